//! A project's override of the operator's egress policy, as the admin API
//! sets it (JSON), and the method names it and the operator's method list
//! accept. Merging is [`Policy::with_override`](super::Policy::with_override):
//! an override may narrow or widen the allowlist, add deny rules and
//! change the method list, but never remove a deny rule of the operator's
//! nor add an exception to an always-refused range.

use axum::http::Method;
use serde::{Deserialize, Serialize};

use super::Rule;

/// A per-project override, e.g.
/// `{"allow": ["**.pkg.example.com:443"], "deny": ["*.evil.test"], "methods": ["GET"]}`.
/// Every field may be left out; unknown fields are refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// Replaces the operator's allowlist for this project (may narrow or
    /// widen it); `None` keeps the operator's. Address rules here never
    /// lift an always-refused range: only the operator's can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<Rule>>,
    /// Added to the operator's deny rules (a project can never remove one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<Rule>,
    /// Replaces the plain-HTTP method list when given. `[]` is accepted and
    /// means no plain HTTP at all: only CONNECT tunnels (HTTPS), which a
    /// method list never limits.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "method_names"
    )]
    pub methods: Option<Vec<Method>>,
}

/// A method name that cannot be in a method list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MethodError {
    #[error("{0:?} is not an HTTP method name (letters, - and _ only, e.g. GET)")]
    Invalid(String),
    #[error(
        "CONNECT cannot be in a method list: a tunnel is decided by its host and \
         port alone, since the requests inside TLS are not visible to the proxy"
    )]
    Connect,
}

/// The longest method name accepted; the standard ones have at most 7
/// letters, extension methods (`PROPFIND`, `M-SEARCH`) a few more.
const MAX_METHOD: usize = 32;

/// A method of a method list: ASCII letters, `-` and `_`, any case
/// (`get` is `GET`: every standard method is upper case, and a lower-case
/// one in a setting is a typo, not a different method). `CONNECT` is
/// refused ([`MethodError::Connect`]).
pub fn parse_method(text: &str) -> Result<Method, MethodError> {
    let name = text.trim();
    let invalid = || MethodError::Invalid(text.chars().take(MAX_METHOD + 8).collect());
    if name.is_empty()
        || name.len() > MAX_METHOD
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphabetic() || b == b'-' || b == b'_')
    {
        return Err(invalid());
    }
    let method = Method::from_bytes(name.to_ascii_uppercase().as_bytes()).map_err(|_| invalid())?;
    if method == Method::CONNECT {
        return Err(MethodError::Connect);
    }
    Ok(method)
}

