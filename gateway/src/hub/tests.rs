//! The hub driven through its handle, with a fake child and paused time:
//! what a client and the admin API see while a child starts, runs,
//! crashes, is restarted, stopped or reaped.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::timeout;
use tokio_util::task::TaskTracker;

use super::child::StartError;
use super::child::{BoxFuture, ChildControl, Launched, Launcher, SendError};
use super::{
    AttachError, Attached, ChildState, Delivery, HubHandle, HubSettings, Join, StopReason,
};
use crate::auth::Role;
use crate::dialect::{Dialect, OwnRuns};
use crate::metrics::Metrics;
use crate::process::backoff::RestartPolicy;
use crate::process::{ChildOutput, ExitInfo, LimitHit, StderrTail};
use crate::ws::close::CloseCode;

#[path = "audit_tests.rs"]
mod audit_tests;

const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
const IDLE: Duration = Duration::from_secs(600);
const COOLDOWN: Duration = Duration::from_secs(300);

pub(super) fn settings() -> HubSettings {
    HubSettings {
        epoch: "e1".into(),
        egress: None,
        dialect: Dialect::default(),
        child_bin: PathBuf::from("corral-agent"),
        child_args: Vec::new(),
        child_command: None,
        homes_dir: PathBuf::from("/nonexistent"),
        state_dir: PathBuf::from("/nonexistent"),
        sandbox_args: Vec::new(),
        child_template: false,
        projects_root: PathBuf::from("/nonexistent"),
        credentials: None,
        limits: None,
        child_env: Vec::new(),
        sessions_dir: PathBuf::from("/nonexistent"),
        replay_events: 1000,
        replay_bytes: 1 << 20,
        outbox_frames: 64,
        budgets: crate::hub::budget::Budgets::new(
            usize::MAX,
            usize::MAX,
            Arc::new(Metrics::new().unwrap()),
        ),
        max_client_requests: 4,
        max_line: 1 << 16,
        ping_interval: PING_INTERVAL,
        ping_timeout: PING_TIMEOUT,
        ready_timeout: Duration::from_secs(15),
        stop_grace: Duration::from_secs(5),
        permission_timeout: Duration::from_secs(300),
        idle_timeout: Some(IDLE),
        restart: RestartPolicy::new(
            Duration::from_secs(1),
            Duration::from_secs(8),
            3,
            Duration::from_secs(60),
            COOLDOWN,
        )
        .unwrap(),
        metrics: Arc::new(Metrics::new().unwrap()),
        model_broker: None,
        gate: Arc::new(crate::hub::gate::Open),
        audit: crate::audit::Audit::disabled(),
        spend: None,
        mcp: Arc::default(),
        mcp_dir: PathBuf::from("/nonexistent"),
    }
}

/// A start the hub asked for; the test answers it.
pub(super) struct StartRequest(oneshot::Sender<Result<Launched, StartError>>);

struct FakeLauncher {
    starts: mpsc::UnboundedSender<StartRequest>,
}

impl Launcher for FakeLauncher {
    fn launch(&mut self) -> BoxFuture<Result<Launched, StartError>> {
        let (reply, answer) = oneshot::channel();
        let _ = self.starts.send(StartRequest(reply));
        Box::pin(async move {
            answer
                .await
                .unwrap_or_else(|_| Err(StartError::crash("the test dropped the start")))
        })
    }
}

/// The hub's side of a fake child.
struct FakeControl {
    pid: u32,
    stdin: Mutex<Option<mpsc::UnboundedSender<String>>>,
    out: mpsc::Sender<ChildOutput>,
    exit: watch::Sender<Option<ExitInfo>>,
    /// Exit as soon as stdin closes (a well-behaved agent).
    exit_on_eof: bool,
    eof: AtomicBool,
}

impl FakeControl {
    fn exit(&self, info: ExitInfo) {
        if self.exit.borrow().is_some() {
            return;
        }
        self.stdin.lock().unwrap().take();
        self.exit.send_replace(Some(info));
        let _ = self.out.try_send(ChildOutput::Exited(info));
    }
}

impl ChildControl for FakeControl {
    fn pid(&self) -> u32 {
        self.pid
    }

