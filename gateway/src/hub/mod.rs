//! The hub: one task per project that owns the project's child and every
//! client attached to it.
//!
//! The task (`actor`) receives [`HubCommand`]s from WebSocket connections
//! and lines from the child. Requests get gateway-unique ids ([`ids`]);
//! responses go back to the one client that asked; events get a `seq` and go
//! into the shared [`feed`] that every client reads at its own pace
//! (`routing`; what the hub says itself, in `outbox`). The child's
//! lifecycle (start, health, restart, stop) is a
//! state machine (`supervision`, `lifecycle`) over a child the hub only
//! knows through the `child` traits, so tests drive it with a fake child.
//!
//! The hub's state is a few parts, each with private fields and its own
//! invariants and tests: the attached `clients` (by [`ClientId`]), the
//! requests waiting for the child ([`ids::IdMap`]), the runs
//! (`run_tracker`, over [`runs::RunBook`]: which client each run belongs
//! to), the child's requests waiting for clients (`ask_queue`), the
//! [`feed`] with its replay [`ring`], and the `supervision` state. Every
//! id the gateway sends a child is a [`GatewayId`], minted in one place
//! and parsed once when the child answers. What frames mean
//! (ids, answers, runs, greetings) is the business of the project's
//! [`Dialect`]. What waits for each client is bounded in bytes
//! ([`budget`]); what a project spends on its model, `metering` over
//! the state in `spending`. The admin API reads each hub's [`HubStatus`]
//! from a `watch` channel the hub alone writes. What clients do through
//! the hub (prompts, aborts, permission answers, …) goes to the audit log
//! (`audit`).

mod actor;
mod ask_queue;
mod asks;
mod audit;
pub mod budget;
mod child;
mod client_id;
mod clients;
pub mod feed;
pub mod gate;
pub mod gateway_id;
pub mod ids;
mod join;
mod launch;
mod lifecycle;
mod mcp;
mod metering;
mod outbox;
pub mod ring;
mod routing;
mod run_tracker;
pub mod runs;
mod sessions;
mod spending;
mod supervision;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_mcp;
#[cfg(test)]
mod tests_sessions;
#[cfg(test)]
mod tests_spending;
pub mod trace;
mod waiting;

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};

use crate::access::Identity;
use crate::auth::Role;
use crate::dialect::{Dialect, OwnRuns};
use crate::metrics::Metrics;
use crate::process::backoff::RestartPolicy;
use crate::process::{Credentials, Limits, StderrTail};
pub use client_id::ClientId;
pub use feed::{ClientFeed, Delivery, Unicast};
pub use gateway_id::GatewayId;

/// Commands a hub may have waiting before senders are slowed down.
const COMMAND_QUEUE: usize = 1024;

/// Settings every hub shares.
#[derive(Debug, Clone)]
pub struct HubSettings {
    /// What the children and clients speak.
    pub dialect: Dialect,
    pub child_bin: PathBuf,
    /// Appended to `rpc --cwd DIR --session FILE`.
    pub child_args: Vec<OsString>,
    /// A third-party ACP agent run instead of `child_bin rpc …` (its
    /// program, then its arguments); under `child_bin sandbox-exec` when
    /// the sandbox is on.
    pub child_command: Option<Vec<OsString>>,
    /// Private homes of third-party agents: `homes_dir/PROJECT`.
    pub homes_dir: PathBuf,
    /// The state directory: a child writes its stderr to
    /// `state_dir/logs/PROJECT.log`.
    pub state_dir: PathBuf,
    /// The agent's sandbox flags (`--sandbox --sandbox-hide …`), or none.
    pub sandbox_args: Vec<OsString>,
    /// Fork `corral-agent` children from its template (`--child-template`).
    pub child_template: bool,
    /// With `--tool-network proxy`: the egress proxy's registry, which
    /// gives each spawn its secret (`CORRAL_EGRESS_SECRET`).
    pub egress: Option<Arc<crate::egress::Registry>>,
    /// The canonical projects root: a project's directory is checked
    /// again against it before every spawn.
    pub projects_root: PathBuf,
    /// The account children run as (`--child-user`), if not the gateway's.
    pub credentials: Option<Credentials>,
    /// Per-child resource limits, when configured.
    pub limits: Option<Arc<Limits>>,
    /// The child's environment (already scrubbed), without the RPC token.
    pub child_env: Vec<(OsString, OsString)>,
    /// Session journals go in `sessions_dir/PROJECT.jsonl`.
    pub sessions_dir: PathBuf,
    /// Names this gateway process's `seq` space: it changes when the
    /// gateway restarts (and its `seq` counters start again), so a client
    /// never takes new events for ones it has.
    pub epoch: String,
    pub replay_events: usize,
    pub replay_bytes: usize,
    /// Per-client queue of responses not yet written.
    pub outbox_frames: usize,
    /// Byte bounds of every client's outbox and of all of them together
    /// (shared by every hub).
    pub budgets: Arc<budget::Budgets>,
    /// Requests one client may have waiting for the child's answer.
    pub max_client_requests: usize,
    /// How long a request of the child for its clients (ACP permission)
    /// waits for an answer before the gateway answers it "cancelled".
    pub permission_timeout: Duration,
    /// Longest line accepted from a child.
    pub max_line: usize,
    pub ping_interval: Duration,
    pub ping_timeout: Duration,
    pub ready_timeout: Duration,
    pub stop_grace: Duration,
    /// `None`: never reap idle children.
    pub idle_timeout: Option<Duration>,
    pub restart: RestartPolicy,
    pub metrics: Arc<Metrics>,
    /// With `--model-broker on`: where each spawn registers its child's
    /// placeholder key (the child's environment gets it instead of the
    /// provider keys).
    pub model_broker: Option<Arc<crate::broker::Registry>>,
    /// What a prompt passes before it reaches the child (per-identity
    /// rate limits, budgets).
    pub gate: Arc<dyn gate::Gate>,
    /// Where the hub records what clients do (prompts, aborts, answers);
    /// records nothing without `--audit-log`.
    pub audit: crate::audit::Audit,
    /// The budgets: whom a project's model calls are charged to, what
    /// stops a run whose budget is spent, where the spend an agent
    /// reports is counted (without the broker). `None`: no budgets.
    pub spend: Option<Arc<crate::spend::Ledger>>,
    /// The operator's MCP servers and what clients may select of them
    /// (`--mcp-servers`, `--client-mcp`).
    pub mcp: Arc<crate::mcp::McpPolicy>,
    /// Where each `corral-agent` child's MCP config file is written
    /// (`STATE/mcp/PROJECT.json`), hidden from agents with the state
    /// directory.
    pub mcp_dir: PathBuf,
}

