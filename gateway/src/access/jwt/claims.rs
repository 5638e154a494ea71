//! A verified JWT's claims turned into an [`Identity`]: `sub` (the name),
//! `exp` (required) and `nbf` against the time passed in, with the clock
//! leeway; `corral_role`, capped by `--jwt-max-role`; `corral_projects`.
//! Runs only after the signature was checked. Pure: no I/O, no clock.
//! `iss` and `aud` are checked by `jsonwebtoken` while decoding.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::access::{Identity, Kind, PatternError, ProjectScope};
use crate::auth::Role;

/// Longest `sub` accepted, in bytes: it names the actor in logs, the
/// audit trail (whose names are at most this long) and budgets.
pub const MAX_SUBJECT_BYTES: usize = 128;

/// What the operator allows a JWT to claim, and the clock leeway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPolicy {
    /// The highest `corral_role` a JWT may hold (see [`rank`]).
    pub max_role: Role,
    /// Tolerated clock difference with the issuer, for `exp` and `nbf`.
    pub leeway: Duration,
}

/// Why verified claims give no identity. The messages name claims, never
/// the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClaimError {
    #[error("the claims are not a JSON object")]
    NotAnObject,
    #[error("the required claim `{0}` is missing")]
    Missing(&'static str),
    #[error("the claim `{0}` has the wrong type")]
    WrongType(&'static str),
    #[error("`sub` must be 1 to {MAX_SUBJECT_BYTES} bytes, no control character among them")]
    BadSubject,
    #[error("the token has expired (`exp`, with the clock leeway)")]
    Expired,
    #[error("the token is not valid yet (`nbf`, with the clock leeway)")]
    NotYetValid,
    #[error("`corral_role` must be \"client\", \"observer\" or \"admin\"")]
    UnknownRole,
    #[error(
        "`corral_role` {role} is above --jwt-max-role {max}: the token is refused, \
         not given a lower role"
    )]
    RoleAboveMax { role: Role, max: Role },
    #[error("`corral_projects`: {0}")]
    Projects(#[from] PatternError),
}

/// The order `--jwt-max-role` caps by: an observer reads, a client also
/// drives, an admin administers.
pub fn rank(role: Role) -> u8 {
    match role {
        Role::Observer => 0,
        Role::Client => 1,
        Role::Admin => 2,
    }
}

impl ClaimPolicy {
    /// The identity the claims prove at `now`, or why they prove none.
    /// `expires` is `exp` plus the leeway: the instant this verifier
    /// would start refusing the token, so that a session lives exactly as
    /// long as a new hello with the same token would be accepted.
    pub fn identity(&self, claims: &Value, now: SystemTime) -> Result<Identity, ClaimError> {
        let claims = claims.as_object().ok_or(ClaimError::NotAnObject)?;
        let name = subject(claims)?;
        let exp = time(claims, "exp")?.ok_or(ClaimError::Missing("exp"))?;
        let expires = exp
            .checked_add(self.leeway)
            .ok_or(ClaimError::WrongType("exp"))?;
        if now >= expires {
            return Err(ClaimError::Expired);
        }
        if let Some(nbf) = time(claims, "nbf")? {
            if now.checked_add(self.leeway).is_some_and(|late| late < nbf) {
                return Err(ClaimError::NotYetValid);
            }
        }
        let role = role(claims)?;
        if rank(role) > rank(self.max_role) {
            return Err(ClaimError::RoleAboveMax {
                role,
                max: self.max_role,
            });
        }
        Ok(Identity {
            name,
            kind: Kind::Jwt,
            role,
            scope: projects(claims)?,
            expires: Some(expires),
            // A subject's budget is set through the admin API, not claimed.
            budget_usd: None,
        })
    }
}

/// `sub`: required, 1 to [`MAX_SUBJECT_BYTES`] bytes, printable.
fn subject(claims: &Map<String, Value>) -> Result<String, ClaimError> {
    let sub = match claims.get("sub") {
        None | Some(Value::Null) => return Err(ClaimError::Missing("sub")),
        Some(Value::String(sub)) => sub,
        Some(_) => return Err(ClaimError::WrongType("sub")),
    };
    if sub.trim().is_empty() || sub.len() > MAX_SUBJECT_BYTES || sub.chars().any(char::is_control) {
        return Err(ClaimError::BadSubject);
    }
    Ok(sub.clone())
}

/// A NumericDate claim (seconds since the epoch, possibly fractional), if
/// present.
fn time(
    claims: &Map<String, Value>,
    claim: &'static str,
) -> Result<Option<SystemTime>, ClaimError> {
    let seconds = match claims.get(claim) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_f64().filter(|s| s.is_finite() && *s >= 0.0),
        Some(_) => None,
    };
    seconds
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .and_then(|d| SystemTime::UNIX_EPOCH.checked_add(d))
        .map(Some)
        .ok_or(ClaimError::WrongType(claim))
}

/// `corral_role`: optional, `client` by default.
fn role(claims: &Map<String, Value>) -> Result<Role, ClaimError> {
    match claims.get("corral_role") {
        None | Some(Value::Null) => Ok(Role::Client),
        Some(Value::String(name)) => match name.as_str() {
            "client" => Ok(Role::Client),
            "observer" => Ok(Role::Observer),
            "admin" => Ok(Role::Admin),
            _ => Err(ClaimError::UnknownRole),
        },
        Some(_) => Err(ClaimError::WrongType("corral_role")),
    }
}

