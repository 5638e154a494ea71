//! Zi RPC v1's [`DialectRules`]: the frames of the parent module put
//! together, plus what only Zi has: per-connection `sequence` numbers,
//! per-client admission (an id in flight once, [`CLIENT_IN_FLIGHT`]
//! operations), a state snapshot in every greeting, and the choice of
//! events ([`EventFilter`], `connection.set_events`).

use std::ffi::OsString;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::*;
use crate::audit::Action;
use crate::dialect::attach::{self, EndOfInput, Seen, StdinFrame};
use crate::dialect::audited::{text_field, Audited};
use crate::dialect::cost::ReportedCost;
use crate::dialect::hub::{ChildGreeter, ClientRequests, ResponseNews};
use crate::dialect::rules::{ChildAsks, DialectRules, EventFilter, Leave, OneSession};
use crate::dialect::ChildGreeting;
use corral_protocol::ndjson::FrameError;

/// Zi RPC v1's rules.
pub struct Zi;

impl DialectRules for Zi {
    fn name(&self) -> &'static str {
        "zi"
    }

    /// The gateway bounds each client; the child serves them all.
    fn child_args(&self) -> Vec<OsString> {
        vec![
            "--dialect".into(),
            "zi".into(),
            "--max-in-flight".into(),
            CHILD_IN_FLIGHT.to_string().into(),
        ]
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

    /// `model`, or the model of the state snapshot in the child's `ready`.
    fn model_of(&self, hello: &Map<String, Value>) -> Option<String> {
        crate::dialect::model_field(hello)
            .or_else(|| {
                let state = hello.get("state")?;
                state.pointer("/model/model/id")?.as_str()
            })
            .map(str::to_string)
    }

    fn ping_line(&self, id: &str) -> String {
        get_state_line(id)
    }

    fn abort_line(&self, id: &str, _hello: &Map<String, Value>) -> String {
        let frame = json!({"version": 1, "id": id, "method": "session.interrupt"});
        format!("{frame}\n")
    }

    /// `session.get_state`, for the `ready` snapshot.
    fn state_request(&self, id: &str) -> Option<String> {
        Some(get_state_line(id))
    }

    fn hello_shape(&self) -> &'static str {
        r#"{"version":1,"id":…,"method":"connection.hello","params":{"token":…}}"#
    }

    /// Clients wait for `ready` before writing.
    fn greets_first(&self) -> bool {
        true
    }

    fn client_hello(&self, frame: &Map<String, Value>) -> Option<Result<ClientHello, String>> {
        client_hello(frame)
    }

    fn inbound(&self, frame: &Map<String, Value>, observer: bool) -> Inbound {
        inbound(frame, observer)
    }

    /// An id may be in flight once, and at most [`CLIENT_IN_FLIGHT`]
    /// operations besides an interruption.
    fn admit(
        &self,
        id: Option<&Value>,
        command: &str,
        requests: &dyn ClientRequests,
    ) -> Result<(), Bytes> {
        if id.is_some_and(|id| requests.has_id(id)) {
            let message = "the request id is in flight; reuse it after its response";
            return Err(protocol_error(id, "invalid_request", message));
        }
        let interrupt = "session.interrupt";
        let limit = CLIENT_IN_FLIGHT;
        if command != interrupt && requests.count_except(interrupt) >= limit {
            let message = format!("at most {limit} operations may be in flight per connection");
            return Err(failed(id, command, "capacity", &message));
        }
        Ok(())
    }

    fn command_label<'a>(&self, command: &'a str) -> &'a str {
        crate::dialect::known_command_label(command)
    }

    /// Zi records are decoded strictly (unknown fields are refused), so
    /// they carry none.
    /// `session.prompt` (its `text`, and its `delivery`),
    /// `session.interrupt` (an abort), and `command.invoke` of `compact`.
    fn audited(
        &self,
        command: &str,
        frame: &Map<String, Value>,
        prompt_text: bool,
    ) -> Option<Audited> {
        let params = params(frame);
        Some(match command {
            "session.prompt" => Audited::prompt(prompt_text, || text_field(params, "text"))
                .detail("delivery", params.get("delivery")),
            "session.interrupt" => Audited::new(Action::Abort),
            "command.invoke" if params.get("name") == Some(&json!("compact")) => {
                Audited::new(Action::Compact)
            }
            _ => return None,
        })
    }

    fn put_trace_context(&self, _frame: &mut Map<String, Value>, _traceparent: String) {}

    fn outbound(&self, line: &[u8]) -> Option<Outbound> {
        outbound(line)
    }

    fn restore_id(&self, line: &[u8], original: Option<Value>, run: Option<&str>) -> Option<Bytes> {
        let mut frame = crate::dialect::object_line(line)?;
        if let Some(run) = run {
            name_run(&mut frame, run);
        }
        frame.insert("id".into(), original.unwrap_or(Value::Null));
        Some(unstamped(frame))
    }

    fn event_bytes(&self, line: &[u8], seq: u64, run: Option<&str>) -> Option<Bytes> {
        event_bytes(line, seq, run)
    }

    fn hello_after(&self, _hello: &mut Map<String, Value>, _line: &[u8]) {}

    /// Runs start and end in events.
    fn response_news(&self, _command: &str, _line: &[u8]) -> ResponseNews {
        ResponseNews::default()
    }

    fn run_claim(&self, command: &str, frame: &Map<String, Value>) -> Claim {
        run_claim(command, frame)
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

    /// In a `session_event`'s `event`: `mcp_status`,
    /// `tool_execution_start {toolCallId, toolName}`, `tool_execution_end
    /// {toolCallId, isError}`.
    fn mcp_news(&self, line: &[u8], calls_open: bool) -> Option<crate::mcp::McpNews> {
        use crate::dialect::mcp_news::{may_be_news, of_event, ToolFields};
        const FIELDS: ToolFields = ToolFields {
            start: "tool_execution_start",
            end: "tool_execution_end",
            id: "toolCallId",
            name: "toolName",
            failed: "isError",
        };
        if !may_be_news(line, FIELDS.end, calls_open) {
            return None;
        }
        let frame: Value = serde_json::from_slice(line).ok()?;
        of_event(frame.get("event")?, &FIELDS)
    }

    fn gateway_event(&self, kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes {
        session_event(kind, fields, seq, run)
    }

    fn request_failed(
        &self,
        id: Option<&Value>,
        command: &str,
        _acked: bool,
        error: &str,
    ) -> Bytes {
        failed(id, command, "operation_failed", error)
    }

    fn malformed(&self, error: &str) -> Bytes {
        malformed(error)
    }

    /// A complete frame (`sequence` 1): nothing else precedes it.
    fn refusal(&self, id: Option<&Value>, code: &str, error: &str) -> Bytes {
        stamp(&protocol_error(id, code, error), 1)
    }

    /// `ready`, with the state snapshot.
    fn greeting(&self, _hello: &Map<String, Value>, gateway: Value, state: Value) -> Vec<Bytes> {
        vec![ready(state, gateway)]
    }

    fn hello_answer(
        &self,
        id: Option<&Value>,
        _hello: &Map<String, Value>,
        gateway: Value,
        _gap: bool,
    ) -> Vec<Bytes> {
        let id = id.cloned().unwrap_or(Value::Null);
        let result = json!({ "gateway": gateway });
        vec![ok(&id, "connection.hello", result)]
    }

    fn sequenced(&self) -> bool {
        true
    }

    fn stamp(&self, frame: &[u8], sequence: u64) -> Bytes {
        stamp(frame, sequence)
    }

    fn leave(&self) -> Option<&dyn Leave> {
        None
    }

    /// `connection.set_events`.
    fn event_filter(&self) -> Option<&dyn EventFilter> {
        Some(self)
    }

    fn one_session(&self) -> Option<&dyn OneSession> {
        None
    }

    fn child_asks(&self) -> Option<&dyn ChildAsks> {
        None
    }

    /// Every UTF-8 line is forwarded, even one that is not JSON: the
    /// gateway answers it with a `protocol_error` in the connection's
    /// `sequence`. Invalid UTF-8 or an over-long line is fatal, as for the
    /// agent: one `protocol_error` with code `invalid_framing` (the next
    /// `sequence`), then exit.
    fn attach_stdin(
        &self,
        line: Result<Vec<u8>, FrameError>,
        _hello: &Value,
        sequence: u64,
    ) -> StdinFrame {
        let framing = |message: String| {
            StdinFrame::Fatal(attach::line_of(
                &json!({"version": 1, "sequence": sequence + 1,
                "type": "protocol_error", "code": "invalid_framing", "message": message}),
            ))
        };
        match line.map(String::from_utf8) {
            Ok(Ok(text)) => StdinFrame::Forward {
                text,
                frame: Map::new(),
            },
            Ok(Err(_)) | Err(FrameError::InvalidUtf8) => {
                framing("record is not valid UTF-8".into())
            }
            Err(error) => framing(error.to_string()),
        }
    }

    /// The gateway greets first (`ready`).
    fn attach_hello(&self, _token: &str) -> Option<String> {
        None
    }

    fn attach_hello_answer(&self, frame: &Value) -> Option<Result<Value, String>> {
        crate::dialect::zut::attach_hello_answer(frame)
    }

    fn attach_tracks_work(&self) -> bool {
        false
    }

    /// Close at once.
    fn attach_end_of_input(&self) -> EndOfInput {
        EndOfInput::Leave
    }

    fn attach_seen(&self, frame: &Value) -> Seen {
        Seen::Sequence(frame["sequence"].as_u64())
    }
}

/// `connection.set_events none` turns `session_event`s off.
impl EventFilter for Zi {
    fn filter_set(&self, id: &Value, all: bool) -> Bytes {
        let mode = if all { "all" } else { "none" };
        ok(id, "connection.set_events", json!({ "mode": mode }))
    }

    fn is_optional_event(&self, frame: &[u8]) -> bool {
        is_session_event(frame)
    }
}
