//! The hub task: its state, its main loop and its commands. Clients
//! joining are in [`super::join`], frame routing in [`super::routing`],
//! the child's lifecycle in [`super::lifecycle`] over the states of
//! [`super::supervision`].
//!
//! The loop never waits on the child: lines for it are queued without
//! waiting, and its start and stop are futures polled here beside the
//! commands, so a project serves attach, detach, abort and status while
//! its child starts or stops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{sleep_until, Instant};

use super::ask_queue::Asks;
use super::child::Launcher;
use super::client_id::ClientId;
use super::clients::Clients;
use super::feed::Feed;
use super::gateway_id::{GatewayId, IdMint};
use super::ids::IdMap;
use super::ring::ReplayRing;
use super::run_tracker::Runs;
use super::spending::Spending;
use super::supervision::{far_future, Supervision};
use super::waiting::{Waiting, WaitingAttach};
use super::{AttachError, HubCommand, HubSettings, HubStatus, LastExit, StopReason};
use crate::dialect::Inbound;
use crate::process::backoff::CrashHistory;

/// All state of one project. Owned by its task; nothing else touches it.
pub(super) struct Hub {
    pub project: String,
    pub settings: Arc<HubSettings>,
    /// The project's event counter; outlives this hub.
    pub seq: Arc<AtomicU64>,
    /// The admin API's view of this hub, published by the hub alone.
    pub status: watch::Sender<HubStatus>,
    pub feed: Arc<Feed>,
    pub clients: Clients,
    /// Requests of clients waiting for the child's answer.
    pub pending: IdMap,
    /// The runs in flight and which client each belongs to.
    pub runs: Runs,
    /// Where every id the hub sends the child comes from.
    pub mint: IdMint,
    /// Where the child is.
    pub supervision: Supervision,
    /// How children start.
    pub launcher: Box<dyn Launcher>,
    /// The hub ends once its loop sees this.
    pub ending: bool,
    /// Who waits for the hub to end (stop requests).
    pub stopped: Vec<oneshot::Sender<()>>,
    /// Attaches and requests that arrived while the child was not ready.
    pub waiting: Waiting,
    pub crashes: CrashHistory,
    pub restarts: u32,
    /// Since when nobody is attached and nothing runs.
    pub idle_since: Option<Instant>,
    /// The child's hello data, given to clients on attach.
    pub hello: Map<String, Value>,
    pub last_exit: Option<LastExit>,
    /// The model in use (from the hello, then `set_model` answers).
    pub model: Option<String>,
    /// The latest cumulative usage reported by the child.
    pub usage: Option<Value>,
    /// Clients that said they leave (the dialect's `Leave` capability),
    /// with the id of that request: dismissed once no run is active.
    pub leaving: Vec<(ClientId, Option<Value>)>,
    /// Attaches waiting for the state snapshot their greeting carries
    /// (the dialect's `state_request`), by the id of the request sent for
    /// it.
    pub awaiting_state: HashMap<GatewayId, WaitingAttach>,
    /// Requests of the child waiting for a client's answer (the dialect's
    /// `ChildAsks` capability).
    pub asks: Asks,
    /// Audit entries of prompts waiting for the agent's first answer,
    /// which names their run (see `super::audit`).
    pub audit_held: HashMap<GatewayId, crate::audit::Entry>,
    /// Who pays for the project's model calls, and what a spent budget
    /// stops.
    pub spending: Spending,
    /// Loads waiting for a page of the child's history, by the id of the
    /// request for it (see `super::sessions`).
    pub loading: HashMap<GatewayId, Loading>,
    /// The child answered a history request with "method not found":
    /// loads replay the ring instead.
    pub history_unsupported: bool,
    /// The agent's MCP servers and calls as it reports them.
    pub mcp: crate::mcp::McpTracker,
    /// The operator servers clients selected for the project's session,
    /// sent again to each new child.
    pub mcp_selected: Vec<String>,
}

