//! zut RPC v1's [`DialectRules`]: the frames of the parent module put
//! together, plus what `corral attach` answers itself for a zut tool (a
//! `hello`, and a line that is not a JSON object).

use std::ffi::OsString;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::*;
use crate::audit::Action;
use crate::dialect::attach::{self, EndOfInput, Seen, StdinFrame, HELLO_ID};
use crate::dialect::audited::{text_field, Audited};
use crate::dialect::cost::ReportedCost;
use crate::dialect::hub::{ChildGreeter, ClientRequests, ResponseNews};
use crate::dialect::rules::{ChildAsks, DialectRules, EventFilter, Leave, OneSession};
use crate::dialect::ChildGreeting;
use corral_protocol::ndjson::FrameError;

/// The answer to a zut-shaped hello (`{"type":"response","command":"hello"}`),
/// when `frame` is one.
pub(in crate::dialect) fn attach_hello_answer(frame: &Value) -> Option<Result<Value, String>> {
    let is_answer =
        frame["type"] == "response" && (frame["id"] == HELLO_ID || frame["command"] == "hello");
    if !is_answer {
        return None;
    }
    if frame["success"] == true {
        return Some(Ok(frame.get("data").cloned().unwrap_or_else(|| json!({}))));
    }
    let error = frame["error"].as_str().unwrap_or("no reason given");
    Some(Err(error.to_string()))
}

/// Sorts one zut line read from stdin (or the framing error it produced).
/// `hello` is the `data` of the gateway's hello response.
fn attach_classify(line: Result<Vec<u8>, FrameError>, hello: &Value) -> StdinFrame {
    let (line, frame) = match attach::object(line) {
        Ok(parsed) => parsed,
        Err(error) => {
            return StdinFrame::Answer(attach_response(None, None, Err(error.to_string())))
        }
    };
    if frame.get("type").and_then(Value::as_str) == Some("hello") {
        let answer = attach_response(frame.get("id"), Some("hello"), Ok(hello));
        return StdinFrame::Answer(answer);
    }
    attach::forward(line, frame)
}

/// A zut `response` line made up locally, with the tool's `id` echoed as
/// given.
fn attach_response(
    id: Option<&Value>,
    command: Option<&str>,
    result: Result<&Value, String>,
) -> Vec<u8> {
    let id = id.filter(|id| !id.is_null());
    let mut line = response(id, command, result.map(|data| Some(data.clone()))).to_vec();
    line.push(b'\n');
    line
}

/// zut RPC v1's rules.
pub struct Zut;

