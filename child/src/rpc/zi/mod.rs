//! The Zi RPC v1 dialect (`corral-agent rpc --dialect zi`): versioned,
//! sequenced JSONL requests over the shared stdio transport.
//!
//! Endpoints: `session.get_state`, `session.get_messages`,
//! `session.get_outcomes` (always an empty page: this agent records no
//! operation outcomes), `session.prompt`, `session.interrupt`,
//! `session.await_idle`, `connection.set_events`, `command.list`,
//! `command.invoke` (built-ins `compact`, `clear`), `model.list`,
//! `model.select`, `thinking.list`, `thinking.select`; and corral's
//! `mcp.select {servers}` (starts MCP servers defined with `"default":
//! false`; the result is every server's status, as the `mcp_status`
//! session events that follow each change carry).
//!
//! Records are decoded as strictly as the reference does (see
//! [`request`]); every rejection before launch is a `protocol_error` with
//! `code` and `message` at the top level (`invalid_json`,
//! `invalid_request`, `unknown_method`, `unsupported_version`). Invalid
//! UTF-8 or a record over the line bound ends the connection after one
//! `protocol_error` with code `invalid_framing`, with exit code
//! [`FRAMING_EXIT`]. Operations that settle later (`session.interrupt`,
//! `session.await_idle`, `command.invoke compact`) run as tasks holding
//! their id until their response is sent.

mod encoder;
mod event;
mod frame;
mod message;
/// Public so that fuzz targets reach the exact parser the front-end runs.
pub mod request;
mod session;
mod settings;
mod settle;
mod state;

use std::future::Future;
use std::sync::atomic::Ordering;

use corral_protocol::ndjson::FrameError;
use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{EofPolicy, Flow, Frontend};
use crate::agent::remote::AgentRemote;
use crate::agent::{Agent, Output, RunKind, RunRequest};
use encoder::{ZiEncoder, RUN_DISCARDED, RUN_STARTED};
use frame::FailCode;
pub use frame::ProtocolCode;
use request::Request;
use state::Connection;

/// Exit code after an `invalid_framing` frame.
pub const FRAMING_EXIT: u8 = 1;
/// How long interrupted work may take to settle after stdin closes.
pub const SETTLEMENT: std::time::Duration = std::time::Duration::from_secs(5);
/// Ordinary operations that may be in flight at once, by default (the
/// document's bound; `--max-in-flight` changes it).
pub const MAX_IN_FLIGHT: usize = corral_protocol::zi::MAX_IN_FLIGHT;

/// Serves Zi requests for one agent.
pub struct ZiServer {
    agent: Agent,
    out: mpsc::Sender<Output>,
    /// State shared with the encoder and the settlement tasks.
    connection: Connection,
    /// Lets settlement tasks abort runs and read the session.
    remote: AgentRemote,
    /// Cancelled when the server is dropped: pending tasks give up.
    cancel: CancellationToken,
    /// Models outside the catalogue are accepted (custom `--base-url`).
    allow_unknown_models: bool,
    /// Identifies this session in state snapshots.
    session_id: String,
    /// Ordinary operations that may be in flight at once.
    max_in_flight: usize,
    /// The session's MCP servers (`mcp.select`).
    mcp: Option<std::sync::Arc<crate::mcp::McpHub>>,
}

/// Which admission slot an operation holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Ordinary,
    Interrupt,
}

impl ZiServer {
    pub fn new(
        agent: Agent,
        out: mpsc::Sender<Output>,
        connection: Connection,
        allow_unknown_models: bool,
    ) -> ZiServer {
        let remote = agent.remote();
        let session_id = format!(
            "{}-{}",
            std::process::id(),
            time::OffsetDateTime::now_utc().unix_timestamp_nanos()
        );
        ZiServer {
            agent,
            out,
            connection,
            remote,
            cancel: CancellationToken::new(),
            allow_unknown_models,
            session_id,
            max_in_flight: MAX_IN_FLIGHT,
            mcp: None,
        }
    }

    async fn send(&self, frame: Value) {
        let _ = self.out.send(Output::Frame(frame)).await;
    }

    /// Whether every submitted run has finished.
    fn idle(&self) -> bool {
        self.connection.idle()
    }