/// `corral_projects`: names and globs; missing or empty opens nothing, a
/// `*` among them opens every project.
fn projects(claims: &Map<String, Value>) -> Result<ProjectScope, ClaimError> {
    let list = match claims.get("corral_projects") {
        None | Some(Value::Null) => return Ok(ProjectScope::Only(Vec::new())),
        Some(Value::Array(list)) => list,
        Some(_) => return Err(ClaimError::WrongType("corral_projects")),
    };
    let names = list
        .iter()
        .map(|entry| {
            entry
                .as_str()
                .ok_or(ClaimError::WrongType("corral_projects"))
        })
        .collect::<Result<Vec<&str>, ClaimError>>()?;
    if names.iter().any(|name| name.trim() == "*") {
        return Ok(ProjectScope::All);
    }
    Ok(ProjectScope::parse(&names)?)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: u64 = 1_000_000;

    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn policy(max_role: Role) -> ClaimPolicy {
        ClaimPolicy {
            max_role,
            leeway: Duration::from_secs(30),
        }
    }

    fn check(claims: Value) -> Result<Identity, ClaimError> {
        policy(Role::Client).identity(&claims, at(NOW))
    }

    #[test]
    fn a_minimal_token_is_a_client_that_opens_nothing() {
        let who = check(json!({"sub": "alice", "exp": NOW + 60})).unwrap();
        assert_eq!(who.name, "alice");
        assert_eq!(who.kind, Kind::Jwt);
        assert_eq!(who.role, Role::Client);
        assert_eq!(who.scope, ProjectScope::Only(Vec::new()));
        assert!(!who.sees("anything"));
        assert_eq!(who.expires, Some(at(NOW + 90)), "exp plus the leeway");
    }

    #[test]
    fn projects_are_names_and_globs_and_a_star_is_all() {
        let who = check(json!({
            "sub": "bob", "exp": NOW + 60, "corral_role": "observer",
            "corral_projects": ["team-b-*", "shared"]
        }))
        .unwrap();
        assert_eq!(who.role, Role::Observer);
        assert!(who.sees("team-b-web") && who.sees("shared") && !who.sees("team-a-web"));
        let all = check(json!({"sub": "c", "exp": NOW + 60, "corral_projects": ["*"]})).unwrap();
        assert_eq!(all.scope, ProjectScope::All);
        let err = check(json!({"sub": "c", "exp": NOW + 60, "corral_projects": ["a/b"]}));
        assert!(matches!(err, Err(ClaimError::Projects(_))), "{err:?}");
        let err = check(json!({"sub": "c", "exp": NOW + 60, "corral_projects": "a"}));
        assert_eq!(err, Err(ClaimError::WrongType("corral_projects")));
    }

    #[test]
    fn time_claims_are_checked_against_the_time_given_with_leeway() {
        // Within the leeway on either side: accepted.
        assert!(check(json!({"sub": "a", "exp": NOW - 29})).is_ok());
        assert!(check(json!({"sub": "a", "exp": NOW + 60, "nbf": NOW + 30})).is_ok());
        assert!(check(json!({"sub": "a", "exp": NOW as f64 + 60.5})).is_ok());
        // Beyond it: refused.
        assert_eq!(
            check(json!({"sub": "a", "exp": NOW - 30})),
            Err(ClaimError::Expired)
        );
        assert_eq!(
            check(json!({"sub": "a", "exp": NOW + 60, "nbf": NOW + 31})),
            Err(ClaimError::NotYetValid)
        );
        assert_eq!(check(json!({"sub": "a"})), Err(ClaimError::Missing("exp")));
        for bad in [json!("soon"), json!(-1), json!(1e300)] {
            assert_eq!(
                check(json!({"sub": "a", "exp": bad})),
                Err(ClaimError::WrongType("exp"))
            );
        }
    }

    #[test]
    fn the_subject_is_required_and_printable() {
        assert_eq!(
            check(json!({"exp": NOW + 60})),
            Err(ClaimError::Missing("sub"))
        );
        assert_eq!(
            check(json!({"sub": 7, "exp": NOW + 60})),
            Err(ClaimError::WrongType("sub"))
        );
        let long = "é".repeat(MAX_SUBJECT_BYTES / 2 + 1);
        for bad in ["", "  ", "a\nb", "a\u{7}", long.as_str()] {
            assert_eq!(
                check(json!({"sub": bad, "exp": NOW + 60})),
                Err(ClaimError::BadSubject),
                "{bad:?}"
            );
        }
        let longest = "é".repeat(MAX_SUBJECT_BYTES / 2);
        assert!(check(json!({"sub": longest, "exp": NOW + 60})).is_ok());
        assert_eq!(check(json!(["sub"])), Err(ClaimError::NotAnObject));
    }

    #[test]
    fn a_role_above_the_maximum_is_refused_not_lowered() {
        let claims = |role: &str| json!({"sub": "a", "exp": NOW + 60, "corral_role": role});
        let err = check(claims("admin")).unwrap_err();
        assert_eq!(
            err,
            ClaimError::RoleAboveMax {
                role: Role::Admin,
                max: Role::Client
            }
        );
        assert!(err.to_string().contains("not given a lower role"), "{err}");
        let observers_only = policy(Role::Observer);
        assert!(matches!(
            observers_only.identity(&claims("client"), at(NOW)),
            Err(ClaimError::RoleAboveMax { .. })
        ));
        assert!(observers_only
            .identity(&claims("observer"), at(NOW))
            .is_ok());
        let admins = policy(Role::Admin);
        assert_eq!(
            admins.identity(&claims("admin"), at(NOW)).unwrap().role,
            Role::Admin
        );
        assert_eq!(check(claims("root")), Err(ClaimError::UnknownRole));
    }
}
