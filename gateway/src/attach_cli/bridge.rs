//! The bridge proper, once the session is open. Tasks: a stdin reader
//! (lines → channel) and one loop that alone owns stdout and the socket:
//! stdin lines become frames (or local answers), frames become stdout lines,
//! and it decides when to stop: stdin closed and drained, the socket
//! closed, stdout gone, or a signal.

use std::io::ErrorKind;

use corral_protocol::ndjson::{FrameError, FrameReader};
use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::io::{AsyncWriteExt, BufReader, Stdout};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, timeout, Instant};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};

use super::connect::{Session, Ws};
use super::local;
use super::{Signals, CLOSE_GRACE, DRAIN_GRACE, EXIT_FAILURE, EXIT_OK, MAX_LINE};
use crate::dialect::attach::{EndOfInput, InFlight, Seen, StdinFrame};
use crate::dialect::Dialect;
use crate::ws::close::CloseCode;

/// Stdin lines read ahead of the loop.
const STDIN_QUEUE: usize = 64;

/// What the loop does after one event.
enum Step {
    Continue,
    /// Send a normal close (1000) with this reason, then exit with `exit`.
    Close {
        exit: i32,
        reason: &'static str,
    },
    /// The socket is already closed: exit with this code.
    Exit(i32),
}

/// Reads stdin lines on a task of their own; the channel closes at end of
/// input (a read error counts as end of input).
pub fn read_stdin() -> mpsc::Receiver<Result<Vec<u8>, FrameError>> {
    let (tx, rx) = mpsc::channel(STDIN_QUEUE);
    tokio::spawn(async move {
        let stdin = BufReader::new(tokio::io::stdin());
        let mut lines = FrameReader::with_max_line(stdin, MAX_LINE);
        while let Some(line) = lines.next_line().await {
            if let Err(FrameError::Io(e)) = &line {
                tracing::warn!("cannot read stdin ({e}); treating it as closed");
                return;
            }
            if tx.send(line).await.is_err() {
                return;
            }
        }
    });
    rx
}

/// One session between stdio and the gateway.
pub struct Bridge {
    ws: Ws,
    /// The gateway's hello data, the answer to a local `hello`.
    hello: Value,
    /// Protocol lines only; nothing else writes here.
    stdout: Stdout,
    /// What must arrive before a closed stdin may end the session.
    inflight: InFlight,
    /// Set once stdin has closed: the drain ends at this instant at the latest.
    drain_until: Option<Instant>,
    dialect: Dialect,
    /// Zi: the last `sequence` written to stdout.
    sequence: u64,
}

impl Bridge {
    pub fn new(session: Session, dialect: Dialect) -> Bridge {
        Bridge {
            ws: session.ws,
            hello: session.hello,
            stdout: tokio::io::stdout(),
            inflight: InFlight::default(),
            drain_until: None,
            dialect,
            sequence: 0,
        }
    }

    /// Runs until the session ends; returns the exit code.
    pub async fn run(
        mut self,
        early: Vec<String>,
        mut stdin: mpsc::Receiver<Result<Vec<u8>, FrameError>>,
        signals: &mut Signals,
    ) -> i32 {
        let mut step = Step::Continue;
        for text in early {
            step = self.on_gateway_message(Some(Ok(Message::text(text)))).await;
            if !matches!(step, Step::Continue) {
                break;
            }
        }
        while let Step::Continue = step {
            let draining = self.drain_until.is_some();
            let deadline = self.drain_until.unwrap_or_else(Instant::now);
            step = tokio::select! {
                line = stdin.recv(), if !draining => match line {
                    Some(line) => self.on_stdin_line(line).await,
                    None => self.stdin_closed().await,
                },
                message = self.ws.next() => self.on_gateway_message(message).await,
                () = sleep_until(deadline), if draining => {
                    tracing::warn!(
                        requests = self.inflight.requests(),
                        runs = self.inflight.runs(),
                        "stdin closed {} s ago and work is still in flight; closing anyway",
                        DRAIN_GRACE.as_secs()
                    );
                    Step::Close { exit: EXIT_OK, reason: "drain grace elapsed" }
                }
                exit = signals.next() => Step::Close { exit, reason: "interrupted" },
            };
        }
        match step {
            Step::Close { exit, reason } => {
                self.close(reason).await;
                exit
            }
            Step::Exit(exit) => exit,
            Step::Continue => EXIT_OK,
        }
    }

    /// End of input, as the dialect says: let this client's requests and
    /// runs finish (zut), send a farewell the gateway answers by closing
    /// once no run is active (letscode `bye`), or close at once (Zi).
    async fn stdin_closed(&mut self) -> Step {
        match self.dialect.rules().attach_end_of_input() {
            EndOfInput::DrainInFlight => {}
            EndOfInput::Send(bye) => {
                if let Err(e) = self.ws.send(Message::text(bye)).await {
                    return lost(&e);
                }
                self.drain_until = Some(Instant::now() + DRAIN_GRACE);
                return Step::Continue;
            }
            EndOfInput::Leave => {
                return Step::Close {
                    exit: EXIT_OK,
                    reason: "stdin closed",
                }
            }
        }
        if self.inflight.is_idle() {
            return Step::Close {
                exit: EXIT_OK,
                reason: "stdin closed",
            };
        }
        tracing::debug!(
            requests = self.inflight.requests(),
            runs = self.inflight.runs(),
            "stdin closed; waiting for work in flight"
        );
        self.drain_until = Some(Instant::now() + DRAIN_GRACE);
        Step::Continue
    }

