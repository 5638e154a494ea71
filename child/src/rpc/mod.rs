//! The stdio transport, shared by every dialect: one reader loop on stdin,
//! one writer task that alone owns stdout (bounded queue, a flush per
//! line), and the shutdown rules.
//!
//! A dialect supplies a [`Frontend`] (what to do with each input line, and
//! how it wants EOF handled) and an [`Encoder`] (how agent events and the
//! frontend's own frames become stdout lines, in order). zut RPC v1 is in
//! [`zut`], letscode-rpc/1 in [`letscode`], Zi RPC v1 in [`zi`] and the
//! Agent Client Protocol in [`acp`]; [`dialects`] is the one list of them
//! (which front-end serves each), and no dialect imports another's: what
//! two share, such as the transcript's wire shape ([`transcript_wire`]),
//! lives here.

pub mod acp;
pub mod dialects;
pub mod letscode;
pub mod mcp_status;
pub mod stdio;
mod trace_context;
pub mod transcript_wire;
pub mod zi;
pub mod zut;

use std::time::Duration;

use corral_protocol::ndjson::{encode_line, FrameError, FrameReader};
use serde_json::{Map, Value};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufReader};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::agent::{Agent, Output};

/// Lines that may wait for stdout before the agent is slowed down.
pub const OUTPUT_QUEUE: usize = 1024;
/// How long an aborted run gets to emit its last events before exit.
pub const ABORT_GRACE: Duration = Duration::from_secs(2);

/// Transport limits.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    /// Longest accepted input line, in bytes.
    pub max_line: usize,
    /// After stdin closes, how long queued runs may take before they are
    /// aborted.
    pub eof_grace: Duration,
    /// Zi: ordinary operations in flight at once.
    pub max_in_flight: usize,
}

/// What the reader loop should do after a line.
#[derive(Debug, PartialEq, Eq)]
pub enum Flow {
    Continue,
    /// Stop reading and wind down (e.g. a `bye`): like EOF.
    Finish,
    /// Stop serving and exit with this code (failed authentication, a
    /// fatal handshake mismatch).
    Exit(u8),
}

/// What stdin EOF means for the runs in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EofPolicy {
    /// Let the active and queued runs finish (within the grace).
    Drain,
    /// The client is gone: abort everything.
    Abort,
}

/// Turns agent output into stdout lines (each ending in LF).
pub trait Encoder: Send + 'static {
    fn encode(&mut self, output: Output, lines: &mut Vec<Vec<u8>>);
}

