//! Tokens and roles: which role a presented token grants (constant-time
//! compare against every configured token), what an observer may send,
//! the browser `Origin` allowlist, `Authorization: Bearer` parsing and
//! random token generation. Pure logic, no I/O besides the random source.
//!
//! Roles are separate: a client token opens project sessions, an observer
//! token opens read-only sessions, an admin token may use only the admin
//! API. A token configured in several lists holds all of those roles.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use subtle::{Choice, ConstantTimeEq};

/// What a token lets its holder do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Full access to project sessions over WebSocket.
    Client,
    /// Read-only project sessions (each dialect names the commands).
    Observer,
    /// The admin API only.
    Admin,
}

impl Role {
    /// The lowercase name used on the wire, in logs and in metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Client => "client",
            Role::Observer => "observer",
            Role::Admin => "admin",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A secret string (a token). `Debug` and `Display` print `Secret(***)`, so
/// it can sit in structs that get logged; read it only with [`Secret::expose`].
/// Deliberately not `PartialEq`: compare through [`Tokens`], in constant time.
/// Deserializes from a string only; a value of another type is refused
/// without echoing it (never serializes).
#[derive(Clone, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself. Never log or format the result.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SecretVisitor;

        impl serde::de::Visitor<'_> for SecretVisitor {
            type Value = Secret;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a token string")
            }

            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret::new(v))
            }

            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<Secret, E> {
                Err(E::custom(
                    "expected a token string (in quotes), found a number",
                ))
            }

            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<Secret, E> {
                Err(E::custom(
                    "expected a token string (in quotes), found a number",
                ))
            }

            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<Secret, E> {
                Err(E::custom(
                    "expected a token string (in quotes), found a number",
                ))
            }

            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<Secret, E> {
                Err(E::custom("expected a token string, found a boolean"))
            }
        }

        deserializer.deserialize_str(SecretVisitor)
    }
}

impl FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(Secret::new(s))
    }
}

/// The set of roles one token holds (usually exactly one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RoleSet {
    pub client: bool,
    pub observer: bool,
    pub admin: bool,
}

impl RoleSet {
    pub fn contains(self, role: Role) -> bool {
        match role {
            Role::Client => self.client,
            Role::Observer => self.observer,
            Role::Admin => self.admin,
        }
    }

    pub fn is_empty(self) -> bool {
        !(self.client || self.observer || self.admin)
    }
}

/// The configured tokens, one list per role. Validated by `config`
/// (non-empty, at least 16 characters).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    pub client: Vec<Secret>,
    pub observer: Vec<Secret>,
    pub admin: Vec<Secret>,
}

impl Tokens {
    /// Every role `presented` holds. Compares against every configured token
    /// of every list without stopping at a match, so the time taken does not
    /// reveal which token (or how much of one) matched.
    pub fn roles_of(&self, presented: &str) -> RoleSet {
        if presented.is_empty() {
            return RoleSet::default();
        }
        let presented = presented.as_bytes();
        let any = |list: &[Secret]| {
            list.iter().fold(Choice::from(0), |acc, token| {
                acc | token.expose().as_bytes().ct_eq(presented)
            })
        };
        let (client, observer, admin) = (any(&self.client), any(&self.observer), any(&self.admin));
        RoleSet {
            client: bool::from(client),
            observer: bool::from(observer),
            admin: bool::from(admin),
        }
    }

    /// The most privileged role `presented` holds: admin, then client, then
    /// observer. `role_of(t) == Some(Role::Admin)` exactly when `t` is an
    /// admin token, so the admin API can use this directly; WebSocket
    /// sessions should use [`Tokens::session_role`].
    pub fn role_of(&self, presented: &str) -> Option<Role> {
        let roles = self.roles_of(presented);
        [Role::Admin, Role::Client, Role::Observer]
            .into_iter()
            .find(|role| roles.contains(*role))
    }

