//! The hub task: its state, its main loop, and client attach/detach.
//! Frame routing is in [`super::routing`], the child's lifecycle in
//! [`super::lifecycle`].

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant as StdInstant;
use std::time::SystemTime;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot};
use tokio::time::{sleep_until, Instant};

use super::feed::{ClientFeed, Feed, Unicast};
use super::ids::IdMap;
use super::lifecycle::Running;
use super::ring::ReplayRing;
use super::runs::RunBook;
use super::{
    AttachError, Attached, ChildState, ClientInfo, HubCommand, HubSettings, HubStatus, Join,
    LastExit,
};
use crate::auth::Role;
use crate::dialect::Inbound;
use crate::metrics::Direction;
use crate::supervisor::backoff::CrashHistory;
use crate::supervisor::ChildOutput;

/// Client ids issued by this process: unique across projects and hubs, so
/// a client id named to resume never means another project's client.
static CLIENT_IDS: AtomicU64 = AtomicU64::new(0);

/// An attached client.
pub(super) struct Client {
    pub role: Role,
    /// The client id its runs are attributed to: its own, or the one of
    /// an earlier connection it resumes (`client_id` in its hello).
    pub owner: u64,
    pub unicast: mpsc::Sender<Unicast>,
    /// The client's delivery cursor, for its lag.
    pub cursor: Arc<AtomicU64>,
}

/// An attach that waits for the child to become ready.
pub(super) struct WaitingAttach {
    pub join: Join,
    pub reply: oneshot::Sender<Result<Attached, AttachError>>,
}

/// All state of one project. Owned by its task; nothing else touches it.
pub(super) struct Hub {
    pub project: String,
    pub dir: PathBuf,
    pub settings: Arc<HubSettings>,
    /// The project's event counter; outlives this hub.
    pub seq: Arc<AtomicU64>,
    /// Published snapshot for the admin API.
    pub status: Arc<Mutex<HubStatus>>,
    pub feed: Arc<Feed>,
    pub clients: HashMap<u64, Client>,
    pub ids: IdMap,
    /// Which client each run belongs to.
    pub runbook: RunBook,
    pub child: Option<Running>,
    pub state: ChildState,
    /// Runs in flight: from a started `prompt`/`compact` to its `done`.
    pub busy: u32,
    pub waiting_attach: Vec<WaitingAttach>,
    /// Requests that arrived while the child was not ready.
    pub waiting_requests: VecDeque<(u64, Map<String, Value>)>,
    pub crashes: CrashHistory,
    pub restarts: u32,
    /// When to start the child again after a crash.
    pub restart_at: Option<Instant>,
    /// End of a crash-loop cool-down.
    pub failed_until: Option<Instant>,
    /// Since when nobody is attached and nothing runs.
    pub idle_since: Option<Instant>,
    /// The child's hello data, given to clients on attach.
    pub hello: Map<String, Value>,
    /// Since when a run is in flight.
    pub busy_since: Option<SystemTime>,
    /// Start instants of the runs in flight, oldest first.
    pub runs: VecDeque<StdInstant>,
    pub last_exit: Option<LastExit>,
    /// The model in use (from the hello, then `set_model` answers).
    pub model: Option<String>,
    /// The latest cumulative usage reported by the child.
    pub usage: Option<Value>,
    /// Ids of admin aborts sent to the child.
    pub aborts: u64,
    /// letscode clients that said `bye`, with its id: dismissed once no
    /// run is active.
    pub leaving: Vec<(u64, Option<Value>)>,
    /// Zi attaches waiting for their `ready`'s state snapshot, by the id
    /// of the `session.get_state` sent for it.
    pub snapshots: HashMap<String, WaitingAttach>,
    pub snapshot_ids: u64,
}

