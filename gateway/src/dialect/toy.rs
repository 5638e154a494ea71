//! A dialect for tests only, to show (and check) that a dialect is one
//! type: it implements [`DialectRules`] here and is listed once in
//! [`super::Dialect`], and nothing else in the gateway knows it.
//!
//! Requests are `{"type": command, "id"?}` (a `hello` is answered by the
//! gateway); every child line with an `event` is an event (`run_start`,
//! `run_end`, anything else), every other line with a string `id` answers
//! that request. Events get `"run"` and `"seq"` on the way to clients.

use std::ffi::OsString;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::attach::{self, EndOfInput, Seen, StdinFrame};
use super::audited::{text_field, Audited};
use super::cost::ReportedCost;
use super::hub::{ChildGreeter, ClientRequests, ResponseNews};
use super::rules::{ChildAsks, DialectRules, EventFilter, Leave, OneSession};
use super::{to_bytes, Answer, ChildGreeting, Claim, ClientHello, OwnRuns};
use super::{EventKind, Inbound, Outbound};
use corral_protocol::ndjson::FrameError;

/// The toy dialect's rules.
pub struct Toy;

/// A frame `{"error": message, "id"?}`.
fn error(id: Option<&Value>, message: &str) -> Bytes {
    let mut frame = json!({ "error": message });
    if let Some(id) = id {
        frame["id"] = id.clone();
    }
    to_bytes(&frame)
}

/// `frame` with `run` (if any) and `seq` added.
fn stamped(mut frame: Map<String, Value>, seq: u64, run: Option<&str>) -> Bytes {
    if let Some(run) = run {
        frame.insert("run".into(), json!(run));
    }
    frame.insert("seq".into(), json!(seq));
    to_bytes(&Value::Object(frame))
}

