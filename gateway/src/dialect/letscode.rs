//! letscode-rpc/1: `{"cmd": name, "id"?: token, …}` commands; control
//! messages `ack`/`done`/`error{id}` answer one command, domain events
//! (and an `error` without `id`) go to everyone. `ready` and `bye` are the
//! child's own handshake and farewell: the gateway greets and dismisses
//! each client itself.
//!
//! Through the gateway:
//! - a client's first frame may be `{"cmd":"hello","token":T,
//!   "resume_after"?:SEQ,"protocol"?,"id"?}`, answered `ready`, `ack`,
//!   `done`; with an `Authorization` header the `ready` comes at once;
//! - `hello` later is answered by the gateway (`ack`, `done`, or a fatal
//!   `error` closing that client on a major-version mismatch);
//! - `bye` is answered `ack`, then, once no run is active, `done`, `bye`,
//!   and that client's socket closes; the child goes on;
//! - observers may send `hello` and `bye` only;
//! - own runs: `hello` may carry `own_runs` and `client_id`; events of a
//!   run carry `run_id`, and so do the `ack` and `done` of the command
//!   that started or queued it.

use std::ffi::OsString;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::attach::{EndOfInput, Seen, StdinFrame};
use super::audited::{text_field, Audited};
use super::cost::{self, ReportedCost};
use super::hub::{ChildGreeter, ClientRequests, ResponseNews};
use super::rules::{ChildAsks, DialectRules, EventFilter, Leave, OneSession};
use super::{to_bytes, Answer, ChildGreeting, Claim, ClientHello, EventKind, Inbound, Outbound};
use crate::audit::Action;
use corral_protocol::ndjson::FrameError;

pub use corral_protocol::letscode::PROTOCOL;

pub fn client_hello(frame: &Map<String, Value>) -> Option<Result<ClientHello, String>> {
    if frame.get("cmd").and_then(Value::as_str) != Some("hello") {
        return None;
    }
    let id = frame.get("id").cloned();
    if let Err(e) = check_protocol(frame.get("protocol")) {
        return Some(Err(e));
    }
    Some(super::zut::hello_fields(id, frame))
}

/// Accepts no `protocol`, `letscode-rpc/1` and any `letscode-rpc/1.x`.
fn check_protocol(given: Option<&Value>) -> Result<(), String> {
    let given = match given {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(given)) => given,
        Some(other) => return Err(format!("`protocol` must be a string, not {other}")),
    };
    if corral_protocol::letscode::speaks(given) {
        return Ok(());
    }
    Err(format!(
        "protocol mismatch: this gateway speaks {PROTOCOL}, the client asked for {given}"
    ))
}

pub fn inbound(frame: &Map<String, Value>, observer: bool) -> Inbound {
    let id = frame.get("id").cloned();
    let Some(Value::String(command)) = frame.get("cmd") else {
        return Inbound::Reject(error(id.as_ref(), "missing field `cmd`", false));
    };
    match command.as_str() {
        "hello" => match super::zut::own_runs(frame) {
            Ok(own_runs) => Inbound::Hello {
                refusal: check_protocol(frame.get("protocol"))
                    .err()
                    .map(|e| error(id.as_ref(), &e, true)),
                id,
                own_runs,
            },
            Err(e) => Inbound::Reject(error(id.as_ref(), &e, false)),
        },
        "bye" => Inbound::Leave { id },
        c if crate::mcp::is_select_command(c) => {
            Inbound::Reject(error(id.as_ref(), crate::mcp::SELECT_REFUSED, false))
        }
        _ if observer => Inbound::Reject(error(
            id.as_ref(),
            &format!(
                "the observer role may not send `{command}`; observers may send hello and bye"
            ),
            false,
        )),
        _ => Inbound::Forward {
            id,
            command: command.clone(),
        },
    }
}

pub fn outbound(line: &[u8]) -> Option<Outbound> {
    match super::leading_type(line) {
        Some("ack" | "done" | "error" | "ready" | "bye") | None => {}
        Some(kind) => return Some(Outbound::Event(event_kind(kind))),
    }
    let envelope = super::envelope(line)?;
    let kind = envelope.kind?;
    let has_id = envelope.id.is_some();
    let reply = |last| match envelope.id {
        Some(Value::String(id)) => Outbound::Reply { id, last },
        _ => Outbound::Drop("a control message without a gateway id"),
    };
    Some(match kind.as_str() {
        "ack" => reply(false),
        "done" => reply(true),
        // A control error carries `id` (maybe null); an agent error event
        // has none.
        "error" if has_id => reply(true),
        "ready" => Outbound::Drop("the child's ready"),
        "bye" => Outbound::Drop("the child's bye"),
        kind => Outbound::Event(event_kind(kind)),
    })
}

fn event_kind(kind: &str) -> EventKind {
    match kind {
        "agent_start" => EventKind::RunStart,
        "agent_end" => EventKind::RunEnd,
        _ => EventKind::Other,
    }
}

pub fn run_aborted(error: &str) -> Vec<(&'static str, Value)> {
    vec![("agent_end", json!({"messages": [], "error": error}))]
}

