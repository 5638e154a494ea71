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

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{to_bytes, Answer, Claim, ClientHello, EventKind, Inbound, Outbound, OwnRuns};

/// Longest request id, in bytes.
pub const MAX_ID_BYTES: usize = 256;
/// Ordinary operations one client may have in flight (the document's
/// bound, per connection).
pub const CLIENT_IN_FLIGHT: usize = 32;
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

pub fn inbound(frame: &Map<String, Value>, observer: bool) -> Inbound {
    let id = match frame.get("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_BYTES => id.clone(),
        Some(Value::String(_)) => {
            return reject(None, format!("`id` must be 1 to {MAX_ID_BYTES} bytes"))
        }
        Some(_) => return reject(None, "`id` must be a string"),
        None => return reject(None, "`id` is required"),
    };
    let Some(Value::String(method)) = frame.get("method") else {
        return reject(Some(&id), "`method` is required and must be a string");
    };
    if frame.get("version").and_then(Value::as_u64) != Some(1) {
        let version = frame.get("version").map_or("none".into(), Value::to_string);
        return reject(
            Some(&id),
            format!("unsupported protocol version {version}; expected 1"),
        );
    }
    if observer && !OBSERVER_METHODS.contains(&method.as_str()) {
        let message = format!(
            "the observer role may not call `{method}`; observers may call {}",
            OBSERVER_METHODS.join(", ")
        );
        return reject(Some(&id), message);
    }
    let id_value = Value::String(id.clone());
    match method.as_str() {
        "connection.hello" => match own_runs(params(frame)) {
            Ok(own_runs) => Inbound::Hello {
                id: Some(id_value),
                refusal: None,
                own_runs,
            },
            Err(e) => reject(Some(&id), e),
        },
        "connection.set_events" => match params(frame).get("mode") {
            None | Some(Value::Null) => Inbound::SetEvents {
                id: id_value,
                all: true,
            },
            Some(Value::String(mode)) if mode == "all" || mode == "none" => Inbound::SetEvents {
                id: id_value,
                all: mode == "all",
            },
            Some(other) => reject(
                Some(&id),
                format!("unknown event mode {other}: expected all or none"),
            ),
        },
        _ => Inbound::Forward {
            id: Some(id_value),
            command: method.clone(),
        },
    }
}

fn reject(id: Option<&str>, message: impl Into<String>) -> Inbound {
    let id = id.map(|id| Value::String(id.to_string()));
    Inbound::Reject(protocol_error(
        id.as_ref(),
        "invalid_request",
        &message.into(),
    ))
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
        "invalid_framing" => Outbound::Drop("the child refused a record's framing"),
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

pub fn run_aborted(error: &str) -> Vec<(&'static str, Value)> {
    vec![("agent_end", json!({"errorMessage": error}))]
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

/// A `protocol_error` (unstamped); `id` when it could be read.
pub fn protocol_error(id: Option<&Value>, code: &str, message: &str) -> Bytes {
    let mut frame = json!({"type": "protocol_error"});
    if let Some(id) = id {
        frame["id"] = id.clone();
    }
    frame["error"] = json!({"code": code, "message": message});
    build(frame)
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