impl DialectRules for Toy {
    fn name(&self) -> &'static str {
        "toy"
    }

    fn child_args(&self) -> Vec<OsString> {
        vec!["--dialect".into(), "toy".into()]
    }

    fn child_token(&self) -> bool {
        false
    }

    fn child_greeting(&self) -> ChildGreeting {
        ChildGreeting::Ready
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
        hello.get("model")?.as_str().map(str::to_string)
    }

    fn ping_line(&self, id: &str) -> String {
        format!("{}\n", json!({"type": "ping", "id": id}))
    }

    fn abort_line(&self, id: &str, _hello: &Map<String, Value>) -> String {
        format!("{}\n", json!({"type": "abort", "id": id}))
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
        if frame.get("type")? != "hello" {
            return None;
        }
        Some(Ok(ClientHello {
            id: frame.get("id").cloned(),
            token: frame
                .get("token")
                .and_then(Value::as_str)
                .map(str::to_string),
            resume_after: None,
            own_runs: OwnRuns::default(),
        }))
    }

    fn inbound(&self, frame: &Map<String, Value>, observer: bool) -> Inbound {
        let id = frame.get("id").cloned();
        match frame.get("type").and_then(Value::as_str) {
            None => Inbound::Reject(error(id.as_ref(), "missing `type`")),
            Some("hello") => Inbound::Hello {
                id,
                refusal: None,
                own_runs: OwnRuns::default(),
            },
            Some(_) if observer => Inbound::Reject(error(id.as_ref(), "observers only read")),
            Some(command) => Inbound::Forward {
                id,
                command: command.to_string(),
            },
        }
    }

    fn admit(
        &self,
        _id: Option<&Value>,
        _command: &str,
        _requests: &dyn ClientRequests,
    ) -> Result<(), Bytes> {
        Ok(())
    }

    fn command_label<'a>(&self, _command: &'a str) -> &'a str {
        "other"
    }

    /// `prompt` (its `text`) and `abort`.
    fn audited(
        &self,
        command: &str,
        frame: &Map<String, Value>,
        prompt_text: bool,
    ) -> Option<Audited> {
        Some(match command {
            "prompt" => Audited::prompt(prompt_text, || text_field(frame, "text")),
            "abort" => Audited::new(crate::audit::Action::Abort),
            _ => return None,
        })
    }

    fn put_trace_context(&self, _frame: &mut Map<String, Value>, _traceparent: String) {}

    fn outbound(&self, line: &[u8]) -> Option<Outbound> {
        let frame = super::object_line(line)?;
        if let Some(event) = frame.get("event").and_then(Value::as_str) {
            return Some(Outbound::Event(match event {
                "run_start" => EventKind::RunStart,
                "run_end" => EventKind::RunEnd,
                _ => EventKind::Other,
            }));
        }
        Some(match frame.get("id") {
            Some(Value::String(id)) => Outbound::Reply {
                id: id.clone(),
                last: true,
            },
            _ => Outbound::Drop("neither an event nor an answer"),
        })
    }

    fn restore_id(
        &self,
        line: &[u8],
        original: Option<Value>,
        _run: Option<&str>,
    ) -> Option<Bytes> {
        let mut frame = super::object_line(line)?;
        frame.insert("id".into(), original.unwrap_or(Value::Null));
        Some(to_bytes(&Value::Object(frame)))
    }

    fn event_bytes(&self, line: &[u8], seq: u64, run: Option<&str>) -> Option<Bytes> {
        Some(stamped(super::object_line(line)?, seq, run))
    }

    fn hello_after(&self, _hello: &mut Map<String, Value>, _line: &[u8]) {}

    fn response_news(&self, _command: &str, _line: &[u8]) -> ResponseNews {
        ResponseNews::default()
    }

    fn run_claim(&self, _command: &str, _frame: &Map<String, Value>) -> Claim {
        Claim::None
    }

    fn run_answer(&self, _command: &str, _line: &[u8]) -> Answer {
        Answer::Nothing
    }

    fn request_is_run(&self, _command: &str) -> bool {
        false
    }

    fn run_aborted(&self, error: &str) -> Vec<(&'static str, Value)> {
        vec![("run_end", json!({ "error": error }))]
    }

    /// `{"event":"cost","usd":N}`: a model call's cost.
    fn mcp_news(&self, _line: &[u8], _calls_open: bool) -> Option<crate::mcp::McpNews> {
        None
    }

    fn reported_cost(&self, line: &[u8]) -> Option<ReportedCost> {
        let frame = super::object_line(line)?;
        if frame.get("event")? != "cost" {
            return None;
        }
        super::cost::amount(frame.get("usd")).map(ReportedCost::Call)
    }

    fn gateway_event(&self, kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes {
        let mut frame = Map::new();
        frame.insert("event".into(), json!(kind));
        if let Value::Object(fields) = fields {
            frame.extend(fields);
        }
        stamped(frame, seq, run)
    }

    fn request_failed(
        &self,
        id: Option<&Value>,
        _command: &str,
        _acked: bool,
        message: &str,
    ) -> Bytes {
        error(id, message)
    }

    fn malformed(&self, message: &str) -> Bytes {
        error(None, message)
    }

    fn refusal(&self, id: Option<&Value>, _code: &str, message: &str) -> Bytes {
        error(id, message)
    }

    fn greeting(&self, _hello: &Map<String, Value>, _gateway: Value, _state: Value) -> Vec<Bytes> {
        Vec::new()
    }

    fn hello_answer(
        &self,
        id: Option<&Value>,
        _hello: &Map<String, Value>,
        gateway: Value,
        _gap: bool,
    ) -> Vec<Bytes> {
        vec![to_bytes(&json!({"id": id, "welcome": gateway}))]
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

    fn attach_stdin(
        &self,
        line: Result<Vec<u8>, FrameError>,
        _hello: &Value,
        _sequence: u64,
    ) -> StdinFrame {
        match attach::object(line) {
            Ok((line, frame)) => attach::forward(line, frame),
            Err(e) => StdinFrame::Answer(attach::line_of(&json!({ "error": e.to_string() }))),
        }
    }

    fn attach_hello(&self, token: &str) -> Option<String> {
        Some(json!({"type": "hello", "id": "attach", "token": token}).to_string())
    }

    fn attach_hello_answer(&self, frame: &Value) -> Option<Result<Value, String>> {
        if frame["id"] != "attach" {
            return None;
        }
        Some(match frame["error"].as_str() {
            Some(error) => Err(error.to_string()),
            None => Ok(frame["welcome"].clone()),
        })
    }

    fn attach_tracks_work(&self) -> bool {
        false
    }

    fn attach_end_of_input(&self) -> EndOfInput {
        EndOfInput::Leave
    }

    fn attach_seen(&self, _frame: &Value) -> Seen {
        Seen::Sequence(None)
    }
}
