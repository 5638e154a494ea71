//! Who is asking, and which policy applies: the per-spawn egress secret of
//! each project's child, and each project's policy (the operator's, or
//! merged with the project's [`Override`]). Shared by the supervisor (it
//! registers a secret per spawn), the admin API (overrides) and the proxy
//! (it looks secrets up).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::{Override, Policy};
use crate::auth::RandomError;
use crate::spawn_secrets::SpawnSecrets;

/// The secrets and overrides in force. `Send + Sync`; share it as
/// `Arc<Registry>`.
#[derive(Debug)]
pub struct Registry {
    /// The operator's policy, the base of every project's.
    operator: Arc<Policy>,
    /// Each project's child's live secret.
    secrets: SpawnSecrets,
    /// Project → its override and the merged policy, merged once when set.
    overrides: Mutex<HashMap<String, (Override, Arc<Policy>)>>,
}

impl Registry {
    pub fn new(policy: Policy) -> Registry {
        Registry {
            operator: Arc::new(policy),
            secrets: SpawnSecrets::default(),
            overrides: Mutex::default(),
        }
    }

    fn locked(&self) -> MutexGuard<'_, HashMap<String, (Override, Arc<Policy>)>> {
        self.overrides
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh secret for `project`'s new child; the previous one stops
    /// working at once ([`SpawnSecrets::register`]).
    pub fn register(&self, project: &str) -> Result<String, RandomError> {
        self.secrets.register(project)
    }

    /// Forgets the project's secret (its child ended for good). Its
    /// override stays: it belongs to the project, not to the child.
    pub fn forget(&self, project: &str) {
        self.secrets.forget(project);
    }

    /// The project a secret belongs to, if it is a live one.
    pub fn project_of(&self, secret: &str) -> Option<String> {
        self.secrets.project_of(secret)
    }

    /// The policy in force for `project`: the operator's, or merged with
    /// the project's override.
    pub fn policy_for(&self, project: &str) -> Arc<Policy> {
        match self.locked().get(project) {
            Some((_, merged)) => merged.clone(),
            None => self.operator.clone(),
        }
    }

    /// Sets (`Some`) or removes (`None`) `project`'s override. Requests
    /// decided from then on use it, on connections already open too.
    pub fn set_override(&self, project: &str, change: Option<Override>) {
        let mut overrides = self.locked();
        match change {
            Some(o) => {
                let merged = Arc::new(self.operator.with_override(&o));
                overrides.insert(project.to_string(), (o, merged));
            }
            None => {
                overrides.remove(project);
            }
        }
    }

    /// Every project's override, by project name.
    pub fn overrides(&self) -> std::collections::BTreeMap<String, Override> {
        self.locked()
            .iter()
            .map(|(project, (o, _))| (project.clone(), o.clone()))
            .collect()
    }

    pub fn override_of(&self, project: &str) -> Option<Override> {
        self.locked().get(project).map(|(o, _)| o.clone())
    }

    pub fn operator_policy(&self) -> Arc<Policy> {
        self.operator.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_shared_across_threads() {
        fn shared<T: Send + Sync>() {}
        shared::<Registry>();
    }

    #[test]
    fn a_secret_names_its_project_until_replaced_or_forgotten() {
        let registry = Registry::new(Policy::default());
        let a1 = registry.register("a").unwrap();
        let b = registry.register("b").unwrap();
        assert_eq!(a1.len(), 64);
        assert!(a1.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
        assert_ne!(a1, b);
        assert_eq!(registry.project_of(&a1).as_deref(), Some("a"));
        assert_eq!(registry.project_of(&b).as_deref(), Some("b"));
        let a2 = registry.register("a").unwrap();
        assert_eq!(registry.project_of(&a1), None, "replaced at once");
        assert_eq!(registry.project_of(&a2).as_deref(), Some("a"));
        registry.forget("a");
        assert_eq!(registry.project_of(&a2), None);
        assert_eq!(registry.project_of(&b).as_deref(), Some("b"));
        assert_eq!(registry.project_of(""), None);
        assert_eq!(registry.project_of(&"0".repeat(64)), None);
    }

    #[test]
    fn overrides_are_per_project_and_outlive_the_child() {
        let allow = vec!["**.example.com".parse().unwrap()];
        let registry = Registry::new(Policy::new(allow, vec![], None));
        let o = Override {
            allow: Some(vec!["**.pkg.example.com".parse().unwrap()]),
            ..Override::default()
        };
        registry.set_override("a", Some(o.clone()));
        assert_eq!(registry.override_of("a"), Some(o.clone()));
        assert_eq!(registry.override_of("b"), None);
        assert_eq!(
            registry.policy_for("a").allow()[0].to_string(),
            "**.pkg.example.com"
        );
        assert_eq!(registry.policy_for("b"), registry.operator_policy());
        registry.register("a").unwrap();
        registry.forget("a");
        assert_eq!(registry.override_of("a"), Some(o));
        registry.set_override("a", None);
        assert_eq!(registry.policy_for("a"), registry.operator_policy());
    }
}