/// One dialect's request handling.
#[allow(async_fn_in_trait)]
pub trait Frontend {
    /// Handles one input line (or the framing error it produced).
    async fn handle(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow;
    fn agent(&self) -> &Agent;
    fn agent_mut(&mut self) -> &mut Agent;
    fn eof_policy(&self) -> EofPolicy {
        EofPolicy::Drain
    }
    /// With [`EofPolicy::Abort`], how long the aborted work may take to
    /// settle (emit its last frames) before the process exits.
    fn settle_grace(&self) -> Duration {
        ABORT_GRACE
    }
    /// A last frame after the runs have ended (letscode's `bye`).
    fn farewell(&self) -> Option<Value> {
        None
    }
    /// Where the frontend sends frames of its own.
    fn output(&self) -> &mpsc::Sender<Output>;
}

/// Starts the stdout writer.
pub fn spawn_writer(out: mpsc::Receiver<Output>, encoder: Box<dyn Encoder>) -> JoinHandle<()> {
    tokio::spawn(write_loop(out, stdio::output(), encoder))
}

/// Writes every output in order, one flushed line each, until all senders
/// are gone. A closed stdout ends the loop quietly.
pub async fn write_loop<W: AsyncWrite + Unpin>(
    mut out: mpsc::Receiver<Output>,
    mut writer: W,
    mut encoder: Box<dyn Encoder>,
) {
    let mut lines = Vec::new();
    while let Some(item) = out.recv().await {
        lines.clear();
        encoder.encode(item, &mut lines);
        for line in &lines {
            if writer.write_all(line).await.is_err() || writer.flush().await.is_err() {
                tracing::debug!("stdout closed; dropping further output");
                return;
            }
        }
    }
}

/// Serialises a frame as one line, logging (not failing) the impossible.
pub fn line_of(frame: &impl serde::Serialize) -> Option<Vec<u8>> {
    match encode_line(frame) {
        Ok(line) => Some(line),
        Err(e) => {
            tracing::error!(error = %e, "could not encode a frame");
            None
        }
    }
}

/// Serves a frontend on stdin/stdout until EOF, a signal or an exit.
/// Returns the process exit code.
pub async fn serve<F: Frontend>(
    mut server: F,
    worker: JoinHandle<()>,
    writer: JoinHandle<()>,
    options: TransportOptions,
) -> u8 {
    let mut reader = FrameReader::with_max_line(BufReader::new(stdio::input()), options.max_line);
    let (mut term, mut int) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(term), Ok(int)) => (term, int),
        _ => {
            tracing::error!("cannot install signal handlers");
            return 1;
        }
    };
    let end_of_input = |server: &F| match server.eof_policy() {
        EofPolicy::Drain => options.eof_grace,
        EofPolicy::Abort => {
            abort_now(server);
            server.settle_grace()
        }
    };
    let (code, grace) = loop {
        tokio::select! {
            line = reader.next_object() => match line {
                None => break (0, end_of_input(&server)),
                Some(Err(e)) if !e.is_recoverable() => {
                    tracing::error!(error = %e, "stdin failed");
                    break (0, end_of_input(&server));
                }
                Some(line) => match server.handle(line).await {
                    Flow::Continue => {}
                    Flow::Finish => break (0, end_of_input(&server)),
                    Flow::Exit(code) => {
                        server.agent().stop();
                        break (code, ABORT_GRACE);
                    }
                },
            },
            _ = term.recv() => {
                tracing::info!("SIGTERM: aborting the active run and exiting");
                abort_now(&server);
                break (0, ABORT_GRACE);
            }
            _ = int.recv() => {
                tracing::info!("SIGINT: aborting the active run and exiting");
                abort_now(&server);
                break (0, ABORT_GRACE);
            }
        }
    };
    let signals = async {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM while winding down: aborting"),
            _ = int.recv() => tracing::info!("SIGINT while winding down: aborting"),
        }
    };
    shutdown(server, worker, writer, grace, signals).await;
    code
}

/// Aborts every run and kills the running commands' process groups at
/// once, rather than when the aborted tool gets to it: the process is
/// about to exit, and nothing it started may outlive it.
fn abort_now<F: Frontend>(server: &F) {
    server.agent().stop();
    crate::tools::group::kill_all();
}

/// Lets queued work finish within `grace` (cut short by `signals`),
/// aborting what remains, sends the frontend's farewell, then waits for
/// the writer to flush everything.
async fn shutdown<F: Frontend>(
    mut server: F,
    mut worker: JoinHandle<()>,
    writer: JoinHandle<()>,
    grace: Duration,
    signals: impl std::future::Future<Output = ()>,
) {
    server.agent_mut().close();
    // A signal during the grace (a supervisor's stop escalating, its death)
    // ends the wait at once.
    let finished = tokio::select! {
        done = tokio::time::timeout(grace, &mut worker) => done.is_ok(),
        () = signals => false,
    };
    if !finished {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "queued runs did not finish in time or a signal came; aborting"
        );
        abort_now(&server);
        if tokio::time::timeout(ABORT_GRACE, &mut worker)
            .await
            .is_err()
        {
            worker.abort();
        }
    }
    if let Some(frame) = server.farewell() {
        let _ = server.output().send(Output::Frame(frame)).await;
    }
    drop(server);
    let _ = tokio::time::timeout(ABORT_GRACE, writer).await;
}