/// `Option<Vec<Method>>` as a list of method names.
mod method_names {
    use axum::http::Method;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        methods: &Option<Vec<Method>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        match methods {
            None => serializer.serialize_none(),
            Some(list) => serializer.collect_seq(list.iter().map(Method::as_str)),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<Method>>, D::Error> {
        let Some(names) = Option::<Vec<String>>::deserialize(deserializer)? else {
            return Ok(None);
        };
        names
            .iter()
            .map(|name| super::parse_method(name).map_err(serde::de::Error::custom))
            .collect::<Result<Vec<_>, _>>()
            .map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::egress::{Host, Policy, Target};

    fn rules(texts: &[&str]) -> Vec<Rule> {
        texts.iter().map(|t| t.parse().unwrap()).collect()
    }

    fn operator() -> Policy {
        Policy::new(
            rules(&["**.example.com:443", "127.0.0.1:8080", "10.20.0.0/16"]),
            rules(&["bad.example.com"]),
            Some(vec![Method::GET]),
        )
    }

    fn label(policy: &Policy, host: &str, port: u16, addr: &str, method: Option<Method>) -> String {
        policy
            .decide(&Target {
                host: Host::parse(host),
                port,
                resolved: vec![addr.parse().unwrap()],
                method,
            })
            .to_string()
    }

    #[test]
    fn reads_and_writes_json_with_rules_as_text() {
        let json = r#"{"allow":["**.pkg.example.com:443","[fd00::1]:8080"],"deny":["*.evil.test"],"methods":["get","HEAD"]}"#;
        let o: Override = serde_json::from_str(json).unwrap();
        assert_eq!(
            o.allow.as_ref().unwrap()[0].to_string(),
            "**.pkg.example.com:443"
        );
        assert_eq!(o.methods, Some(vec![Method::GET, Method::HEAD]));
        let back = serde_json::to_string(&o).unwrap();
        assert_eq!(
            back,
            r#"{"allow":["**.pkg.example.com:443","[fd00::1]:8080"],"deny":["*.evil.test"],"methods":["GET","HEAD"]}"#
        );
        assert_eq!(serde_json::from_str::<Override>(&back).unwrap(), o);
        assert_eq!(
            serde_json::from_str::<Override>("{}").unwrap(),
            Override::default()
        );
        for bad in [
            r#"{"allowed":[]}"#,
            r#"{"allow":["https://x.test"]}"#,
            r#"{"methods":["CONNECT"]}"#,
            r#"{"methods":["GET /"]}"#,
        ] {
            assert!(serde_json::from_str::<Override>(bad).is_err(), "{bad}");
        }
        let err = serde_json::from_str::<Override>(r#"{"deny":["a*.test"]}"#).unwrap_err();
        assert!(err.to_string().contains("a*.test"), "{err}");
    }

    #[test]
    fn an_override_allowlist_replaces_and_its_denies_add() {
        let o = Override {
            allow: Some(rules(&["**.pkg.example.com:443"])),
            deny: rules(&["evil.pkg.example.com"]),
            methods: None,
        };
        let merged = operator().with_override(&o);
        let public = "93.184.215.14";
        assert_eq!(
            label(&merged, "files.pkg.example.com", 443, public, None),
            "allow:**.pkg.example.com:443"
        );
        assert_eq!(
            label(&merged, "a.example.com", 443, public, None),
            "not-allowed"
        );
        assert_eq!(
            label(&merged, "evil.pkg.example.com", 443, public, None),
            "deny:evil.pkg.example.com"
        );
        // The operator's deny rule stays whatever the override allows.
        let widen = Override {
            allow: Some(rules(&["**.example.com"])),
            ..Override::default()
        };
        let merged = operator().with_override(&widen);
        assert_eq!(
            label(&merged, "bad.example.com", 443, public, None),
            "deny:bad.example.com"
        );
        assert_eq!(
            label(&merged, "a.example.com", 80, public, Some(Method::GET)),
            "allow:**.example.com"
        );
        // Methods: the operator's unless replaced; [] is tunnels only.
        assert_eq!(
            label(&merged, "a.example.com", 80, public, Some(Method::POST)),
            "method:POST"
        );
        let tunnels_only = Override {
            methods: Some(vec![]),
            ..widen
        };
        let merged = operator().with_override(&tunnels_only);
        assert_eq!(
            label(&merged, "a.example.com", 80, public, Some(Method::GET)),
            "method:GET"
        );
        assert!(merged
            .decide(&Target {
                host: Host::parse("a.example.com"),
                port: 443,
                resolved: vec![public.parse().unwrap()],
                method: None,
            })
            .is_allowed());
        // No override fields: the operator's policy as it is.
        assert_eq!(operator().with_override(&Override::default()), operator());
    }

    #[test]
    fn an_override_never_unlocks_a_blocked_range() {
        let o = Override {
            allow: Some(rules(&[
                "169.254.169.254",
                "10.0.0.0/8",
                "127.0.0.1",
                "[::1]",
                "0.0.0.0/0",
                "**.example.com",
            ])),
            ..Override::default()
        };
        let merged = operator().with_override(&o);
        assert_eq!(merged.exceptions(), operator().exceptions());
        for (host, port, addr, range) in [
            ("169.254.169.254", 80, "169.254.169.254", "link-local"),
            ("meta.example.com", 80, "169.254.169.254", "link-local"),
            ("10.1.2.3", 443, "10.1.2.3", "private"),
            ("127.0.0.1", 9000, "127.0.0.1", "loopback"),
            ("::1", 8080, "::1", "loopback"),
        ] {
            assert_eq!(
                label(&merged, host, port, addr, None),
                format!("blocked-range:{range}"),
                "{host}:{port}"
            );
        }
        // The operator's own exceptions still lift their ranges, and the
        // override's allowlist then decides.
        assert_eq!(
            label(&merged, "127.0.0.1", 8080, "127.0.0.1", None),
            "allow:127.0.0.1"
        );
        assert_eq!(
            label(&merged, "10.20.1.1", 443, "10.20.1.1", None),
            "allow:10.0.0.0/8"
        );
        let narrow = Override {
            allow: Some(rules(&["**.pkg.example.com"])),
            ..Override::default()
        };
        assert_eq!(
            label(
                &operator().with_override(&narrow),
                "127.0.0.1",
                8080,
                "127.0.0.1",
                None
            ),
            "not-allowed"
        );
    }

    #[test]
    fn exceptions_are_the_operators_rules_inside_blocked_ranges_or_naming_one_address() {
        let p = Policy::new(
            rules(&[
                "**.example.com",
                "0.0.0.0/0",
                "127.0.0.1:8080",
                "10.20.0.0/16",
                "8.8.8.8",
                "[fd00::1]:443",
            ]),
            vec![],
            None,
        );
        let exceptions: Vec<String> = p.exceptions().iter().map(ToString::to_string).collect();
        assert_eq!(
            exceptions,
            ["127.0.0.1:8080", "10.20.0.0/16", "8.8.8.8", "[fd00::1]:443"]
        );
    }

    #[test]
    fn method_names() {
        assert_eq!(parse_method("get"), Ok(Method::GET));
        assert_eq!(parse_method(" PROPFIND ").unwrap().as_str(), "PROPFIND");
        assert_eq!(parse_method("connect"), Err(MethodError::Connect));
        for bad in ["", "G ET", "GET/", "Ö", &"A".repeat(MAX_METHOD + 1)] {
            assert!(
                matches!(parse_method(bad), Err(MethodError::Invalid(_))),
                "{bad}"
            );
        }
    }
}