    fn try_send(&self, line: Bytes) -> Result<(), SendError> {
        let stdin = self.stdin.lock().unwrap();
        let stdin = stdin.as_ref().ok_or(SendError::Gone)?;
        let line = String::from_utf8(line.to_vec()).unwrap();
        stdin.send(line).map_err(|_| SendError::Gone)
    }

    fn kill(&self) {
        self.exit(ExitInfo {
            code: None,
            signal: Some(9),
        });
    }

    fn stop(self: Arc<Self>, _grace: Duration) -> BoxFuture<ExitInfo> {
        self.stdin.lock().unwrap().take();
        self.eof.store(true, Ordering::SeqCst);
        if self.exit_on_eof {
            self.exit(ExitInfo {
                code: Some(0),
                signal: None,
            });
        }
        let mut exit = self.exit.subscribe();
        Box::pin(async move {
            let info = exit.wait_for(Option::is_some).await.unwrap();
            info.unwrap()
        })
    }

    fn stderr_tail(&self) -> StderrTail {
        StderrTail::default()
    }

    fn limit_hit(&self) -> Option<LimitHit> {
        None
    }
}

/// The test's side of a fake child: what the hub sent it (pings are
/// answered by the child itself), and its voice.
pub(super) struct FakeChild {
    control: Arc<FakeControl>,
    requests: mpsc::UnboundedReceiver<Value>,
    out: mpsc::Sender<ChildOutput>,
}

static PIDS: AtomicU64 = AtomicU64::new(1000);

impl FakeChild {
    /// Answers `start` with a ready child.
    pub(super) fn start(start: StartRequest, exit_on_eof: bool) -> FakeChild {
        let (stdin, mut lines) = mpsc::unbounded_channel::<String>();
        let (out, output) = mpsc::channel(64);
        let control = Arc::new(FakeControl {
            pid: PIDS.fetch_add(1, Ordering::Relaxed) as u32,
            stdin: Mutex::new(Some(stdin)),
            out: out.clone(),
            exit: watch::channel(None).0,
            exit_on_eof,
            eof: AtomicBool::new(false),
        });
        let (requests_tx, requests) = mpsc::unbounded_channel();
        let pings = out.clone();
        tokio::spawn(async move {
            while let Some(line) = lines.recv().await {
                let frame: Value = serde_json::from_str(&line).unwrap();
                if frame["type"] == "ping" {
                    let answer = json!({"type": "response", "id": frame["id"], "command": "ping", "success": true});
                    let _ = pings.send(line_of(&answer)).await;
                } else {
                    let _ = requests_tx.send(frame);
                }
            }
        });
        let launched = Launched {
            control: control.clone(),
            output,
            hello: json!({"protocol_version": 1, "model": "fake-model"})
                .as_object()
                .unwrap()
                .clone(),
        };
        assert!(start.0.send(Ok(launched)).is_ok(), "the start was dropped");
        FakeChild {
            control,
            requests,
            out,
        }
    }

    pub(super) async fn say(&self, frame: Value) {
        self.out.send(line_of(&frame)).await.unwrap();
    }

    pub(super) fn crash(&self) {
        self.control.exit(ExitInfo {
            code: Some(1),
            signal: None,
        });
    }

    pub(super) async fn next_request(&mut self) -> Value {
        self.requests
            .recv()
            .await
            .expect("the hub sent nothing more")
    }

    fn saw_eof(&self) -> bool {
        self.control.eof.load(Ordering::SeqCst)
    }
}

fn line_of(frame: &Value) -> ChildOutput {
    ChildOutput::Line(Bytes::from(frame.to_string()))
}

pub(super) struct Harness {
    pub(super) hub: HubHandle,
    starts: mpsc::UnboundedReceiver<StartRequest>,
}

pub(super) fn harness(settings: HubSettings) -> Harness {
    let (tx, starts) = mpsc::unbounded_channel();
    let hub = HubHandle::start(
        "alpha".into(),
        Arc::new(settings),
        Arc::new(AtomicU64::new(0)),
        Box::new(FakeLauncher { starts: tx }),
        &TaskTracker::new(),
    );
    Harness { hub, starts }
}

