//! The MCP servers a hosted project may use, decided by the gateway: the
//! operator's servers (`--mcp-servers FILE`, [`operator`]), what a client
//! may select of them (`--client-mcp`, [`selection`]: by definition,
//! never by a name the client chose), and what the agent reports of them
//! (server states and tool calls, [`status`]) for the admin API and the
//! metrics.
//!
//! Each `corral-agent` child gets the operator's servers as a config file
//! of its own (`STATE/mcp/PROJECT.json`, mode 0600, under the state
//! directory its sandbox hides), named with `--mcp-config`; servers marked
//! `"default": false` are defined there but started only once selected
//! (`_corral/mcp/select`). A third-party agent (`--child-command`) gets
//! none of this: it is given no operator servers.

pub mod operator;
pub mod selection;
pub mod status;

pub use operator::{OperatorError, OperatorServer, OperatorServers, Transport};
pub use selection::{EditorServer, Refused, Selection};
pub use status::{McpNews, McpTracker, ServerStatus};

/// Whether a client's command is the agent's own MCP selection request
/// (`mcp_select` in zut and letscode, `mcp.select`/`mcp_select` in Zi,
/// `_corral/mcp/select` in ACP). Only the gateway sends it: a client that
/// could would pick servers past `--client-mcp`.
pub fn is_select_command(command: &str) -> bool {
    matches!(command, "mcp_select" | "mcp.select" | "_corral/mcp/select")
}

/// Why a client's selection request is refused.
pub const SELECT_REFUSED: &str = "MCP servers are not selected by a command through the gateway: \
    the operator's default servers run for every project, and an ACP editor selects others \
    with its session's mcpServers (matched to the operator's servers by definition)";

/// What a client may do about MCP servers (`--client-mcp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum ClientMcp {
    /// Clients name no servers: the operator's defaults only.
    Off,
    /// Clients may select operator-defined servers, matched by their
    /// definition; anything else they name is refused.
    #[default]
    Select,
}

impl<'de> serde::Deserialize<'de> for ClientMcp {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        <ClientMcp as clap::ValueEnum>::from_str(text.trim(), true).map_err(|_| {
            serde::de::Error::custom(format!("expected \"off\" or \"select\", found {text:?}"))
        })
    }
}

/// The gateway's MCP policy, shared by every hub.
#[derive(Debug, Clone, Default)]
pub struct McpPolicy {
    /// The operator's servers (empty: none configured).
    pub servers: OperatorServers,
    /// What clients may select.
    pub client: ClientMcp,
}

impl McpPolicy {
    /// Whether a client may select anything: `--client-mcp select` and at
    /// least one server that is not started by default.
    pub fn selectable(&self) -> bool {
        self.client == ClientMcp::Select && self.servers.iter().any(|s| !s.default)
    }

    /// Whether any selectable server is reached over HTTP (what an ACP
    /// `initialize` may advertise as `mcpCapabilities.http`).
    pub fn selectable_http(&self) -> bool {
        self.client == ClientMcp::Select
            && self
                .servers
                .iter()
                .any(|s| !s.default && matches!(s.transport, Transport::Http { .. }))
    }

    /// The editor's servers matched against the operator's.
    pub fn select(&self, asked: &[EditorServer]) -> Selection {
        selection::select(&self.servers, self.client, asked)
    }
}
