//! The MCP status feed every dialect shares: once its gate opens (after
//! the handshake the dialect needs first) and the servers that start with
//! the agent were tried, one task sends the full list of server statuses,
//! then again at each change, as the frame the dialect makes of it (ACP's
//! `_corral/mcp_status` notification, zut's and letscode's `mcp_status`
//! event, Zi's `mcp_status` session event). Nothing is sent while no server
//! is defined.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::agent::Output;
use crate::mcp::{status, McpHub, ServerStatus};

/// The command (zut, letscode) selecting servers: `servers` names them.
pub const SELECT_COMMAND: &str = "mcp_select";
/// Most names one selection may hold.
pub const MAX_SELECTED: usize = 64;

/// Enables the servers `servers` (a JSON array of names) names, as
/// `mcp_select` asks; the answer's data is every server's status.
pub fn select(hub: &McpHub, servers: Option<&Value>) -> Result<Value, String> {
    let names: Vec<String> = match servers {
        Some(Value::Array(names)) if names.len() <= MAX_SELECTED => names
            .iter()
            .map(|n| n.as_str().map(str::to_string))
            .collect::<Option<_>>()
            .ok_or_else(|| "`servers` must hold server names (strings)".to_string())?,
        Some(Value::Array(_)) => return Err(format!("at most {MAX_SELECTED} servers at once")),
        _ => return Err("`servers` must be an array of server names".to_string()),
    };
    hub.select(&names)
        .map(|servers| status::payload(&servers))
        .map_err(|e| e.to_string())
}

/// Opens the feed: statuses flow from then on.
#[derive(Clone, Debug)]
pub struct FeedGate(Arc<watch::Sender<bool>>);

impl FeedGate {
    pub fn open(&self) {
        self.0.send_replace(true);
    }
}

/// Starts the feed of `hub`'s statuses into `out`, each made a frame by
/// `frame` from `{"servers": [...]}`; it waits for the gate returned.
pub fn spawn(hub: Arc<McpHub>, out: mpsc::Sender<Output>, frame: fn(Value) -> Value) -> FeedGate {
    let (gate, mut opened) = watch::channel(false);
    let mut changes = hub.subscribe();
    // Weak: the feed must not keep the writer alive once the front-end and
    // the agent are done (the process exits when its output is flushed).
    let out = out.downgrade();
    tokio::spawn(async move {
        if opened.wait_for(|open| *open).await.is_err() {
            return;
        }
        hub.settled().await;
        let mut last: Option<Vec<ServerStatus>> = None;
        loop {
            changes.borrow_and_update();
            let now = hub.status();
            if worth_sending(last.as_deref(), &now) {
                let Some(out) = out.upgrade() else {
                    return;
                };
                let sent = out.send(Output::Frame(frame(status::payload(&now)))).await;
                if sent.is_err() {
                    return;
                }
                last = Some(now);
            }
            if changes.changed().await.is_err() {
                return;
            }
        }
    });
    FeedGate(Arc::new(gate))
}

/// A list differing from the last one sent, unless nothing was ever
/// defined.
fn worth_sending(last: Option<&[ServerStatus]>, now: &[ServerStatus]) -> bool {
    match last {
        None => !now.is_empty(),
        Some(last) => last != now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::ServerState;

    #[test]
    fn only_changes_are_sent_and_nothing_without_servers() {
        let one = vec![ServerStatus::new("a", ServerState::Connected, 1, None)];
        assert!(!worth_sending(None, &[]));
        assert!(worth_sending(None, &one));
        assert!(!worth_sending(Some(&one), &one));
        assert!(worth_sending(Some(&one), &[]));
    }
}
