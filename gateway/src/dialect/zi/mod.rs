//! Zi RPC v1: `{"version":1,"id","method","params"?}` requests;
//! `response` and `protocol_error` frames answer one request by `id`,
//! `session_event` frames go to everyone, and every frame carries a
//! connection-local `sequence`.
//!
//! Through the gateway:
//! - the hub keeps frames *unstamped*, `{"version":1,…}` without
//!   `sequence`; each client's feed numbers what it actually sends, from 1,
//!   gap-free ([`stamp`]); `session_event`s also carry the project's `seq`
//!   (the resume point);
//! - a client's first frame may be `{"version":1,"id","method":
//!   "connection.hello","params":{"token","resumeAfter"?}}`, answered
//!   `ready` then its `response`; with an `Authorization` header the
//!   `ready` comes at once; each `ready` holds a fresh state snapshot;
//! - `connection.set_events` and `connection.hello` are answered by the
//!   gateway and apply to that client only; a request id may be in flight
//!   once per client (`protocol_error` `invalid_request` otherwise), and a
//!   client may have [`CLIENT_IN_FLIGHT`] operations in flight besides one
//!   `session.interrupt` (`capacity` beyond);
//! - gateway events are `session_event`s (`child_started`,
//!   `child_exited`, `error`);
//! - own runs: `connection.hello` may carry `ownRuns` and `clientId`;
//!   `session_event`s of a run carry `runId` beside `seq`, and the
//!   `session.prompt` (or `command.invoke compact`) response that started
//!   or queued a run names it in `result.runId`.

mod rules;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{to_bytes, Answer, Claim, ClientHello, EventKind, Inbound, Outbound, OwnRuns};
use crate::dialect::cost::{self, ReportedCost};

pub use corral_protocol::zi::MAX_ID_BYTES;
pub use rules::Zi;
/// Ordinary operations one client may have in flight (the document's
/// bound, per connection).
pub const CLIENT_IN_FLIGHT: usize = corral_protocol::zi::MAX_IN_FLIGHT;
/// Ordinary operations a child serving all of a project's clients may
/// have in flight.
pub const CHILD_IN_FLIGHT: usize = 1024;
/// Methods an observer may call.
pub const OBSERVER_METHODS: [&str; 9] = [
    "connection.hello",
    "connection.set_events",
    "session.get_state",
    "session.get_messages",
    "session.get_outcomes",
    "session.await_idle",
    "command.list",
    "model.list",
    "thinking.list",
];
/// The run id field of session events and prompt results.
pub const RUN_FIELD: &str = "runId";
/// The unstamped frame prefix (`sequence` goes after it).
const VERSION_PREFIX: &[u8] = br#"{"version":1,"#;

/// `params` when it is an object, else the record itself (as the child
/// reads parameters).
fn params(frame: &Map<String, Value>) -> &Map<String, Value> {
    match frame.get("params") {
        Some(Value::Object(params)) => params,
        _ => frame,
    }
}

pub fn client_hello(frame: &Map<String, Value>) -> Option<Result<ClientHello, String>> {
    if frame.get("method").and_then(Value::as_str) != Some("connection.hello") {
        return None;
    }
    let params = params(frame);
    Some((|| {
        Ok(ClientHello {
            id: frame.get("id").cloned(),
            token: super::token_field(params.get("token"))?,
            resume_after: super::resume_field(params.get("resumeAfter"), "resumeAfter")?,
            own_runs: own_runs(params)?,
        })
    })())
}

