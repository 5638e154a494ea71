//! MCP in ACP: the editor's `mcpServers` of `session/new`, `session/load`
//! and `session/resume` (used as given: this is the standalone agent an
//! editor runs on its user's machine; behind the gateway the gateway
//! answers those requests itself), the servers it refused told as an
//! agent message, and corral's `_corral/mcp/select` request, answered with
//! every server's status; `_corral/mcp_status` notifications carry the
//! same list whenever it changes (`crate::rpc::mcp_status`).

use corral_protocol::acp::{error_code, ContentBlock, SessionUpdate};
use serde::Deserialize;
use serde_json::Value;

use super::encoder::update_frame;
use super::rpc::{self, RpcError};
use super::AcpServer;
use crate::mcp::{editor, status};

/// corral's request selecting operator-defined servers.
pub const SELECT: &str = "_corral/mcp/select";
/// corral's notification of the servers' statuses.
pub const STATUS: &str = "_corral/mcp_status";
/// Most names one selection may hold.
const MAX_SELECTED: usize = 64;

/// `_corral/mcp/select` params.
#[derive(Deserialize)]
struct SelectParams {
    servers: Vec<String>,
}

/// The `_corral/mcp_status` notification of `{"servers": [...]}`.
pub fn status_notification(payload: Value) -> Value {
    rpc::notification(STATUS, payload)
}

impl AcpServer {
    /// Makes the editor's `entries` the session's own servers; what is
    /// not used is told, after the answer, as an agent message.
    pub(super) async fn use_editor_servers(&mut self, entries: &[Value]) {
        let own = self.mcp.configured_names();
        let (servers, refused) = editor::servers(entries, &own);
        let left_out = self.mcp.set_editor_servers(servers).await;
        let mut lines: Vec<String> = refused
            .iter()
            .map(|r| format!("MCP server `{}` is not used: {}", r.name, r.reason))
            .collect();
        lines.extend(left_out.iter().map(|name| {
            format!("MCP server `{name}` is not used: this agent's --tools leaves it out")
        }));
        if lines.is_empty() {
            return;
        }
        let update = SessionUpdate::AgentMessageChunk {
            content: ContentBlock::Text {
                text: format!("{}\n", lines.join("\n")),
            },
        };
        self.after.push(update_frame(&self.session_id, &update));
    }

    pub(super) fn select_mcp(&self, name: &str, params: Value) -> Result<Value, RpcError> {
        let params: SelectParams = rpc::params(name, params)?;
        if params.servers.len() > MAX_SELECTED {
            return Err(RpcError::invalid_params(format!(
                "at most {MAX_SELECTED} servers at once"
            )));
        }
        match self.mcp.select(&params.servers) {
            Ok(servers) => Ok(status::payload(&servers)),
            Err(e) => Err(RpcError::new(error_code::INVALID_PARAMS, e.to_string())),
        }
    }
}
