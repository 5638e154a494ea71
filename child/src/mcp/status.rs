//! What clients are told about the MCP servers: for each configured server
//! its name, state (`connected`, `connecting`, `failed`, `disabled`), the
//! number of tools it offers and the last error, in the shape of
//! `_corral/mcp/select`'s answer and of the `mcp_status` events of every
//! dialect (always the full list). Pure.

use serde::Serialize;
use serde_json::{json, Value};

/// Characters of an error shown in a status.
pub const MAX_ERROR_CHARS: usize = 512;

/// A server's state as clients see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerState {
    /// Its tools are offered.
    Connected,
    /// Started and not answered yet, or died and restarted on its next use.
    Connecting,
    /// Given up on; `error` says why.
    Failed,
    /// Defined with `"default": false` and not selected.
    Disabled,
}

/// One server's status.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    pub state: ServerState,
    /// The tools of the server the model is offered.
    pub tools: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl ServerStatus {
    pub fn new(name: &str, state: ServerState, tools: usize, error: Option<String>) -> Self {
        ServerStatus {
            name: name.to_string(),
            state,
            tools,
            error: error.map(|e| crate::tools::cut_line(&e, MAX_ERROR_CHARS).to_string()),
        }
    }
}

/// `{"servers": [...]}`: the payload of a select answer and of a status
/// event.
pub fn payload(servers: &[ServerStatus]) -> Value {
    json!({ "servers": servers })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_serialise_as_the_contract_says() {
        let servers = [
            ServerStatus::new("fs", ServerState::Connected, 3, None),
            ServerStatus::new("gh", ServerState::Failed, 0, Some("x".repeat(2000))),
            ServerStatus::new("db", ServerState::Disabled, 0, None),
        ];
        let value = payload(&servers);
        assert_eq!(
            value["servers"][0],
            json!({"name": "fs", "state": "connected", "tools": 3})
        );
        assert_eq!(value["servers"][1]["state"], "failed");
        assert!(value["servers"][1]["error"].as_str().unwrap().len() < MAX_ERROR_CHARS + 40);
        assert_eq!(value["servers"][2]["state"], "disabled");
    }
}