/// Checks a client frame's envelope in the child's order (`version`,
/// then `id`, then `method`, with the child's codes and wording), answers
/// the gateway's own methods and forwards the rest, whose fields the
/// child checks.
pub fn inbound(frame: &Map<String, Value>, observer: bool) -> Inbound {
    let id = match frame.get("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_BYTES => Some(id.as_str()),
        _ => None,
    };
    let version = frame.get("version");
    if version.and_then(Value::as_f64) != Some(1.0) {
        let shown = match version {
            None => "undefined".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let message = format!("Unsupported RPC protocol version: {shown} (expected 1)");
        return reject_with(id, "unsupported_version", message);
    }
    let Some(id) = id else {
        let message =
            format!("RPC request id must be a non-empty string of at most {MAX_ID_BYTES} bytes");
        return reject(None, message);
    };
    let Some(Value::String(method)) = frame.get("method") else {
        return reject(Some(id), "RPC request method must be a string");
    };
    if observer && !OBSERVER_METHODS.contains(&method.as_str()) {
        let message = format!(
            "the observer role may not call `{method}`; observers may call {}",
            OBSERVER_METHODS.join(", ")
        );
        return reject(Some(id), message);
    }
    let id_value = Value::String(id.to_string());
    match method.as_str() {
        "connection.hello" => match own_runs(params(frame)) {
            Ok(own_runs) => Inbound::Hello {
                id: Some(id_value),
                refusal: None,
                own_runs,
            },
            Err(e) => reject(Some(id), e),
        },
        "connection.set_events" => match event_mode(frame) {
            Ok(mode) => Inbound::SetFilter {
                id: id_value,
                all: mode != "none",
            },
            Err(message) => reject(Some(id), message),
        },
        m if crate::mcp::is_select_command(m) => reject(Some(id), crate::mcp::SELECT_REFUSED),
        _ => Inbound::Forward {
            id: Some(id_value),
            command: method.clone(),
        },
    }
}

/// The mode of a `connection.set_events`, checked as the child checks
/// it: `params` is exactly `{mode}`, one of `all`, `none` or `activity`
/// (which, as in the child, drops no event).
fn event_mode(frame: &Map<String, Value>) -> Result<&str, &'static str> {
    const UNKNOWN: &str = "RPC request contains unknown fields";
    const MISSING: &str = "RPC request is missing required fields";
    let envelope = ["version", "id", "method", "params"];
    if frame.keys().any(|key| !envelope.contains(&key.as_str())) {
        return Err(UNKNOWN);
    }
    let params = match frame.get("params") {
        None => return Err(MISSING),
        Some(Value::Object(params)) => params,
        Some(_) => return Err("connection.set_events params must be an object"),
    };
    if params.keys().any(|key| key != "mode") {
        return Err(UNKNOWN);
    }
    match params.get("mode") {
        None => Err(MISSING),
        Some(Value::String(mode)) if matches!(mode.as_str(), "all" | "none" | "activity") => {
            Ok(mode)
        }
        Some(_) => Err("Event mode must be all, none, or activity"),
    }
}

fn reject(id: Option<&str>, message: impl Into<String>) -> Inbound {
    reject_with(id, "invalid_request", message)
}

fn reject_with(id: Option<&str>, code: &str, message: impl Into<String>) -> Inbound {
    let id = id.map(|id| Value::String(id.to_string()));
    Inbound::Reject(protocol_error(id.as_ref(), code, &message.into()))
}

pub fn outbound(line: &[u8]) -> Option<Outbound> {
    if let Some(kind) = leading_event_type(line) {
        return Some(Outbound::Event(event_kind(Some(kind))));
    }
    let envelope = super::envelope(line)?;
    let kind = envelope.kind?;
    Some(match kind.as_str() {
        "response" | "protocol_error" => match envelope.id {
            Some(Value::String(id)) => Outbound::Reply { id, last: true },
            _ => Outbound::Drop("an answer without a gateway id"),
        },
        "ready" => Outbound::Drop("the child's ready"),
        "session_event" => {
            let event = envelope.event.unwrap_or_default();
            Outbound::Event(event_kind(event.get("type").and_then(Value::as_str)))
        }
        _ => Outbound::Event(EventKind::Other),
    })
}

fn event_kind(kind: Option<&str>) -> EventKind {
    match kind {
        Some("agent_start") => EventKind::RunStart,
        Some("agent_end") => EventKind::RunEnd,
        Some("agent_settled") => EventKind::RunTail,
        _ => EventKind::Other,
    }
}

/// The inner `type` of a session event as the child writes it,
/// `{"version":1,"sequence":N,"type":"session_event","event":{"type":"name",`,
/// without parsing the rest (see `leading_type` in the parent module).
fn leading_event_type(line: &[u8]) -> Option<&str> {
    let rest = after_sequence(super::trim(line))?;
    let rest = rest.strip_prefix(br#""type":"session_event","event":{"type":""#)?;
    super::type_name(rest)
}

/// The run ends, and the session, with no child left to run anything,
/// is settled.
pub fn run_aborted(error: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("agent_end", json!({"errorMessage": error})),
        ("agent_settled", json!({})),
    ]
}

