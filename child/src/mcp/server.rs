//! One MCP server as the agent holds it: the connection's state machine
//! (`Idle → Connected`, back to `Idle` when the server dies, `Failed` when
//! it cannot be reached or keeps dying), its tools as the model sees them,
//! kept current through `notifications/tools/list_changed`, and calls with
//! a timeout and cancellation (dropping a call sends
//! `notifications/cancelled`).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation};
use rmcp::service::{NotificationContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::config::{ServerConfig, Transport};
use super::{bridge, http, names, result, spawn};
use crate::provider::ToolSpec;
use crate::sandbox::{ToolConfinement, ToolNet};
use crate::tools::ToolOutput;
use std::collections::BTreeMap;

/// How long starting a server and its `initialize` and first `tools/list`
/// may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// Restarts after the server died before it counts as failed.
pub const MAX_RESTARTS: u32 = 3;
/// Most tools taken from one server.
pub const MAX_TOOLS: usize = 128;

/// One tool of the server.
#[derive(Clone, Debug)]
pub struct McpTool {
    /// The model's name, `mcp__SERVER__TOOL`.
    pub exposed: String,
    /// The server's name for it.
    pub original: String,
    pub spec: ToolSpec,
    /// The server's `readOnlyHint`: allowed in read-only mode.
    pub read_only: bool,
}

/// Where a server is, as its status shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Not tried yet, or died since (restarted on the next use).
    Idle,
    Connected,
    Failed,
}

/// Where the connection is.
enum State {
    /// Not started, or died since (then restarted on the next use).
    Idle,
    Connected(Box<Connection>),
    /// Given up on; the reason is what calls answer.
    Failed(String),
}

struct Connection {
    service: RunningService<RoleClient, Handler>,
    /// The stdio server's process; `None` over HTTP.
    process: Option<spawn::StdioProcess>,
}

/// Receives the server's notifications.
#[derive(Clone)]
struct Handler {
    server: std::sync::Weak<Server>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("corral-agent", env!("CARGO_PKG_VERSION")),
        )
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let Some(server) = self.server.upgrade() else {
            return;
        };
        // Its own task: the listing is a request to the server whose
        // notification this is.
        tokio::spawn(async move {
            match tokio::time::timeout(CONNECT_TIMEOUT, context.peer.list_all_tools()).await {
                Ok(Ok(tools)) => server.set_tools(tools),
                Ok(Err(e)) => {
                    tracing::warn!(server = %server.config.name, error = %e, "MCP tools/list failed")
                }
                Err(_) => tracing::warn!(server = %server.config.name, "MCP tools/list timed out"),
            }
        });
    }
}