    /// The role a project session opened with `presented` gets: client if
    /// the token is a client token, else observer if it is an observer
    /// token, else `None` (admin-only tokens may not open sessions).
    pub fn session_role(&self, presented: &str) -> Option<Role> {
        let roles = self.roles_of(presented);
        [Role::Client, Role::Observer]
            .into_iter()
            .find(|role| roles.contains(*role))
    }
}

/// The system random source failed; no token was made.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the system random source: {0}")]
pub struct RandomError(getrandom::Error);

/// A fresh token: 32 random bytes from the OS as 64 lowercase hex digits.
/// Fails rather than falling back to a weaker source.
pub fn random_token() -> Result<String, RandomError> {
    let mut bytes = [0u8; 32];
    random_bytes(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Fills `out` from the OS random source (no weaker fallback).
pub fn random_bytes(out: &mut [u8]) -> Result<(), RandomError> {
    getrandom::getrandom(out).map_err(RandomError)
}

/// Why an authentication was refused: the `reason` label of
/// `corral_auth_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthFailure {
    /// A token was checked and is not one of the configured ones (or not
    /// of a role the endpoint accepts).
    InvalidToken,
    /// No token was presented.
    MissingToken,
    /// The first WebSocket message was not the dialect's hello.
    NotHello,
    /// No hello within `--hello-timeout`.
    HelloTimeout,
    /// A browser origin outside `--allowed-origin`.
    Origin,
    /// More than `--max-hello-bytes` before authenticating.
    HelloTooLarge,
    /// Refused without a check: the source's failure budget is empty.
    Throttled,
    /// A valid credential asked for what it does not cover (a project
    /// outside its scope, a role it lacks) or has expired.
    Forbidden,
}

impl AuthFailure {
    pub const ALL: [AuthFailure; 8] = [
        AuthFailure::InvalidToken,
        AuthFailure::MissingToken,
        AuthFailure::NotHello,
        AuthFailure::HelloTimeout,
        AuthFailure::Origin,
        AuthFailure::HelloTooLarge,
        AuthFailure::Throttled,
        AuthFailure::Forbidden,
    ];

    /// The metric label.
    pub fn as_label(self) -> &'static str {
        match self {
            AuthFailure::InvalidToken => "invalid_token",
            AuthFailure::MissingToken => "missing_token",
            AuthFailure::NotHello => "not_hello",
            AuthFailure::HelloTimeout => "hello_timeout",
            AuthFailure::Origin => "origin",
            AuthFailure::HelloTooLarge => "hello_too_large",
            AuthFailure::Throttled => "throttled",
            AuthFailure::Forbidden => "forbidden",
        }
    }
}

/// Whether a request with this `Origin` (and `Host`) header may connect.
///
/// - no `Origin`: allowed (non-browser clients do not send one);
/// - `*` in `allowed`: any origin;
/// - `allowed` non-empty: the origin must equal an entry (`scheme://host[:port]`,
///   case-insensitive, a trailing slash ignored);
/// - `allowed` empty: same-origin only: the origin's `host[:port]` must equal
///   the `Host` header (a default port, 80 for http/ws and 443 for https/wss,
///   may be written or left out on either side).
pub fn origin_allowed(origin: Option<&str>, host: Option<&str>, allowed: &[String]) -> bool {
    let Some(origin) = origin else {
        return true;
    };
    if allowed.iter().any(|entry| entry.trim() == "*") {
        return true;
    }
    let Some(origin) = normalize_origin(origin) else {
        return false;
    };
    if !allowed.is_empty() {
        return allowed
            .iter()
            .filter_map(|entry| normalize_origin(entry))
            .any(|entry| entry == origin);
    }
    let Some(host) = host else {
        return false;
    };
    let Some((scheme, authority)) = origin.split_once("://") else {
        return false;
    };
    let default_port = match scheme {
        "http" | "ws" => ":80",
        "https" | "wss" => ":443",
        _ => "",
    };
    let host = host.trim().to_ascii_lowercase();
    let strip = |s: &str| -> String {
        match s.strip_suffix(default_port) {
            Some(rest) if !default_port.is_empty() => rest.to_string(),
            _ => s.to_string(),
        }
    };
    strip(authority) == strip(&host)
}

