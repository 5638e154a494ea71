//! The Agent Client Protocol v1 dialect (`corral-agent rpc --dialect
//! acp`): JSON-RPC 2.0 on stdio, one message per line, one session per
//! process.
//!
//! Client → agent: `initialize`, `session/new`, `session/load`,
//! `session/resume`, `session/close`, `session/list`, `session/prompt`
//! (also the slash commands `/compact` and `/clear`), `session/set_mode`
//! (the permission modes `auto`, `ask`, `read-only`),
//! `session/set_config_option` (`mode`, `model`, `reasoning`), the
//! notification `session/cancel`, and corral's `_corral/session/history`.
//! Agent → client: `session/update` notifications,
//! `session/request_permission` (ids `perm-N`) and, when the client offers
//! them, `fs/read_text_file` and `fs/write_text_file` (ids `fs-N`).
//!
//! The session id is fixed for the process: derived from the `--session`
//! journal's path (so a new process on the same journal loads it under
//! the same id), random without one. `session/new` starts an empty
//! conversation (the journal records the clear); `session/load` replays
//! the journal; `session/close` cancels the work and refuses the session's
//! prompts until a `session/load`, `session/resume` or `session/new`
//! opens it again. Stdin EOF aborts the run.

mod client;
mod commands;
mod config;
mod encoder;
mod history;
mod lifecycle;
mod mcp;
mod prompt;
/// Public so that fuzz targets reach the exact parser the front-end runs.
pub mod rpc;
mod run;
mod settings;
mod tool_call;

use std::path::Path;
use std::sync::Arc;

use corral_protocol::acp::{
    error_code, method, CancelParams, InitializeParams, PermissionOutcome, PromptParams,
    SessionUpdate, PROTOCOL_VERSION,
};
use corral_protocol::ndjson::FrameError;
use corral_protocol::permission::PermissionOption;
use serde_json::{json, Map, Value};
use tokio::sync::mpsc;

pub use self::encoder::AcpEncoder;
use self::encoder::{update_frame, Private};
use self::rpc::{Incoming, RpcError};
use super::mcp_status::{self, FeedGate};
use super::trace_context::{self, TraceContext};
use super::{EofPolicy, Flow, Frontend};
use crate::agent::{Agent, Output};
use crate::mcp::McpHub;

/// Serves ACP for one agent.
pub struct AcpServer {
    agent: Agent,
    out: mpsc::Sender<Output>,
    /// The one session's id.
    session_id: String,
    /// File requests waiting for the client's answer.
    outgoing: client::Outgoing,
    /// `session/close` ended the session: its prompts and settings are
    /// refused until it is opened again.
    closed: bool,
    /// The trace context of the request being handled, written on the
    /// frames it causes.
    trace: Option<TraceContext>,
    /// Frames that follow the answer of the request being handled (the
    /// commands of a session the client learns the id of in the answer).
    after: Vec<Value>,
    /// The session's MCP servers.
    mcp: Arc<McpHub>,
    /// The `_corral/mcp_status` feed, opened once `initialize` is answered.
    mcp_feed: FeedGate,
    /// `initialize` was answered.
    initialized: bool,
}

impl AcpServer {
    /// A server for `agent`; the encoder learns `session_id` from the
    /// first frame it is sent.
    pub async fn new(
        agent: Agent,
        out: mpsc::Sender<Output>,
        session_id: String,
        mcp: Arc<McpHub>,
    ) -> AcpServer {
        let private = Private::Session {
            id: session_id.clone(),
        };
        let _ = out.send(Output::Frame(private.to_frame())).await;
        let mcp_feed = mcp_status::spawn(mcp.clone(), out.clone(), mcp::status_notification);
        AcpServer {
            agent,
            out,
            session_id,
            outgoing: client::Outgoing::default(),
            closed: false,
            trace: None,
            after: Vec::new(),
            mcp,
            mcp_feed,
            initialized: false,
        }
    }

    async fn send(&self, frame: Value) {
        let _ = self.out.send(Output::Frame(frame)).await;
    }

    /// A `session/update` for this session, with the request's trace
    /// context.
    fn update(&self, update: &SessionUpdate) -> Value {
        let mut frame = update_frame(&self.session_id, update);
        if let Some(trace) = &self.trace {
            trace_context::put_in_meta(&mut frame, trace);
        }
        frame
    }

    async fn notify(&self, update: &SessionUpdate) {
        self.send(self.update(update)).await;
    }

