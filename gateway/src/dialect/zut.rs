//! zut RPC v1: `{"id"?, "type": command, …}` requests, `type:"response"`
//! answers, and every other `type` an event. The gateway reads only the
//! envelope (`type`, `id`) and leaves every other byte of an event as the
//! child wrote it, adding `"seq"` last.
//!
//! Own runs: a hello may carry `own_runs` and `client_id`; every event of
//! a run carries `run_id` (before `seq`), and a `prompt`/`compact`
//! response with `started:true` names it in `data.run_id`.

use std::ffi::OsString;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::attach::{EndOfInput, Seen, StdinFrame, HELLO_ID};
use super::hub::{ChildGreeter, ClientRequests, ResponseNews};
use super::rules::{ChildAsks, DialectRules, EventFilter, Leave, OneSession};
use super::{to_bytes, trim, Answer, ChildGreeting, Claim, ClientHello, OwnRuns};
use super::{EventKind, Inbound, Outbound};
use corral_protocol::ndjson::FrameError;

/// The run id field of events (and of a response's `data`).
pub const RUN_FIELD: &str = "run_id";

/// Commands an observer may send.
pub const OBSERVER_COMMANDS: [&str; 5] =
    ["hello", "get_state", "get_messages", "get_models", "ping"];

pub fn client_hello(frame: &Map<String, Value>) -> Option<Result<ClientHello, String>> {
    if frame.get("type").and_then(Value::as_str) != Some("hello") {
        return None;
    }
    Some(hello_fields(frame.get("id").cloned(), frame))
}

/// The token and resume point of a hello-like object (`token`,
/// `resume_after`).
pub(super) fn hello_fields(
    id: Option<Value>,
    fields: &Map<String, Value>,
) -> Result<ClientHello, String> {
    Ok(ClientHello {
        id,
        token: super::token_field(fields.get("token"))?,
        resume_after: super::resume_field(fields.get("resume_after"), "resume_after")?,
        own_runs: own_runs(fields)?,
    })
}

/// `own_runs` and `client_id` (zut and letscode spell them alike).
pub(super) fn own_runs(fields: &Map<String, Value>) -> Result<OwnRuns, String> {
    OwnRuns::read(fields, "own_runs", "client_id")
}

pub fn inbound(frame: &Map<String, Value>, observer: bool) -> Inbound {
    let id = frame.get("id").cloned();
    let Some(Value::String(command)) = frame.get("type") else {
        return Inbound::Reject(response(
            id.as_ref(),
            None,
            Err("missing field `type`".into()),
        ));
    };
    if observer && !OBSERVER_COMMANDS.contains(&command.as_str()) {
        let error = format!(
            "the observer role may not send `{command}`; observers may send {}",
            OBSERVER_COMMANDS[1..].join(", ")
        );
        return Inbound::Reject(response(id.as_ref(), Some(command), Err(error)));
    }
    if command == "hello" {
        return match own_runs(frame) {
            Ok(own_runs) => Inbound::Hello {
                id,
                refusal: None,
                own_runs,
            },
            Err(error) => Inbound::Reject(response(id.as_ref(), Some(command), Err(error))),
        };
    }
    Inbound::Forward {
        id,
        command: command.clone(),
    }
}

pub fn outbound(line: &[u8]) -> Option<Outbound> {
    match super::leading_type(line) {
        Some("response") | None => {}
        Some(kind) => return Some(Outbound::Event(event_kind(kind))),
    }
    let envelope = super::envelope(line)?;
    Some(match envelope.kind?.as_str() {
        "response" => match envelope.id {
            Some(Value::String(id)) => Outbound::Reply { id, last: true },
            _ => Outbound::Drop("a response without a gateway id"),
        },
        kind => Outbound::Event(event_kind(kind)),
    })
}

fn event_kind(kind: &str) -> EventKind {
    match kind {
        "done" => EventKind::RunEnd,
        "usage" => EventKind::Usage,
        _ => EventKind::Other,
    }
}

/// The end of a run the child can no longer finish, as the child ends a
/// failed run: `turn_end {stop:"error"}`, then `error`, then `done`.
pub fn run_aborted(error: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("turn_end", json!({"stop": "error", "error": error})),
        ("error", json!({"message": error})),
        ("done", json!({})),
    ]
}