/// A `usage` session event's `turn.cost_usd`: what the model call it
/// reports cost.
pub fn reported_cost(line: &[u8]) -> Option<ReportedCost> {
    if !cost::mentions(line, b"\"cost_usd\"") {
        return None;
    }
    let frame: Value = serde_json::from_slice(line).ok()?;
    let event = frame.get("event")?;
    if frame.get("type")? != "session_event" || event.get("type")? != "usage" {
        return None;
    }
    cost::amount(event.get("turn")?.get("cost_usd")).map(ReportedCost::Call)
}

/// A frame in the unstamped form: `version` first, no `sequence`.
pub fn unstamped(mut frame: Map<String, Value>) -> Bytes {
    frame.shift_remove("version");
    frame.shift_remove("sequence");
    let body = to_bytes(&Value::Object(frame));
    let mut out = Vec::with_capacity(body.len() + VERSION_PREFIX.len());
    if body.len() <= 2 {
        out.extend_from_slice(br#"{"version":1}"#);
    } else {
        out.extend_from_slice(VERSION_PREFIX);
        out.extend_from_slice(&body[1..]);
    }
    Bytes::from(out)
}

/// Numbers an unstamped frame for one connection: `"sequence":N` right
/// after `"version":1` (or first, for a frame of another shape).
pub fn stamp(frame: &[u8], sequence: u64) -> Bytes {
    let number = sequence.to_string();
    let mut out = Vec::with_capacity(frame.len() + 16 + number.len());
    let (head, rest) = if frame.starts_with(VERSION_PREFIX) {
        frame.split_at(VERSION_PREFIX.len())
    } else if frame == br#"{"version":1}"# {
        (&br#"{"version":1,"#[..], &b"}"[..])
    } else if frame.len() > 2 && frame.first() == Some(&b'{') {
        frame.split_at(1)
    } else {
        (&b"{"[..], &b"}"[..])
    };
    out.extend_from_slice(head);
    out.extend_from_slice(b"\"sequence\":");
    out.extend_from_slice(number.as_bytes());
    if rest != b"}" {
        out.push(b',');
    }
    out.extend_from_slice(rest);
    Bytes::from(out)
}

/// A child's event line for the ring: its `sequence` removed (each client
/// gets its own) and the project's `seq` added, in one copy when the child
/// wrote `{"version":1,"sequence":N,…}` as it does.
pub fn event_bytes(line: &[u8], seq: u64, run: Option<&str>) -> Option<Bytes> {
    let line = super::trim(line);
    let run = run.map(|run| (RUN_FIELD, run));
    let Some(body) = after_sequence(line).and_then(|rest| rest.strip_suffix(b"}")) else {
        return match serde_json::from_slice::<Value>(line) {
            Ok(Value::Object(frame)) => super::zut::stamp(&unstamped(frame), seq, run),
            _ => None,
        };
    };
    let seq = seq.to_string();
    let mut out = Vec::with_capacity(line.len() + seq.len() + 40);
    out.extend_from_slice(VERSION_PREFIX);
    out.extend_from_slice(body);
    out.push(b',');
    if let Some((key, run)) = run {
        out.extend_from_slice(&super::runs::field(key, run));
    }
    out.extend_from_slice(b"\"seq\":");
    out.extend_from_slice(seq.as_bytes());
    out.push(b'}');
    Some(Bytes::from(out))
}

/// What follows `{"version":1,"sequence":N,` in a line the child wrote.
fn after_sequence(line: &[u8]) -> Option<&[u8]> {
    let rest = line.strip_prefix(VERSION_PREFIX)?;
    let rest = rest.strip_prefix(b"\"sequence\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 {
        return None;
    }
    rest[digits..].strip_prefix(b",")
}

fn build(fields: Value) -> Bytes {
    match fields {
        Value::Object(frame) => unstamped(frame),
        _ => unstamped(Map::new()),
    }
}

/// The `session.get_state` request line with gateway id `id` (a
/// client's `ready` snapshot, and the health check).
pub fn get_state_line(id: &str) -> String {
    format!(
        "{}\n",
        json!({"version": 1, "id": id, "method": "session.get_state"})
    )
}

/// A gateway event as a `session_event`, with the project's `seq` and
/// the run it belongs to.
pub fn session_event(kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes {
    let mut event = Map::new();
    event.insert("type".into(), json!(kind));
    if let Value::Object(fields) = fields {
        event.extend(fields);
    }
    let mut frame = json!({"type": "session_event", "event": event});
    if let Some(run) = run {
        frame[RUN_FIELD] = json!(run);
    }
    frame["seq"] = json!(seq);
    build(frame)
}

/// A `protocol_error` (unstamped), `code` and `message` at the top level
/// as the child writes them; `id` when it could be read.
pub fn protocol_error(id: Option<&Value>, code: &str, message: &str) -> Bytes {
    let mut frame = json!({"type": "protocol_error", "code": code, "message": message});
    if let Some(id) = id {
        frame["id"] = id.clone();
    }
    build(frame)
}

/// The answer to a client frame that is not a JSON object (or not text):
/// `invalid_json`, as the child answers a line it cannot parse.
pub fn malformed(error: &str) -> Bytes {
    protocol_error(None, "invalid_json", error)
}

/// A successful response (unstamped).
pub fn ok(id: &Value, method: &str, result: Value) -> Bytes {
    build(json!({"type": "response", "id": id, "method": method, "ok": true, "result": result}))
}

/// A failed response (unstamped).
pub fn failed(id: Option<&Value>, method: &str, code: &str, message: &str) -> Bytes {
    build(
        json!({"type": "response", "id": id.cloned().unwrap_or(Value::Null),
        "method": method, "ok": false, "error": {"code": code, "message": message}}),
    )
}

/// The `ready` a client gets (unstamped): a state snapshot and `gateway`.
pub fn ready(state: Value, gateway: Value) -> Bytes {
    build(json!({"type": "ready", "state": state, "gateway": gateway}))
}

/// Whether an unstamped frame is a `session_event` (the frames
/// `connection.set_events none` suppresses).
pub fn is_session_event(frame: &[u8]) -> bool {
    frame
        .strip_prefix(VERSION_PREFIX)
        .is_some_and(|rest| rest.starts_with(br#""type":"session_event""#))
}

fn own_runs(params: &Map<String, Value>) -> Result<OwnRuns, String> {
    OwnRuns::read(params, "ownRuns", "clientId")
}

/// A `direct` (or `prompt`) delivery and `command.invoke compact` may
/// start a run; `continue` starts one when idle and joins the active one
/// otherwise; `steer` and `follow_up` are input for the active run or the
/// next one; `session.interrupt` discards what was queued before it.
pub fn run_claim(method: &str, frame: &Map<String, Value>) -> Claim {
    let params = params(frame);
    match method {
        "session.prompt" => match params.get("delivery").and_then(Value::as_str) {
            Some("continue") => Claim::Join,
            Some("steer" | "follow_up") => Claim::Input,
            _ => Claim::May,
        },
        "command.invoke" if params.get("name") == Some(&json!("compact")) => Claim::May,
        "session.interrupt" => Claim::Interrupt,
        _ => Claim::None,
    }
}

/// An admitted prompt starts, queues or joins a run; a refused one
/// starts none; a settled interruption discards what was queued.
pub fn run_answer(method: &str, line: &[u8]) -> Answer {
    if !matches!(
        method,
        "session.prompt" | "command.invoke" | "session.interrupt"
    ) {
        return Answer::Nothing;
    }
    let Some(frame) = super::runs::object(line) else {
        return Answer::Nothing;
    };
    let ok = frame.get("ok") == Some(&Value::Bool(true));
    match method {
        "session.interrupt" if ok => Answer::Interrupted,
        "session.interrupt" => Answer::Nothing,
        "session.prompt" if ok => Answer::Queued,
        _ if ok => Answer::Nothing,
        _ => Answer::NoRun,
    }
}

/// `result.runId` in the response that started or queued a run.
pub fn name_run(frame: &mut Map<String, Value>, run: &str) {
    if let Some(Value::Object(result)) = frame.get_mut("result") {
        result.insert(RUN_FIELD.into(), json!(run));
    }
}

#[cfg(test)]
mod tests;
