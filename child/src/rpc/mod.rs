//! The stdio transport: one reader loop on stdin, one writer task that
//! alone owns stdout (bounded queue, a flush per line), and the shutdown
//! rules: stdin EOF drains queued runs within a grace, SIGTERM/SIGINT abort.

pub mod zut;

use std::time::Duration;

use corral_protocol::ndjson::{encode_line, FrameReader};
use tokio::io::{AsyncWrite, AsyncWriteExt, BufReader};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::agent::Output;
use zut::{Flow, ZutServer};

/// Lines that may wait for stdout before the agent is slowed down.
pub const OUTPUT_QUEUE: usize = 1024;
/// How long an aborted run gets to emit its last events before exit.
const ABORT_GRACE: Duration = Duration::from_secs(2);

/// Transport limits.
#[derive(Debug, Clone)]
pub struct TransportOptions {
    /// Longest accepted input line, in bytes.
    pub max_line: usize,
    /// After stdin closes, how long queued runs may take before they are
    /// aborted.
    pub eof_grace: Duration,
}

/// Starts the stdout writer.
pub fn spawn_writer(out: mpsc::Receiver<Output>) -> JoinHandle<()> {
    tokio::spawn(write_loop(out, tokio::io::stdout()))
}

/// Writes every output in order, one flushed line each, until all senders
/// are gone. A closed stdout ends the loop quietly.
pub async fn write_loop<W: AsyncWrite + Unpin>(mut out: mpsc::Receiver<Output>, mut writer: W) {
    while let Some(item) = out.recv().await {
        let line = match item {
            Output::Line(line) => line,
            Output::Event(event) => match encode_line(&zut::wire_event(&event)) {
                Ok(line) => line,
                Err(e) => {
                    tracing::error!(error = %e, "could not encode event");
                    continue;
                }
            },
        };
        if writer.write_all(&line).await.is_err() || writer.flush().await.is_err() {
            tracing::debug!("stdout closed; dropping further output");
            break;
        }
    }
}

/// Serves zut RPC on stdin/stdout until EOF, a signal or failed auth.
/// Returns the process exit code.
pub async fn serve(
    mut server: ZutServer,
    worker: JoinHandle<()>,
    writer: JoinHandle<()>,
    options: TransportOptions,
) -> u8 {
    let mut reader =
        FrameReader::with_max_line(BufReader::new(tokio::io::stdin()), options.max_line);
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
    let (code, grace) = loop {
        tokio::select! {
            line = reader.next_object() => match line {
                None => break (0, options.eof_grace),
                Some(Err(e)) if !e.is_recoverable() => {
                    tracing::error!(error = %e, "stdin failed");
                    break (0, options.eof_grace);
                }
                Some(line) => {
                    if let Flow::Exit(code) = server.handle(line).await {
                        server.agent().stop();
                        break (code, ABORT_GRACE);
                    }
                }
            },
            _ = term.recv() => {
                tracing::info!("SIGTERM: aborting the active run and exiting");
                server.agent().stop();
                break (0, ABORT_GRACE);
            }
            _ = int.recv() => {
                tracing::info!("SIGINT: aborting the active run and exiting");
                server.agent().stop();
                break (0, ABORT_GRACE);
            }
        }
    };
    shutdown(server, worker, writer, grace).await;
    code
}

/// Lets queued work finish within `grace`, aborting what remains, then
/// waits for the writer to flush everything.
async fn shutdown(
    mut server: ZutServer,
    mut worker: JoinHandle<()>,
    writer: JoinHandle<()>,
    grace: Duration,
) {
    server.agent_mut().close();
    if tokio::time::timeout(grace, &mut worker).await.is_err() {
        tracing::warn!(
            grace_ms = grace.as_millis() as u64,
            "queued runs did not finish in time; aborting"
        );
        server.agent().stop();
        if tokio::time::timeout(ABORT_GRACE, &mut worker)
            .await
            .is_err()
        {
            worker.abort();
        }
    }
    drop(server);
    let _ = tokio::time::timeout(ABORT_GRACE, writer).await;
}
