//! The agent: one session, one run at a time.
//!
//! [`Agent`] is the handle the front-ends hold. Runs (prompts and
//! compactions) go through a bounded queue to a single worker task, which
//! executes them in order and writes their events to the output channel.
//! Everything else (state queries, abort, settings) acts on shared state
//! directly, so it answers immediately even while a run is in flight.

mod call;
mod compact;
pub mod event;
mod input;
mod interrupted;
pub mod journal;
pub mod permission;
pub mod remote;
pub mod retry;
pub mod session;
pub(crate) mod trace;
mod turn;
pub mod usage;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

pub use event::AgentEvent;
pub use input::Queue;
pub(crate) use input::Steering;
pub use permission::{PermissionMode, Permissions};
pub use session::Session;
use trace::RunSpans;

use crate::provider::Provider;
use crate::sandbox::ToolConfinement;
use crate::tools::{ClientFiles, ToolSet};
use crate::transcript::Block;

/// The `error` of the transcript record of an aborted step.
pub const ABORTED: &str = "the run was aborted";

/// Prompts and compactions that may wait behind the active run.
pub const MAX_QUEUED_RUNS: usize = 64;

/// Fixed settings of the session.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The working directory tools resolve paths against.
    pub cwd: PathBuf,
    /// The system prompt (assembled on first use).
    pub system_prompt: crate::prompt::SystemPrompt,
    /// Model calls one prompt may make before it is stopped.
    pub max_steps: u32,
    /// What tool commands give up when the agent is sandboxed.
    pub tool_confinement: ToolConfinement,
    /// The permission mode at start (changed later through
    /// [`Agent::permissions`]).
    pub permission_mode: PermissionMode,
}

/// What goes to the front-end's writer, in order.
#[derive(Debug)]
pub enum Output {
    Event(AgentEvent),
    /// A frame the front-end made itself (a response), written in order
    /// with the events; the front-end's encoder serialises it.
    Frame(serde_json::Value),
}

/// A unit of queued work.
#[derive(Debug)]
pub struct RunRequest {
    pub kind: RunKind,
    /// Sent to the output just before the run's first event (the
    /// `{"started":true}` response).
    pub started: Option<serde_json::Value>,
    /// Sent to the output instead of the run when it is discarded before
    /// it starts ([`Agent::discard_queued`]); such a run emits nothing else.
    pub discarded: Option<serde_json::Value>,
    /// The W3C trace context of the caller's span (the gateway's), which
    /// the run's trace continues; without it the run starts its own trace.
    pub traceparent: Option<String>,
}

#[derive(Debug)]
pub enum RunKind {
    Prompt { text: String, images: Vec<Block> },
    Compact,
}

/// The run queue is full.
#[derive(Debug, thiserror::Error)]
#[error("too many queued prompts: at most {MAX_QUEUED_RUNS} may wait behind the active run")]
pub struct QueueFull;

/// State shared by the handle and the worker.
pub(crate) struct Shared {
    pub provider: Arc<dyn Provider>,
    pub tools: ToolSet,
    pub settings: Settings,
    pub session: Mutex<Session>,
    /// True while a run executes (not while it waits in the queue).
    pub busy: AtomicBool,
    /// Runs submitted but not yet picked up by the worker.
    pub queued: AtomicUsize,
    /// Runs ever submitted; each run's number is its count.
    pub submitted: AtomicU64,
    /// Runs numbered up to this one are discarded when dequeued.
    pub discard_upto: AtomicU64,
    /// Steering messages for the active prompt run (see [`Agent::steer`]).
    pub steering: Mutex<Steering>,
    /// Cancels the active run.
    pub current: Mutex<Option<CancellationToken>>,
    /// The permission gate every tool call passes.
    pub permissions: Permissions,
    /// The client's file access, when it offers one (an ACP editor's
    /// buffers); tools use the disk otherwise.
    pub client_files: Mutex<Option<Arc<dyn ClientFiles>>>,
    /// Cancelled when the process is going away: the active run is aborted
    /// and queued runs are dropped.
    pub stop: CancellationToken,
}

