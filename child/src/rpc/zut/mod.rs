//! The zut RPC v1 dialect: request handling (commands, queued runs) here;
//! token auth in `auth`, the encoder (which ends a failed run with
//! `error`) in `encoder`, the wire shapes of events and messages in
//! `wire`.
//!
//! Extensions (new commands and events, which zut's versioning rule
//! allows): `permission_reply {request_id, option}` answers a
//! `permission_request {request_id, id, name, args, kind, options}` event;
//! `permission_resolved {request_id, id, outcome}` says how each request
//! ended; `set_permission_mode {mode}` changes the mode, which `get_state`
//! reports as `permission_mode`; `refusal` says the model declined;
//! `mcp_select {servers}` starts MCP servers defined with `"default":
//! false` (its `data` is every server's status) and an `mcp_status
//! {servers}` event gives that full list at start and at every change.

use base64::Engine as _;
use corral_protocol::ndjson::FrameError;
use corral_protocol::zut::{self, Command, Request, RequestId, Response};
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

mod auth;
mod encoder;
mod wire;

pub use encoder::ZutEncoder;
pub use wire::wire_event;

use self::auth::{Parsed, Unreadable, Verdict};
use super::mcp_status::{self, FeedGate};
use super::transcript_wire::wire_message;
use super::{trace_context, Flow, Frontend};
use crate::agent::{Agent, Output, RunKind, RunRequest};
use crate::mcp::McpHub;
use crate::provider::catalogue;
use crate::transcript::Block;
use std::sync::Arc;

/// Options fixed at start.
#[derive(Debug, Clone)]
pub struct ZutOptions {
    /// `ZUTCORE_RPC_TOKEN`: when set, nothing but a matching hello is
    /// served until one has come.
    pub token: Option<String>,
    /// Models outside the catalogue are accepted (custom `--base-url`).
    pub allow_unknown_models: bool,
}

/// Serves zut requests for one agent.
pub struct ZutServer {
    agent: Agent,
    out: mpsc::Sender<Output>,
    options: ZutOptions,
    /// Whether a hello with the token has come (always, without a token).
    authenticated: bool,
    /// The MCP status feed, opened once authenticated.
    mcp_feed: Option<FeedGate>,
    /// The session's MCP servers (`mcp_select`).
    mcp: Option<Arc<McpHub>>,
}

impl ZutServer {
    pub fn new(agent: Agent, out: mpsc::Sender<Output>, options: ZutOptions) -> ZutServer {
        let authenticated = options.token.is_none();
        ZutServer {
            agent,
            out,
            options,
            authenticated,
            mcp_feed: None,
            mcp: None,
        }
    }

    /// Serves `mcp_select` from `hub` and opens `feed` once authenticated.
    pub fn with_mcp(mut self, hub: Arc<McpHub>, feed: FeedGate) -> ZutServer {
        if self.authenticated {
            feed.open();
        }
        self.mcp = Some(hub);
        self.mcp_feed = Some(feed);
        self
    }