impl Harness {
    pub(super) async fn next_start(&mut self) -> StartRequest {
        self.starts.recv().await.expect("the hub ended")
    }

    /// Whether the hub asked for a start within `within` of (paused) time.
    async fn starts_within(&mut self, within: Duration) -> Option<StartRequest> {
        timeout(within, self.starts.recv()).await.ok().flatten()
    }

    fn state(&self) -> ChildState {
        self.hub.status().state
    }
}

pub(super) fn join() -> Join {
    Join {
        who: Arc::new(crate::access::Identity::gateway()),
        peer: None,
        role: Role::Client,
        resume_after: None,
        hello: None,
        own_runs: OwnRuns::default(),
    }
}

/// Spawns an attach; its result arrives on the returned receiver.
fn attach_later(hub: &HubHandle) -> oneshot::Receiver<Result<Attached, AttachError>> {
    let (tx, rx) = oneshot::channel();
    let hub = hub.clone();
    tokio::spawn(async move {
        let _ = tx.send(hub.attach(join()).await);
    });
    rx
}

/// Everything a client is sent until nothing more comes within a (paused)
/// second, as JSON; a close ends it.
pub(super) async fn received(attached: &mut Attached) -> (Vec<Value>, Option<(CloseCode, String)>) {
    let mut frames = Vec::new();
    loop {
        match timeout(Duration::from_secs(1), attached.feed.next()).await {
            Err(_) => return (frames, None),
            Ok(Delivery::Frames(batch)) => frames.extend(
                batch
                    .iter()
                    .map(|b| serde_json::from_slice::<Value>(b).unwrap()),
            ),
            Ok(Delivery::Close { code, reason }) => return (frames, Some((code, reason))),
        }
    }
}

pub(super) fn request(frame: Value) -> Map<String, Value> {
    frame.as_object().unwrap().clone()
}

pub(super) fn types(frames: &[Value]) -> Vec<&str> {
    frames.iter().filter_map(|f| f["type"].as_str()).collect()
}

#[tokio::test(start_paused = true)]
async fn a_project_serves_attach_status_and_abort_while_its_child_starts() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    assert_eq!(h.state(), ChildState::Starting);

    // An attach waits for the child; the hub keeps answering meanwhile.
    let mut first = attach_later(&h.hub);
    h.hub.abort().await;
    h.hub.restart().await;
    assert!(timeout(Duration::from_millis(10), &mut first)
        .await
        .is_err());
    assert_eq!(h.state(), ChildState::Starting);
    assert_eq!(h.hub.status().pid, None);
    // Restart while starting does not start a second child.
    assert!(h.starts_within(Duration::from_millis(10)).await.is_none());

    let mut child = FakeChild::start(start, true);
    let mut attached = first
        .await
        .unwrap()
        .expect("attached once the child is ready");
    assert_eq!(attached.child_hello["model"], "fake-model");
    let status = h.hub.status();
    assert_eq!(status.state, ChildState::Ready);
    assert_eq!(status.pid, Some(child.control.pid));
    assert_eq!(status.clients, 1);
    assert_eq!(status.model.as_deref(), Some("fake-model"));

    // A request reaches the child under a gateway id; the answer comes
    // back under the client's.
    let client = attached.client;
    h.hub
        .request(client, request(json!({"id": "mine", "type": "get_state"})))
        .await;
    let sent = child.next_request().await;
    assert_eq!(sent["type"], "get_state");
    let gateway_id = sent["id"].as_str().unwrap().to_string();
    assert_ne!(gateway_id, "mine");
    child
        .say(json!({"type": "response", "id": gateway_id, "command": "get_state", "success": true}))
        .await;
    let (frames, close) = received(&mut attached).await;
    assert_eq!(close, None);
    let answer = frames.iter().find(|f| f["type"] == "response").unwrap();
    assert_eq!(answer["id"], "mine");
}