impl DialectRules for Zut {
    fn name(&self) -> &'static str {
        "zut"
    }

    fn child_args(&self) -> Vec<OsString> {
        Vec::new()
    }

    fn child_token(&self) -> bool {
        true
    }

    fn child_greeting(&self) -> ChildGreeting {
        ChildGreeting::TokenHello
    }

    fn greeter(&self, _cwd: &str, _kept: Option<String>) -> Option<Box<dyn ChildGreeter>> {
        None
    }

    fn check_ready(&self, _ready: &Map<String, Value>) -> Result<(), String> {
        Ok(())
    }

    fn runs_third_party_agents(&self) -> bool {
        false
    }

    fn model_of(&self, hello: &Map<String, Value>) -> Option<String> {
        crate::dialect::model_field(hello).map(str::to_string)
    }

    fn ping_line(&self, id: &str) -> String {
        format!("{}\n", json!({"id": id, "type": "ping"}))
    }

    fn abort_line(&self, id: &str, _hello: &Map<String, Value>) -> String {
        format!("{}\n", json!({"id": id, "type": "abort"}))
    }

    fn state_request(&self, _id: &str) -> Option<String> {
        None
    }

    fn hello_shape(&self) -> &'static str {
        r#"{"type":"hello","token":…}"#
    }

    fn greets_first(&self) -> bool {
        false
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

    /// `prompt` (its `message`), `abort`, `clear`, `compact`,
    /// `set_permission_mode` (its `mode`) and `permission_reply` (its
    /// `option`).
    fn audited(
        &self,
        command: &str,
        frame: &Map<String, Value>,
        prompt_text: bool,
    ) -> Option<Audited> {
        Some(match command {
            "prompt" => Audited::prompt(prompt_text, || text_field(frame, "message")),
            "abort" => Audited::new(Action::Abort),
            "clear" => Audited::new(Action::Clear),
            "compact" => Audited::new(Action::Compact),
            "set_permission_mode" => {
                Audited::new(Action::ModeChange).detail("mode", frame.get("mode"))
            }
            "permission_reply" => {
                Audited::new(Action::PermissionAnswered).detail("option", frame.get("option"))
            }
            _ => return None,
        })
    }

    fn put_trace_context(&self, frame: &mut Map<String, Value>, traceparent: String) {
        let field = corral_telemetry::TRACEPARENT.to_string();
        frame.insert(field, Value::String(traceparent));
    }

    fn outbound(&self, line: &[u8]) -> Option<Outbound> {
        outbound(line)
    }

    fn restore_id(&self, line: &[u8], original: Option<Value>, run: Option<&str>) -> Option<Bytes> {
        let mut frame = crate::dialect::object_line(line)?;
        if let Some(run) = run {
            name_run(&mut frame, run);
        }
        match original {
            Some(id) => frame.insert("id".into(), id),
            None => frame.shift_remove("id"),
        };
        Some(to_bytes(&Value::Object(frame)))
    }

    fn event_bytes(&self, line: &[u8], seq: u64, run: Option<&str>) -> Option<Bytes> {
        stamp(line, seq, run.map(|run| (RUN_FIELD, run)))
    }

    fn hello_after(&self, _hello: &mut Map<String, Value>, _line: &[u8]) {}

    /// A `prompt`/`compact` that started a run (zut has no start event),
    /// the model after `set_model`.
    fn response_news(&self, command: &str, line: &[u8]) -> ResponseNews {
        let mut news = ResponseNews::default();
        let Ok(response) = serde_json::from_slice::<Value>(line) else {
            return news;
        };
        if response.get("success") != Some(&Value::Bool(true)) {
            return news;
        }
        let data = response.get("data");
        let started = data.and_then(|d| d.get("started")) == Some(&Value::Bool(true));
        news.run_started = started && matches!(command, "prompt" | "compact");
        if command == "set_model" {
            news.model = data
                .and_then(|d| d.get("model"))
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        news
    }

    fn run_claim(&self, command: &str, _frame: &Map<String, Value>) -> Claim {
        run_claim(command)
    }

    fn run_answer(&self, command: &str, line: &[u8]) -> Answer {
        run_answer(command, line)
    }

    fn request_is_run(&self, _command: &str) -> bool {
        false
    }

    fn run_aborted(&self, error: &str) -> Vec<(&'static str, Value)> {
        run_aborted(error)
    }

    fn reported_cost(&self, line: &[u8]) -> Option<ReportedCost> {
        reported_cost(line)
    }

    /// `mcp_status`, `tool_execution_started {id, name}`, `tool_result
    /// {id, is_error}`.
    fn mcp_news(&self, line: &[u8], calls_open: bool) -> Option<crate::mcp::McpNews> {
        use crate::dialect::mcp_news::{may_be_news, of_event, ToolFields};
        const FIELDS: ToolFields = ToolFields {
            start: "tool_execution_started",
            end: "tool_result",
            id: "id",
            name: "name",
            failed: "is_error",
        };
        if !may_be_news(line, FIELDS.end, calls_open) {
            return None;
        }
        of_event(&serde_json::from_slice(line).ok()?, &FIELDS)
    }

    fn gateway_event(&self, kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes {
        event(kind, fields, seq, run)
    }

    fn request_failed(
        &self,
        id: Option<&Value>,
        command: &str,
        _acked: bool,
        error: &str,
    ) -> Bytes {
        response(id, Some(command), Err(error.to_string()))
    }

    fn malformed(&self, error: &str) -> Bytes {
        response(None, None, Err(error.to_string()))
    }

    fn refusal(&self, id: Option<&Value>, _code: &str, error: &str) -> Bytes {
        response(id, Some("hello"), Err(error.to_string()))
    }

    fn greeting(&self, _hello: &Map<String, Value>, _gateway: Value, _state: Value) -> Vec<Bytes> {
        Vec::new()
    }

    /// The child's own `hello` data plus `gateway` (and `gap` when replay
    /// cannot be complete).
    fn hello_answer(
        &self,
        id: Option<&Value>,
        hello: &Map<String, Value>,
        gateway: Value,
        gap: bool,
    ) -> Vec<Bytes> {
        let mut data = hello.clone();
        data.insert("gateway".into(), gateway);
        if gap {
            data.insert("gap".into(), Value::Bool(true));
        }
        vec![response(id, Some("hello"), Ok(Some(Value::Object(data))))]
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

    fn one_session(&self) -> Option<&dyn OneSession> {
        None
    }

    fn child_asks(&self) -> Option<&dyn ChildAsks> {
        None
    }

    /// A `hello` is answered with the gateway's hello data (the session is
    /// already authenticated); a line that is not a JSON object gets an
    /// error response, as the agent would send.
    fn attach_stdin(
        &self,
        line: Result<Vec<u8>, FrameError>,
        hello: &Value,
        _sequence: u64,
    ) -> StdinFrame {
        attach_classify(line, hello)
    }

    fn attach_hello(&self, token: &str) -> Option<String> {
        Some(json!({"id": HELLO_ID, "type": "hello", "token": token}).to_string())
    }

    fn attach_hello_answer(&self, frame: &Value) -> Option<Result<Value, String>> {
        attach_hello_answer(frame)
    }

    fn attach_tracks_work(&self) -> bool {
        true
    }

    fn attach_end_of_input(&self) -> EndOfInput {
        EndOfInput::DrainInFlight
    }

    fn attach_seen(&self, _frame: &Value) -> Seen {
        Seen::Track
    }
}
