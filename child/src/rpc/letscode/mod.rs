//! The letscode-rpc/1 dialect (`corral-agent rpc --dialect letscode`, or
//! `--mode rpc --dialect letscode`): NDJSON commands on stdin, control
//! messages and domain events on stdout.
//!
//! - First line: `{"type":"ready","protocol":"letscode-rpc/1","letscode":V}`
//!   where `letscode` is the version of this implementation (the
//!   `corral-agent` crate version), not of upstream letscode.
//! - Commands: `hello`, `prompt`, `steer`, `follow_up`, `abort`, `reset`,
//!   `bye`; each answered `ack{id}` then `done{id}`, or `error{id, error,
//!   recoverable[, fatal]}` (`id` is `null` when the command had none).
//!   `prompt`'s `ack` comes just before `agent_start`, its `done` just
//!   after `agent_end`. `bye` is answered `ack` at once and `done` after the
//!   active run drained, just before the final `bye` frame.
//! - `steer{text}`: handed to the active run, which adds it to the
//!   transcript as a user message (seen as `message_start`/`message_end`
//!   with role `user`) at its next step boundary, before its next model
//!   call; if the model has already answered, the run goes on for one more
//!   step rather than ending. When no run is active (or the run is past
//!   its last boundary) the text is queued as a run of its own, like
//!   `follow_up`. Steering a run that then fails is reported by an `error`
//!   event; `abort` discards steering not yet taken.
//! - `follow_up{text}`: queued as a run of its own that starts after the
//!   active one (at once when idle); its events come without `ack`/`done`
//!   around them. `prompt` and `reset` need the agent idle: no active run
//!   and none queued.
//! - Messages: `{"role":"user"|"assistant"|"tool","content":[block],
//!   "timestamp":RFC 3339}`; blocks `text{text}`, `thinking{thinking}`,
//!   `image{mime_type,bytes}`, `tool_call{id,name,arguments}`,
//!   `tool_result{tool_call_id,is_error,content}`. `agent_start.messages`
//!   holds the run's prompt; `agent_end.messages` every message the run
//!   added (prompt, steering, assistant messages, tool results).
//! - Extension (additive, as the document allows): with `--permission-mode
//!   ask`, a `permission_request {request_id, tool_call_id, tool_name,
//!   arguments, kind, options}` event asks for `permission_reply
//!   {request_id, option}`; `permission_resolved {request_id, tool_call_id,
//!   outcome}` tells how it ended; `set_permission_mode {mode}` changes
//!   the mode. Both commands are answered `ack` then `done` (or `error`).
//!   `mcp_select {servers}` starts MCP servers defined with `"default":
//!   false`, answered `ack` then `done {id, servers}` (every server's
//!   status); an `mcp_status {servers}` event gives that full list at
//!   start and at every change.

/// Public so that fuzz targets reach the exact parser the front-end runs.
pub mod command;
mod encoder;
mod wire;

use corral_protocol::ndjson::FrameError;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use self::command::{check_protocol, Command, Kind};
use self::wire::{Private, Reply};
use super::{mcp_status, trace_context, Flow, Frontend};
use crate::agent::{Agent, Output, RunKind, RunRequest};
use crate::mcp::McpHub;
use std::sync::Arc;

pub use self::encoder::LetscodeEncoder;

/// Serves letscode commands for one agent.
pub struct LetscodeServer {
    agent: Agent,
    out: mpsc::Sender<Output>,
    /// A `hello` failed: exit without the farewell `bye`.
    fatal: bool,
    /// The `bye` command being answered (`Some(null)` for one without id).
    bye: Option<Value>,
    /// The session's MCP servers (`mcp_select`).
    mcp: Arc<McpHub>,
}

impl LetscodeServer {
    pub fn new(agent: Agent, out: mpsc::Sender<Output>, mcp: Arc<McpHub>) -> LetscodeServer {
        LetscodeServer {
            agent,
            out,
            fatal: false,
            bye: None,
            mcp,
        }
    }

    async fn send(&self, frame: Value) {
        let _ = self.out.send(Output::Frame(frame)).await;
    }

    async fn reject(&self, id: &Value, error: &str) {
        self.send(wire::control_error(id, error, true, false)).await;
    }