/// A fresh `seq` epoch: 64 random bits, in hex.
pub fn new_epoch() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; 8];
    getrandom::getrandom(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// How a client joins a hub.
#[derive(Debug, Clone)]
pub struct Join {
    /// Who the client's credential proves.
    pub who: Arc<Identity>,
    /// Where the client connects from (after trusted proxies).
    pub peer: Option<IpAddr>,
    pub role: Role,
    pub resume_after: Option<u64>,
    /// `Some(id)` when the client sent a hello to answer (its `id`, if
    /// any): the answer comes first (after a letscode or Zi `ready`).
    pub hello: Option<Option<Value>>,
    /// Whether it receives only its own runs' events, and as which client.
    pub own_runs: OwnRuns,
}

/// What a connection asks of a hub.
#[derive(Debug)]
pub enum HubCommand {
    /// Join; the reply comes once the child is ready (or failed to start).
    Attach {
        join: Join,
        reply: oneshot::Sender<Result<Attached, AttachError>>,
    },
    /// A frame for one client, in order with everything else it receives
    /// (errors about its own malformed input).
    Reply {
        client: ClientId,
        bytes: bytes::Bytes,
    },
    /// A client left.
    Detach { client: ClientId },
    /// A request frame from a client (any command but its first hello).
    Request {
        client: ClientId,
        frame: Map<String, Value>,
    },
    /// Stop the child gracefully and end the hub.
    Stop {
        reason: StopReason,
        done: oneshot::Sender<()>,
    },
    /// Restart the child gracefully, or start it again after a crash loop
    /// (admin).
    Restart,
    /// Abort the run in flight, if any (admin).
    Abort,
}

/// Why a hub stops its child on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    Idle,
    Admin,
    Shutdown,
    /// Evicted to make room under `--max-children`.
    Evicted,
}

impl StopReason {
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Idle => "idle",
            StopReason::Admin => "admin",
            StopReason::Shutdown => "shutdown",
            StopReason::Evicted => "evicted",
        }
    }
}

/// A successful attach.
#[derive(Debug)]
pub struct Attached {
    pub client: ClientId,
    /// The child's hello data (`protocol_version`, `version`, ...).
    pub child_hello: Map<String, Value>,
    pub last_seq: u64,
    /// Some events after `resume_after` are gone.
    pub gap: bool,
    pub feed: ClientFeed,
}

/// Why an attach failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AttachError {
    #[error("the agent failed to start: {0}")]
    StartFailed(String),
    /// The session journal is held by another agent process (another
    /// gateway runs this project).
    #[error("the agent failed to start: {0}")]
    Elsewhere(String),
    /// The gateway lacks a resource to start it now (open files): try
    /// again later.
    #[error("the agent failed to start: {0}")]
    Unavailable(String),
    #[error("the agent is in a crash loop; automatic restarts resume in {0} s (or an admin restarts it)")]
    CrashLoop(u64),
    /// The hub is stopping or gone; ask the registry again.
    #[error("the project's hub is stopping")]
    Gone,
}

/// Lifecycle state of a project's child.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ChildState {
    Starting,
    Ready,
    Backoff,
    Failed,
    Stopping,
    Exited,
}

/// How the previous child ended.
#[derive(Debug, Clone, Serialize)]
pub struct LastExit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub reason: String,
}

/// An attached client, as the admin API lists it.
#[derive(Debug, Clone)]
pub struct ClientInfo {
    pub client: ClientId,
    pub role: Role,
    /// The last `seq` delivered to it.
    pub cursor: Arc<AtomicU64>,
}

