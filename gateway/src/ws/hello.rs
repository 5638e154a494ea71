//! Authenticating a WebSocket client: a token from the upgrade's
//! `Authorization: Bearer` header, or the dialect's hello as the first
//! message, read under `--max-hello-bytes` within `--hello-timeout`.
//! Every token check goes through the per-source throttle
//! ([`crate::throttle`]).

use std::net::IpAddr;
use std::time::Instant;

use serde_json::Value;

use super::handshake::Io;
use super::preauth::{self, PreAuthError};
use super::session::parse;
use crate::auth::Role;
use crate::dialect::OwnRuns;
use crate::server::AppState;
use crate::throttle::Admission;
use crate::token_slots::Credential;

/// Policy violation: authentication failed.
pub const CLOSE_POLICY: u16 = 1008;
/// The client sent more than the gateway accepts.
pub const CLOSE_TOO_BIG: u16 = 1009;
/// Invalid WebSocket framing.
pub const CLOSE_PROTOCOL: u16 = 1002;
/// Try again later.
pub const CLOSE_AGAIN: u16 = 1013;

/// An authenticated client, before it is attached.
#[derive(Debug)]
pub struct Hello {
    pub role: Role,
    pub resume_after: Option<u64>,
    /// `Some(id)` when there is a hello to answer.
    pub answer: Option<Option<Value>>,
    /// Own runs only (hello fields or query parameters).
    pub own_runs: OwnRuns,
    /// The credential it authenticated with, for its per-token place.
    pub credential: Credential,
}

/// A refused client: the id to answer, the metric reason, the message
/// and the close code.
#[derive(Debug)]
pub struct Refusal {
    pub id: Option<Value>,
    pub reason: &'static str,
    pub message: String,
    pub code: u16,
}

impl Refusal {
    fn new(id: Option<Value>, reason: &'static str, message: impl Into<String>) -> Refusal {
        Refusal {
            id,
            reason,
            message: message.into(),
            code: CLOSE_POLICY,
        }
    }
}

/// Checks `token` for a session from `peer`, after the wait the throttle
/// asks for. `Err` is the metric reason: `invalid_token` or `throttled`.
pub async fn check_token(
    state: &AppState,
    peer: IpAddr,
    token: &str,
) -> Result<Role, &'static str> {
    match state.throttle.admit(peer, Instant::now()) {
        Admission::Now => {}
        Admission::After(wait) => {
            state.metrics.auth_delay(wait);
            tokio::time::sleep(wait).await;
        }
        Admission::Refused => return Err("throttled"),
    }
    match state.tokens.session_role(token) {
        Some(role) => {
            state.throttle.succeeded(peer);
            Ok(role)
        }
        None => {
            state.throttle.failed(peer, Instant::now());
            Err("invalid_token")
        }
    }
}

/// The message for a refused token.
pub fn token_refusal(reason: &str) -> &'static str {
    match reason {
        "throttled" => "authentication failed too often from this address; try again later",
        _ => "authentication failed: invalid token",
    }
}

/// Reads and checks the hello of a client without a header token; on
/// success also the bytes read after it.
pub async fn read_hello(
    io: &mut Io,
    state: &AppState,
    peer: IpAddr,
) -> Result<(Hello, Vec<u8>), Refusal> {
    let read = preauth::read_first_text(io, state.max_hello_bytes);
    let first = match tokio::time::timeout(state.hello_timeout, read).await {
        Err(_) => {
            let message = format!("no hello within {} s", state.hello_timeout.as_secs());
            return Err(Refusal::new(None, "hello_timeout", message));
        }
        Ok(Err(error)) => return Err(unreadable(state, error)),
        Ok(Ok(first)) => first,
    };
    let frame = parse(&first.text).map_err(|error| {
        state.metrics.invalid_frame("client", "malformed");
        Refusal::new(None, "not_hello", error)
    })?;
    let id = frame.get("id").cloned();
    let hello = match state.dialect.client_hello(&frame) {
        Some(Ok(hello)) => hello,
        Some(Err(error)) => return Err(Refusal::new(id, "not_hello", error)),
        None => {
            return Err(Refusal::new(
                id,
                "not_hello",
                state.dialect.hello_required(),
            ))
        }
    };
    let Some(token) = &hello.token else {
        let message = "authentication failed: the hello has no token";
        return Err(Refusal::new(id, "missing_token", message));
    };
    let role = match check_token(state, peer, token).await {
        Ok(role) => role,
        Err(reason) => {
            let mut refusal = Refusal::new(id, reason, token_refusal(reason));
            if reason == "throttled" {
                refusal.code = CLOSE_AGAIN;
            }
            return Err(refusal);
        }
    };
    let hello = Hello {
        role,
        resume_after: hello.resume_after,
        answer: Some(hello.id),
        own_runs: hello.own_runs,
        credential: state.token_slots.credential(token),
    };
    Ok((hello, first.leftover))
}

/// The refusal for a first message that could not be read.
fn unreadable(state: &AppState, error: PreAuthError) -> Refusal {
    let message = error.to_string();
    match error {
        PreAuthError::TooLarge(_) => {
            state.metrics.invalid_frame("client", "too_large");
            Refusal {
                code: CLOSE_TOO_BIG,
                ..Refusal::new(None, "hello_too_large", message)
            }
        }
        PreAuthError::Binary => {
            state.metrics.invalid_frame("client", "binary");
            Refusal::new(None, "not_hello", message)
        }
        PreAuthError::Protocol(_) => Refusal {
            code: CLOSE_PROTOCOL,
            ..Refusal::new(None, "not_hello", message)
        },
        PreAuthError::NotUtf8 => {
            state.metrics.invalid_frame("client", "malformed");
            Refusal::new(None, "not_hello", message)
        }
        PreAuthError::Closed | PreAuthError::Io(_) => {
            Refusal::new(None, "not_hello", "the connection closed before the hello")
        }
    }
}
