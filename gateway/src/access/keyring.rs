//! Which [`Identity`] a presented bearer string proves, from every kind of
//! credential the gateway knows: the static tokens of the original flags
//! and variables (every project, named `client-token-1` and so on), the
//! config file's `[[token]]` entries and the managed tokens of
//! `STATE/tokens` (both kept as SHA-256 digests only), and signed tokens
//! (JWT) through a verifier.
//!
//! Static and configured tokens are compared in constant time against
//! every entry; managed tokens are found by the digest of what was
//! presented (a map lookup leaks timing about the digest, which says
//! nothing about a high-entropy token). Nothing here does I/O.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use subtle::{Choice, ConstantTimeEq};

use super::digest::sha256;
use super::store::Store;
use super::{Identity, Kind, ProjectScope};
use crate::auth::{Role, Secret, Tokens};

/// The longest bearer string looked at; anything longer proves nothing
/// (a JWT with a few claims is well under this).
pub const MAX_PRESENTED: usize = 8 * 1024;

/// What the credential is presented for. Only static tokens care: one
/// token may be in several of the original lists, and a session takes its
/// client (else observer) role where the admin API takes its admin role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Session,
    Admin,
}

/// A `[[token]]` entry of the config file: the digest of its secret and
/// the identity it proves.
#[derive(Debug, Clone)]
pub struct ConfiguredToken {
    pub digest: [u8; 32],
    pub identity: Identity,
}

/// Verifies a signed token; `None` when it proves nothing.
pub type JwtVerify = Arc<dyn Fn(&str, SystemTime) -> Option<Identity> + Send + Sync>;

/// Every credential the gateway accepts.
#[derive(Clone, Default)]
pub struct Keyring {
    pub statics: Tokens,
    pub configured: Vec<ConfiguredToken>,
    pub managed: Option<Arc<Store>>,
    pub jwt: Option<JwtVerify>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("statics", &self.statics)
            .field("configured", &self.configured.len())
            .field("managed", &self.managed.is_some())
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

impl Keyring {
    /// A keyring of static tokens only.
    pub fn of_statics(statics: Tokens) -> Keyring {
        Keyring {
            statics,
            ..Keyring::default()
        }
    }

    /// The identity `presented` proves, if any. An expired credential
    /// still proves who it is; [`super::authorize`] refuses it.
    pub fn identify(&self, presented: &str, purpose: Purpose, now: SystemTime) -> Option<Identity> {
        if presented.is_empty() || presented.len() > MAX_PRESENTED {
            return None;
        }
        if let Some(found) = self.static_identity(presented, purpose) {
            return Some(found);
        }
        let hashed = sha256(presented);
        if let Some(found) = self.configured_identity(&hashed) {
            return Some(found);
        }
        if let Some(found) = self.managed.as_ref().and_then(|s| s.find(&hashed)) {
            return Some(found);
        }
        let jwt = self.jwt.as_ref()?;
        if presented.bytes().filter(|&b| b == b'.').count() != 2 {
            return None;
        }
        jwt(presented, now)
    }

    /// Whether `who` still holds: a managed token may have been revoked
    /// since it was identified (checked again once its session is
    /// registered, so a revocation in between cannot be missed).
    pub fn still_valid(&self, who: &Identity) -> bool {
        match who.kind {
            Kind::Managed => self.managed.as_ref().is_some_and(|s| s.has(&who.name)),
            Kind::Static | Kind::Configured | Kind::Jwt => true,
        }
    }

    /// Whether a credential named `name` is defined outside the managed
    /// store (a managed token may not take such a name).
    pub fn name_taken_elsewhere(&self, name: &str) -> bool {
        self.configured.iter().any(|c| c.identity.name == name)
            || static_names(&self.statics).iter().any(|n| n == name)
    }

    fn static_identity(&self, presented: &str, purpose: Purpose) -> Option<Identity> {
        let bytes = presented.as_bytes();
        let client = position(&self.statics.client, bytes);
        let observer = position(&self.statics.observer, bytes);
        let admin = position(&self.statics.admin, bytes);
        let pick = match purpose {
            Purpose::Session => [(client, Role::Client), (observer, Role::Observer)]
                .into_iter()
                .find_map(|(i, role)| i.map(|i| (i, role))),
            Purpose::Admin => [
                (admin, Role::Admin),
                (client, Role::Client),
                (observer, Role::Observer),
            ]
            .into_iter()
            .find_map(|(i, role)| i.map(|i| (i, role))),
        };
        let (index, role) = pick?;
        Some(Identity {
            name: static_name(role, index),
            kind: Kind::Static,
            role,
            scope: ProjectScope::All,
            expires: None,
            budget_usd: None,
        })
    }