impl Hub {
    pub fn new(
        project: String,
        settings: Arc<HubSettings>,
        seq: Arc<AtomicU64>,
        status: watch::Sender<HubStatus>,
        launcher: Box<dyn Launcher>,
    ) -> Hub {
        let ring = ReplayRing::new(
            settings.replay_events,
            super::ring::byte_budget(settings.replay_bytes, settings.max_line),
            seq.load(Ordering::SeqCst),
        );
        let spending = Spending::new(settings.spend.clone(), settings.model_broker.is_some());
        Hub {
            project,
            feed: Arc::new(Feed::new(ring)),
            settings,
            seq,
            status,
            clients: Clients::default(),
            pending: IdMap::default(),
            runs: Runs::default(),
            mint: IdMint::default(),
            supervision: Supervision::Exited,
            launcher,
            ending: false,
            stopped: Vec::new(),
            waiting: Waiting::default(),
            crashes: CrashHistory::default(),
            restarts: 0,
            idle_since: None,
            hello: Map::new(),
            last_exit: None,
            model: None,
            usage: None,
            leaving: Vec::new(),
            awaiting_state: HashMap::new(),
            asks: Asks::default(),
            audit_held: HashMap::new(),
            spending,
            loading: HashMap::new(),
            history_unsupported: false,
            mcp: crate::mcp::McpTracker::default(),
            mcp_selected: Vec::new(),
        }
    }

    pub async fn run(mut self, mut commands: mpsc::Receiver<HubCommand>) {
        self.serve(&mut commands).await;
        self.audit_unanswered("the project's hub ended");
        // A start still in progress is abandoned (its child killed).
        self.supervision = Supervision::Exited;
        self.spending.forget(&self.project);
        // No child of this hub runs any more: its secrets stop working
        // (before the channel closes, so no newer hub's are touched).
        if let Some(egress) = &self.settings.egress {
            egress.forget(&self.project);
        }
        if let Some(broker) = &self.settings.model_broker {
            broker.forget(&self.project);
        }
        self.publish();
        // Closed before anyone hears `Gone`, so the registry, asked
        // again, sees this hub ended and starts a new one.
        commands.close();
        while let Ok(command) = commands.try_recv() {
            match command {
                HubCommand::Attach { reply, .. } => {
                    let _ = reply.send(Err(AttachError::Gone));
                }
                HubCommand::Stop { done, .. } => {
                    let _ = done.send(());
                }
                _ => {}
            }
        }
        let awaiting_state = self.awaiting_state.drain().map(|(_, w)| w);
        for waiting in self
            .waiting
            .take_attaches()
            .into_iter()
            .chain(awaiting_state)
        {
            let _ = waiting.reply.send(Err(AttachError::Gone));
        }
        for done in self.stopped.drain(..) {
            let _ = done.send(());
        }
    }

    /// Runs the child and serves commands until the hub should end.
    async fn serve(&mut self, commands: &mut mpsc::Receiver<HubCommand>) {
        self.start_child();
        let mut ping = tokio::time::interval(self.settings.ping_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.should_end() {
                break;
            }
            let idle_deadline = self.idle_deadline();
            let ask_deadline = self.asks.deadline(self.settings.permission_timeout);
            tokio::select! {
                command = commands.recv() => match command {
                    None => break,
                    Some(command) => self.command(command),
                },
                wake = self.supervision.next() => self.supervise(wake),
                _ = ping.tick() => self.send_ping(),
                () = sleep_until(idle_deadline.unwrap_or_else(far_future)), if idle_deadline.is_some() => {
                    tracing::info!(project = %self.project, "reaping idle agent");
                    self.begin_stop(StopReason::Idle);
                }
                () = sleep_until(ask_deadline.unwrap_or_else(far_future)), if ask_deadline.is_some() => self.asks_expired(),
                () = self.spending.changed(), if self.runs.busy() => self.check_budgets(),
            }
        }
    }

    /// A hub ends once it was stopped, or has nobody to serve and no
    /// child worth keeping. A child in backoff after a crash is worth
    /// keeping: it restarts like any crashed child, and the hub's replay
    /// ring stays for a client that left a moment before the crash and
    /// resumes after it (idle reaping ends the hub later).
    fn should_end(&self) -> bool {
        self.ending
            || (self.clients.is_empty()
                && !self.waiting.has_attaches()
                && self.awaiting_state.is_empty()
                && !self.runs.busy()
                && matches!(
                    self.supervision,
                    Supervision::Failed { .. } | Supervision::Exited
                ))
    }