impl ClientInfo {
    /// Events the client has not been sent yet.
    pub fn lag(&self, last_seq: u64) -> u64 {
        last_seq.saturating_sub(self.cursor.load(Ordering::Relaxed))
    }
}

/// A snapshot for the admin API.
#[derive(Debug, Clone)]
pub struct HubStatus {
    pub project: String,
    pub pid: Option<u32>,
    pub state: ChildState,
    pub busy: bool,
    pub busy_since: Option<SystemTime>,
    pub clients: usize,
    pub client_list: Vec<ClientInfo>,
    pub restarts: u32,
    /// When the current child became ready.
    pub ready_since: Option<SystemTime>,
    pub last_activity: SystemTime,
    pub last_seq: u64,
    pub last_exit: Option<LastExit>,
    pub model: Option<String>,
    /// The latest cumulative usage the child reported.
    pub usage: Option<Value>,
    pub stderr_tail: Option<StderrTail>,
    /// The agent's MCP servers as it last reported them.
    pub mcp: Vec<crate::mcp::ServerStatus>,
}

/// The connection-side handle of a hub.
#[derive(Clone)]
pub struct HubHandle {
    pub project: String,
    commands: mpsc::Sender<HubCommand>,
    status: watch::Receiver<HubStatus>,
}

impl HubHandle {
    /// Starts a hub for `project` (working directory `dir`). `seq` is the
    /// project's counter, kept by the caller so it outlives the hub.
    pub fn spawn(
        project: String,
        dir: PathBuf,
        settings: Arc<HubSettings>,
        seq: Arc<AtomicU64>,
        tasks: &tokio_util::task::TaskTracker,
    ) -> HubHandle {
        let launcher = launch::AgentLauncher {
            project: project.clone(),
            dir,
            settings: settings.clone(),
        };
        HubHandle::start(project, settings, seq, Box::new(launcher), tasks)
    }

    /// Starts a hub whose children come from `launcher`.
    fn start(
        project: String,
        settings: Arc<HubSettings>,
        seq: Arc<AtomicU64>,
        launcher: Box<dyn child::Launcher>,
        tasks: &tokio_util::task::TaskTracker,
    ) -> HubHandle {
        let (commands, rx) = mpsc::channel(COMMAND_QUEUE);
        let (publisher, status) = watch::channel(HubStatus {
            project: project.clone(),
            pid: None,
            state: ChildState::Starting,
            busy: false,
            busy_since: None,
            clients: 0,
            client_list: Vec::new(),
            restarts: 0,
            ready_since: None,
            last_activity: SystemTime::now(),
            last_seq: 0,
            last_exit: None,
            model: None,
            usage: None,
            stderr_tail: None,
            mcp: Vec::new(),
        });
        let hub = actor::Hub::new(project.clone(), settings, seq, publisher, launcher);
        tasks.spawn(hub.run(rx));
        HubHandle {
            project,
            commands,
            status,
        }
    }

    /// Joins the hub; waits until its child is ready.
    pub async fn attach(&self, join: Join) -> Result<Attached, AttachError> {
        let (reply, rx) = oneshot::channel();
        self.commands
            .send(HubCommand::Attach { join, reply })
            .await
            .map_err(|_| AttachError::Gone)?;
        rx.await.unwrap_or(Err(AttachError::Gone))
    }

    pub async fn request(&self, client: ClientId, frame: Map<String, Value>) {
        let _ = self
            .commands
            .send(HubCommand::Request { client, frame })
            .await;
    }

    pub async fn reply(&self, client: ClientId, bytes: bytes::Bytes) {
        let _ = self
            .commands
            .send(HubCommand::Reply { client, bytes })
            .await;
    }

    pub async fn detach(&self, client: ClientId) {
        let _ = self.commands.send(HubCommand::Detach { client }).await;
    }

    /// Stops the child gracefully; returns when it has exited.
    pub async fn stop(&self, reason: StopReason) {
        let (done, rx) = oneshot::channel();
        if self
            .commands
            .send(HubCommand::Stop { reason, done })
            .await
            .is_ok()
        {
            let _ = rx.await;
        }
    }

    pub async fn restart(&self) {
        let _ = self.commands.send(HubCommand::Restart).await;
    }

    pub async fn abort(&self) {
        let _ = self.commands.send(HubCommand::Abort).await;
    }

    /// Whether the hub task has ended (its child, if any, has exited).
    pub fn is_closed(&self) -> bool {
        self.commands.is_closed()
    }

    /// Waits until the hub task has ended.
    pub async fn closed(&self) {
        self.commands.closed().await;
    }

    /// Whether both handles address the same hub (not just the same
    /// project).
    pub fn same(&self, other: &HubHandle) -> bool {
        self.commands.same_channel(&other.commands)
    }

    pub fn status(&self) -> HubStatus {
        self.status.borrow().clone()
    }

    /// A receiver that wakes whenever the hub publishes a new status (and
    /// fails once the hub is gone).
    pub fn status_changes(&self) -> watch::Receiver<HubStatus> {
        let mut changes = self.status.clone();
        changes.mark_unchanged();
        changes
    }
}