#[tokio::test(start_paused = true)]
async fn a_request_sent_while_the_child_starts_reaches_it_once_ready() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let mut child = FakeChild::start(start, true);
    let attached = waiting.await.unwrap().unwrap();
    h.hub.restart().await;
    // The restart stops the child and starts another; a request in between waits.
    let start = h.next_start().await;
    h.hub
        .request(
            attached.client,
            request(json!({"id": 7, "type": "get_state"})),
        )
        .await;
    assert!(child.saw_eof());
    let mut second = FakeChild::start(start, true);
    let sent = second.next_request().await;
    assert_eq!(sent["type"], "get_state");
    assert!(child.requests.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn an_abort_during_a_stop_is_answered_and_the_stop_completes() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    // This child does not exit on its own when its stdin closes.
    let mut child = FakeChild::start(start, false);
    let mut attached = waiting.await.unwrap().unwrap();

    // A run starts.
    h.hub
        .request(
            attached.client,
            request(json!({"id": 1, "type": "prompt", "message": "hi"})),
        )
        .await;
    let prompt = child.next_request().await;
    child
        .say(json!({"type": "response", "id": prompt["id"], "command": "prompt", "success": true, "data": {"started": true}}))
        .await;
    child.say(json!({"type": "agent_start"})).await;
    let (frames, _) = received(&mut attached).await;
    assert!(types(&frames).contains(&"agent_start"));
    assert!(h.hub.status().busy);

    // An admin stop begins; the child takes its time.
    let stopper = h.hub.clone();
    let stopped = tokio::spawn(async move { stopper.stop(StopReason::Admin).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(child.saw_eof());
    assert_eq!(h.state(), ChildState::Stopping);
    assert!(!stopped.is_finished());

    // Abort, status and a new request are all served during the stop.
    h.hub.abort().await;
    h.hub
        .request(
            attached.client,
            request(json!({"id": 2, "type": "get_state"})),
        )
        .await;
    // Paused time advances once the hub has handled both.
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert_eq!(h.state(), ChildState::Stopping);
    assert!(
        child.requests.try_recv().is_err(),
        "nothing reaches a stopping child"
    );

    // The child writes its last line and exits: the stop completes.
    child.say(json!({"type": "done"})).await;
    child.crash();
    stopped.await.unwrap();
    h.hub.closed().await;
    let (frames, close) = received(&mut attached).await;
    let (code, reason) = close.expect("the client is told to close");
    assert_eq!(code, CloseCode::GoingAway);
    assert_eq!(reason, "the agent was stopped by an administrator");
    assert!(types(&frames).contains(&"done"));
    let refused = frames
        .iter()
        .find(|f| f["type"] == "response" && f["id"] == 2)
        .expect("the request sent during the stop is answered");
    assert_eq!(refused["success"], false);
    let exited = frames.iter().find(|f| f["type"] == "child_exited").unwrap();
    assert_eq!(exited["reason"], "admin");
    assert_eq!(h.state(), ChildState::Exited);
}

#[tokio::test(start_paused = true)]
async fn crashes_back_off_and_a_crash_loop_stops_restarts_until_the_cooldown() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let child = FakeChild::start(start, true);
    let mut attached = waiting.await.unwrap().unwrap();

    // First crash: back off about a second (±20 %), not restarted before.
    child.crash();
    assert!(h.starts_within(Duration::from_millis(790)).await.is_none());
    assert_eq!(h.state(), ChildState::Backoff);
    let start = h
        .starts_within(Duration::from_millis(420))
        .await
        .expect("restarted after the backoff");
    assert_eq!(h.state(), ChildState::Starting);
    let child = FakeChild::start(start, true);
    tokio::task::yield_now().await;
    assert_eq!(h.state(), ChildState::Ready);

    // Second crash: the delay doubles (1.6 s to 2.4 s).
    child.crash();
    assert!(h.starts_within(Duration::from_millis(1590)).await.is_none());
    let start = h
        .starts_within(Duration::from_millis(820))
        .await
        .expect("restarted after the second backoff");
    let child = FakeChild::start(start, true);
    tokio::task::yield_now().await;
    assert_eq!(h.hub.status().restarts, 2);

    // Third crash within the window: a crash loop. No restart until the
    // cool-down, and a new client is told why.
    child.crash();
    assert!(h
        .starts_within(COOLDOWN - Duration::from_secs(1))
        .await
        .is_none());
    assert_eq!(h.state(), ChildState::Failed);
    match h.hub.attach(join()).await {
        Err(AttachError::CrashLoop(secs)) => assert!(secs <= COOLDOWN.as_secs()),
        other => panic!("expected a crash-loop refusal, got {other:?}"),
    }
    h.hub
        .request(
            attached.client,
            request(json!({"id": 3, "type": "get_state"})),
        )
        .await;
    let (frames, close) = received(&mut attached).await;
    assert_eq!(close, None, "the attached client stays");
    let exits: Vec<_> = frames
        .iter()
        .filter(|f| f["type"] == "child_exited")
        .collect();
    assert_eq!(exits.len(), 3);
    assert_eq!(exits[2]["restarting"], false);
    let refused = frames.iter().find(|f| f["id"] == 3).unwrap();
    assert_eq!(refused["success"], false);
    assert!(refused["error"].as_str().unwrap().contains("crash loop"));

    // After the cool-down it starts again, with a fresh crash budget.
    let start = h
        .starts_within(Duration::from_secs(2))
        .await
        .expect("started after the cool-down");
    let _child = FakeChild::start(start, true);
    tokio::task::yield_now().await;
    assert_eq!(h.state(), ChildState::Ready);
}

#[tokio::test(start_paused = true)]
async fn an_admin_restart_ends_a_crash_loop_at_once() {
    let mut h = harness(settings());
    let waiting = attach_later(&h.hub);
    let mut start = h.next_start().await;
    let mut waiting = Some(waiting);
    let mut _attached = None;
    for _ in 0..3 {
        let child = FakeChild::start(start, true);
        if let Some(waiting) = waiting.take() {
            _attached = Some(waiting.await.unwrap().unwrap());
        }
        tokio::task::yield_now().await;
        child.crash();
        match h.starts_within(Duration::from_secs(10)).await {
            Some(next) => start = next,
            None => break,
        }
    }
    assert_eq!(h.state(), ChildState::Failed);
    h.hub.restart().await;
    assert!(h.starts_within(Duration::from_millis(1)).await.is_some());
}

#[tokio::test(start_paused = true)]
async fn an_idle_child_is_reaped_and_the_hub_ends() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let child = FakeChild::start(start, true);
    let attached = waiting.await.unwrap().unwrap();
    // Attached clients keep it, however long (pings are answered).
    tokio::time::sleep(IDLE * 2).await;
    assert_eq!(h.state(), ChildState::Ready);
    assert!(!child.saw_eof());

    h.hub.detach(attached.client).await;
    tokio::time::sleep(IDLE - Duration::from_secs(1)).await;
    assert_eq!(h.state(), ChildState::Ready);
    assert!(!child.saw_eof());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(child.saw_eof(), "the idle child was asked to stop");
    h.hub.closed().await;
    let status = h.hub.status();
    assert_eq!(status.state, ChildState::Exited);
    assert_eq!(status.last_exit.unwrap().reason, "idle");
}

