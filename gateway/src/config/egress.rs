//! The egress policy of `--tool-network proxy` (`--egress-allow`,
//! `--egress-deny`, `--egress-methods`) and the proxy's connection cap,
//! parsed once at start. The rule syntax and the decision are
//! `crate::egress`'s.

use axum::http::Method;

use super::ConfigError;
use crate::egress::{parse_method, Policy, Rule};

/// What the egress proxy enforces for every project (the admin API can
/// override the lists per project).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EgressSettings {
    pub policy: Policy,
    /// Tool connections open through the proxy at once, in total.
    pub max_connections: usize,
}

impl EgressSettings {
    /// Tool connections one project may hold open: a quarter of the total,
    /// so one busy project cannot starve the others.
    pub fn max_per_project(&self) -> usize {
        crate::egress::proxy::per_project_share(self.max_connections)
    }
}

/// Parses the rules and methods as given (command line or file).
pub(super) fn resolve(
    allow: &[String],
    deny: &[String],
    methods: &[String],
    max_connections: usize,
) -> Result<EgressSettings, ConfigError> {
    let allow = rules(allow, "--egress-allow / egress_allow")?;
    let deny = rules(deny, "--egress-deny / egress_deny")?;
    let methods = match methods.is_empty() {
        true => None,
        false => Some(
            methods
                .iter()
                .map(|m| method(m))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    Ok(EgressSettings {
        policy: Policy::new(allow, deny, methods),
        max_connections,
    })
}

fn rules(texts: &[String], setting: &str) -> Result<Vec<Rule>, ConfigError> {
    texts
        .iter()
        .map(|text| {
            text.parse::<Rule>().map_err(|e| ConfigError::Invalid {
                setting: setting.into(),
                reason: e.to_string(),
            })
        })
        .collect()
}

/// One method of `--egress-methods` (any case; not `CONNECT`, since
/// tunnels are decided by host and port, never by this list).
fn method(text: &str) -> Result<Method, ConfigError> {
    parse_method(text).map_err(|e| ConfigError::Invalid {
        setting: "--egress-methods / egress_methods".into(),
        reason: format!("{e}; write methods comma-separated, e.g. GET,HEAD"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn rules_and_methods_parse_into_the_policy() {
        let settings = resolve(
            &strings(&["registry.example.com:443", "10.20.0.0/16"]),
            &strings(&["*.evil.example"]),
            &strings(&["GET", "HEAD"]),
            8,
        )
        .unwrap();
        assert_eq!(settings.policy.allow().len(), 2);
        assert_eq!(settings.policy.deny().len(), 1);
        assert_eq!(
            settings.policy.methods(),
            Some(&[Method::GET, Method::HEAD][..])
        );
        assert_eq!(settings.max_per_project(), 2);
        let open = resolve(&[], &[], &[], 1).unwrap();
        assert_eq!(open.policy.methods(), None);
        assert!(open.policy.allow().is_empty());
        assert_eq!(open.max_per_project(), 1);
    }

    #[test]
    fn a_bad_rule_or_method_names_the_setting_and_the_value() {
        let err = resolve(&strings(&["https://x.example"]), &[], &[], 1).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("--egress-allow") && text.contains("x.example"),
            "{text}"
        );
        let err = resolve(&[], &strings(&["a*b.example"]), &[], 1).unwrap_err();
        assert!(err.to_string().contains("--egress-deny"), "{err}");
        for bad in ["", "CONNECT", "GE T"] {
            let err = resolve(&[], &[], &strings(&[bad]), 1).unwrap_err();
            assert!(err.to_string().contains("--egress-methods"), "{bad}: {err}");
        }
    }
}