    async fn dispatch(
        &mut self,
        Command { id, kind }: Command,
        traceparent: Option<String>,
    ) -> Flow {
        match kind {
            Kind::Hello { protocol } => match check_protocol(&protocol) {
                Ok(()) => self.acted(&id, |_| Ok(())).await,
                Err(e) => {
                    tracing::error!("{e}");
                    self.fatal = true;
                    self.send(wire::control_error(&id, &e.to_string(), false, true))
                        .await;
                    return Flow::Exit(1);
                }
            },
            Kind::Prompt { text } => {
                if !self.agent.idle() {
                    self.reject(&id, "busy: a run is active; wait for its done, or abort it")
                        .await;
                    return Flow::Continue;
                }
                let started = Private::RunStart {
                    reply: Some(Reply { id: id.clone() }),
                };
                if let Err(e) = self.agent.submit(prompt_run(text, started, traceparent)) {
                    self.reject(&id, &e.to_string()).await;
                }
            }
            Kind::Steer { text } => {
                self.acted(&id, |agent| match agent.steer(text) {
                    Ok(()) => Ok(()),
                    Err(text) => queue(agent, text),
                })
                .await
            }
            Kind::FollowUp { text } => self.acted(&id, |agent| queue(agent, text)).await,
            Kind::Abort => {
                self.acted(&id, |agent| {
                    agent.clear_steering();
                    agent.abort();
                    Ok(())
                })
                .await
            }
            Kind::Reset => {
                if !self.agent.idle() {
                    self.reject(&id, "busy: reset needs the agent idle; abort the run first")
                        .await;
                    return Flow::Continue;
                }
                self.acted(&id, |agent| {
                    agent.clear_steering();
                    agent.session().clear().map_err(|e| e.to_string())
                })
                .await
            }
            Kind::PermissionReply { request_id, option } => {
                self.acted(&id, |agent| {
                    agent
                        .permissions()
                        .answer(&request_id, option)
                        .map_err(|e| e.to_string())
                })
                .await
            }
            Kind::SetPermissionMode { mode } => {
                self.acted(&id, |agent| {
                    agent.permissions().set_mode(mode);
                    Ok(())
                })
                .await
            }
            Kind::McpSelect { servers } => {
                self.send(wire::ack(&id)).await;
                let answer = match mcp_status::select(&self.mcp, servers.as_ref()) {
                    Ok(Value::Object(data)) => {
                        let mut done = wire::done(&id);
                        if let Value::Object(frame) = &mut done {
                            frame.extend(data);
                        }
                        done
                    }
                    Ok(_) => wire::done(&id),
                    Err(e) => wire::control_error(&id, &e, true, false),
                };
                self.send(answer).await;
            }
            Kind::Bye => {
                self.send(wire::ack(&id)).await;
                self.bye = Some(id);
                return Flow::Finish;
            }
        }
        Flow::Continue
    }

    /// `ack`, the action, then `done` (or a recoverable `error`). The
    /// answer's slot is reserved before acting, so a run the action queues
    /// cannot write ahead of it (the runtime is single-threaded).
    async fn acted(&self, id: &Value, action: impl FnOnce(&Agent) -> Result<(), String>) {
        self.send(wire::ack(id)).await;
        let Ok(slot) = self.out.reserve().await else {
            return;
        };
        let answer = match action(&self.agent) {
            Ok(()) => wire::done(id),
            Err(e) => wire::control_error(id, &e, true, false),
        };
        slot.send(Output::Frame(answer));
    }
}

fn prompt_run(text: String, started: Private, traceparent: Option<String>) -> RunRequest {
    RunRequest {
        kind: RunKind::Prompt {
            text,
            images: Vec::new(),
        },
        started: Some(started.to_frame()),
        discarded: None,
        traceparent,
    }
}

/// Queues `text` as a run of its own, answered by nobody.
fn queue(agent: &Agent, text: String) -> Result<(), String> {
    agent
        .submit(prompt_run(text, Private::RunStart { reply: None }, None))
        .map_err(|e| e.to_string())
}

impl Frontend for LetscodeServer {
    async fn handle(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow {
        let mut traceparent = None;
        match line
            .map_err(|e| (Value::Null, e.to_string()))
            .and_then(|mut object| {
                traceparent = trace_context::take(&mut object);
                command::parse(object).map_err(|bad| (bad.id, bad.message))
            }) {
            Ok(command) => self.dispatch(command, traceparent).await,
            Err((id, message)) => {
                self.reject(&id, &message).await;
                Flow::Continue
            }
        }
    }

    fn agent(&self) -> &Agent {
        &self.agent
    }

    fn agent_mut(&mut self) -> &mut Agent {
        &mut self.agent
    }

    fn farewell(&self) -> Option<Value> {
        (!self.fatal).then(|| {
            Private::Farewell {
                reply: self.bye.clone().map(|id| Reply { id }),
            }
            .to_frame()
        })
    }

    fn output(&self) -> &mpsc::Sender<Output> {
        &self.out
    }
}

/// Whether this dialect can ask the client to approve a tool call:
/// letscode asks with a `permission_request` extension event.
pub const CAN_ASK_PERMISSION: bool = true;

/// Serves letscode-rpc/1 on stdin/stdout; returns the exit code.
pub async fn serve_stdio(setup: crate::setup::Setup, transport: super::TransportOptions) -> u8 {
    let (out, out_rx) = mpsc::channel(super::OUTPUT_QUEUE);
    let writer = super::spawn_writer(out_rx, Box::new(LetscodeEncoder::default()));
    // Written before stdin is read: the queue is empty, so this cannot wait.
    let _ = out.send(Output::Frame(wire::ready())).await;
    mcp_status::spawn(setup.mcp.clone(), out.clone(), |mut payload| {
        payload["type"] = Value::from("mcp_status");
        payload
    })
    .open();
    let (agent, worker) = Agent::start(
        setup.provider,
        setup.tools,
        setup.settings,
        setup.session,
        out.clone(),
    );
    let server = LetscodeServer::new(agent, out, setup.mcp);
    super::serve(server, worker, writer, transport).await
}