/// An origin in canonical form, `scheme://host[:port]` lowercased without a
/// trailing slash, or `None` if `origin` does not have that shape (no
/// scheme, empty host, a path, a query, user info or whitespace).
pub fn normalize_origin(origin: &str) -> Option<String> {
    let origin = origin.trim();
    let origin = origin.strip_suffix('/').unwrap_or(origin);
    let (scheme, authority) = origin.split_once("://")?;
    let scheme_ok = scheme
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    let authority_ok = !authority.is_empty()
        && !authority
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | '?' | '#' | '@'));
    (scheme_ok && authority_ok).then(|| origin.to_ascii_lowercase())
}

/// The token of an `Authorization: Bearer TOKEN` header (scheme
/// case-insensitive), or `None` for a missing header, another scheme or an
/// empty token.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let header = header?.trim();
    let (scheme, token) = header.split_once([' ', '\t'])?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    (!token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = "client-token-0123456789";
    const OBSERVER: &str = "observer-token-0123456789";
    const ADMIN: &str = "admin-token-0123456789";
    const BOTH: &str = "client-and-admin-0123456789";

    fn tokens() -> Tokens {
        Tokens {
            client: vec![Secret::new(CLIENT), Secret::new(BOTH)],
            observer: vec![Secret::new(OBSERVER)],
            admin: vec![Secret::new(ADMIN), Secret::new(BOTH)],
        }
    }

    #[test]
    fn role_names() {
        assert_eq!(Role::Observer.as_str(), "observer");
        assert_eq!(Role::Admin.to_string(), "admin");
        assert_eq!(serde_json::to_string(&Role::Client).unwrap(), "\"client\"");
        let back: Role = serde_json::from_str("\"observer\"").unwrap();
        assert_eq!(back, Role::Observer);
    }

    #[test]
    fn secret_is_never_formatted() {
        let s = Secret::new("very-secret-value-123");
        assert_eq!(format!("{s:?}"), "Secret(***)");
        assert_eq!(format!("{s}"), "Secret(***)");
        assert!(!format!("{:?}", tokens()).contains(CLIENT));
        assert_eq!(s.expose(), "very-secret-value-123");
    }

    #[test]
    fn roles_are_separate() {
        let t = tokens();
        assert_eq!(t.role_of(CLIENT), Some(Role::Client));
        assert_eq!(t.role_of(OBSERVER), Some(Role::Observer));
        assert_eq!(t.role_of(ADMIN), Some(Role::Admin));
        assert_eq!(t.session_role(CLIENT), Some(Role::Client));
        assert_eq!(t.session_role(OBSERVER), Some(Role::Observer));
        assert_eq!(t.session_role(ADMIN), None, "admin tokens open no sessions");
    }

    #[test]
    fn token_in_several_lists_holds_each_role() {
        let t = tokens();
        let roles = t.roles_of(BOTH);
        assert!(roles.client && roles.admin && !roles.observer);
        assert_eq!(t.role_of(BOTH), Some(Role::Admin));
        assert_eq!(t.session_role(BOTH), Some(Role::Client));
    }

    #[test]
    fn unknown_prefix_and_empty_tokens_match_nothing() {
        let t = tokens();
        assert_eq!(t.role_of("nope"), None);
        assert_eq!(t.role_of(&CLIENT[..CLIENT.len() - 1]), None);
        assert_eq!(t.role_of(&format!("{CLIENT}x")), None);
        assert_eq!(t.role_of(""), None);
        assert!(t.roles_of("").is_empty());
        // An empty configured token never matches an empty presented one.
        let empty = Tokens {
            client: vec![Secret::new("")],
            ..Tokens::default()
        };
        assert_eq!(empty.role_of(""), None);
    }

    #[test]
    fn random_tokens_are_64_hex_and_differ() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));
        assert_ne!(a, b);
    }

    fn list(entries: &[&str]) -> Vec<String> {
        entries.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn origin_missing_or_wildcard() {
        assert!(origin_allowed(None, None, &[]));
        assert!(origin_allowed(
            None,
            Some("h:1"),
            &list(&["https://a.example"])
        ));
        assert!(origin_allowed(
            Some("https://evil.example"),
            None,
            &list(&["*"])
        ));
    }

    #[test]
    fn origin_allowlist_is_exact_but_case_and_slash_insensitive() {
        let allowed = list(&["https://ide.example.com", "http://localhost:3000/"]);
        assert!(origin_allowed(
            Some("https://ide.example.com"),
            None,
            &allowed
        ));
        assert!(origin_allowed(
            Some("HTTPS://IDE.Example.com/"),
            None,
            &allowed
        ));
        assert!(origin_allowed(
            Some("http://localhost:3000"),
            None,
            &allowed
        ));
        assert!(!origin_allowed(
            Some("http://localhost:3001"),
            None,
            &allowed
        ));
        assert!(!origin_allowed(
            Some("http://ide.example.com"),
            None,
            &allowed
        ));
        assert!(!origin_allowed(
            Some("https://ide.example.com.evil"),
            None,
            &allowed
        ));
        assert!(!origin_allowed(
            Some("https://sub.ide.example.com"),
            None,
            &allowed
        ));
        assert!(!origin_allowed(Some("null"), None, &allowed));
        // The allowlist replaces the same-origin rule.
        assert!(!origin_allowed(
            Some("http://gw:7000"),
            Some("gw:7000"),
            &allowed
        ));
    }

    #[test]
    fn origin_same_origin_when_list_empty() {
        assert!(origin_allowed(
            Some("http://gw.local:7000"),
            Some("gw.local:7000"),
            &[]
        ));
        assert!(origin_allowed(
            Some("http://GW.local:7000/"),
            Some("gw.LOCAL:7000"),
            &[]
        ));
        assert!(origin_allowed(
            Some("https://gw.local"),
            Some("gw.local:443"),
            &[]
        ));
        assert!(origin_allowed(
            Some("http://gw.local:80"),
            Some("gw.local"),
            &[]
        ));
        assert!(!origin_allowed(
            Some("http://gw.local:7001"),
            Some("gw.local:7000"),
            &[]
        ));
        assert!(!origin_allowed(
            Some("https://gw.local"),
            Some("gw.local:80"),
            &[]
        ));
        assert!(!origin_allowed(
            Some("http://evil.example"),
            Some("gw.local"),
            &[]
        ));
        assert!(!origin_allowed(Some("http://gw.local"), None, &[]));
        assert!(!origin_allowed(Some("null"), Some("gw.local"), &[]));
        assert!(!origin_allowed(Some("gw.local"), Some("gw.local"), &[]));
    }

    #[test]
    fn origin_normal_form() {
        assert_eq!(
            normalize_origin("HTTPS://A.b:8443/").as_deref(),
            Some("https://a.b:8443")
        );
        assert_eq!(
            normalize_origin(" http://[::1]:7000 ").as_deref(),
            Some("http://[::1]:7000")
        );
        for bad in [
            "",
            "*",
            "null",
            "a.b",
            "://a.b",
            "http://",
            "http://a.b/path",
            "http://u@a.b",
            "1http://a",
        ] {
            assert_eq!(normalize_origin(bad), None, "{bad}");
        }
    }

    #[test]
    fn bearer_header() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("BEARER\tabc")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(Some("Bearer")), None);
        assert_eq!(bearer(Some("Bearer   ")), None);
        assert_eq!(bearer(Some("Bearerabc")), None);
        assert_eq!(bearer(None), None);
    }
}
