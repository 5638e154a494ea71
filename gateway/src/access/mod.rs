//! "May this identity do X on project P?", answered in one place.
//!
//! An [`Identity`] is what a credential proves: a name (a token's name or
//! a JWT's `sub`), a [`Role`], a [`ProjectScope`] and an optional expiry.
//! [`authorize`] decides one [`Action`]; every route (WebSocket hello,
//! admin API, dashboard, `/metrics`, `corral attach` through the
//! WebSocket) is to ask it. A project outside the scope is refused the
//! same way whether it exists or not: the decision never sees existence.
//! Pure: no I/O, the time is passed in.

pub mod digest;
pub mod jwt;
pub mod keyring;
mod live;
pub mod rate;
mod scope;
pub mod store;

use std::time::SystemTime;

pub use keyring::{ConfiguredToken, Keyring, Purpose};
pub use live::{Live, Ticket};
pub use scope::{PatternError, ProjectPattern, ProjectScope};

use crate::auth::Role;

/// Who is asking, as a credential proves it.
#[derive(Debug, Clone, PartialEq)]
pub struct Identity {
    /// The token's name, or the JWT's `sub`: what logs and the audit name.
    pub name: String,
    /// Where the credential was defined.
    pub kind: Kind,
    pub role: Role,
    pub scope: ProjectScope,
    /// When the credential stops working; `None`: never.
    pub expires: Option<SystemTime>,
    /// The most this identity's prompts may spend on the model, in USD;
    /// `None`: no budget of its own.
    pub budget_usd: Option<f64>,
}

/// Where a credential was defined, which says how it ends: a static
/// token with the gateway's configuration, a managed one when revoked, a
/// JWT when it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// `--token`, `--observer-token`, `--admin-token` and their variables
    /// and config keys: named `client-token-N` and so on, every project.
    Static,
    /// A `[[token]]` entry of the config file.
    Configured,
    /// Made through `POST /v1/tokens`, kept in `STATE/tokens`.
    Managed,
    /// A signed token; its name is the `sub` claim.
    Jwt,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Static => "static",
            Kind::Configured => "configured",
            Kind::Managed => "managed",
            Kind::Jwt => "jwt",
        }
    }
}

