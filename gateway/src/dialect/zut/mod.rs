//! zut RPC v1: `{"id"?, "type": command, …}` requests, `type:"response"`
//! answers, and every other `type` an event. The gateway reads only the
//! envelope (`type`, `id`) and leaves every other byte of an event as the
//! child wrote it, adding `"seq"` last.
//!
//! Own runs: a hello may carry `own_runs` and `client_id`; every event of
//! a run carries `run_id` (before `seq`), and a `prompt`/`compact`
//! response with `started:true` names it in `data.run_id`.

mod rules;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{to_bytes, trim, Answer, Claim, ClientHello, OwnRuns};
use super::{EventKind, Inbound, Outbound};
use crate::dialect::cost::{self, ReportedCost};

pub(super) use rules::attach_hello_answer;
pub use rules::Zut;

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
    if crate::mcp::is_select_command(command) {
        let error = crate::mcp::SELECT_REFUSED.to_string();
        return Inbound::Reject(response(id.as_ref(), Some(command), Err(error)));
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

/// A `usage` event's `cost_usd`: what the model call it reports cost.
pub fn reported_cost(line: &[u8]) -> Option<ReportedCost> {
    if !cost::mentions(line, b"\"cost_usd\"") {
        return None;
    }
    let frame: Value = serde_json::from_slice(line).ok()?;
    if frame.get("type")? != "usage" {
        return None;
    }
    cost::amount(frame.get("cost_usd")).map(ReportedCost::Call)
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