/// A configured server and what the agent knows of it.
pub struct Server {
    pub config: ServerConfig,
    cwd: std::path::PathBuf,
    confinement: ToolConfinement,
    /// The per-call timeout.
    timeout: Duration,
    state: tokio::sync::Mutex<State>,
    /// Its tools, as last listed.
    tools: Mutex<Vec<McpTool>>,
    /// Times it died and was restarted.
    restarts: Mutex<u32>,
    /// The reason it is unusable, for listings (`None` while usable).
    failure: Mutex<Option<String>>,
    /// What [`State`] is, readable without waiting for a connection.
    phase: Mutex<Phase>,
    /// Why it last stopped being usable (a death it is restarted from, or
    /// its failure), for status listings.
    last_error: Mutex<Option<String>>,
    /// Its first connection was tried (and ended, either way).
    tried: std::sync::atomic::AtomicBool,
    /// Told of every change of phase or tools (the hub's status feed).
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Server {
    pub fn new(
        config: ServerConfig,
        cwd: std::path::PathBuf,
        confinement: ToolConfinement,
        default_timeout: Duration,
        changes: Arc<tokio::sync::watch::Sender<u64>>,
    ) -> Arc<Server> {
        Arc::new(Server {
            timeout: config.timeout.unwrap_or(default_timeout),
            config,
            cwd,
            confinement,
            state: tokio::sync::Mutex::new(State::Idle),
            tools: Mutex::new(Vec::new()),
            restarts: Mutex::new(0),
            failure: Mutex::new(None),
            phase: Mutex::new(Phase::Idle),
            last_error: Mutex::new(None),
            tried: std::sync::atomic::AtomicBool::new(false),
            changes,
        })
    }

    /// Where the server is.
    pub fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a first connection was tried and ended.
    pub fn tried(&self) -> bool {
        self.tried.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Why it last stopped being usable, if it did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_phase(&self, phase: Phase, error: Option<String>) {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = phase;
        if error.is_some() || phase == Phase::Connected {
            *self
                .last_error
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = error;
        }
        self.changed();
    }

    fn changed(&self) {
        self.changes
            .send_modify(|version| *version = version.wrapping_add(1));
    }

    pub fn name(&self) -> &str {
        &self.config.name
    }

    /// The tools as last listed.
    pub fn tools(&self) -> Vec<McpTool> {
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Why the server is unusable, if it is.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_tools(&self, listed: Vec<rmcp::model::Tool>) {
        let mut tools: Vec<McpTool> = Vec::new();
        if listed.len() > MAX_TOOLS {
            tracing::warn!(server = %self.config.name, count = listed.len(), "MCP server lists more than {MAX_TOOLS} tools; the rest are left out");
        }
        for tool in listed.into_iter().take(MAX_TOOLS) {
            let taken: Vec<String> = tools.iter().map(|t| t.exposed.clone()).collect();
            let exposed = names::unique(names::tool_name(&self.config.name, &tool.name), &taken);
            let annotations = tool.annotations.as_ref();
            tools.push(McpTool {
                spec: ToolSpec {
                    name: exposed.clone(),
                    description: names::description(
                        &self.config.name,
                        tool.description.as_deref(),
                        tool.title
                            .as_deref()
                            .or(annotations.and_then(|a| a.title.as_deref())),
                    ),
                    input_schema: names::input_schema(&tool.input_schema),
                },
                exposed,
                original: tool.name.to_string(),
                read_only: annotations.and_then(|a| a.read_only_hint) == Some(true),
            });
        }
        *self.tools.lock().unwrap_or_else(PoisonError::into_inner) = tools;
        self.changed();
    }

    fn fail(&self, state: &mut State, reason: String) -> String {
        tracing::warn!(server = %self.config.name, reason = %reason, "MCP server failed");
        *self.failure.lock().unwrap_or_else(PoisonError::into_inner) = Some(reason.clone());
        self.tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        *state = State::Failed(reason.clone());
        self.set_phase(Phase::Failed, Some(reason.clone()));
        reason
    }

    /// Connects if not connected (and not failed). A failure to connect
    /// marks the server failed.
    pub async fn ensure_connected(self: &Arc<Self>) -> Result<(), String> {
        let mut state = self.state.lock().await;
        self.connect_locked(&mut state).await
    }

    async fn connect_locked(self: &Arc<Self>, state: &mut State) -> Result<(), String> {
        match state {
            State::Connected(conn) if !conn.service.is_transport_closed() => return Ok(()),
            State::Connected(_) => self.died(state),
            State::Failed(reason) => return Err(reason.clone()),
            State::Idle => {}
        }
        if let State::Failed(reason) = state {
            return Err(reason.clone());
        }
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT, self.connect()).await;
        self.tried.store(true, std::sync::atomic::Ordering::Release);
        match attempt {
            Ok(Ok((conn, tools))) => {
                *state = State::Connected(Box::new(conn));
                self.set_phase(Phase::Connected, None);
                self.set_tools(tools);
                Ok(())
            }
            Ok(Err(e)) => Err(self.fail(state, e)),
            Err(_) => Err(self.fail(
                state,
                format!(
                    "did not answer within {}s of starting",
                    CONNECT_TIMEOUT.as_secs()
                ),
            )),
        }
    }

    /// The connection died: back to idle (restarted on the next use), or
    /// failed after [`MAX_RESTARTS`].
    fn died(&self, state: &mut State) {
        let restarts = {
            let mut restarts = self.restarts.lock().unwrap_or_else(PoisonError::into_inner);
            *restarts += 1;
            *restarts
        };
        if restarts > MAX_RESTARTS {
            self.fail(
                state,
                format!("exited {restarts} times; not restarted again"),
            );
        } else {
            *state = State::Idle;
            self.set_phase(
                Phase::Idle,
                Some("exited; restarted on its next use".to_string()),
            );
        }
    }

    async fn connect(self: &Arc<Self>) -> Result<(Connection, Vec<rmcp::model::Tool>), String> {
        let handler = Handler {
            server: Arc::downgrade(self),
        };
        let (service, process) = match &self.config.transport {
            Transport::Stdio { command, args, env } => {
                let (process, stdout, stdin) =
                    spawn::start(command, args, env, &self.cwd, &self.confinement)
                        .map_err(|e| format!("cannot start `{command}`: {e}"))?;
                let service = handler
                    .serve((stdout, stdin))
                    .await
                    .map_err(|e| format!("initialize failed: {e}"))?;
                (service, Some(process))
            }
            Transport::Http { url, headers } => match self.confinement.network() {
                ToolNet::Host => (http::connect(handler, url, headers).await?, None),
                ToolNet::Proxy(_) => {
                    // Through the egress proxy, like a tool command's traffic.
                    let (program, args) = bridge::command();
                    let env = BTreeMap::from([(
                        bridge::SERVER_ENV.to_string(),
                        bridge::server_env(url, headers),
                    )]);
                    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
                    let (process, stdout, stdin) =
                        spawn::start(program, &args, &env, &self.cwd, &self.confinement)
                            .map_err(|e| format!("cannot start the HTTP bridge: {e}"))?;
                    let service = handler
                        .serve((stdout, stdin))
                        .await
                        .map_err(|e| format!("initialize failed: {e}"))?;
                    (service, Some(process))
                }
                ToolNet::Isolated => {
                    return Err("HTTP MCP servers need a network: with --tool-network off \
                         there is none; use proxy (through the egress proxy) or on"
                        .into())
                }
            },
        };
        let tools = service
            .peer()
            .list_all_tools()
            .await
            .map_err(|e| format!("tools/list failed: {e}"))?;
        Ok((Connection { service, process }, tools))
    }

    /// Calls the server's tool `original` with the model's arguments, until
    /// it answers, the timeout passes or `cancel` fires.
    pub async fn call(
        self: &Arc<Self>,
        original: &str,
        args: Value,
        cancel: &CancellationToken,
    ) -> ToolOutput {
        let arguments = match args {
            Value::Object(map) => Some(map),
            Value::Null => None,
            _ => return ToolOutput::error("the arguments of an MCP tool must be a JSON object"),
        };
        let peer = {
            let mut state = self.state.lock().await;
            if let Err(reason) = self.connect_locked(&mut state).await {
                return ToolOutput::error(format!(
                    "MCP server `{}` is unavailable: {reason}",
                    self.config.name
                ));
            }
            match &*state {
                State::Connected(conn) => conn.service.peer().clone(),
                _ => return ToolOutput::error("MCP server is not connected"),
            }
        };
        let mut params = CallToolRequestParams::new(original.to_string());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        // Dropping the call (abort, timeout) sends notifications/cancelled.
        let call = peer.call_tool(params);
        let outcome = tokio::select! {
            biased;
            _ = cancel.cancelled() => return ToolOutput::error("aborted"),
            outcome = tokio::time::timeout(self.timeout, call) => outcome,
        };
        match outcome {
            Ok(Ok(answer)) => result::to_output(&serde_json::to_value(&answer).unwrap_or_default()),
            Ok(Err(e)) => self.call_failed(e).await,
            Err(_) => ToolOutput::error(format!(
                "timed out after {}s: MCP server `{}` did not answer (the call was cancelled)",
                self.timeout.as_secs(),
                self.config.name
            )),
        }
    }

    /// A call that failed: a dead server is reported (once: this call's
    /// result) and restarted on the next use.
    async fn call_failed(self: &Arc<Self>, error: rmcp::ServiceError) -> ToolOutput {
        let mut state = self.state.lock().await;
        let dead = match &*state {
            State::Connected(conn) => conn.service.is_transport_closed(),
            _ => false,
        };
        if !dead {
            return ToolOutput::error(format!("MCP error from `{}`: {error}", self.config.name));
        }
        let process = match &mut *state {
            State::Connected(conn) => conn.process.as_mut(),
            _ => None,
        };
        let status = match process {
            Some(process) => {
                match tokio::time::timeout(Duration::from_secs(1), process.child.wait()).await {
                    Ok(Ok(status)) => format!(" ({status})"),
                    _ => String::new(),
                }
            }
            None => String::new(),
        };
        self.died(&mut state);
        let next = match &*state {
            State::Failed(reason) => format!("it is not restarted: {reason}"),
            _ => "it is restarted on its next use".to_string(),
        };
        ToolOutput::error(format!(
            "MCP server `{}` exited during the call{status}; {next}",
            self.config.name
        ))
    }

    /// Stops the server (closing its connection; a stdio server's group is
    /// killed).
    pub async fn stop(&self) {
        let mut state = self.state.lock().await;
        if let State::Connected(mut conn) = std::mem::replace(&mut *state, State::Idle) {
            let _ = tokio::time::timeout(Duration::from_secs(1), conn.service.close()).await;
            if let Some(mut process) = conn.process {
                process.group.kill();
            }
        }
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner) = Phase::Idle;
    }
}
