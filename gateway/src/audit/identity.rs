//! How an [`Identity`] appears in the audit log, in one place: its name
//! as the actor, its [`Kind`] as the `actor_kind` (so a line tells a
//! static token from a configured or managed one and from a JWT), and
//! why [`authorize`](crate::access::authorize) refused it as a `reason`.

use super::{ActorKind, Entry};
use crate::access::{Denied, Identity, Kind};

impl From<Kind> for ActorKind {
    fn from(kind: Kind) -> ActorKind {
        match kind {
            Kind::Static => ActorKind::Static,
            Kind::Configured => ActorKind::Configured,
            Kind::Managed => ActorKind::Managed,
            Kind::Jwt => ActorKind::Jwt,
        }
    }
}

impl Entry {
    /// Done by `who`: its name (a token's name or a JWT's `sub`, never a
    /// secret) and the kind of its credential.
    pub fn by(self, who: &Identity) -> Entry {
        self.actor(&who.name, who.kind.into())
    }
}

/// The `detail.reason` of a refusal by [`crate::access::authorize`].
pub fn denied_reason(denied: Denied) -> &'static str {
    match denied {
        Denied::Expired => "expired",
        Denied::WrongRole => "wrong_role",
        Denied::OutOfScope => "out_of_scope",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::ProjectScope;
    use crate::auth::Role;

    #[test]
    fn each_kind_of_credential_is_its_own_actor_kind() {
        let kinds = [Kind::Static, Kind::Configured, Kind::Managed, Kind::Jwt];
        let named: Vec<&str> = kinds
            .iter()
            .map(|kind| ActorKind::from(*kind).as_str())
            .collect();
        assert_eq!(named, ["static", "configured", "managed", "jwt"]);
        let who = Identity {
            name: "ci-bot".into(),
            kind: Kind::Managed,
            role: Role::Client,
            scope: ProjectScope::All,
            expires: None,
            budget_usd: None,
        };
        let fields = Entry::new(super::super::Action::Prompt).by(&who).fields();
        assert_eq!(
            (fields["actor"].as_str(), fields["actor_kind"].as_str()),
            (Some("ci-bot"), Some("managed"))
        );
    }
}
