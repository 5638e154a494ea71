//! The agent's MCP client: the servers named by `--mcp-config` (and, when
//! allowed, the project's `.mcp.json`), started when the agent starts, with
//! their tools offered to the model as `mcp__SERVER__TOOL`. [`McpHub`] owns
//! the servers the session selected (`--tools`) and routes calls to them;
//! `config` parses, `names` and `result` map between MCP and the model,
//! `spawn` and `http` are the transports, `server` one server's state.

pub mod bridge;
pub mod config;
pub mod editor;
mod http;
mod hub;
pub mod names;
pub mod result;
mod server;
mod spawn;
pub mod status;

use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub use config::{ServerConfig, Transport};
pub use hub::{McpHub, UnknownNames};
pub use names::PREFIX;
pub use server::{McpTool, Server, CONNECT_TIMEOUT, MAX_RESTARTS};
pub use spawn::INHERITED_VARS;
pub use status::{ServerState, ServerStatus};

use crate::provider::ToolSpec;
use crate::tools::{is_mcp_entry, ExternalTools, ToolOutput};

/// Default per-call timeout (`--mcp-timeout`), in seconds.
pub const DEFAULT_CALL_TIMEOUT_SECS: u64 = 120;

/// Which MCP tools a session offers: `--tools` entries `mcp` (every
/// server), `mcp__SERVER` (one server's tools) and `mcp__SERVER__TOOL`
/// (one tool); without `--tools`, all of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selection {
    All,
    Only(Vec<String>),
}

impl Selection {
    /// The selection a `--tools` list makes.
    pub fn from_tools_flag(names: &[String]) -> Selection {
        let entries: Vec<String> = names.iter().filter(|n| is_mcp_entry(n)).cloned().collect();
        match entries.iter().any(|e| e == "mcp") {
            true => Selection::All,
            false => Selection::Only(entries),
        }
    }

    /// Whether `server` has any tool selected.
    pub(crate) fn wants_server(&self, server: &str) -> bool {
        match self {
            Selection::All => true,
            Selection::Only(entries) => entries.iter().any(|e| entry_server(e) == Some(server)),
        }
    }

    /// Whether the tool the model knows as `exposed`, of `server`, is
    /// selected.
    pub(crate) fn wants_tool(&self, server: &str, exposed: &str) -> bool {
        match self {
            Selection::All => true,
            Selection::Only(entries) => entries
                .iter()
                .any(|e| e == exposed || e.strip_prefix(PREFIX).is_some_and(|rest| rest == server)),
        }
    }

    /// The first entry naming a server that is not configured.
    pub(crate) fn unknown_server<'a>(&'a self, servers: &[ServerConfig]) -> Option<&'a str> {
        match self {
            Selection::All => None,
            Selection::Only(entries) => entries
                .iter()
                .find(|e| {
                    let server = entry_server(e);
                    !servers.iter().any(|s| Some(s.name.as_str()) == server)
                })
                .map(String::as_str),
        }
    }
}

/// The server an entry `mcp__SERVER` or `mcp__SERVER__TOOL` names.
fn entry_server(entry: &str) -> Option<&str> {
    let rest = entry.strip_prefix(PREFIX)?;
    Some(rest.split_once("__").map_or(rest, |(server, _)| server))
}

/// A `--tools` entry about a server that is not configured.
#[derive(Debug, thiserror::Error)]
#[error("--tools {entry}: no MCP server of that name is configured (configured: {configured})")]
pub struct UnknownServer {
    pub entry: String,
    pub configured: String,
}

impl ExternalTools for McpHub {
    fn is_empty(&self) -> bool {
        McpHub::is_empty(self)
    }

    fn ready<'a>(&'a self, cancel: &'a CancellationToken) -> BoxFuture<'a, ()> {
        Box::pin(McpHub::ready(self, cancel))
    }

    fn specs(&self) -> Vec<ToolSpec> {
        McpHub::specs(self)
    }

    fn names(&self) -> Vec<String> {
        McpHub::names(self)
    }

    fn has(&self, name: &str) -> bool {
        McpHub::has(self, name)
    }

    fn read_only(&self, name: &str) -> bool {
        McpHub::read_only(self, name)
    }

    fn call(
        self: Arc<Self>,
        name: String,
        args: Value,
        cancel: CancellationToken,
    ) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move { McpHub::call(&self, &name, args, cancel).await })
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::sandbox::ToolConfinement;

    fn servers(names: &[&str]) -> Vec<ServerConfig> {
        names
            .iter()
            .map(|n| ServerConfig {
                name: n.to_string(),
                transport: Transport::Stdio {
                    command: "true".into(),
                    args: vec![],
                    env: Default::default(),
                },
                timeout: None,
                starts: true,
            })
            .collect()
    }

    fn flag(entries: &[&str]) -> Selection {
        Selection::from_tools_flag(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn the_tools_flag_selects_servers_and_tools() {
        assert_eq!(flag(&["read", "mcp"]), Selection::All);
        let some = flag(&["read", "mcp__fs", "mcp__gh__list_issues"]);
        assert!(some.wants_server("fs") && some.wants_server("gh") && !some.wants_server("db"));
        assert!(some.wants_tool("fs", "mcp__fs__read_file"));
        assert!(some.wants_tool("gh", "mcp__gh__list_issues"));
        assert!(!some.wants_tool("gh", "mcp__gh__create_issue"));
        let none = flag(&["read", "bash"]);
        assert!(!none.wants_server("fs"));
    }

    #[test]
    fn an_unknown_server_is_refused_naming_the_configured_ones() {
        let hub = McpHub::new(
            servers(&["fs", "gh"]),
            flag(&["mcp__db"]),
            PathBuf::from("/"),
            ToolConfinement::none(),
            Duration::from_secs(1),
        );
        let err = hub.unwrap_err().to_string();
        assert!(err.contains("mcp__db") && err.contains("fs, gh"), "{err}");
        let hub = McpHub::new(
            servers(&["fs", "gh"]),
            flag(&["mcp__gh"]),
            PathBuf::from("/"),
            ToolConfinement::none(),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(format!("{hub:?}"), r#"["gh"]"#);
    }
}