    async fn on_stdin_line(&mut self, line: Result<Vec<u8>, FrameError>) -> Step {
        match self
            .dialect
            .rules()
            .attach_stdin(line, &self.hello, self.sequence)
        {
            StdinFrame::Answer(line) => self.write(&line).await,
            StdinFrame::Fatal(line) => match self.write(&line).await {
                Step::Continue => Step::Close {
                    exit: EXIT_FAILURE,
                    reason: "invalid framing",
                },
                step => step,
            },
            StdinFrame::Forward { text, frame } => {
                if self.dialect.rules().attach_tracks_work() {
                    self.inflight.sent(&frame);
                }
                match self.ws.send(Message::text(text)).await {
                    Ok(()) => Step::Continue,
                    Err(e) => lost(&e),
                }
            }
        }
    }

    async fn on_gateway_message(&mut self, message: Option<Result<Message, WsError>>) -> Step {
        let text = match message {
            None => {
                eprintln!(
                    "corral attach: the connection to the gateway ended without a close frame"
                );
                return Step::Exit(EXIT_FAILURE);
            }
            Some(Err(e)) => return lost(&e),
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(frame))) => return self.closed_by_gateway(frame).await,
            Some(Ok(Message::Binary(_))) => {
                tracing::warn!("ignored a binary frame from the gateway");
                return Step::Continue;
            }
            Some(Ok(_)) => return Step::Continue,
        };
        let parsed: Option<Value> = serde_json::from_str(text.as_str()).ok();
        if let Some(frame) = &parsed {
            match self.dialect.rules().attach_seen(frame) {
                Seen::Track => self.inflight.received(frame),
                Seen::Hide => return Step::Continue,
                Seen::Sequence(sequence) => {
                    self.sequence = sequence.unwrap_or(self.sequence);
                }
            }
        }
        if let Some(line) = local::frame_line(text.as_str(), parsed.as_ref()) {
            let step = self.write(&line).await;
            if !matches!(step, Step::Continue) {
                return step;
            }
        }
        if self.dialect.rules().attach_tracks_work()
            && self.drain_until.is_some()
            && self.inflight.is_idle()
        {
            return Step::Close {
                exit: EXIT_OK,
                reason: "stdin closed",
            };
        }
        Step::Continue
    }

    /// One line to stdout, flushed. A reader that went away ends the
    /// session quietly (a broken pipe is not an error).
    async fn write(&mut self, line: &[u8]) -> Step {
        let written = async {
            self.stdout.write_all(line).await?;
            self.stdout.flush().await
        };
        match written.await {
            Ok(()) => Step::Continue,
            Err(e) if e.kind() == ErrorKind::BrokenPipe => {
                tracing::debug!("stdout closed; ending the session");
                Step::Close {
                    exit: EXIT_OK,
                    reason: "stdout closed",
                }
            }
            Err(e) => {
                eprintln!("corral attach: cannot write to stdout: {e}");
                Step::Close {
                    exit: EXIT_FAILURE,
                    reason: "stdout failed",
                }
            }
        }
    }

    /// The gateway closed: 1000/1001 end the session normally, any other
    /// code is reported.
    async fn closed_by_gateway(&mut self, frame: Option<CloseFrame>) -> Step {
        // Reading on lets tungstenite send its close reply.
        let _ = timeout(CLOSE_GRACE, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
        match frame {
            Some(f)
                if matches!(
                    CloseCode::from_code(u16::from(f.code)),
                    Some(CloseCode::Normal | CloseCode::GoingAway)
                ) =>
            {
                tracing::debug!(code = u16::from(f.code), reason = %f.reason, "the gateway closed the session");
                Step::Exit(EXIT_OK)
            }
            Some(f) => {
                let reason = if f.reason.is_empty() {
                    "no reason given"
                } else {
                    f.reason.as_str()
                };
                eprintln!(
                    "corral attach: the gateway closed the connection: {} {reason}",
                    u16::from(f.code)
                );
                Step::Exit(EXIT_FAILURE)
            }
            None => {
                eprintln!("corral attach: the gateway closed the connection without a status code");
                Step::Exit(EXIT_FAILURE)
            }
        }
    }

    /// A normal close (1000), waiting a little for the gateway's reply.
    async fn close(&mut self, reason: &'static str) {
        let frame = CloseFrame {
            code: CloseCode::Normal.code().into(),
            reason: reason.into(),
        };
        let handshake = async {
            if self.ws.close(Some(frame)).await.is_ok() {
                while let Some(Ok(_)) = self.ws.next().await {}
            }
        };
        if timeout(CLOSE_GRACE, handshake).await.is_err() {
            tracing::debug!("the gateway did not answer the close in time");
        }
    }
}

/// The socket failed: report and exit 1.
fn lost(error: &WsError) -> Step {
    eprintln!("corral attach: lost the connection to the gateway: {error}");
    Step::Exit(EXIT_FAILURE)
}
