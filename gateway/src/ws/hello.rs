//! Authenticating a WebSocket client: a token from the upgrade's
//! `Authorization: Bearer` header, or the dialect's hello as the first
//! message, read under `--max-hello-bytes` within `--hello-timeout`.
//! Every token check goes through [`crate::guard`] (the per-source
//! failure budget).

use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use super::close::CloseCode;
use super::handshake::Io;
use super::preauth::{self, PreAuthError};
use super::session::parse;
use crate::access::{Denied, Identity, Purpose};
use crate::audit::denied_reason;
use crate::auth::{AuthFailure, Role};
use crate::dialect::OwnRuns;
use crate::guard::{self, Refused};
use crate::state::AppState;
use crate::token_slots::Credential;

/// An authenticated client, before it is attached.
#[derive(Debug)]
pub struct Hello {
    /// Who the credential proves, and from where.
    pub who: Arc<Identity>,
    pub peer: IpAddr,
    pub role: Role,
    pub resume_after: Option<u64>,
    /// `Some(id)` when there is a hello to answer.
    pub answer: Option<Option<Value>>,
    /// Own runs only (hello fields or query parameters).
    pub own_runs: OwnRuns,
    /// The credential it authenticated with, for its per-identity place.
    pub credential: Credential,
}

/// The session role `who` (from `peer`) gets on `project`, or the
/// refusal to send (and record in the audit log): a project outside the
/// scope is refused the same whether it exists.
pub fn session_role(
    state: &AppState,
    who: &Identity,
    peer: IpAddr,
    project: &str,
) -> Result<Role, (AuthFailure, String)> {
    guard::session_role(who, project).map_err(|denied| {
        super::audit::refused(state, who, peer, project, denied_reason(denied));
        let message = match denied {
            Denied::Expired => "authentication failed: the credential has expired".to_string(),
            Denied::WrongRole => {
                "authentication failed: this credential may not open sessions".to_string()
            }
            Denied::OutOfScope => {
                format!("the credential does not cover project {project:?}")
            }
        };
        (AuthFailure::Forbidden, message)
    })
}

/// A refused client: the id to answer, the metric reason, the message
/// and the close code.
#[derive(Debug)]
pub struct Refusal {
    pub id: Option<Value>,
    pub reason: AuthFailure,
    pub message: String,
    pub code: CloseCode,
}

impl Refusal {
    fn new(id: Option<Value>, reason: AuthFailure, message: impl Into<String>) -> Refusal {
        Refusal {
            id,
            reason,
            message: message.into(),
            code: CloseCode::Policy,
        }
    }
}

/// Reads and checks the hello of a client without a header token; on
/// success also the bytes read after it.
pub async fn read_hello(
    io: &mut Io,
    state: &AppState,
    peer: IpAddr,
    project: &str,
) -> Result<(Hello, Vec<u8>), Refusal> {
    let read = preauth::read_first_text(io, state.max_hello_bytes);
    let first = match tokio::time::timeout(state.hello_timeout, read).await {
        Err(_) => {
            let message = format!("no hello within {} s", state.hello_timeout.as_secs());
            return Err(Refusal::new(None, AuthFailure::HelloTimeout, message));
        }
        Ok(Err(error)) => return Err(unreadable(state, error)),
        Ok(Ok(first)) => first,
    };
    let frame = parse(&first.text).map_err(|error| {
        state.metrics.invalid_frame("client", "malformed");
        Refusal::new(None, AuthFailure::NotHello, error)
    })?;
    let id = frame.get("id").cloned();
    let hello = match state.dialect.rules().client_hello(&frame) {
        Some(Ok(hello)) => hello,
        Some(Err(error)) => return Err(Refusal::new(id, AuthFailure::NotHello, error)),
        None => {
            return Err(Refusal::new(
                id,
                AuthFailure::NotHello,
                state.dialect.rules().hello_required(),
            ))
        }
    };
    let Some(token) = &hello.token else {
        let message = "authentication failed: the hello has no token";
        return Err(Refusal::new(id, AuthFailure::MissingToken, message));
    };
    let who = match guard::identify(state, peer, token, Purpose::Session) {
        Ok(who) => who,
        Err(refused) => {
            let mut refusal = Refusal::new(id, refused.failure(), refused.message());
            if let Refused::Throttled { .. } = refused {
                refusal.code = CloseCode::TryAgain;
            }
            return Err(refusal);
        }
    };
    let role = match session_role(state, &who, peer, project) {
        Ok(role) => role,
        Err((reason, message)) => return Err(Refusal::new(id, reason, message)),
    };
    let hello = Hello {
        credential: state.token_slots.credential(&who.key()),
        who: Arc::new(who),
        peer,
        role,
        resume_after: hello.resume_after,
        answer: Some(hello.id),
        own_runs: hello.own_runs,
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
                code: CloseCode::TooBig,
                ..Refusal::new(None, AuthFailure::HelloTooLarge, message)
            }
        }
        PreAuthError::Binary => {
            state.metrics.invalid_frame("client", "binary");
            Refusal::new(None, AuthFailure::NotHello, message)
        }
        PreAuthError::Protocol(_) => Refusal {
            code: CloseCode::Protocol,
            ..Refusal::new(None, AuthFailure::NotHello, message)
        },
        PreAuthError::NotUtf8 => {
            state.metrics.invalid_frame("client", "malformed");
            Refusal::new(None, AuthFailure::NotHello, message)
        }
        PreAuthError::Closed | PreAuthError::Io(_) => Refusal::new(
            None,
            AuthFailure::NotHello,
            "the connection closed before the hello",
        ),
    }
}