    /// Hands one run to the agent; its `agent_start` precedes its events.
    fn submit(&self, kind: RunKind) -> bool {
        let run = RunRequest {
            kind,
            started: Some(Value::String(RUN_STARTED.into())),
            discarded: Some(Value::String(RUN_DISCARDED.into())),
            traceparent: None,
        };
        let admitted = self.agent.submit(run).is_ok();
        if admitted {
            self.connection.submitted.fetch_add(1, Ordering::SeqCst);
        }
        admitted
    }

    async fn handle_line(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow {
        let rejection = |code, message: &str| frame::protocol_error(None, code, message);
        let record = match line {
            Ok(record) => record,
            Err(FrameError::InvalidUtf8) => {
                let message = "RPC input must be valid UTF-8";
                self.send(rejection(ProtocolCode::InvalidFraming, message))
                    .await;
                return Flow::Exit(FRAMING_EXIT);
            }
            Err(FrameError::TooLong { limit }) => {
                let message = format!("RPC input records cannot exceed {limit} bytes");
                self.send(rejection(ProtocolCode::InvalidFraming, &message))
                    .await;
                return Flow::Exit(FRAMING_EXIT);
            }
            Err(FrameError::NotObject(_)) => {
                let message = "RPC requests must be JSON objects";
                self.send(rejection(ProtocolCode::InvalidRequest, message))
                    .await;
                return Flow::Continue;
            }
            Err(_) => {
                let message = "RPC input must contain one JSON object per line";
                self.send(rejection(ProtocolCode::InvalidJson, message))
                    .await;
                return Flow::Continue;
            }
        };
        let request = match request::parse(record) {
            Ok(request) => request,
            Err(r) => {
                let frame = frame::protocol_error(r.id.as_deref(), r.code, r.message);
                self.send(frame).await;
                return Flow::Continue;
            }
        };
        if self.connection.lock().in_flight.contains(&request.id) {
            let message = "RPC request id is already in flight";
            let code = ProtocolCode::InvalidRequest;
            self.send(frame::protocol_error(Some(&request.id), code, message))
                .await;
            return Flow::Continue;
        }
        if let Some(frame) = self.dispatch(&request) {
            self.send(frame).await;
        }
        Flow::Continue
    }

    /// Answers one request; `None` when a settlement task will answer.
    fn dispatch(&mut self, request: &Request) -> Option<Value> {
        let result = match request.method {
            "session.get_state" => Ok(self.snapshot()),
            "session.get_messages" => self.messages_page(request),
            "session.get_outcomes" => session::outcomes_page(request),
            "session.prompt" => self.prompt(request),
            "session.interrupt" => return self.interrupt(request),
            "session.await_idle" => return self.await_idle(request),
            "connection.set_events" => return Some(settings::set_events(request)),
            "command.list" => Ok(settings::command_list()),
            "command.invoke" => return self.invoke(request),
            "model.list" => Ok(self.model_list()),
            "model.select" => self.model_select(request),
            "thinking.list" => Ok(self.thinking_list()),
            "thinking.select" => self.thinking_select(request),
            "mcp.select" => match &self.mcp {
                Some(hub) => super::mcp_status::select(hub, request.params.get("servers"))
                    .map_err(|e| Reply::Fail(FailCode::NotFound, e)),
                None => Err(Reply::Fail(FailCode::NotFound, "no MCP servers".into())),
            },
            other => Err(Reply::Fail(
                FailCode::OperationFailed,
                format!("{other} is not implemented"),
            )),
        };
        Some(match result {
            Ok(value) => frame::ok(&request.id, request.method, value),
            Err(reply) => reply.frame(request),
        })
    }

    /// Takes a slot and registers the id, or says why not.
    fn admit(&self, request: &Request, slot: Slot) -> Result<Slot, Value> {
        let mut inner = self.connection.lock();
        let slot = match slot {
            Slot::Interrupt if inner.interrupt_reserved => {
                return Err(frame::fail(
                    &request.id,
                    request.method,
                    FailCode::Capacity,
                    "An interruption request is already active",
                ));
            }
            Slot::Interrupt => {
                inner.interrupt_reserved = true;
                Slot::Interrupt
            }
            _ if inner.ordinary >= self.max_in_flight => {
                let message = format!(
                    "RPC accepts at most {} in-flight operations",
                    self.max_in_flight
                );
                return Err(frame::fail(
                    &request.id,
                    request.method,
                    FailCode::Capacity,
                    message,
                ));
            }
            _ => {
                inner.ordinary += 1;
                Slot::Ordinary
            }
        };
        inner.in_flight.insert(request.id.clone());
        Ok(slot)
    }

    /// Runs `work` to settlement, then releases the slot and sends its
    /// response. Nothing is sent if the server goes away first.
    fn settle<F>(&self, request: &Request, slot: Slot, work: F)
    where
        F: Future<Output = Value> + Send + 'static,
    {
        let connection = self.connection.clone();
        let out = self.out.clone();
        let cancel = self.cancel.clone();
        let id = request.id.clone();
        tokio::spawn(async move {
            let frame = tokio::select! {
                frame = work => Some(frame),
                () = cancel.cancelled() => None,
            };
            {
                let mut inner = connection.lock();
                inner.in_flight.remove(&id);
                match slot {
                    Slot::Interrupt => inner.interrupt_reserved = false,
                    Slot::Ordinary => inner.ordinary = inner.ordinary.saturating_sub(1),
                }
            }
            if let Some(frame) = frame {
                let _ = out.send(Output::Frame(frame)).await;
            }
        });
    }
}

/// Why a synchronous request did not succeed.
pub(crate) enum Reply {
    /// A rejected shape: `protocol_error`, nothing applied.
    Protocol(String),
    /// An `ok: false` response.
    Fail(FailCode, String),
}

impl Reply {
    fn frame(self, request: &Request) -> Value {
        match self {
            Reply::Protocol(message) => {
                frame::protocol_error(Some(&request.id), ProtocolCode::InvalidRequest, message)
            }
            Reply::Fail(code, message) => frame::fail(&request.id, request.method, code, message),
        }
    }
}

impl From<String> for Reply {
    fn from(message: String) -> Reply {
        Reply::Protocol(message)
    }
}

impl Drop for ZiServer {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

impl Frontend for ZiServer {
    async fn handle(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow {
        self.handle_line(line).await
    }

    fn agent(&self) -> &Agent {
        &self.agent
    }

    fn agent_mut(&mut self) -> &mut Agent {
        &mut self.agent
    }

    /// Closing stdin means the client is gone: interrupt everything.
    fn eof_policy(&self) -> EofPolicy {
        EofPolicy::Abort
    }

    /// The document's connection settlement bound.
    fn settle_grace(&self) -> std::time::Duration {
        SETTLEMENT
    }

    fn output(&self) -> &mpsc::Sender<Output> {
        &self.out
    }
}

/// Whether this dialect can ask the client to approve a tool call:
/// Zi RPC has no permission request: `--permission-mode ask` is refused.
pub const CAN_ASK_PERMISSION: bool = false;

/// Serves Zi RPC v1 on stdin/stdout; returns the exit code.
pub async fn serve_stdio(setup: crate::setup::Setup, transport: super::TransportOptions) -> u8 {
    let connection = Connection::new();
    let (out, out_rx) = mpsc::channel(super::OUTPUT_QUEUE);
    let (agent, worker) = Agent::start(
        setup.provider,
        setup.tools,
        setup.settings,
        setup.session,
        out.clone(),
    );
    let remote = agent.remote();
    let message_count = Box::new(move || remote.session().transcript().len());
    let encoder = ZiEncoder::new(connection.clone(), message_count);
    let writer = super::spawn_writer(out_rx, Box::new(encoder));
    let mut server = ZiServer::new(agent, out, connection, setup.allow_unknown_models);
    server.max_in_flight = transport.max_in_flight;
    server.mcp = Some(setup.mcp.clone());
    let ready = serde_json::json!({"type": "ready", "state": server.snapshot()});
    server.send(ready).await;
    super::mcp_status::spawn(setup.mcp.clone(), server.out.clone(), |mut payload| {
        payload["type"] = Value::from("mcp_status");
        serde_json::json!({"type": "session_event", "event": payload})
    })
    .open();
    super::serve(server, worker, writer, transport).await
}