impl Hub {
    pub fn new(
        project: String,
        dir: PathBuf,
        settings: Arc<HubSettings>,
        seq: Arc<AtomicU64>,
        status: Arc<Mutex<HubStatus>>,
    ) -> Hub {
        let ring = ReplayRing::new(
            settings.replay_events,
            super::ring::byte_budget(settings.replay_bytes, settings.max_line),
            seq.load(Ordering::SeqCst),
        );
        Hub {
            project,
            dir,
            feed: Arc::new(Feed::new(ring)),
            settings,
            seq,
            status,
            clients: HashMap::new(),
            ids: IdMap::default(),
            runbook: RunBook::default(),
            child: None,
            state: ChildState::Starting,
            busy: 0,
            waiting_attach: Vec::new(),
            waiting_requests: VecDeque::new(),
            crashes: CrashHistory::default(),
            restarts: 0,
            restart_at: None,
            failed_until: None,
            idle_since: None,
            hello: Map::new(),
            busy_since: None,
            runs: VecDeque::new(),
            last_exit: None,
            model: None,
            usage: None,
            aborts: 0,
            leaving: Vec::new(),
            snapshots: HashMap::new(),
            snapshot_ids: 0,
        }
    }

    pub async fn run(mut self, mut commands: mpsc::Receiver<HubCommand>) {
        self.serve(&mut commands).await;
        self.set_state(ChildState::Exited);
        // Whatever arrived meanwhile: attaches must ask again (a new hub).
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
        let snapshots = self.snapshots.drain().map(|(_, w)| w);
        for waiting in self.waiting_attach.drain(..).chain(snapshots) {
            let _ = waiting.reply.send(Err(AttachError::Gone));
        }
    }

    /// Runs the child and serves commands until the hub should end.
    async fn serve(&mut self, commands: &mut mpsc::Receiver<HubCommand>) {
        // The attach that created this hub is already queued: take it (and
        // anything else waiting) first, so a failed start can answer it.
        while let Ok(command) = commands.try_recv() {
            if let HubCommand::Stop { done, .. } = command {
                let _ = done.send(());
                return;
            }
            self.command(command).await;
        }
        self.start_child().await;
        let mut ping = tokio::time::interval(self.settings.ping_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if self.should_end() {
                break;
            }
            let restart_at = self.restart_at;
            let failed_until = self.failed_until;
            let ping_deadline = self.child.as_ref().and_then(|c| c.ping_deadline);
            let idle_deadline = self.idle_deadline();
            tokio::select! {
                command = commands.recv() => match command {
                    None => break,
                    Some(HubCommand::Stop { reason, done }) => {
                        self.stop(reason).await;
                        let _ = done.send(());
                        break;
                    }
                    Some(command) => self.command(command).await,
                },
                output = next_output(&mut self.child) => self.child_output(output).await,
                _ = sleep_until(restart_at.unwrap_or_else(far_future)), if restart_at.is_some() => {
                    self.restart_at = None;
                    self.settings.metrics.child_restarts.inc();
                    self.start_child().await;
                }
                _ = sleep_until(failed_until.unwrap_or_else(far_future)), if failed_until.is_some() => {
                    self.failed_until = None;
                    self.crashes.reset();
                    self.start_child().await;
                }
                _ = ping.tick() => self.send_ping().await,
                _ = sleep_until(ping_deadline.unwrap_or_else(far_future)), if ping_deadline.is_some() => self.hung(),
                _ = sleep_until(idle_deadline.unwrap_or_else(far_future)), if idle_deadline.is_some() => {
                    tracing::info!(project = %self.project, "reaping idle agent");
                    self.stop(super::StopReason::Idle).await;
                    break;
                }
            }
        }
    }

    /// A hub with nobody to serve and no child worth keeping ends. A child
    /// in backoff after a crash is worth keeping: it restarts like any
    /// crashed child, and the hub's replay ring stays for a client that
    /// left a moment before the crash and resumes after it (idle reaping
    /// ends the hub later).
    fn should_end(&self) -> bool {
        self.clients.is_empty()
            && self.waiting_attach.is_empty()
            && self.snapshots.is_empty()
            && self.busy == 0
            && matches!(self.state, ChildState::Failed | ChildState::Exited)
    }

    fn idle_deadline(&self) -> Option<Instant> {
        let timeout = self.settings.idle_timeout?;
        if !self.clients.is_empty() || self.busy > 0 || !self.waiting_attach.is_empty() {
            return None;
        }
        self.idle_since.map(|since| since + timeout)
    }