    /// Handles one input line (or the framing error it produced).
    pub async fn handle_line(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow {
        let mut traceparent = None;
        let parsed: Parsed = match line {
            Ok(mut object) => {
                traceparent = trace_context::take(&mut object);
                let kind = object.get("type").and_then(Value::as_str);
                if self.authenticated && kind == Some(mcp_status::SELECT_COMMAND) {
                    self.mcp_select(&object).await;
                    return Flow::Continue;
                }
                Request::from_object(object).map_err(|e| Unreadable {
                    id: e.id,
                    command: e.command,
                    message: e.message,
                    framing: false,
                })
            }
            Err(e) => Err(Unreadable {
                id: None,
                command: None,
                message: e.to_string(),
                framing: true,
            }),
        };
        if !self.authenticated {
            return self.authenticate(parsed).await;
        }
        match parsed {
            Ok(request) => {
                let response = self.dispatch(request, traceparent);
                if let Some(response) = response {
                    self.send(&response).await;
                }
            }
            Err(line) => {
                self.send(&Response::error(
                    line.id,
                    line.command.as_deref(),
                    line.message,
                ))
                .await;
            }
        }
        Flow::Continue
    }

    async fn authenticate(&mut self, parsed: Parsed) -> Flow {
        let expected = self.options.token.as_deref().unwrap_or_default();
        match auth::judge(expected, parsed) {
            Verdict::Welcome(id) => {
                self.authenticated = true;
                if let Some(feed) = &self.mcp_feed {
                    feed.open();
                }
                let response = Response::ok(id, "hello", Some(self.hello_data()));
                self.send(&response).await;
                Flow::Continue
            }
            Verdict::Refuse(response) => {
                self.send(&response).await;
                Flow::Continue
            }
            Verdict::Reject(response) => {
                tracing::warn!("hello with a wrong token; exiting");
                self.send(&response).await;
                Flow::Exit(1)
            }
        }
    }

    /// Answers one request; `None` when the answer is queued with a run.
    fn dispatch(&mut self, request: Request, traceparent: Option<String>) -> Option<Response> {
        let Request { id, command } = request;
        let name = command.name();
        let ok = |data: Option<Value>| Some(Response::ok(id.clone(), name, data));
        let fail = |message: String| Some(Response::error(id.clone(), Some(name), message));
        match command {
            Command::Hello { .. } => ok(Some(self.hello_data())),
            Command::Ping => ok(Some(json!({"pong": true}))),
            Command::Prompt { message, images } => {
                let images = match decode_images(images.unwrap_or_default()) {
                    Ok(images) => images,
                    Err(e) => return fail(e),
                };
                let kind = RunKind::Prompt {
                    text: message,
                    images,
                };
                self.queue(id.clone(), name, kind, traceparent)
            }
            Command::Compact => self.queue(id.clone(), name, RunKind::Compact, traceparent),
            Command::Abort => {
                self.agent.abort();
                ok(None)
            }
            Command::GetState => ok(Some(self.state_data())),
            Command::GetMessages => {
                let messages: Vec<zut::Message> = self
                    .agent
                    .session()
                    .messages()
                    .iter()
                    .map(wire_message)
                    .collect();
                ok(Some(json!({ "messages": messages })))
            }
            Command::Clear => {
                if self.agent.busy() {
                    return fail(
                        "cannot clear while a prompt or compact is running; abort it first".into(),
                    );
                }
                match self.agent.session().clear() {
                    Ok(()) => ok(None),
                    Err(e) => fail(e.to_string()),
                }
            }
            Command::SetModel { model } => {
                let provider = self.agent.provider().name();
                let known = catalogue::find(provider, &model).is_some();
                if !known && !self.options.allow_unknown_models {
                    let names: Vec<&str> = catalogue::models(provider).map(|m| m.id).collect();
                    return fail(format!(
                        "unknown model {model:?} for provider {provider}; known models: {}",
                        names.join(", ")
                    ));
                }
                self.agent.session().model = model.clone();
                ok(Some(json!({ "model": model })))
            }
            Command::SetReasoning { reasoning } => {
                self.agent.session().reasoning = reasoning;
                ok(Some(json!({ "reasoning": reasoning.zut_name() })))
            }
            Command::GetModels => {
                let provider = self.agent.provider().name();
                let models: Vec<Value> = catalogue::models(provider)
                    .map(|m| {
                        json!({"id": m.id, "provider": m.provider, "context_window": m.context_window,
                               "max_output": m.max_output, "reasoning": m.reasoning})
                    })
                    .collect();
                ok(Some(json!({ "models": models })))
            }
            Command::PermissionReply { request_id, option } => {
                match self.agent.permissions().answer(&request_id, option) {
                    Ok(()) => ok(None),
                    Err(e) => fail(e.to_string()),
                }
            }
            Command::SetPermissionMode { mode } => {
                self.agent.permissions().set_mode(mode);
                ok(Some(json!({ "permission_mode": mode })))
            }
        }
    }

    /// Queues a run whose `started` response is sent when it starts.
    fn queue(
        &mut self,
        id: Option<RequestId>,
        name: &str,
        kind: RunKind,
        traceparent: Option<String>,
    ) -> Option<Response> {
        let started = Response::ok(id.clone(), name, Some(json!({"started": true})));
        let started = serde_json::to_value(&started).ok();
        let run = RunRequest {
            kind,
            started,
            discarded: None,
            traceparent,
        };
        match self.agent.submit(run) {
            Ok(()) => None,
            Err(e) => Some(Response::error(id, Some(name), e.to_string())),
        }
    }

    /// `mcp_select {servers}` (an extension): answered with every
    /// server's status as `data`.
    async fn mcp_select(&self, object: &Map<String, Value>) {
        let name = mcp_status::SELECT_COMMAND;
        let id = match RequestId::from_field(object.get("id")) {
            Ok(id) => id,
            Err(e) => return self.send(&Response::error(None, Some(name), e)).await,
        };
        let answer = match &self.mcp {
            Some(hub) => mcp_status::select(hub, object.get("servers")),
            None => Err("no MCP servers".to_string()),
        };
        let response = match answer {
            Ok(data) => Response::ok(id, name, Some(data)),
            Err(e) => Response::error(id, Some(name), e),
        };
        self.send(&response).await;
    }

    fn hello_data(&self) -> Value {
        json!({
            "protocol_version": zut::PROTOCOL_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            "provider": self.agent.provider().name(),
            "model": self.agent.session().model,
        })
    }

    fn state_data(&self) -> Value {
        let session = self.agent.session();
        json!({
            "provider": self.agent.provider().name(),
            "model": session.model,
            "cwd": self.agent.settings().cwd.to_string_lossy(),
            "message_count": session.messages().len(),
            "busy": self.agent.busy(),
            "reasoning": session.reasoning.zut_name(),
            "usage": session.usage,
            "permission_mode": self.agent.permissions().mode(),
        })
    }

    async fn send(&self, response: &Response) {
        if let Ok(frame) = serde_json::to_value(response) {
            let _ = self.out.send(Output::Frame(frame)).await;
        }
    }
}

impl Frontend for ZutServer {
    async fn handle(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow {
        self.handle_line(line).await
    }

    fn agent(&self) -> &Agent {
        &self.agent
    }

    fn agent_mut(&mut self) -> &mut Agent {
        &mut self.agent
    }

    fn output(&self) -> &mpsc::Sender<Output> {
        &self.out
    }
}

/// The `mcp_status` event (an extension) of `{"servers": [...]}`.
fn status_event(mut payload: Value) -> Value {
    payload["type"] = json!("mcp_status");
    payload
}

/// Checks prompt images: an `image/*` type and valid base64 data.
fn decode_images(images: Vec<zut::ImageInput>) -> Result<Vec<Block>, String> {
    images
        .into_iter()
        .enumerate()
        .map(|(i, image)| {
            if !image.mime_type.starts_with("image/") {
                return Err(format!(
                    "images[{i}]: mime_type {:?} is not an image type",
                    image.mime_type
                ));
            }
            base64::engine::general_purpose::STANDARD
                .decode(image.data.as_bytes())
                .map_err(|e| format!("images[{i}]: data is not valid base64: {e}"))?;
            Ok(Block::Image {
                mime_type: image.mime_type,
                data: image.data,
            })
        })
        .collect()
}

/// Whether this dialect can ask the client to approve a tool call:
/// zut asks with a `permission_request` extension event.
pub const CAN_ASK_PERMISSION: bool = true;

/// Serves zut RPC v1 on stdin/stdout; returns the exit code.
pub async fn serve_stdio(
    setup: crate::setup::Setup,
    token: Option<String>,
    transport: super::TransportOptions,
) -> u8 {
    let (out, out_rx) = mpsc::channel(super::OUTPUT_QUEUE);
    let writer = super::spawn_writer(out_rx, Box::new(ZutEncoder::default()));
    let feed = mcp_status::spawn(setup.mcp.clone(), out.clone(), status_event);
    let (agent, worker) = Agent::start(
        setup.provider,
        setup.tools,
        setup.settings,
        setup.session,
        out.clone(),
    );
    let options = ZutOptions {
        token: token.filter(|t| !t.is_empty()),
        allow_unknown_models: setup.allow_unknown_models,
    };
    let server = ZutServer::new(agent, out, options).with_mcp(setup.mcp, feed);
    super::serve(server, worker, writer, transport).await
}
