//! The one gate every presented token passes, on every route (WebSocket
//! header or hello, admin API, `/metrics`): the source's failure budget
//! ([`crate::throttle`]), the constant-time check ([`crate::auth`]), and
//! how a refusal is answered over HTTP — 401, or 429 with `Retry-After`
//! when the attempt was not even checked. Callers count the refusal in
//! `corral_auth_failures_total` once, with [`Refused::failure`].

use std::net::IpAddr;
use std::time::{Duration, Instant};

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

use crate::auth::{self, AuthFailure, Role, Tokens};
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

/// Checks `token` from `addr` with `role_of` (which role it grants, if
/// any), through the failure budget of `addr`.
pub fn check<R>(
    state: &AppState,
    addr: IpAddr,
    token: &str,
    role_of: impl FnOnce(&Tokens, &str) -> Option<R>,
) -> Result<R, Refused> {
    let checked = state
        .throttle
        .check(addr, token, Instant::now(), |t| role_of(&state.tokens, t));
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

/// The role a project session opened with `token` from `addr` gets.
pub fn session_role(state: &AppState, addr: IpAddr, token: &str) -> Result<Role, Refused> {
    check(state, addr, token, Tokens::session_role)
}

/// The refusal for a request without the admin bearer token: 401 when no
/// valid token was presented, 429 when its source may not try now, 403
/// for a valid token of another role.
pub fn admin_refusal(state: &AppState, headers: &HeaderMap, addr: ClientAddr) -> Option<Response> {
    let header = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let Some(token) = auth::bearer(header) else {
        state.metrics.auth_failure(AuthFailure::MissingToken);
        let error = json!({ "error": "admin token required" });
        return Some((StatusCode::UNAUTHORIZED, Json(error)).into_response());
    };
    match check(state, addr.0, token, Tokens::role_of) {
        Ok(Role::Admin) => None,
        Ok(_) => {
            let error = json!({ "error": "this endpoint needs the admin token" });
            Some((StatusCode::FORBIDDEN, Json(error)).into_response())
        }
        Err(refused) => {
            state.metrics.auth_failure(refused.failure());
            Some(refused.into_response(true))
        }
    }
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