    async fn handle_line(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow {
        match rpc::read(line) {
            Ok(Incoming::Request {
                id,
                method,
                mut params,
            }) => {
                self.trace = trace_context::take_context_from_meta(&mut params);
                let answer = self.request(&id, &method, params).await;
                match answer {
                    Ok(Some(result)) => self.send(rpc::result(&id, result)).await,
                    Ok(None) => {}
                    Err(error) => self.send(rpc::error(&id, &error)).await,
                }
                for frame in std::mem::take(&mut self.after) {
                    self.send(frame).await;
                }
                if self.initialized {
                    self.mcp_feed.open();
                }
                self.trace = None;
            }
            Ok(Incoming::Notification { method, params }) => {
                self.notification(&method, params).await
            }
            Ok(Incoming::Response { id, result }) => self.response(id, result),
            Err(bad) => self.send(rpc::error(&bad.id, &bad.error)).await,
        }
        Flow::Continue
    }

    /// Answers a request; `Ok(None)` when the answer comes later (a prompt).
    async fn request(
        &mut self,
        id: &Value,
        name: &str,
        params: Value,
    ) -> Result<Option<Value>, RpcError> {
        match name {
            method::INITIALIZE => {
                let params: InitializeParams = rpc::params(name, params)?;
                Ok(Some(self.initialize(params)))
            }
            method::SESSION_NEW => self.new_session(name, params).await.map(Some),
            method::SESSION_LOAD => self.load_session(name, params).await.map(Some),
            method::SESSION_RESUME => self.resume_session(name, params).await.map(Some),
            method::SESSION_CLOSE => self.close_session(name, params).await.map(Some),
            method::SESSION_LIST => self.list_sessions(name, params).map(Some),
            method::CORRAL_SESSION_HISTORY => self.history(name, params).map(Some),
            mcp::SELECT => self.select_mcp(name, params).map(Some),
            method::SESSION_PROMPT => {
                let params: PromptParams = rpc::params(name, params)?;
                self.check_open(&params.session_id)?;
                self.prompt(id, params).await
            }
            method::SESSION_SET_MODE => self.set_mode(name, params).await.map(Some),
            method::SESSION_SET_CONFIG_OPTION => {
                self.set_config_option(name, params).await.map(Some)
            }
            other => Err(RpcError::new(
                error_code::METHOD_NOT_FOUND,
                format!("method not found: {other}"),
            )),
        }
    }

    fn initialize(&mut self, params: InitializeParams) -> Value {
        self.initialized = true;
        let fs = params.client_capabilities.fs;
        let files = (fs.read_text_file || fs.write_text_file).then(|| {
            Arc::new(client::EditorFiles {
                out: self.out.clone(),
                outgoing: self.outgoing.clone(),
                session: self.session_id.clone(),
                offered: fs,
            }) as Arc<dyn crate::tools::ClientFiles>
        });
        self.agent.set_client_files(files);
        if params.protocol_version != u64::from(PROTOCOL_VERSION) {
            tracing::info!(
                asked = params.protocol_version,
                "the client asked for another ACP version; answering {PROTOCOL_VERSION}"
            );
        }
        json!({
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": true,
                "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
                "sessionCapabilities": {"list": {}, "resume": {}, "close": {}},
                "mcpCapabilities": {"http": true, "sse": false},
            },
            "authMethods": [],
            "agentInfo": {"name": "corral-agent", "title": "corral", "version": env!("CARGO_PKG_VERSION")},
        })
    }

    async fn notification(&mut self, name: &str, params: Value) {
        if name != method::SESSION_CANCEL {
            tracing::debug!(method = name, "ignoring an unknown notification");
            return;
        }
        match rpc::params::<CancelParams>(name, params) {
            Ok(params) if params.session_id == self.session_id && !self.closed => {
                self.cancel().await
            }
            Ok(params) => tracing::warn!(
                session = params.session_id,
                "cancel for another or a closed session"
            ),
            Err(e) => tracing::warn!(error = e.message, "unreadable session/cancel"),
        }
    }

    /// Ends the run in flight (`cancelled`) and drops the queued ones.
    async fn cancel(&self) {
        self.send(Private::Cancel.to_frame()).await;
        self.agent.discard_queued();
        self.agent.abort();
    }

    /// The client's answer to a file or permission request.
    fn response(&self, id: Value, result: Result<Value, RpcError>) {
        let Some(request) = id.as_str().map(str::to_string) else {
            tracing::warn!(%id, "an answer to no request");
            return;
        };
        if self.outgoing.settle(&id, result.clone()) {
            return;
        }
        let permissions = self.agent.permissions();
        let settled = match permission_answer(result) {
            Ok(Some(option)) => permissions.answer(&request, option),
            Ok(None) => permissions.cancel(&request),
            Err(e) => {
                tracing::warn!(
                    request,
                    error = e,
                    "unusable permission answer; cancelling it"
                );
                permissions.cancel(&request)
            }
        };
        if let Err(e) = settled {
            tracing::debug!(error = %e, "a late or unknown answer");
        }
    }

    fn check_session(&self, id: &str) -> Result<(), RpcError> {
        if id == self.session_id {
            return Ok(());
        }
        Err(RpcError::new(
            error_code::RESOURCE_NOT_FOUND,
            format!(
                "session {id:?} not found; this agent serves one session, {:?}",
                self.session_id
            ),
        ))
    }