#[tokio::test(start_paused = true)]
async fn a_child_that_stops_answering_pings_is_killed_and_restarted() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let child = FakeChild::start(start, true);
    let _attached = waiting.await.unwrap().unwrap();
    // It stops reading: pings go unanswered.
    child.control.stdin.lock().unwrap().take();
    let start = h
        .starts_within(PING_INTERVAL + PING_TIMEOUT + Duration::from_secs(2))
        .await
        .expect("restarted after the missed ping");
    let status = h.hub.status();
    assert_eq!(status.last_exit.unwrap().reason, "hung");
    drop(start);
}

#[tokio::test(start_paused = true)]
async fn a_child_busy_writing_is_not_taken_for_hung() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let child = FakeChild::start(start, true);
    let _attached = waiting.await.unwrap().unwrap();
    // Its pongs stop (it reads no more), but it keeps writing replies and
    // events for three ping timeouts: it is alive.
    child.control.stdin.lock().unwrap().take();
    let talking = PING_INTERVAL + 3 * PING_TIMEOUT;
    let mut said = Duration::ZERO;
    while said < talking {
        child
            .say(json!({"type": "message_update", "delta": "still here"}))
            .await;
        tokio::time::sleep(PING_TIMEOUT / 2).await;
        said += PING_TIMEOUT / 2;
    }
    assert!(h.starts_within(Duration::ZERO).await.is_none());
    assert_eq!(h.hub.status().state, ChildState::Ready);
    // Silent for a whole timeout with a ping outstanding: hung.
    let start = h
        .starts_within(PING_TIMEOUT + Duration::from_secs(2))
        .await
        .expect("restarted once it fell silent");
    assert_eq!(h.hub.status().last_exit.unwrap().reason, "hung");
    drop(start);
}