    fn idle_deadline(&self) -> Option<Instant> {
        let timeout = self.settings.idle_timeout?;
        if !self.clients.is_empty()
            || self.runs.busy()
            || self.waiting.has_attaches()
            || matches!(self.supervision, Supervision::Stopping(_))
        {
            return None;
        }
        self.idle_since.map(|since| since + timeout)
    }

    /// Starts the idle clock when nobody is attached and nothing runs
    /// (reaping waits `--idle-timeout` from here).
    pub(super) fn start_idle_clock(&mut self) {
        if self.clients.is_empty() && !self.runs.busy() {
            self.idle_since = Some(Instant::now());
        }
    }

    pub(super) fn command(&mut self, command: HubCommand) {
        match command {
            HubCommand::Attach { join, reply } => {
                let waiting = WaitingAttach { join, reply };
                match &self.supervision {
                    Supervision::Ready(_) => self.attach(waiting),
                    Supervision::Failed { until } => {
                        let wait = until.saturating_duration_since(Instant::now()).as_secs();
                        let _ = waiting.reply.send(Err(AttachError::CrashLoop(wait)));
                    }
                    _ => self.waiting.push_attach(waiting),
                }
            }
            HubCommand::Detach { client } => self.forget(client),
            HubCommand::Request { client, frame } => self.request(client, frame),
            HubCommand::Reply { client, bytes } => self.unicast(client, bytes),
            HubCommand::Restart => self.restart(),
            HubCommand::Abort => self.abort(),
            HubCommand::Stop { reason, done } => {
                self.stopped.push(done);
                self.begin_stop(reason);
            }
        }
    }

    /// An admin abort (or a spent budget's): the dialect's abort of the
    /// run in flight, if the child is ready (a child starting or stopping
    /// has no run to abort).
    pub(super) fn abort(&mut self) {
        if self.supervision.ready().is_none() {
            return;
        }
        let id = self.mint.abort();
        let line = self
            .settings
            .dialect
            .rules()
            .abort_line(&id.to_string(), &self.hello);
        self.abort_claim(id, &line);
        if let Err(refused) = self.send_line(line) {
            tracing::warn!(project = %self.project, ?refused, "could not send an abort to the agent");
        }
    }

    /// Notes what an admin abort (request `line`, id `id`) does to runs
    /// (a Zi interrupt discards the runs queued before it).
    fn abort_claim(&mut self, id: GatewayId, line: &str) {
        let dialect = self.settings.dialect.rules();
        let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(line) else {
            return;
        };
        if let Inbound::Forward { command, .. } = dialect.inbound(&frame, false) {
            let claim = dialect.run_claim(&command, &frame);
            self.runs.forwarded(id, &command, ClientId::GATEWAY, claim);
        }
    }

    pub(super) fn touch(&self) {
        self.status
            .send_modify(|status| status.last_activity = SystemTime::now());
    }

    /// Publishes the hub's state to the admin API.
    pub(super) fn publish(&self) {
        self.status.send_modify(|status| {
            let child = self.supervision.child();
            status.pid = child.map(|c| c.control.pid());
            status.state = self.supervision.state();
            status.busy = self.runs.busy();
            status.busy_since = self.runs.busy_since();
            status.clients = self.clients.len();
            status.client_list = self.clients.infos();
            status.restarts = self.restarts;
            status.last_seq = self.feed.last_seq();
            status.last_exit = self.last_exit.clone();
            status.model = self.model.clone();
            status.usage = self.usage.clone();
            status.stderr_tail = child.map(|c| c.control.stderr_tail());
            status.mcp = self.mcp.servers().to_vec();
        });
    }
}

/// A load waiting for the child's history.
#[derive(Debug)]
pub(super) struct Loading {
    pub client: ClientId,
    /// The id of the client's `session/load`.
    pub id: Value,
    /// Pages asked so far.
    pub pages: usize,
    /// It joins the session with this load (it was not following it).
    pub joining: bool,
    /// What came of the MCP servers the load named, for its answer.
    pub mcp: Option<serde_json::Value>,
}
