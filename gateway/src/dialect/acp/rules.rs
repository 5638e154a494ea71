//! The Agent Client Protocol's [`DialectRules`]: the messages of the
//! parent module put together, plus what only ACP has: the gateway's own
//! greeting of the child ([`Greeter`]), the project's one session
//! ([`OneSession`]), and the agent's requests for its clients
//! ([`ChildAsks`]). It is also the dialect third-party agents speak.

use std::ffi::OsString;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::*;
use crate::audit::Action;
use crate::dialect::attach::{self, EndOfInput, Seen, StdinFrame, HELLO_ID};
use crate::dialect::audited::Audited;
use crate::dialect::cost::ReportedCost;
use crate::dialect::hub::{ChildGreeter, ClientRequests, ResponseNews};
use crate::dialect::rules::{
    ChildAsks, DialectRules, EventFilter, HistoryPage, Leave, ListedSession, OneSession,
};
use crate::dialect::{Answer, ChildGreeting, Claim, Open};
use corral_protocol::ndjson::FrameError;
use mcp::mcp_news;

/// The Agent Client Protocol's rules.
pub struct Acp;

/// The text of a prompt's `text` content blocks, one per line (images,
/// resources and links are not text a person typed).
fn prompt_of(blocks: Option<&Value>) -> Option<String> {
    let blocks = blocks?.as_array()?;
    let texts: Vec<&str> = blocks
        .iter()
        .filter(|block| block.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|block| block.get("text").and_then(Value::as_str))
        .collect();
    Some(texts.join("\n"))
}