/// Adds `"seq":N` as the last field of a JSON object line, leaving every
/// other byte as the child wrote it.
pub fn stamp_seq(line: &[u8], seq: u64) -> Option<Bytes> {
    stamp(line, seq, None)
}

/// [`stamp_seq`], with `"key":"run"` just before `seq` when `run` is
/// `Some((key, run))`.
pub fn stamp(line: &[u8], seq: u64, run: Option<(&str, &str)>) -> Option<Bytes> {
    let trimmed = trim(line);
    if trimmed.len() < 2 || trimmed[0] != b'{' || trimmed[trimmed.len() - 1] != b'}' {
        return None;
    }
    let body = &trimmed[..trimmed.len() - 1];
    let empty = body[1..].iter().all(u8::is_ascii_whitespace);
    let mut out = Vec::with_capacity(trimmed.len() + 24);
    out.extend_from_slice(body);
    if !empty {
        out.push(b',');
    }
    if let Some((key, run)) = run {
        out.extend_from_slice(&super::runs::field(key, run));
    }
    out.extend_from_slice(b"\"seq\":");
    out.extend_from_slice(seq.to_string().as_bytes());
    out.push(b'}');
    Some(Bytes::from(out))
}

/// A `response` frame the gateway answers itself.
pub fn response(
    id: Option<&Value>,
    command: Option<&str>,
    result: Result<Option<Value>, String>,
) -> Bytes {
    let mut map = Map::new();
    map.insert("type".into(), json!("response"));
    if let Some(id) = id {
        map.insert("id".into(), id.clone());
    }
    if let Some(command) = command {
        map.insert("command".into(), json!(command));
    }
    match result {
        Ok(data) => {
            map.insert("success".into(), json!(true));
            if let Some(data) = data {
                map.insert("data".into(), data);
            }
        }
        Err(error) => {
            map.insert("success".into(), json!(false));
            map.insert("error".into(), json!(error));
        }
    }
    to_bytes(&Value::Object(map))
}

/// A gateway event (`child_started`, `turn_end`, ...) with its `seq` and
/// the run it belongs to.
pub fn event(kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes {
    let mut map = Map::new();
    map.insert("type".into(), json!(kind));
    if let Value::Object(fields) = fields {
        map.extend(fields);
    }
    if let Some(run) = run {
        map.insert(RUN_FIELD.into(), json!(run));
    }
    map.insert("seq".into(), json!(seq));
    to_bytes(&Value::Object(map))
}

/// `prompt` and `compact` start runs.
pub fn run_claim(command: &str) -> Claim {
    match command {
        "prompt" | "compact" => Claim::May,
        _ => Claim::None,
    }
}

/// A run starts with its `started:true` response; a failed one starts
/// none.
pub fn run_answer(command: &str, line: &[u8]) -> Answer {
    if run_claim(command) == Claim::None {
        return Answer::Nothing;
    }
    let Some(frame) = super::runs::object(line) else {
        return Answer::Nothing;
    };
    let started = frame.get("data").and_then(|d| d.get("started")) == Some(&Value::Bool(true));
    match frame.get("success") {
        Some(Value::Bool(true)) if started => Answer::Now,
        Some(Value::Bool(false)) => Answer::NoRun,
        _ => Answer::Nothing,
    }
}

/// `data.run_id` in the response that started a run.
pub fn name_run(frame: &mut Map<String, Value>, run: &str) {
    if let Some(Value::Object(data)) = frame.get_mut("data") {
        data.insert(RUN_FIELD.into(), json!(run));
    }
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
        super::model_field(hello).map(str::to_string)
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
        super::known_command_label(command)
    }

    fn put_trace_context(&self, frame: &mut Map<String, Value>, traceparent: String) {
        let field = corral_telemetry::TRACEPARENT.to_string();
        frame.insert(field, Value::String(traceparent));
    }

    fn outbound(&self, line: &[u8]) -> Option<Outbound> {
        outbound(line)
    }

    fn restore_id(&self, line: &[u8], original: Option<Value>, run: Option<&str>) -> Option<Bytes> {
        let mut frame = super::object_line(line)?;
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
        super::attach::classify(line, hello)
    }

    fn attach_hello(&self, token: &str) -> Option<String> {
        Some(json!({"id": HELLO_ID, "type": "hello", "token": token}).to_string())
    }

    fn attach_hello_answer(&self, frame: &Value) -> Option<Result<Value, String>> {
        super::attach::zut_hello_answer(frame)
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