impl Shared {
    pub fn session(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Cancels the run executing right now; whether there was one.
    pub fn abort_current(&self) -> bool {
        let current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        match current.as_ref() {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    pub fn steering(&self) -> MutexGuard<'_, Steering> {
        self.steering.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn client_files(&self) -> Option<Arc<dyn ClientFiles>> {
        self.client_files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// Handle to a running agent.
pub struct Agent {
    shared: Arc<Shared>,
    /// Runs with their numbers.
    runs: Option<mpsc::Sender<(u64, RunRequest, RunSpans)>>,
}

impl Agent {
    /// Starts the worker. Events and queued responses go to `out`.
    pub fn start(
        provider: Arc<dyn Provider>,
        tools: ToolSet,
        settings: Settings,
        session: Session,
        out: mpsc::Sender<Output>,
    ) -> (Agent, JoinHandle<()>) {
        let permissions = Permissions::new(settings.permission_mode);
        let shared = Arc::new(Shared {
            provider,
            tools,
            settings,
            session: Mutex::new(session),
            busy: AtomicBool::new(false),
            queued: AtomicUsize::new(0),
            submitted: AtomicU64::new(0),
            discard_upto: AtomicU64::new(0),
            steering: Mutex::new(Steering::default()),
            current: Mutex::new(None),
            permissions,
            client_files: Mutex::new(None),
            stop: CancellationToken::new(),
        });
        let (tx, rx) = mpsc::channel(MAX_QUEUED_RUNS);
        let worker = tokio::spawn(worker(shared.clone(), rx, out));
        (
            Agent {
                shared,
                runs: Some(tx),
            },
            worker,
        )
    }

    /// Queues a run. It starts when every earlier run has finished.
    pub fn submit(&self, run: RunRequest) -> Result<(), QueueFull> {
        let spans = RunSpans::open(&run.kind, run.traceparent.as_deref());
        self.submit_traced(run, spans)
    }

    /// Queues a run whose spans the caller opened (to learn the run's own
    /// trace context before it starts; `run.traceparent` is not read).
    pub(crate) fn submit_traced(&self, run: RunRequest, spans: RunSpans) -> Result<(), QueueFull> {
        let runs = self.runs.as_ref().ok_or(QueueFull)?;
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let number = self.shared.submitted.fetch_add(1, Ordering::SeqCst) + 1;
        runs.try_send((number, run, spans)).map_err(|_| {
            self.shared.queued.fetch_sub(1, Ordering::SeqCst);
            QueueFull
        })
    }

    /// No run is executing and none waits in the queue.
    pub fn idle(&self) -> bool {
        !self.busy() && self.shared.queued.load(Ordering::SeqCst) == 0
    }

    /// Cancels the active run, if any. Queued runs are unaffected.
    pub fn abort(&self) -> bool {
        self.shared.abort_current()
    }

    /// Discards every run submitted so far that has not started (each
    /// sends its `discarded` frame instead); the active run is unaffected.
    pub fn discard_queued(&self) {
        let submitted = self.shared.submitted.load(Ordering::SeqCst);
        self.shared
            .discard_upto
            .fetch_max(submitted, Ordering::SeqCst);
    }

    /// Aborts the active run and drops every queued one.
    pub fn stop(&self) {
        self.shared.stop.cancel();
    }

    pub fn busy(&self) -> bool {
        self.shared.busy.load(Ordering::SeqCst)
    }

    /// Locks the session state for a quick read or change.
    pub fn session(&self) -> MutexGuard<'_, Session> {
        self.shared.session()
    }

    pub fn provider(&self) -> &dyn Provider {
        self.shared.provider.as_ref()
    }

    pub fn settings(&self) -> &Settings {
        &self.shared.settings
    }

    /// The permission gate: its mode, and the answers to its requests.
    pub fn permissions(&self) -> &Permissions {
        &self.shared.permissions
    }

    /// Routes the file tools through the client (`None`: the disk).
    pub fn set_client_files(&self, files: Option<Arc<dyn ClientFiles>>) {
        *self
            .shared
            .client_files
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = files;
    }

    /// Stops accepting runs; the worker ends after the queued ones.
    pub fn close(&mut self) {
        self.runs = None;
    }
}

/// Executes runs one after another.
async fn worker(
    shared: Arc<Shared>,
    mut runs: mpsc::Receiver<(u64, RunRequest, RunSpans)>,
    out: mpsc::Sender<Output>,
) {
    while let Some((number, run, spans)) = runs.recv().await {
        drop(spans.queued);
        if shared.stop.is_cancelled() {
            shared.queued.fetch_sub(1, Ordering::SeqCst);
            continue;
        }
        if number <= shared.discard_upto.load(Ordering::SeqCst) {
            shared.queued.fetch_sub(1, Ordering::SeqCst);
            if let Some(frame) = run.discarded {
                let _ = out.send(Output::Frame(frame)).await;
            }
            continue;
        }
        let cancel = shared.stop.child_token();
        *shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(cancel.clone());
        shared.busy.store(true, Ordering::SeqCst);
        shared.queued.fetch_sub(1, Ordering::SeqCst);
        if let Some(frame) = run.started {
            let _ = out.send(Output::Frame(frame)).await;
        }
        let ctx = RunCtx {
            shared: &shared,
            out: &out,
            cancel,
            unsaved_reported: AtomicBool::new(false),
        };
        execute(&ctx, run.kind).instrument(spans.run).await;
        *shared
            .current
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = None;
        shared.busy.store(false, Ordering::SeqCst);
        let _ = out.send(Output::Event(AgentEvent::Done)).await;
    }
}

/// Executes one run's work (its events go to the output; `Done` is the
/// caller's).
async fn execute(ctx: &RunCtx<'_>, kind: RunKind) {
    match kind {
        RunKind::Prompt { text, images } => {
            {
                let mut input = ctx.shared.steering();
                (input.open, input.active, input.late) = (true, true, false);
            }
            turn::run_prompt(ctx, text, images).await;
            while std::mem::take(&mut ctx.shared.steering().late) {
                turn::resume(ctx).await;
            }
            // A run that ended normally closed its input itself, and
            // what came later waits for the next run; one that did not
            // (aborted, failed, out of steps) leaves input behind.
            let left = {
                let mut input = ctx.shared.steering();
                let left = if input.open {
                    input.pending.len() + input.follow_up.len()
                } else {
                    0
                };
                if input.open {
                    input.pending.clear();
                    input.follow_up.clear();
                }
                (input.open, input.active, input.late) = (false, false, false);
                left
            };
            if left > 0 {
                ctx.emit(AgentEvent::Error(format!(
                    "{left} steering message(s) were not delivered: the run ended first"
                )))
                .await;
            }
        }
        RunKind::Compact => compact::run_compact(ctx).await,
    }
}

/// What one run works with.
pub(crate) struct RunCtx<'a> {
    pub shared: &'a Shared,
    pub out: &'a mpsc::Sender<Output>,
    pub cancel: CancellationToken,
    /// Whether this run already told the client that the journal cannot
    /// be written (once per run is enough; every failed write is logged).
    pub unsaved_reported: AtomicBool,
}

impl RunCtx<'_> {
    pub async fn emit(&self, event: AgentEvent) {
        // A closed output means the front-end is gone; the run still
        // finishes so the journal stays complete.
        let _ = self.out.send(Output::Event(event)).await;
    }

    /// Appends a message to the transcript, reporting a journal failure as
    /// a non-fatal error event.
    pub async fn record(&self, message: crate::transcript::Message) {
        let result = self.shared.session().push(message);
        self.report_journal(result).await;
    }

    /// Adds one tool result to the transcript (see
    /// [`Session::push_tool_result`]).
    pub async fn record_tool_result(&self, call_id: &str, output: &crate::tools::ToolOutput) {
        let result = self.shared.session().push_tool_result(
            call_id.to_string(),
            output.is_error,
            output.content.clone(),
        );
        self.report_journal(result).await;
    }

    /// Logs a failed journal write and tells the client, once per run. The
    /// change stays in memory and is written with the next one.
    async fn report_journal(&self, result: Result<(), journal::JournalError>) {
        let Err(e) = result else { return };
        tracing::error!(error = %e, "journal write failed");
        if !self.unsaved_reported.swap(true, Ordering::SeqCst) {
            self.emit(AgentEvent::Error(e.to_string())).await;
        }
    }
}