/// What an identity asks to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action<'a> {
    /// Open a session on a project with full rights (prompts, aborts,
    /// permission answers).
    Drive(&'a str),
    /// Open a read-only session on a project.
    Observe(&'a str),
    /// Read or act on one project through the admin API (detail, start,
    /// stop, restart, abort, its egress override).
    Administer(&'a str),
    /// Gateway-wide admin reads and acts (stats, `/metrics`, tokens):
    /// they show or touch every project, so only an unscoped admin.
    AdministerGateway,
    /// List projects or events through the admin API: any admin, each
    /// entry then filtered by [`Identity::sees`].
    ListProjects,
}

/// Why an action is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("the credential has expired")]
    Expired,
    #[error("the credential's role may not do this")]
    WrongRole,
    /// Deliberately the same for a project that does not exist.
    #[error("the credential does not cover this project")]
    OutOfScope,
}

/// The key of the credential of `kind` named `name` (see [`Identity::key`]).
pub fn credential_key(kind: Kind, name: &str) -> String {
    format!("{}:{name}", kind.as_str())
}

impl Identity {
    /// The gateway itself, for what it does on no one's behalf (every
    /// project, read-only).
    pub fn gateway() -> Identity {
        Identity {
            name: "gateway".into(),
            kind: Kind::Static,
            role: Role::Observer,
            scope: ProjectScope::All,
            expires: None,
            budget_usd: None,
        }
    }

    /// A key naming this credential among all kinds (`managed:alice`,
    /// `jwt:user-42`): what per-identity limits count and revocation finds.
    pub fn key(&self) -> String {
        credential_key(self.kind, &self.name)
    }

    /// Whether a project shows up in this identity's lists.
    pub fn sees(&self, project: &str) -> bool {
        self.scope.covers(project)
    }

    /// The session role a hello with this identity gets on `project`:
    /// client, or observer, or refused (an admin opens no sessions).
    pub fn session_role(&self, project: &str, now: SystemTime) -> Result<Role, Denied> {
        match self.role {
            Role::Client => authorize(self, Action::Drive(project), now).map(|()| Role::Client),
            Role::Observer => {
                authorize(self, Action::Observe(project), now).map(|()| Role::Observer)
            }
            Role::Admin => Err(Denied::WrongRole),
        }
    }
}

/// Decides `action` for `identity` at `now`: expiry first, then the role,
/// then the scope.
pub fn authorize(identity: &Identity, action: Action<'_>, now: SystemTime) -> Result<(), Denied> {
    if identity.expires.is_some_and(|at| now >= at) {
        return Err(Denied::Expired);
    }
    let (roles, project): (&[Role], Option<&str>) = match action {
        Action::Drive(p) => (&[Role::Client], Some(p)),
        Action::Observe(p) => (&[Role::Client, Role::Observer], Some(p)),
        Action::Administer(p) => (&[Role::Admin], Some(p)),
        Action::AdministerGateway => {
            if identity.role != Role::Admin {
                return Err(Denied::WrongRole);
            }
            return match identity.scope.is_everything() {
                true => Ok(()),
                false => Err(Denied::OutOfScope),
            };
        }
        Action::ListProjects => (&[Role::Admin], None),
    };
    if !roles.contains(&identity.role) {
        return Err(Denied::WrongRole);
    }
    match project {
        Some(p) if !identity.scope.covers(p) => Err(Denied::OutOfScope),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn identity(role: Role, scope: &[&str], expires: Option<u64>) -> Identity {
        Identity {
            name: "t".into(),
            kind: Kind::Configured,
            budget_usd: None,
            role,
            scope: match scope {
                ["ALL"] => ProjectScope::All,
                patterns => ProjectScope::parse(patterns).unwrap(),
            },
            expires: expires.map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s)),
        }
    }

    /// One row of the table: role, scope (`["ALL"]`: every project),
    /// expiry (seconds since the epoch), action, and the answer.
    type Row<'a> = (
        Role,
        &'a [&'a str],
        Option<u64>,
        Action<'a>,
        Result<(), Denied>,
    );

    /// Every role × action × scope × expiry, and the answer.
    #[test]
    fn the_table() {
        use Action::*;
        use Denied::*;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let ok = Ok(());
        let rows: &[Row] = &[
            // Clients drive and observe their projects, nothing else.
            (Role::Client, &["ALL"], None, Drive("x"), ok),
            (Role::Client, &["a-*"], None, Drive("a-1"), ok),
            (Role::Client, &["a-*"], None, Drive("b-1"), Err(OutOfScope)),
            (Role::Client, &["a-*"], None, Observe("a-1"), ok),
            (
                Role::Client,
                &["a-*"],
                None,
                Observe("b-1"),
                Err(OutOfScope),
            ),
            (
                Role::Client,
                &["ALL"],
                None,
                Administer("x"),
                Err(WrongRole),
            ),
            (
                Role::Client,
                &["ALL"],
                None,
                AdministerGateway,
                Err(WrongRole),
            ),
            (Role::Client, &["ALL"], None, ListProjects, Err(WrongRole)),
            // Observers only observe.
            (Role::Observer, &["a-*"], None, Observe("a-1"), ok),
            (
                Role::Observer,
                &["a-*"],
                None,
                Observe("b-1"),
                Err(OutOfScope),
            ),
            (Role::Observer, &["ALL"], None, Drive("x"), Err(WrongRole)),
            // Admins administer their projects; the gateway only unscoped.
            (Role::Admin, &["a-*"], None, Administer("a-1"), ok),
            (
                Role::Admin,
                &["a-*"],
                None,
                Administer("b-1"),
                Err(OutOfScope),
            ),
            (Role::Admin, &["a-*"], None, ListProjects, ok),
            (
                Role::Admin,
                &["a-*"],
                None,
                AdministerGateway,
                Err(OutOfScope),
            ),
            (Role::Admin, &["ALL"], None, AdministerGateway, ok),
            (Role::Admin, &["*"], None, AdministerGateway, ok),
            (Role::Admin, &["*-x", "*"], None, AdministerGateway, ok),
            (Role::Admin, &["ALL"], None, Drive("x"), Err(WrongRole)),
            // No patterns: nothing.
            (Role::Client, &[], None, Drive("x"), Err(OutOfScope)),
            // Expired before anything else, valid until the instant.
            (Role::Client, &["ALL"], Some(1000), Drive("x"), Err(Expired)),
            (Role::Client, &["ALL"], Some(999), Drive("x"), Err(Expired)),
            (Role::Client, &["ALL"], Some(1001), Drive("x"), ok),
            (
                Role::Admin,
                &["ALL"],
                Some(10),
                Administer("x"),
                Err(Expired),
            ),
        ];
        for (role, scope, expires, action, expected) in rows {
            let who = identity(*role, scope, *expires);
            assert_eq!(
                authorize(&who, *action, now),
                *expected,
                "{role} {scope:?} {expires:?} {action:?}"
            );
        }
    }

    #[test]
    fn a_session_gets_the_role_the_credential_holds() {
        let now = SystemTime::UNIX_EPOCH;
        let client = identity(Role::Client, &["a-*"], None);
        assert_eq!(client.session_role("a-1", now), Ok(Role::Client));
        assert_eq!(client.session_role("b-1", now), Err(Denied::OutOfScope));
        let observer = identity(Role::Observer, &["ALL"], None);
        assert_eq!(observer.session_role("b-1", now), Ok(Role::Observer));
        let admin = identity(Role::Admin, &["ALL"], None);
        assert_eq!(admin.session_role("b-1", now), Err(Denied::WrongRole));
        assert!(client.sees("a-2") && !client.sees("b-2"));
    }
}
