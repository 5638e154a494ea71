//! The per-spawn placeholder keys: each project's child gets a fresh one
//! at spawn (in its environment, where a provider key would be), and the
//! broker accepts a request only with a live one. Shared by the hub (it
//! registers a key per spawn) and the broker (it looks keys up).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use ring::digest::{digest, SHA256};

use crate::auth::{random_token, RandomError};

/// A SHA-256 digest of a placeholder key: the key it is looked up by, so
/// a lookup's timing depends on the digest, which says nothing about the
/// key, and the keys themselves are not kept.
type Digest = [u8; 32];

fn digest_of(secret: &str) -> Digest {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, secret.as_bytes()).as_ref());
    out
}

/// The live placeholder keys. `Send + Sync`; share it as `Arc<Registry>`.
#[derive(Debug, Default)]
pub struct Registry {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Digest of a live key → its project.
    projects: HashMap<Digest, String>,
    /// Project → the digest of its live key (at most one: a new spawn
    /// replaces it).
    keys: HashMap<String, Digest>,
}

impl Registry {
    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A fresh key for `project`'s new child (32 random bytes from the OS,
    /// 64 lower-case hex digits); the project's previous key stops working
    /// at once. Fails, rather than falling back to a weaker source, if the
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

    /// Forgets the project's key (its hub ended: no child of it runs).
    pub fn forget(&self, project: &str) {
        let mut inner = self.inner();
        if let Some(old) = inner.keys.remove(project) {
            inner.projects.remove(&old);
        }
    }

    /// The project whose live key `secret` is.
    pub fn project_of(&self, secret: &str) -> Option<String> {
        self.inner().projects.get(&digest_of(secret)).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forgotten_project_has_no_live_key() {
        let registry = Registry::default();
        let key = registry.register("a").unwrap();
        let other = registry.register("b").unwrap();
        registry.forget("a");
        assert_eq!(registry.project_of(&key), None);
        assert_eq!(registry.project_of(&other).as_deref(), Some("b"));
        registry.forget("a");
    }

    #[test]
    fn a_new_spawn_replaces_the_projects_key() {
        let registry = Registry::default();
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
