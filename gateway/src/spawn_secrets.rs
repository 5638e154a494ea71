//! Per-spawn secrets: each project's child gets a fresh one at spawn (in
//! its environment), and a service of the gateway's that children reach
//! (the egress proxy, the model broker's placeholder keys) accepts a
//! connection or request only with a live one, and learns the project
//! from it. The hub registers a secret per spawn and forgets it when it
//! ends; the service looks secrets up.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use ring::digest::{digest, SHA256};

use crate::auth::{random_token, RandomError};

/// A SHA-256 digest of a secret: what it is looked up by, so a lookup's
/// timing depends on the digest, which says nothing about the secret, and
/// the secrets themselves are not kept.
type Digest = [u8; 32];

fn digest_of(secret: &str) -> Digest {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, secret.as_bytes()).as_ref());
    out
}

/// The live secrets, one per project at most. `Send + Sync`.
#[derive(Debug, Default)]
pub struct SpawnSecrets {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Digest of a live secret → its project.
    projects: HashMap<Digest, String>,
    /// Project → the digest of its live secret (at most one: a new spawn
    /// replaces it).
    keys: HashMap<String, Digest>,
}

impl SpawnSecrets {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh secret for `project`'s new child (32 random bytes from the
    /// OS, 64 lower-case hex digits); the project's previous one stops
    /// working at once (connections already open keep going). Fails, rather than falling back to a weaker source, if the
    /// OS random source does.
    pub fn register(&self, project: &str) -> Result<String, RandomError> {
        let secret = random_token()?;
        let key = digest_of(&secret);
        let mut inner = self.inner();
        if let Some(old) = inner.keys.insert(project.to_string(), key) {
            inner.projects.remove(&old);
        }
        inner.projects.insert(key, project.to_string());
        Ok(secret)
    }

    /// Forgets the project's secret (its hub ended: no child of it runs).
    pub fn forget(&self, project: &str) {
        let mut inner = self.inner();
        if let Some(old) = inner.keys.remove(project) {
            inner.projects.remove(&old);
        }
    }

    /// The project whose live secret `secret` is.
    pub fn project_of(&self, secret: &str) -> Option<String> {
        self.inner().projects.get(&digest_of(secret)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_project_has_no_live_key() {
        let registry = SpawnSecrets::default();
        let key = registry.register("a").unwrap();
        let other = registry.register("b").unwrap();
        registry.forget("a");
        assert_eq!(registry.project_of(&key), None);
        assert_eq!(registry.project_of(&other).as_deref(), Some("b"));
        registry.forget("a");
    }

    #[test]
    fn a_new_spawn_replaces_the_projects_key() {
        let registry = SpawnSecrets::default();
        let first = registry.register("a").unwrap();
        let other = registry.register("b").unwrap();
        assert_eq!(first.len(), 64);
        assert!(first.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(registry.project_of(&first).as_deref(), Some("a"));
        let second = registry.register("a").unwrap();
        assert_ne!(first, second);
        assert_eq!(registry.project_of(&first), None);
        assert_eq!(registry.project_of(&second).as_deref(), Some("a"));
        assert_eq!(registry.project_of(&other).as_deref(), Some("b"));
        assert_eq!(registry.project_of(""), None);
    }
}
