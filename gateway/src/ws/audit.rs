//! What a WebSocket session writes to the audit log: opened (its role and
//! client id), closed (why, and the close code the gateway sent), and
//! authenticated clients refused (why: out of scope, expired, wrong role,
//! the identity's connection limit, …). Clients refused before they
//! proved a credential are not recorded — anyone could fill the log with
//! them; `corral_auth_failures_total` counts them.

use std::net::IpAddr;

use super::close::CloseCode;
use crate::access::Identity;
use crate::audit::{Action, Entry, Outcome};
use crate::auth::Role;
use crate::hub::ClientId;
use crate::state::AppState;

/// How an attached session ended, as the audit log says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// The client closed its socket (or it failed).
    ByClient,
    /// The gateway closed it with this code (the agent stopped, the
    /// client was too slow, it said `bye`, …).
    ByGateway(CloseCode),
    /// Its token was revoked (close code 4001).
    Revoked,
    /// Its credential expired (close code 4001).
    Expired,
    /// It sent a frame over `--max-frame-bytes` (close code 1009).
    TooLarge,
}

impl Closed {
    /// `detail.reason`.
    fn reason(self) -> &'static str {
        match self {
            Closed::ByClient => "client_closed",
            Closed::ByGateway(_) => "gateway_closed",
            Closed::Revoked => "revoked",
            Closed::Expired => "expired",
            Closed::TooLarge => "frame_too_large",
        }
    }

    /// The close code the gateway sent, if it sent one.
    fn code(self) -> Option<CloseCode> {
        match self {
            Closed::ByClient => None,
            Closed::ByGateway(code) => Some(code),
            Closed::Revoked | Closed::Expired => Some(CloseCode::Revoked),
            Closed::TooLarge => Some(CloseCode::TooBig),
        }
    }
}

/// An entry for `action` by `who` from `peer` on `project`.
fn entry(action: Action, who: &Identity, peer: IpAddr, project: &str) -> Entry {
    Entry::new(action).by(who).source(peer).project(project)
}

/// `who`, authenticated, may not open a session on `project`: `reason`
/// (e.g. `out_of_scope`, the same whether the project exists).
pub fn refused(state: &AppState, who: &Identity, peer: IpAddr, project: &str, reason: &str) {
    let entry = entry(Action::Refused, who, peer, project)
        .detail("request", "session")
        .refused(reason);
    state.audit.record(entry);
}

/// An authenticated client's session of a project, as the audit log
/// names it.
#[derive(Debug, Clone, Copy)]
pub struct Session<'a> {
    pub who: &'a Identity,
    pub peer: IpAddr,
    pub role: Role,
    pub project: &'a str,
}

impl Session<'_> {
    fn entry(&self, action: Action) -> Entry {
        entry(action, self.who, self.peer, self.project).detail("role", self.role.as_str())
    }

    /// Refused before it was attached (see [`refused`]).
    pub fn refused(&self, state: &AppState, reason: &str) {
        refused(state, self.who, self.peer, self.project, reason);
    }

    /// Attached as `client`.
    pub fn opened(&self, state: &AppState, client: ClientId) {
        let entry = self
            .entry(Action::SessionOpened)
            .detail("client", client.to_string());
        state.audit.record(entry);
    }

    /// Not attached: the agent could not start, no slot was free, …;
    /// `code` is the close the client got.
    pub fn not_opened(&self, state: &AppState, code: CloseCode) {
        let entry = self
            .entry(Action::SessionOpened)
            .outcome(Outcome::Error)
            .detail("close_code", code.code())
            .detail("error", code.meaning());
        state.audit.record(entry);
    }

    /// The session of `client` ended.
    pub fn closed(&self, state: &AppState, client: ClientId, how: Closed) {
        let mut entry = self
            .entry(Action::SessionClosed)
            .detail("client", client.to_string())
            .detail("reason", how.reason());
        if let Some(code) = how.code() {
            entry = entry.detail("close_code", code.code());
        }
        state.audit.record(entry);
    }
}
