//! [`McpHub`]: the session's MCP servers. Those of the config files start
//! with the agent unless marked `"default": false`, which start once
//! selected ([`McpHub::select`]); an ACP editor's own servers join and
//! leave with its sessions ([`McpHub::set_editor_servers`]). The hub routes
//! the model's calls, and tells its status feed of every change.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::server::Phase;
use super::status::{ServerState, ServerStatus};
use super::{McpTool, Selection, Server, ServerConfig, UnknownServer};
use crate::provider::ToolSpec;
use crate::sandbox::ToolConfinement;
use crate::tools::ToolOutput;

/// Where a server's definition came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// `--mcp-config` or the project's `.mcp.json`.
    Config,
    /// An ACP editor's `mcpServers`.
    Editor,
}

/// One server of the hub.
#[derive(Clone)]
struct Slot {
    server: Arc<Server>,
    origin: Origin,
    /// Started (and its tools offered); `false` until a `"default": false`
    /// server is selected.
    enabled: bool,
}

/// Names a selection asked for that no server has.
#[derive(Debug, thiserror::Error)]
#[error("no MCP server named {}; configured: {configured}", .unknown.join(", "))]
pub struct UnknownNames {
    pub unknown: Vec<String>,
    pub configured: String,
}

/// The session's MCP servers.
pub struct McpHub {
    slots: Mutex<Vec<Slot>>,
    /// What `--tools` lets through.
    selection: Selection,
    /// Where stdio servers run.
    cwd: PathBuf,
    /// How stdio servers are confined, and the network HTTP ones use.
    confinement: ToolConfinement,
    call_timeout: Duration,
    /// Bumped at every change of a server's state or tools.
    changes: Arc<watch::Sender<u64>>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.slots().iter().map(|s| s.server.name().to_string()))
            .finish()
    }
}

impl McpHub {
    /// The hub over the `configs` that `selection` selects. Nothing starts
    /// yet: see [`McpHub::start`].
    pub fn new(
        configs: Vec<ServerConfig>,
        selection: Selection,
        cwd: PathBuf,
        confinement: ToolConfinement,
        call_timeout: Duration,
    ) -> Result<Arc<McpHub>, UnknownServer> {
        if let Some(entry) = selection.unknown_server(&configs) {
            return Err(UnknownServer {
                entry: entry.to_string(),
                configured: match configs.is_empty() {
                    true => "none".into(),
                    false => configs
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                },
            });
        }
        let hub = McpHub {
            slots: Mutex::new(Vec::new()),
            selection,
            cwd,
            confinement,
            call_timeout,
            changes: Arc::new(watch::channel(0).0),
        };
        let slots = configs
            .into_iter()
            .filter(|c| hub.selection.wants_server(&c.name))
            .map(|c| hub.slot(c, Origin::Config))
            .collect();
        *hub.slots.lock().unwrap_or_else(PoisonError::into_inner) = slots;
        Ok(Arc::new(hub))
    }

    fn slot(&self, config: ServerConfig, origin: Origin) -> Slot {
        let enabled = config.starts;
        Slot {
            server: Server::new(
                config,
                self.cwd.clone(),
                self.confinement.clone(),
                self.call_timeout,
                Arc::clone(&self.changes),
            ),
            origin,
            enabled,
        }
    }