#[tokio::test(start_paused = true)]
async fn requests_in_flight_are_bounded_per_client() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let mut child = FakeChild::start(start, true);
    let mut attached = waiting.await.unwrap().unwrap();
    for id in 0..5 {
        h.hub
            .request(
                attached.client,
                request(json!({"id": id, "type": "get_state"})),
            )
            .await;
    }
    for _ in 0..4 {
        child.next_request().await;
    }
    assert!(child.requests.try_recv().is_err());
    let (frames, _) = received(&mut attached).await;
    let refused = frames.iter().find(|f| f["id"] == 4).unwrap();
    assert_eq!(refused["success"], false);
    assert!(refused["error"]
        .as_str()
        .unwrap()
        .contains("too many requests in flight"));
}

/// While the child restarts, a client's waiting requests are bounded
/// like those in flight: the one over the bound is refused at once, the
/// others reach the new child.
#[tokio::test(start_paused = true)]
async fn requests_waiting_for_a_restarting_child_are_bounded_per_client() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let _child = FakeChild::start(start, true);
    let mut attached = waiting.await.unwrap().unwrap();
    h.hub.restart().await;
    let start = h.next_start().await;
    for id in 0..5 {
        h.hub
            .request(
                attached.client,
                request(json!({"id": id, "type": "get_state"})),
            )
            .await;
    }
    let (frames, close) = received(&mut attached).await;
    assert_eq!(close, None);
    let refused = frames.iter().find(|f| f["id"] == 4).unwrap();
    assert_eq!(refused["success"], false);
    assert!(refused["error"]
        .as_str()
        .unwrap()
        .contains("too many requests in flight"));
    let mut second = FakeChild::start(start, true);
    for _ in 0..4 {
        assert_eq!(second.next_request().await["type"], "get_state");
    }
    assert!(second.requests.try_recv().is_err());
}

#[tokio::test(start_paused = true)]
async fn a_stop_while_starting_abandons_the_start() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    tokio::task::yield_now().await;
    h.hub.stop(StopReason::Shutdown).await;
    assert!(start.0.is_closed(), "the start future was dropped");
    assert!(matches!(waiting.await.unwrap(), Err(AttachError::Gone)));
    assert!(h.hub.is_closed());
}

#[tokio::test(start_paused = true)]
async fn a_runaway_agent_cannot_pile_up_requests_for_its_clients() {
    let limit = super::asks::MAX_WAITING;
    // Room for every request in the client's outbox (a client that lets
    // them pile up unread is disconnected, and asked again on return).
    let mut h = harness(HubSettings {
        dialect: Dialect::named("acp").unwrap(),
        outbox_frames: 4 * limit,
        ..settings()
    });
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let mut child = FakeChild::start(start, true);
    let mut attached = waiting.await.unwrap().unwrap();
    // An ACP client is asked once it follows the session.
    let open = json!({"jsonrpc": "2.0", "id": "o", "method": "session/new", "params": {}});
    h.hub.request(attached.client, request(open)).await;
    for n in 0..=limit {
        let ask = json!({"jsonrpc": "2.0", "id": format!("p{n}"),
            "method": "session/request_permission", "params": {}});
        child.say(ask).await;
    }
    // The one over the bound is answered for the clients at once.
    let answer = loop {
        let frame = child.next_request().await;
        if frame.get("method").is_none() {
            break frame;
        }
    };
    assert_eq!(answer["id"], format!("p{limit}"));
    assert_eq!(answer["result"]["outcome"]["outcome"], "cancelled");
    let (frames, _) = received(&mut attached).await;
    let asked = frames
        .iter()
        .filter(|f| f["method"] == "session/request_permission")
        .count();
    assert_eq!(asked, limit);
}

