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

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{to_bytes, Answer, Claim, ClientHello, EventKind, Inbound, Outbound};

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
        "bye" => Inbound::Bye { id },
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