/// A `turn_end`'s `usage.cost_usd`: what the step it ends cost.
pub fn reported_cost(line: &[u8]) -> Option<ReportedCost> {
    if !cost::mentions(line, b"\"cost_usd\"") {
        return None;
    }
    let frame: Value = serde_json::from_slice(line).ok()?;
    if frame.get("type")? != "turn_end" {
        return None;
    }
    cost::amount(frame.get("usage")?.get("cost_usd")).map(ReportedCost::Call)
}

/// The `ready` a client gets: the child's, plus `gateway`.
pub fn ready(child: &Map<String, Value>, gateway: Value) -> Bytes {
    let mut frame = Map::new();
    frame.insert("type".into(), json!("ready"));
    frame.insert("protocol".into(), json!(PROTOCOL));
    for (key, value) in child {
        if key != "type" {
            frame.insert(key.clone(), value.clone());
        }
    }
    frame.insert("gateway".into(), gateway);
    to_bytes(&Value::Object(frame))
}

pub fn ack(id: Option<&Value>) -> Bytes {
    control("ack", id)
}

pub fn done(id: Option<&Value>) -> Bytes {
    control("done", id)
}

pub fn bye() -> Bytes {
    to_bytes(&json!({"type": "bye"}))
}

fn control(kind: &str, id: Option<&Value>) -> Bytes {
    to_bytes(&json!({"type": kind, "id": id.cloned().unwrap_or(Value::Null)}))
}

/// A control `error`: recoverable unless `fatal`.
pub fn error(id: Option<&Value>, message: &str, fatal: bool) -> Bytes {
    let mut frame = json!({"type": "error", "id": id.cloned().unwrap_or(Value::Null),
        "error": message, "recoverable": !fatal});
    if fatal {
        frame["fatal"] = json!(true);
    }
    to_bytes(&frame)
}

/// `prompt` and `follow_up` start runs; `steer` joins the active one, or
/// queues a run like `follow_up` when none is active.
pub fn run_claim(command: &str) -> Claim {
    match command {
        "prompt" | "follow_up" => Claim::May,
        "steer" => Claim::Join,
        _ => Claim::None,
    }
}

/// A prompt's `ack` comes just before its `agent_start`; a `follow_up`'s
/// (or a queued `steer`'s) `ack` queues a run; an `error` starts none.
pub fn run_answer(command: &str, line: &[u8]) -> Answer {
    if run_claim(command) == Claim::None {
        return Answer::Nothing;
    }
    let kind = super::runs::object(line).and_then(|frame| {
        frame
            .get("type")
            .and_then(Value::as_str)
            .map(str::to_string)
    });
    match (kind.as_deref(), command) {
        (Some("ack"), "prompt") => Answer::Next,
        (Some("ack"), _) => Answer::Queued,
        (Some("error"), _) => Answer::NoRun,
        _ => Answer::Nothing,
    }
}

/// `run_id` on a control message.
pub fn name_run(frame: &mut Map<String, Value>, run: &str) {
    frame.insert(super::zut::RUN_FIELD.into(), json!(run));
}

/// The `id` of the `bye` `corral attach` sends when stdin closes; its
/// `ack` and `done` are not the tool's business.
const ATTACH_BYE_ID: &str = "corral-attach-bye";

/// letscode-rpc/1's rules.
pub struct Letscode;