impl DialectRules for Acp {
    fn name(&self) -> &'static str {
        "acp"
    }

    fn child_args(&self) -> Vec<OsString> {
        vec!["--dialect".into(), "acp".into()]
    }

    fn child_token(&self) -> bool {
        false
    }

    fn child_greeting(&self) -> ChildGreeting {
        ChildGreeting::Requests
    }

    fn greeter(&self, cwd: &str, kept: Option<String>) -> Option<Box<dyn ChildGreeter>> {
        Some(Box::new(Greeter::new(cwd, kept)))
    }

    fn check_ready(&self, _ready: &Map<String, Value>) -> Result<(), String> {
        Ok(())
    }

    fn runs_third_party_agents(&self) -> bool {
        true
    }

    fn model_of(&self, hello: &Map<String, Value>) -> Option<String> {
        crate::dialect::model_field(hello).map(str::to_string)
    }

    fn ping_line(&self, id: &str) -> String {
        ping_line(id)
    }

    /// The `session/cancel` notification of the child's session.
    fn abort_line(&self, _id: &str, hello: &Map<String, Value>) -> String {
        cancel_line(hello)
    }

    fn state_request(&self, _id: &str) -> Option<String> {
        None
    }

    fn hello_shape(&self) -> &'static str {
        r#"{"jsonrpc":"2.0","id":…,"method":"initialize","params":{"_meta":{"corral":{"token":…}},…}}"#
    }

    fn greets_first(&self) -> bool {
        true
    }

    fn client_hello(&self, frame: &Map<String, Value>) -> Option<Result<ClientHello, String>> {
        client_hello(frame)
    }

    fn inbound(&self, frame: &Map<String, Value>, observer: bool) -> Inbound {
        inbound(frame, observer)
    }

    fn admit(
        &self,
        _id: Option<&Value>,
        _command: &str,
        _requests: &dyn ClientRequests,
    ) -> Result<(), Bytes> {
        Ok(())
    }

    fn command_label<'a>(&self, command: &'a str) -> &'a str {
        crate::dialect::known_command_label(command)
    }

    /// `session/prompt` (the text of its text blocks), `session/cancel`
    /// (an abort), `session/set_mode` (its `modeId`), and a client's
    /// answer to `session/request_permission` (the option it selected,
    /// or its outcome).
    fn audited(
        &self,
        command: &str,
        frame: &Map<String, Value>,
        prompt_text: bool,
    ) -> Option<Audited> {
        let params = frame.get("params");
        Some(match command {
            method::SESSION_PROMPT => Audited::prompt(prompt_text, || {
                params.and_then(|p| prompt_of(p.get("prompt")))
            }),
            method::SESSION_CANCEL => Audited::new(Action::Abort),
            method::SESSION_SET_MODE => Audited::new(Action::ModeChange)
                .detail("mode", params.and_then(|p| p.get("modeId"))),
            method::SESSION_REQUEST_PERMISSION => {
                // The option selected, else the outcome (`cancelled`), else
                // `error` for a JSON-RPC error.
                let outcome = outcome_of(frame);
                let option = match outcome.get("optionId").or_else(|| outcome.get("outcome")) {
                    Some(option) => option.clone(),
                    None => json!("error"),
                };
                Audited::new(Action::PermissionAnswered).detail("option", Some(&option))
            }
            _ => return None,
        })
    }

    /// In `params._meta`.
    fn put_trace_context(&self, frame: &mut Map<String, Value>, traceparent: String) {
        let field = corral_telemetry::TRACEPARENT.to_string();
        let meta = frame
            .get_mut("params")
            .and_then(Value::as_object_mut)
            .map(|params| {
                params
                    .entry("_meta")
                    .or_insert_with(|| Value::Object(Map::new()))
            })
            .and_then(Value::as_object_mut);
        if let Some(meta) = meta {
            meta.insert(field, Value::String(traceparent));
        }
    }

    fn outbound(&self, line: &[u8]) -> Option<Outbound> {
        outbound(line)
    }

    /// ACP answers name no run (a prompt is its own run).
    fn restore_id(
        &self,
        line: &[u8],
        original: Option<Value>,
        _run: Option<&str>,
    ) -> Option<Bytes> {
        let mut frame = crate::dialect::object_line(line)?;
        frame.insert("id".into(), original.unwrap_or(Value::Null));
        Some(to_bytes(&Value::Object(frame)))
    }

    fn event_bytes(&self, line: &[u8], seq: u64, _run: Option<&str>) -> Option<Bytes> {
        event_bytes(line, seq)
    }

    /// The session's mode and config options after a
    /// `current_mode_update` or `config_option_update`, so a client that
    /// joins later is told what is in force.
    fn hello_after(&self, hello: &mut Map<String, Value>, line: &[u8]) {
        session::follow_update(hello, line);
    }

    fn response_news(&self, _command: &str, _line: &[u8]) -> ResponseNews {
        ResponseNews::default()
    }

    fn run_claim(&self, _command: &str, _frame: &Map<String, Value>) -> Claim {
        Claim::None
    }

    fn run_answer(&self, _command: &str, _line: &[u8]) -> Answer {
        Answer::Nothing
    }

    /// `session/prompt` keeps the project busy until its answer.
    fn request_is_run(&self, command: &str) -> bool {
        is_run(command)
    }

    fn run_aborted(&self, error: &str) -> Vec<(&'static str, Value)> {
        vec![("error", json!({ "message": error }))]
    }

    fn reported_cost(&self, line: &[u8]) -> Option<ReportedCost> {
        reported_cost(line)
    }

    /// `_corral/mcp_status`, and a `session/update`'s `tool_call` (its
    /// title is the tool's name for MCP tools) and `tool_call_update`.
    fn mcp_news(&self, line: &[u8], calls_open: bool) -> Option<crate::mcp::McpNews> {
        mcp_news(line, calls_open)
    }

    fn gateway_event(&self, kind: &str, fields: Value, seq: u64, _run: Option<&str>) -> Bytes {
        gateway_event(kind, fields, seq)
    }

    fn request_failed(
        &self,
        id: Option<&Value>,
        _command: &str,
        _acked: bool,
        error: &str,
    ) -> Bytes {
        self::error(id, error_code::INTERNAL_ERROR, error)
    }

    fn malformed(&self, error: &str) -> Bytes {
        self::error(None, error_code::PARSE_ERROR, error)
    }

    fn refusal(&self, id: Option<&Value>, _code: &str, error: &str) -> Bytes {
        self::error(id, -32000, error)
    }

    fn greeting(&self, _hello: &Map<String, Value>, _gateway: Value, _state: Value) -> Vec<Bytes> {
        Vec::new()
    }

    fn hello_answer(
        &self,
        id: Option<&Value>,
        hello: &Map<String, Value>,
        gateway: Value,
        _gap: bool,
    ) -> Vec<Bytes> {
        vec![session::initialize_answer(id, hello, gateway)]
    }

    fn sequenced(&self) -> bool {
        false
    }

    fn stamp(&self, frame: &[u8], _sequence: u64) -> Bytes {
        Bytes::copy_from_slice(frame)
    }

    fn leave(&self) -> Option<&dyn Leave> {
        None
    }

    fn event_filter(&self) -> Option<&dyn EventFilter> {
        None
    }

    /// `session/new`, `session/load`.
    fn one_session(&self) -> Option<&dyn OneSession> {
        Some(self)
    }

    /// `session/request_permission`.
    fn child_asks(&self) -> Option<&dyn ChildAsks> {
        Some(self)
    }

    /// A line that is not a JSON object gets a JSON-RPC parse error.
    fn attach_stdin(
        &self,
        line: Result<Vec<u8>, FrameError>,
        _hello: &Value,
        _sequence: u64,
    ) -> StdinFrame {
        match attach::object(line) {
            Ok((line, frame)) => attach::forward(line, frame),
            Err(error) => {
                let mut answer =
                    self::error(None, error_code::PARSE_ERROR, &error.to_string()).to_vec();
                answer.push(b'\n');
                StdinFrame::Answer(answer)
            }
        }
    }

    /// Its own `initialize` (token in `_meta.corral`), whose answer it
    /// consumes; the editor's `initialize` then goes to the gateway like
    /// any request.
    fn attach_hello(&self, token: &str) -> Option<String> {
        let hello = json!({"jsonrpc": "2.0", "id": HELLO_ID, "method": "initialize",
            "params": {"protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {}, "_meta": {"corral": {"token": token}}}});
        Some(hello.to_string())
    }

    fn attach_hello_answer(&self, frame: &Value) -> Option<Result<Value, String>> {
        if frame["id"] != HELLO_ID {
            return None;
        }
        Some(match frame.get("result") {
            Some(result) => Ok(result.clone()),
            None => Err(frame["error"]["message"]
                .as_str()
                .unwrap_or("no reason given")
                .to_string()),
        })
    }

    fn attach_tracks_work(&self) -> bool {
        false
    }

    /// Close at once (the editor is gone).
    fn attach_end_of_input(&self) -> EndOfInput {
        EndOfInput::Leave
    }

    fn attach_seen(&self, _frame: &Value) -> Seen {
        Seen::Sequence(None)
    }
}

impl OneSession for Acp {
    fn kept(&self, hello: &Map<String, Value>) -> Option<String> {
        hello
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_string)
    }

    fn names_session(&self, hello: &Map<String, Value>, project: &str, asked: &str) -> bool {
        session::names_session(hello, project, asked)
    }

    fn opened(&self, id: &Value, hello: &Map<String, Value>, open: Open, meta: Value) -> Bytes {
        session::opened(id, hello, open, meta)
    }

    fn unknown(&self, id: &Value, hello: &Map<String, Value>, asked: Option<&str>) -> Bytes {
        session::unknown(id, hello, asked)
    }

    fn closed(&self, id: &Value) -> Bytes {
        result(Some(id), json!({}))
    }

    fn history_request(
        &self,
        hello: &Map<String, Value>,
        gid: &str,
        cursor: Option<&str>,
    ) -> String {
        session::history_request(hello, gid, cursor)
    }

    fn history_page(&self, line: &[u8]) -> HistoryPage {
        session::history_page(line)
    }

    fn listed(&self, id: &Value, sessions: &[ListedSession], next: Option<&str>) -> Bytes {
        session::listed(id, sessions, next)
    }

    fn reset(&self, hello: &Map<String, Value>) -> Map<String, Value> {
        session::reset(hello)
    }

    fn reset_done(&self, hello: &mut Map<String, Value>, line: &[u8]) -> bool {
        session::reset_done(hello, line)
    }

    fn mcp_select(&self, gid: &str, servers: &[String]) -> String {
        mcp::select_line(gid, servers)
    }

    fn mcp_selected(&self, line: &[u8]) -> Result<Vec<Value>, String> {
        mcp::select_answer(line)
    }

    fn honour_mcp(&self, hello: &mut Map<String, Value>, http: bool) {
        mcp::honour_capabilities(hello, http)
    }
}

impl ChildAsks for Acp {
    fn for_clients(&self, line: &[u8], gid: &str) -> Option<Bytes> {
        ask_for_clients(line, gid)
    }

    fn answer_for_child(&self, frame: &Map<String, Value>, child_id: &Value) -> String {
        answer_for_child(frame, child_id)
    }

    fn outcome(&self, frame: &Map<String, Value>) -> Value {
        outcome_of(frame)
    }

    fn no_outcome(&self) -> Value {
        json!({"outcome": "cancelled"})
    }

    fn resolved(&self, gid: &str, outcome: &Value) -> Vec<Bytes> {
        ask_resolved(gid, outcome)
    }

    fn unanswered(&self, child_id: &Value, method: &str) -> String {
        ask_unanswered(child_id, method)
    }
}

impl ChildGreeter for Greeter {
    fn start(&self) -> String {
        Greeter::start(self)
    }

    fn is_answer(&self, frame: &Map<String, Value>) -> bool {
        Greeter::is_answer(frame)
    }

    fn answer(&mut self, frame: &Map<String, Value>) -> Result<Greeting, String> {
        Greeter::answer(self, frame)
    }
}
