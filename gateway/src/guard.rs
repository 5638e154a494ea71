//! The one gate every presented token passes, on every route (WebSocket
//! header or hello, admin API, `/metrics`): the source's failure budget
//! ([`crate::throttle`]), the constant-time check ([`crate::auth`]), and
//! how a refusal is answered over HTTP — 401, or 429 with `Retry-After`
//! when the attempt was not even checked. Callers count the refusal in
//! `corral_auth_failures_total` once, with [`Refused::failure`]. An admin
//! request refused to a valid credential is also recorded in the audit
//! log.

use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::access::{self, Action, Denied, Identity, Kind, Purpose};
use crate::audit::{self, Entry};
use crate::auth::{self, AuthFailure, Role};
use crate::client_addr::ClientAddr;
use crate::state::AppState;
use crate::throttle::Checked;

/// A presented token that was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Checked, and wrong.
    Invalid,
    /// Not checked: the source's failure budget is empty until
    /// `retry_after` has passed.
    Throttled { retry_after: Duration },
}

impl Refused {
    pub fn failure(self) -> AuthFailure {
        match self {
            Refused::Invalid => AuthFailure::InvalidToken,
            Refused::Throttled { .. } => AuthFailure::Throttled,
        }
    }

    /// What the client is told (never the token).
    pub fn message(self) -> &'static str {
        match self {
            Refused::Invalid => "authentication failed: invalid token",
            Refused::Throttled { .. } => {
                "authentication failed too often from this address; try again later"
            }
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Refused::Invalid => StatusCode::UNAUTHORIZED,
            Refused::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    /// Whole seconds until a checked attempt is possible again (at least 1).
    pub fn retry_after_secs(self) -> Option<u64> {
        match self {
            Refused::Invalid => None,
            Refused::Throttled { retry_after } => {
                let secs = retry_after.as_secs() + u64::from(retry_after.subsec_nanos() > 0);
                Some(secs.max(1))
            }
        }
    }

    /// The HTTP answer, with a plain text or a JSON `{"error"}` body.
    pub fn into_response(self, body_json: bool) -> Response {
        let mut response = if body_json {
            (self.status(), Json(json!({ "error": self.message() }))).into_response()
        } else {
            (self.status(), format!("{}\n", self.message())).into_response()
        };
        if let Some(secs) = self.retry_after_secs() {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// Checks `token` from `addr` with `identify` (what it proves, if
/// anything), through the failure budget of `addr`.
pub fn check<R>(
    state: &AppState,
    addr: IpAddr,
    token: &str,
    identify: impl FnOnce(&str) -> Option<R>,
) -> Result<R, Refused> {
    let checked = state.throttle.check(addr, token, Instant::now(), identify);
    match checked {
        Checked::Accepted { value, remembered } => {
            if remembered {
                state.metrics.auth_remembered.inc();
            }
            Ok(value)
        }
        Checked::Rejected => Err(Refused::Invalid),
        Checked::Throttled { retry_after } => Err(Refused::Throttled { retry_after }),
    }
}

/// The identity `token` from `addr` proves, for `purpose`; a managed
/// token's use is noted for `GET /v1/tokens`.
pub fn identify(
    state: &AppState,
    addr: IpAddr,
    token: &str,
    purpose: Purpose,
) -> Result<Identity, Refused> {
    let now = SystemTime::now();
    let who = check(state, addr, token, |t| {
        state.keyring.identify(t, purpose, now)
    })?;
    if let (Kind::Managed, Some(store)) = (who.kind, &state.keyring.managed) {
        store.note_use(&who.name, addr, now);
    }
    Ok(who)
}

/// What a refused action is answered over HTTP: 401 for an expired
/// credential, 403 otherwise. An out-of-scope project gets the same
/// answer whether it exists or not.
pub fn denied_response(denied: Denied, action: Action<'_>) -> Response {
    let (status, error) = match (denied, action) {
        (Denied::Expired, _) => (StatusCode::UNAUTHORIZED, denied.to_string()),
        (Denied::OutOfScope, Action::Drive(p) | Action::Observe(p) | Action::Administer(p)) => (
            StatusCode::FORBIDDEN,
            format!("the credential does not cover project {p:?}"),
        ),
        (Denied::OutOfScope, _) => (
            StatusCode::FORBIDDEN,
            "this endpoint shows every project: it needs an admin credential for all of them"
                .to_string(),
        ),
        (Denied::WrongRole, _) => (
            StatusCode::FORBIDDEN,
            "this endpoint needs an admin credential".to_string(),
        ),
    };
    (status, Json(json!({ "error": error }))).into_response()
}

/// The admin identity of a request allowed `action`, or the answer to
/// send instead: 401 when no valid credential was presented (or it
/// expired), 429 when its source may not try now, 403 for a valid
/// credential of another role or scope.
pub fn admin(
    state: &AppState,
    headers: &HeaderMap,
    addr: ClientAddr,
    action: Action<'_>,
) -> Result<Identity, Box<Response>> {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(token) = auth::bearer(header) else {
        state.metrics.auth_failure(AuthFailure::MissingToken);
        let error = json!({ "error": "admin token required" });
        return Err(Box::new(
            (StatusCode::UNAUTHORIZED, Json(error)).into_response(),
        ));
    };
    let who = match identify(state, addr.0, token, Purpose::Admin) {
        Ok(who) => who,
        Err(refused) => {
            state.metrics.auth_failure(refused.failure());
            return Err(Box::new(refused.into_response(true)));
        }
    };
    match access::authorize(&who, action, SystemTime::now()) {
        Ok(()) => Ok(who),
        Err(denied) => {
            state.metrics.auth_failure(AuthFailure::Forbidden);
            tracing::info!(actor = %who.name, ?action, "admin request refused: {denied}");
            audit_refusal(state, &who, addr, action, denied);
            Err(Box::new(denied_response(denied, action)))
        }
    }
}

/// Records an authenticated admin request refused (the audit log keeps
/// no refusals of requests without a valid credential: anyone could
/// fill it with them).
fn audit_refusal(
    state: &AppState,
    who: &Identity,
    addr: ClientAddr,
    action: Action<'_>,
    denied: Denied,
) {
    let mut entry = Entry::new(audit::Action::Refused)
        .by(who)
        .source(addr.0)
        .detail("request", "admin");
    if let Action::Drive(p) | Action::Observe(p) | Action::Administer(p) = action {
        entry = entry.project(p);
    }
    state
        .audit
        .record(entry.refused(audit::denied_reason(denied)));
}

/// The refusal for a request without an admin credential allowed
/// `action` (see [`admin`]).
pub fn admin_refusal(
    state: &AppState,
    headers: &HeaderMap,
    addr: ClientAddr,
    action: Action<'_>,
) -> Option<Response> {
    admin(state, headers, addr, action)
        .err()
        .map(|refused| *refused)
}

/// The role a session of `who` on `project` gets, or why not.
pub fn session_role(who: &Identity, project: &str) -> Result<Role, Denied> {
    who.session_role(project, SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_rounds_up_to_whole_seconds() {
        let throttled = |ms| Refused::Throttled {
            retry_after: Duration::from_millis(ms),
        };
        assert_eq!(throttled(0).retry_after_secs(), Some(1));
        assert_eq!(throttled(1).retry_after_secs(), Some(1));
        assert_eq!(throttled(1000).retry_after_secs(), Some(1));
        assert_eq!(throttled(1001).retry_after_secs(), Some(2));
        assert_eq!(Refused::Invalid.retry_after_secs(), None);
    }

    #[test]
    fn a_throttled_answer_says_when_to_retry() {
        let response = Refused::Throttled {
            retry_after: Duration::from_millis(2500),
        }
        .into_response(false);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "3");
        let response = Refused::Invalid.into_response(true);
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(!response.headers().contains_key(header::RETRY_AFTER));
    }
}