#[tokio::test(start_paused = true)]
async fn answers_under_ids_the_hub_never_sent_reach_no_client() {
    let mut h = harness(settings());
    let start = h.next_start().await;
    let waiting = attach_later(&h.hub);
    let mut child = FakeChild::start(start, true);
    let mut attached = waiting.await.unwrap().unwrap();
    // The client's own id looks like one of the gateway's.
    h.hub
        .request(
            attached.client,
            request(json!({"id": "corral-ping-1", "type": "get_state"})),
        )
        .await;
    let sent = child.next_request().await;
    let gateway_id = sent["id"].as_str().unwrap().to_string();
    let stray = [
        "corral-ping-1",
        "corral-state-1",
        "corral-abort-1",
        "corral-ask-1",
        "corral-01",
        "corral-x",
        "corral-18446744073709551616",
        "mine",
    ];
    for id in stray.into_iter().chain([gateway_id.as_str()]) {
        child
            .say(json!({"type": "response", "id": id, "command": "get_state", "success": true, "data": {"for": id}}))
            .await;
    }
    let (frames, close) = received(&mut attached).await;
    assert_eq!(close, None);
    let answers: Vec<&Value> = frames.iter().filter(|f| f["type"] == "response").collect();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["id"], "corral-ping-1");
    assert_eq!(answers[0]["data"]["for"], gateway_id.as_str());
    assert_eq!(h.state(), ChildState::Ready);
}

/// A dialect the hub has never heard of (the test-only `toy`, which only
/// implements the dialect rules) carries a whole conversation: a hello,
/// a request under a gateway id and its answer under the client's, and a
/// run's events to every client.
#[tokio::test(start_paused = true)]
async fn a_dialect_that_only_implements_the_rules_carries_a_conversation() {
    let mut h = harness(HubSettings {
        dialect: Dialect::named("toy").unwrap(),
        ..settings()
    });
    let start = h.next_start().await;
    let (first, second) = (attach_later(&h.hub), attach_later(&h.hub));
    let mut child = FakeChild::start(start, true);
    let mut asker = first.await.unwrap().unwrap();
    let mut watcher = second.await.unwrap().unwrap();

    h.hub
        .request(asker.client, request(json!({"type": "hello", "id": "h"})))
        .await;
    let (frames, close) = received(&mut asker).await;
    assert_eq!(close, None);
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], "h");
    assert_eq!(frames[0]["welcome"]["project"], "alpha");

    h.hub
        .request(asker.client, request(json!({"type": "work", "id": "mine"})))
        .await;
    let sent = child.next_request().await;
    assert_eq!(sent["type"], "work");
    let gateway_id = sent["id"].as_str().unwrap().to_string();
    assert_ne!(gateway_id, "mine");
    child.say(json!({"id": gateway_id, "result": 42})).await;
    let (frames, _) = received(&mut asker).await;
    assert_eq!(frames, [json!({"id": "mine", "result": 42})]);

    child.say(json!({"event": "run_start"})).await;
    child.say(json!({"event": "note", "text": "hi"})).await;
    let mut seen = vec![received(&mut asker).await.0, received(&mut watcher).await.0];
    assert!(h.hub.status().busy, "a run is active");
    child.say(json!({"event": "run_end"})).await;
    seen[0].extend(received(&mut asker).await.0);
    seen[1].extend(received(&mut watcher).await.0);
    for frames in seen {
        let events: Vec<&str> = frames.iter().filter_map(|f| f["event"].as_str()).collect();
        assert_eq!(events, ["run_start", "note", "run_end"], "{frames:?}");
        let run = &frames[0]["run"];
        assert!(run.is_string(), "the run's events name it: {frames:?}");
        assert!(frames.iter().all(|f| &f["run"] == run && f["seq"].is_u64()));
    }
    assert!(!h.hub.status().busy, "the run ended");
}