    /// The session is this one and not closed.
    fn check_open(&self, id: &str) -> Result<(), RpcError> {
        self.check_session(id)?;
        if self.closed {
            return Err(RpcError::new(
                error_code::RESOURCE_NOT_FOUND,
                format!("session {id:?} is closed; load or resume it first"),
            ));
        }
        Ok(())
    }

    /// The agent works in its own `--cwd`; another one is noted, not used
    /// (through a gateway the editor's path is never the agent's).
    fn check_cwd(&self, cwd: &str) {
        let own = &self.agent.settings().cwd;
        if Path::new(cwd).canonicalize().ok().as_ref() != Some(own) {
            tracing::info!(asked = cwd, serving = %own.display(), "the session works in the agent's --cwd");
        }
    }

    fn idle_for(&self, name: &str) -> Result<(), RpcError> {
        if self.agent.idle() {
            return Ok(());
        }
        Err(RpcError::internal(format!(
            "{name}: a prompt is running; cancel it first"
        )))
    }
}

/// The option a `session/request_permission` answer selected; `None` for
/// `cancelled`.
fn permission_answer(result: Result<Value, RpcError>) -> Result<Option<PermissionOption>, String> {
    let result = result.map_err(|e| e.message)?;
    let outcome = result.get("outcome").cloned().unwrap_or(Value::Null);
    match serde_json::from_value(outcome).map_err(|e| e.to_string())? {
        PermissionOutcome::Cancelled => Ok(None),
        PermissionOutcome::Selected { option_id } => option_id.parse().map(Some),
    }
}

/// The session id: from the journal's path (stable across processes on
/// the same journal), else unique to this process.
pub fn session_id(journal: Option<&Path>) -> String {
    let seed = match journal {
        Some(path) => path.to_string_lossy().into_owned(),
        None => format!(
            "{}-{}",
            std::process::id(),
            time::OffsetDateTime::now_utc().unix_timestamp_nanos()
        ),
    };
    // FNV-1a: short, stable, and no path shown to clients.
    let hash = seed.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("corral-{hash:016x}")
}

impl Frontend for AcpServer {
    async fn handle(&mut self, line: Result<Map<String, Value>, FrameError>) -> Flow {
        self.handle_line(line).await
    }

    fn agent(&self) -> &Agent {
        &self.agent
    }

    fn agent_mut(&mut self) -> &mut Agent {
        &mut self.agent
    }

    /// The client is gone: nobody would see the rest, or answer a request.
    fn eof_policy(&self) -> EofPolicy {
        EofPolicy::Abort
    }

    fn output(&self) -> &mpsc::Sender<Output> {
        &self.out
    }
}

/// Whether this dialect can ask the client to approve a tool call:
/// ACP asks with `session/request_permission`.
pub const CAN_ASK_PERMISSION: bool = true;

/// Serves ACP on stdin/stdout; returns the exit code.
pub async fn serve_stdio(setup: crate::setup::Setup, transport: super::TransportOptions) -> u8 {
    let (out, out_rx) = mpsc::channel(super::OUTPUT_QUEUE);
    let encoder = AcpEncoder::new(setup.settings.cwd.clone());
    let writer = super::spawn_writer(out_rx, Box::new(encoder));
    let id = session_id(setup.session.journal_path());
    let (agent, worker) = Agent::start(
        setup.provider,
        setup.tools,
        setup.settings,
        setup.session,
        out.clone(),
    );
    let server = AcpServer::new(agent, out, id, setup.mcp).await;
    super::serve(server, worker, writer, transport).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_follow_the_journal() {
        let a = session_id(Some(Path::new("/state/sessions/alpha.jsonl")));
        assert_eq!(
            a,
            session_id(Some(Path::new("/state/sessions/alpha.jsonl")))
        );
        assert_ne!(a, session_id(Some(Path::new("/state/sessions/beta.jsonl"))));
        assert!(a.starts_with("corral-") && !a.contains("alpha"));
        assert_ne!(session_id(None), a);
    }

    #[test]
    fn permission_answers_read_as_the_sdk_sends_them() {
        let selected = json!({"outcome": {"outcome": "selected", "optionId": "reject_always"}});
        assert_eq!(
            permission_answer(Ok(selected)),
            Ok(Some(PermissionOption::RejectAlways))
        );
        assert_eq!(
            permission_answer(Ok(json!({"outcome": {"outcome": "cancelled"}}))),
            Ok(None)
        );
        assert!(permission_answer(Ok(
            json!({"outcome": {"outcome": "selected", "optionId": "maybe"}})
        ))
        .is_err());
        assert!(permission_answer(Ok(json!({}))).is_err());
        assert!(permission_answer(Err(RpcError::internal("x"))).is_err());
    }
}