    async fn command(&mut self, command: HubCommand) {
        match command {
            HubCommand::Attach { join, reply } => {
                let waiting = WaitingAttach { join, reply };
                match self.state {
                    ChildState::Ready => self.attach(waiting).await,
                    ChildState::Failed => {
                        let wait = self
                            .failed_until
                            .map_or(0, |t| t.saturating_duration_since(Instant::now()).as_secs());
                        let _ = waiting.reply.send(Err(AttachError::CrashLoop(wait)));
                    }
                    _ => self.waiting_attach.push(waiting),
                }
            }
            HubCommand::Detach { client } => {
                if self.clients.remove(&client).is_some() {
                    self.ids.forget_client(client);
                    self.leaving.retain(|(c, _)| *c != client);
                    self.waiting_requests.retain(|(c, _)| *c != client);
                    if self.clients.is_empty() && self.busy == 0 {
                        self.idle_since = Some(Instant::now());
                    }
                    self.publish();
                }
            }
            HubCommand::Request { client, frame } => self.request(client, frame).await,
            HubCommand::Reply { client, bytes } => self.unicast(client, bytes),
            HubCommand::Restart => self.restart().await,
            HubCommand::Abort => {
                if self.child.is_some() {
                    self.aborts += 1;
                    let id = format!("corral-abort-{}", self.aborts);
                    let line = self.settings.dialect.abort_line(&id);
                    self.abort_claim(&id, &line);
                    self.settings
                        .metrics
                        .frame(Direction::GatewayToChild, line.len());
                    if let Some(child) = &self.child {
                        let _ = child.process.send(Bytes::from(line)).await;
                    }
                }
            }
            HubCommand::Stop { .. } => {}
        }
    }

    /// Notes what an admin abort (request `line`, id `id`) does to runs
    /// (a Zi interrupt discards the runs queued before it).
    fn abort_claim(&mut self, id: &str, line: &str) {
        let dialect = self.settings.dialect;
        let Ok(Value::Object(frame)) = serde_json::from_str::<Value>(line) else {
            return;
        };
        if let Inbound::Forward { command, .. } = dialect.inbound(&frame, false) {
            let claim = dialect.run_claim(&command, &frame);
            self.runbook.forwarded(id, &command, 0, claim);
        }
    }

    /// Attaches a client once the child is ready. When the dialect's
    /// greeting needs a fresh state snapshot (Zi), the attach completes
    /// when the child answers the request sent for it.
    pub(super) async fn attach(&mut self, waiting: WaitingAttach) {
        let id = format!("corral-state-{}", self.snapshot_ids + 1);
        let Some(line) = self.settings.dialect.state_request(&id) else {
            self.finish_attach(waiting, Value::Null);
            return;
        };
        let Some(child) = self.child.as_ref() else {
            self.waiting_attach.push(waiting);
            return;
        };
        self.snapshot_ids += 1;
        self.settings
            .metrics
            .frame(Direction::GatewayToChild, line.len());
        self.snapshots.insert(id, waiting);
        let _ = child.process.send(Bytes::from(line)).await;
    }

    /// Puts attaches that waited for a snapshot back in line for the next
    /// child (or refuses them when there will be none soon).
    pub(super) fn requeue_snapshots(&mut self) {
        for (_, waiting) in std::mem::take(&mut self.snapshots) {
            if self.state == ChildState::Failed {
                let _ = waiting.reply.send(Err(AttachError::CrashLoop(
                    self.settings.restart.cooldown.as_secs(),
                )));
            } else {
                self.waiting_attach.push(waiting);
            }
        }
    }