    fn configured_identity(&self, hashed: &[u8; 32]) -> Option<Identity> {
        let mut found = None;
        for entry in &self.configured {
            if bool::from(entry.digest.ct_eq(hashed)) {
                found = Some(entry);
            }
        }
        found.map(|entry| entry.identity.clone())
    }
}

/// The index of the token equal to `presented`, comparing against every
/// one without stopping at a match.
fn position(list: &[Secret], presented: &[u8]) -> Option<usize> {
    let mut found = None;
    for (i, token) in list.iter().enumerate() {
        let equal: Choice = token.expose().as_bytes().ct_eq(presented);
        if bool::from(equal) {
            found = Some(i);
        }
    }
    found
}

/// The name of the `index`th static token of `role`.
fn static_name(role: Role, index: usize) -> String {
    format!("{role}-token-{}", index + 1)
}

/// Every static token's name.
fn static_names(tokens: &Tokens) -> Vec<String> {
    let lists = [
        (Role::Client, tokens.client.len()),
        (Role::Observer, tokens.observer.len()),
        (Role::Admin, tokens.admin.len()),
    ];
    lists
        .into_iter()
        .flat_map(|(role, n)| (0..n).map(move |i| static_name(role, i)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = "client-secret-0123456789";
    const BOTH: &str = "both-secret-0123456789ab";
    const ADMIN: &str = "admin-secret-0123456789a";

    fn keyring() -> Keyring {
        let statics = Tokens {
            client: vec![Secret::new(CLIENT), Secret::new(BOTH)],
            observer: vec![Secret::new(BOTH)],
            admin: vec![Secret::new(ADMIN)],
        };
        let alice = Identity {
            name: "alice".into(),
            kind: Kind::Configured,
            role: Role::Client,
            scope: ProjectScope::parse(&["a-*"]).unwrap(),
            expires: None,
            budget_usd: Some(2.0),
        };
        Keyring {
            statics,
            configured: vec![ConfiguredToken {
                digest: sha256("alice-secret-0123456789"),
                identity: alice,
            }],
            ..Keyring::default()
        }
    }

    #[test]
    fn static_tokens_are_named_by_role_and_place_and_open_everything() {
        let keys = keyring();
        let now = SystemTime::now();
        let who = keys.identify(CLIENT, Purpose::Session, now).unwrap();
        assert_eq!(
            (who.name.as_str(), who.role),
            ("client-token-1", Role::Client)
        );
        assert_eq!(who.scope, ProjectScope::All);
        // In two lists: a session takes the client role.
        let who = keys.identify(BOTH, Purpose::Session, now).unwrap();
        assert_eq!(
            (who.name.as_str(), who.role),
            ("client-token-2", Role::Client)
        );
        // An admin-only token opens no session; the admin API takes it.
        assert!(keys.identify(ADMIN, Purpose::Session, now).is_none());
        let who = keys.identify(ADMIN, Purpose::Admin, now).unwrap();
        assert_eq!(
            (who.name.as_str(), who.role),
            ("admin-token-1", Role::Admin)
        );
        // A client token at the admin API is known, with its own role.
        let who = keys.identify(CLIENT, Purpose::Admin, now).unwrap();
        assert_eq!(who.role, Role::Client);
    }

    #[test]
    fn configured_tokens_are_found_by_digest() {
        let keys = keyring();
        let who = keys
            .identify(
                "alice-secret-0123456789",
                Purpose::Session,
                SystemTime::now(),
            )
            .unwrap();
        assert_eq!(who.name, "alice");
        assert!(who.sees("a-1") && !who.sees("b-1"));
        assert_eq!(who.budget_usd, Some(2.0));
        for wrong in [
            "",
            "alice-secret-012345678",
            "x.y.z",
            &"a".repeat(MAX_PRESENTED + 1),
        ] {
            assert!(keys
                .identify(wrong, Purpose::Session, SystemTime::now())
                .is_none());
        }
    }

    #[test]
    fn names_of_other_kinds_are_taken() {
        let keys = keyring();
        for name in [
            "alice",
            "client-token-2",
            "observer-token-1",
            "admin-token-1",
        ] {
            assert!(keys.name_taken_elsewhere(name), "{name}");
        }
        assert!(!keys.name_taken_elsewhere("bob"));
    }

    #[test]
    fn a_jwt_is_asked_only_for_what_looks_like_one() {
        let mut keys = keyring();
        keys.jwt = Some(Arc::new(|token: &str, _| {
            (token == "h.p.s").then(|| Identity {
                name: "user-7".into(),
                kind: Kind::Jwt,
                role: Role::Client,
                scope: ProjectScope::Only(Vec::new()),
                expires: None,
                budget_usd: None,
            })
        }));
        let now = SystemTime::now();
        assert_eq!(
            keys.identify("h.p.s", Purpose::Session, now).unwrap().name,
            "user-7"
        );
        assert!(keys.identify("h.p", Purpose::Session, now).is_none());
    }
}