impl DialectRules for Letscode {
    fn name(&self) -> &'static str {
        "letscode"
    }

    fn child_args(&self) -> Vec<OsString> {
        vec!["--dialect".into(), "letscode".into()]
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

    /// The child must speak letscode-rpc/1 (any 1.x).
    fn check_ready(&self, ready: &Map<String, Value>) -> Result<(), String> {
        let protocol = ready.get("protocol").and_then(Value::as_str);
        if protocol.is_some_and(corral_protocol::letscode::speaks) {
            return Ok(());
        }
        Err(format!(
            "the child speaks {}, not {PROTOCOL}",
            protocol.unwrap_or("an unnamed protocol"),
        ))
    }

    fn runs_third_party_agents(&self) -> bool {
        false
    }

    fn model_of(&self, hello: &Map<String, Value>) -> Option<String> {
        super::model_field(hello).map(str::to_string)
    }

    fn ping_line(&self, id: &str) -> String {
        format!(
            "{}\n",
            json!({"cmd": "hello", "id": id, "protocol": PROTOCOL})
        )
    }

    fn abort_line(&self, id: &str, _hello: &Map<String, Value>) -> String {
        format!("{}\n", json!({"cmd": "abort", "id": id}))
    }

    fn state_request(&self, _id: &str) -> Option<String> {
        None
    }

    fn hello_shape(&self) -> &'static str {
        r#"{"cmd":"hello","token":…}"#
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

    /// `prompt`, `steer` and `follow_up` (prompts, their `text`; the
    /// latter two say so in `delivery`), `abort`, and `reset` (a clear).
    fn audited(
        &self,
        command: &str,
        frame: &Map<String, Value>,
        prompt_text: bool,
    ) -> Option<Audited> {
        let prompt = || Audited::prompt(prompt_text, || text_field(frame, "text"));
        Some(match command {
            "prompt" => prompt(),
            "steer" | "follow_up" => prompt().detail("delivery", Some(&json!(command))),
            "abort" => Audited::new(Action::Abort),
            "reset" => Audited::new(Action::Clear),
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
        let mut frame = super::object_line(line)?;
        if let Some(run) = run {
            name_run(&mut frame, run);
        }
        frame.insert("id".into(), original.unwrap_or(Value::Null));
        Some(to_bytes(&Value::Object(frame)))
    }

    fn event_bytes(&self, line: &[u8], seq: u64, run: Option<&str>) -> Option<Bytes> {
        super::zut::stamp(line, seq, run.map(|run| (super::zut::RUN_FIELD, run)))
    }

    fn hello_after(&self, _hello: &mut Map<String, Value>, _line: &[u8]) {}

    /// Runs start and end in events.
    fn response_news(&self, _command: &str, _line: &[u8]) -> ResponseNews {
        ResponseNews::default()
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

    /// `mcp_status`, `tool_execution_start {tool_call_id, tool_name}`,
    /// `tool_execution_end {tool_call_id, is_error}`.
    fn mcp_news(&self, line: &[u8], calls_open: bool) -> Option<crate::mcp::McpNews> {
        use crate::dialect::mcp_news::{may_be_news, of_event, ToolFields};
        const FIELDS: ToolFields = ToolFields {
            start: "tool_execution_start",
            end: "tool_execution_end",
            id: "tool_call_id",
            name: "tool_name",
            failed: "is_error",
        };
        if !may_be_news(line, FIELDS.end, calls_open) {
            return None;
        }
        of_event(&serde_json::from_slice(line).ok()?, &FIELDS)
    }

    fn gateway_event(&self, kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes {
        super::zut::event(kind, fields, seq, run)
    }

    /// A prompt whose run started ends with `done`; anything else fails
    /// with a recoverable `error`.
    fn request_failed(&self, id: Option<&Value>, command: &str, acked: bool, error: &str) -> Bytes {
        if acked && command == "prompt" {
            return done(id);
        }
        self::error(id, error, false)
    }

    fn malformed(&self, error: &str) -> Bytes {
        self::error(None, error, false)
    }

    fn refusal(&self, id: Option<&Value>, _code: &str, error: &str) -> Bytes {
        self::error(id, error, true)
    }

    /// `ready`, built from the child's `hello`.
    fn greeting(&self, hello: &Map<String, Value>, gateway: Value, _state: Value) -> Vec<Bytes> {
        vec![ready(hello, gateway)]
    }

    fn hello_answer(
        &self,
        id: Option<&Value>,
        _hello: &Map<String, Value>,
        _gateway: Value,
        _gap: bool,
    ) -> Vec<Bytes> {
        vec![ack(id), done(id)]
    }

    fn sequenced(&self) -> bool {
        false
    }

    fn stamp(&self, frame: &[u8], _sequence: u64) -> Bytes {
        Bytes::copy_from_slice(frame)
    }

    /// `bye`.
    fn leave(&self) -> Option<&dyn Leave> {
        Some(self)
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

    /// A line that is not a JSON object gets a recoverable
    /// `error{id:null}`; everything else (`hello` included: the gateway
    /// answers it) is forwarded.
    fn attach_stdin(
        &self,
        line: Result<Vec<u8>, FrameError>,
        _hello: &Value,
        _sequence: u64,
    ) -> StdinFrame {
        match super::attach::object(line) {
            Ok((line, frame)) => super::attach::forward(line, frame),
            Err(error) => StdinFrame::Answer(super::attach::line_of(
                &json!({"type": "error", "id": null, "error": error.to_string(), "recoverable": true}),
            )),
        }
    }

    /// The gateway greets first (`ready`).
    fn attach_hello(&self, _token: &str) -> Option<String> {
        None
    }

    fn attach_hello_answer(&self, frame: &Value) -> Option<Result<Value, String>> {
        super::zut::attach_hello_answer(frame)
    }

    fn attach_tracks_work(&self) -> bool {
        false
    }

    /// A `bye`.
    fn attach_end_of_input(&self) -> EndOfInput {
        EndOfInput::Send(json!({"cmd": "bye", "id": ATTACH_BYE_ID}).to_string())
    }

    fn attach_seen(&self, frame: &Value) -> Seen {
        if frame["id"] == ATTACH_BYE_ID {
            Seen::Hide
        } else {
            Seen::Sequence(None)
        }
    }
}

/// `bye` is answered `ack`, then, once no run is active, `done` and `bye`.
impl Leave for Letscode {
    fn ack(&self, id: Option<&Value>) -> Bytes {
        ack(id)
    }

    fn after_leave(&self, id: Option<&Value>) -> Bytes {
        error(id, "this client said bye; no more commands", false)
    }

    fn farewell(&self, id: Option<&Value>) -> Vec<Bytes> {
        vec![done(id), bye()]
    }
}