    /// Registers the client and queues its greeting: the dialect's first
    /// frames (`state` is the snapshot, when the dialect needs one).
    pub(super) fn finish_attach(&mut self, waiting: WaitingAttach, state: Value) {
        let client = CLIENT_IDS.fetch_add(1, Ordering::Relaxed) + 1;
        let own_runs = waiting.join.own_runs;
        let owner = own_runs.client_id.unwrap_or(client);
        let (unicast, rx) = mpsc::channel(self.settings.outbox_frames.max(4));
        let (cursor, gap) = self.feed.start_cursor(waiting.join.resume_after);
        let last_seq = self.feed.last_seq();
        let metrics = &self.settings.metrics;
        if waiting.join.resume_after.is_some() {
            metrics
                .replayed_events
                .inc_by(last_seq.saturating_sub(cursor));
        }
        if gap {
            metrics.replay_gaps.inc();
        }
        // Due before any event after the cursor: the first frames out.
        for bytes in self.greeting(owner, &waiting.join, gap, state) {
            let _ = unicast.try_send(Unicast::Frame {
                after_seq: cursor,
                bytes,
            });
        }
        let feed = ClientFeed::new(
            self.feed.clone(),
            cursor,
            rx,
            self.settings.metrics.clone(),
            self.settings.outbox_frames,
        )
        .with_owner((own_runs.on == Some(true)).then_some(owner))
        .with_dialect(self.settings.dialect);
        let attached = Attached {
            client,
            child_hello: self.hello.clone(),
            last_seq,
            gap,
            feed,
        };
        // Counted before the reply, so the registry never sees a moment
        // where the client is neither attaching nor attached.
        self.clients.insert(
            client,
            Client {
                role: waiting.join.role,
                owner,
                unicast,
                cursor: attached.feed.shared_cursor(),
            },
        );
        self.publish();
        if waiting.reply.send(Ok(attached)).is_ok() {
            self.settings.metrics.client_connections.inc();
            self.idle_since = None;
        } else {
            self.clients.remove(&client);
            self.publish();
        }
    }

    /// A new client's first frames: the dialect's greeting, then the
    /// answer to its hello (if it sent one). `owner` is the client id it is
    /// known by.
    fn greeting(&self, owner: u64, join: &Join, gap: bool, state: Value) -> Vec<Bytes> {
        let gateway = self.gateway_info(owner, join.role, gap);
        let mut frames = self.settings.dialect.greeting(&self.hello, gateway, state);
        if let Some(id) = &join.hello {
            frames.extend(self.hello_answer(owner, join.role, id.as_ref(), gap));
        }
        frames
    }

    /// The answer to a client's hello (`id` is its id), in its dialect.
    pub(super) fn hello_answer(
        &self,
        client: u64,
        role: Role,
        id: Option<&Value>,
        gap: bool,
    ) -> Vec<Bytes> {
        let gateway = self.gateway_info(client, role, gap);
        self.settings
            .dialect
            .hello_answer(id, &self.hello, gateway, gap)
    }

    /// What the gateway says of itself to a client.
    pub(super) fn gateway_info(&self, client: u64, role: Role, gap: bool) -> Value {
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "project": self.project,
            "client_id": client.to_string(),
            "role": role.as_str(),
            "last_seq": self.feed.last_seq(),
            "gap": gap,
        })
    }

    pub(super) fn set_state(&mut self, state: ChildState) {
        self.state = state;
        self.publish();
    }

    pub(super) fn touch(&self) {
        self.status
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last_activity = SystemTime::now();
    }

    pub(super) fn publish(&self) {
        let mut status = self.status.lock().unwrap_or_else(PoisonError::into_inner);
        status.pid = self.child.as_ref().map(|c| c.process.pid());
        status.state = self.state;
        status.busy = self.busy > 0;
        status.busy_since = self.busy_since;
        status.clients = self.clients.len();
        status.client_list = self
            .clients
            .iter()
            .map(|(id, c)| ClientInfo {
                client: *id,
                role: c.role,
                cursor: c.cursor.clone(),
            })
            .collect();
        status.restarts = self.restarts;
        status.last_seq = self.feed.last_seq();
        status.last_exit = self.last_exit.clone();
        status.model = self.model.clone();
        status.usage = self.usage.clone();
        status.stderr_tail = self.child.as_ref().map(|c| c.process.stderr_tail());
    }
}

async fn next_output(child: &mut Option<Running>) -> Option<ChildOutput> {
    match child {
        Some(running) => running.output.recv().await,
        None => std::future::pending().await,
    }
}

fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400 * 365)
}