    fn slots(&self) -> Vec<Slot> {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn enabled(&self) -> Vec<Arc<Server>> {
        self.slots()
            .into_iter()
            .filter(|s| s.enabled)
            .map(|s| s.server)
            .collect()
    }

    /// No server is defined.
    pub fn is_empty(&self) -> bool {
        self.slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .is_empty()
    }

    /// The names of the servers defined.
    pub fn server_names(&self) -> Vec<String> {
        self.slots()
            .iter()
            .map(|s| s.server.name().to_string())
            .collect()
    }

    /// The names of the servers of the config files.
    pub fn configured_names(&self) -> Vec<String> {
        self.slots()
            .iter()
            .filter(|s| s.origin == Origin::Config)
            .map(|s| s.server.name().to_string())
            .collect()
    }

    /// Starts every enabled server in the background, when a runtime runs.
    pub fn start(self: &Arc<Self>) {
        for server in self.enabled() {
            connect_in_background(server);
        }
    }

    /// Waits until every enabled server was tried once (or `cancel`
    /// fires), so that the model call that follows offers their tools.
    pub async fn ready(&self, cancel: &CancellationToken) {
        tokio::select! {
            _ = cancel.cancelled() => {}
            _ = self.settled() => {}
        }
    }

    /// Waits until every enabled server was tried once.
    pub async fn settled(&self) {
        let pending: Vec<Arc<Server>> = self.enabled().into_iter().filter(|s| !s.tried()).collect();
        join_all(pending.iter().map(|s| s.ensure_connected())).await;
    }

    /// A receiver that sees every change of the servers' statuses.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Every server's status, in order.
    pub fn status(&self) -> Vec<ServerStatus> {
        self.slots()
            .iter()
            .map(|slot| {
                let server = &slot.server;
                let tools = self.offered(server).len();
                let (state, error) = match (slot.enabled, server.phase()) {
                    (false, _) => (ServerState::Disabled, None),
                    (true, Phase::Connected) => (ServerState::Connected, None),
                    (true, Phase::Failed) => (ServerState::Failed, server.last_error()),
                    (true, Phase::Idle) => (ServerState::Connecting, server.last_error()),
                };
                ServerStatus::new(server.name(), state, tools, error)
            })
            .collect()
    }

    /// Enables (starts) the named servers; one enabled already is left as
    /// it is. Every name must be a server's, or nothing changes.
    pub fn select(&self, names: &[String]) -> Result<Vec<ServerStatus>, UnknownNames> {
        let started = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            let unknown: Vec<String> = names
                .iter()
                .filter(|n| !slots.iter().any(|s| s.server.name() == n.as_str()))
                .cloned()
                .collect();
            if !unknown.is_empty() {
                return Err(UnknownNames {
                    unknown,
                    configured: match slots.is_empty() {
                        true => "none".to_string(),
                        false => slots
                            .iter()
                            .map(|s| s.server.name().to_string())
                            .collect::<Vec<_>>()
                            .join(", "),
                    },
                });
            }
            let mut started = Vec::new();
            for slot in slots.iter_mut() {
                if !slot.enabled && names.iter().any(|n| n == slot.server.name()) {
                    slot.enabled = true;
                    started.push(Arc::clone(&slot.server));
                }
            }
            started
        };
        if !started.is_empty() {
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        for server in started {
            connect_in_background(server);
        }
        Ok(self.status())
    }

    /// Makes `configs` the editor's servers: those it no longer names stop,
    /// new ones start (one with the same name and definition goes on
    /// running). Servers the `--tools` selection leaves out are returned,
    /// not added.
    pub async fn set_editor_servers(&self, configs: Vec<ServerConfig>) -> Vec<String> {
        let (wanted, left_out): (Vec<_>, Vec<_>) = configs
            .into_iter()
            .partition(|c| self.selection.wants_server(&c.name));
        let (stopped, started) = {
            let mut slots = self.slots.lock().unwrap_or_else(PoisonError::into_inner);
            let (keep, stopped): (Vec<Slot>, Vec<Slot>) = slots.drain(..).partition(|s| {
                s.origin == Origin::Config || wanted.iter().any(|c| *c == s.server.config)
            });
            *slots = keep;
            let mut started = Vec::new();
            for config in wanted {
                if slots.iter().any(|s| s.server.config == config) {
                    continue;
                }
                let slot = self.slot(config, Origin::Editor);
                started.push(Arc::clone(&slot.server));
                slots.push(slot);
            }
            (stopped, started)
        };
        join_all(stopped.iter().map(|s| s.server.stop())).await;
        if !stopped.is_empty() || !started.is_empty() {
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        for server in started {
            connect_in_background(server);
        }
        left_out.into_iter().map(|c| c.name).collect()
    }

    /// The selected tools of `server`, as last listed.
    fn offered(&self, server: &Server) -> Vec<McpTool> {
        server
            .tools()
            .into_iter()
            .filter(|t| self.selection.wants_tool(server.name(), &t.exposed))
            .collect()
    }

    /// Every tool offered, with its server.
    fn tools(&self) -> Vec<(Arc<Server>, McpTool)> {
        self.enabled()
            .into_iter()
            .flat_map(|server| {
                self.offered(&server)
                    .into_iter()
                    .map(move |t| (Arc::clone(&server), t))
            })
            .collect()
    }

    /// The specs to offer the model.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools().into_iter().map(|(_, t)| t.spec).collect()
    }

    /// The names of the tools offered.
    pub fn names(&self) -> Vec<String> {
        self.tools().into_iter().map(|(_, t)| t.exposed).collect()
    }

    fn find(&self, name: &str) -> Option<(Arc<Server>, McpTool)> {
        self.tools().into_iter().find(|(_, t)| t.exposed == name)
    }

    /// Whether `name` is one of the tools offered.
    pub fn has(&self, name: &str) -> bool {
        self.find(name).is_some()
    }

    /// Whether the server marks the tool `name` read-only.
    pub fn read_only(&self, name: &str) -> bool {
        self.find(name).is_some_and(|(_, t)| t.read_only)
    }

    /// Calls the tool `name` with the model's arguments.
    pub async fn call(&self, name: &str, args: Value, cancel: CancellationToken) -> ToolOutput {
        match self.find(name) {
            Some((server, tool)) => server.call(&tool.original, args, &cancel).await,
            None => ToolOutput::error(format!("unknown MCP tool `{name}`")),
        }
    }

    /// Stops every server.
    pub async fn stop(&self) {
        let slots = self.slots();
        join_all(slots.iter().map(|s| s.server.stop())).await;
    }
}

/// Connects `server` in a task of its own, when a runtime runs.
fn connect_in_background(server: Arc<Server>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            match server.ensure_connected().await {
                Ok(()) => {
                    tracing::info!(server = %server.name(), tools = server.tools().len(), "MCP server connected")
                }
                Err(e) => {
                    tracing::warn!(server = %server.name(), error = %e, "MCP server unavailable")
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::Transport;

    fn server(name: &str, starts: bool) -> ServerConfig {
        ServerConfig {
            name: name.to_string(),
            transport: Transport::Stdio {
                command: "true".into(),
                args: vec![],
                env: Default::default(),
            },
            timeout: None,
            starts,
        }
    }

    fn states(statuses: &[ServerStatus]) -> Vec<(&str, ServerState)> {
        statuses
            .iter()
            .map(|s| (s.name.as_str(), s.state))
            .collect()
    }

    #[test]
    fn a_server_not_started_by_default_is_disabled_until_selected() {
        let hub = McpHub::new(
            vec![server("later", false), server("now", true)],
            Selection::All,
            PathBuf::from("/"),
            ToolConfinement::none(),
            Duration::from_secs(1),
        )
        .unwrap();
        let changes = hub.subscribe();
        assert_eq!(
            states(&hub.status()),
            [
                ("later", ServerState::Disabled),
                ("now", ServerState::Connecting)
            ]
        );
        let err = hub
            .select(&["later".to_string(), "nope".to_string()])
            .unwrap_err();
        assert_eq!(err.unknown, ["nope"]);
        assert!(err.to_string().contains("later, now"), "{err}");
        assert_eq!(
            hub.status()[0].state,
            ServerState::Disabled,
            "nothing changed"
        );
        assert!(!changes.has_changed().unwrap());

        let after = hub.select(&["later".to_string()]).unwrap();
        assert_eq!(after[0].state, ServerState::Connecting);
        assert!(changes.has_changed().unwrap());
        assert_eq!(hub.configured_names(), ["later", "now"]);
    }
}
