//! The wire dialects a child and its clients may speak: zut RPC v1 (the
//! default), letscode-rpc/1, Zi RPC v1 and the Agent Client Protocol.
//!
//! The hub, the WebSocket layer, the supervisor and `corral attach` name no
//! dialect; this module tells them, for a project's dialect, what a client
//! frame asks for ([`Inbound`]), what a child line is ([`Outbound`]), and
//! how to write every frame the gateway makes up itself: greetings, hello
//! answers, refusals, failed requests, lifecycle events and the end of a
//! run the child can no longer finish ([`hub`]), how the child is greeted
//! ([`token_hello`], [`Dialect::check_ready`]) and what `corral attach`
//! answers itself ([`attach`]). Each dialect's shapes are in its own module
//! ([`zut`], [`letscode`], [`zi`], [`acp`]); the `match` on [`Dialect`] that picks
//! one lives only here. Everything here is pure (no I/O).
//!
//! Zi frames carry a connection-local `sequence`, so the hub stores and
//! queues Zi frames *unstamped* (`{"version":1,…}` without `sequence`) and
//! each client's feed stamps them on the way out ([`zi::stamp`]).
//!
//! The own-runs extension ([`runs`]): every event of a run carries the
//! gateway's run id, the answer that starts or queues a run names it, and a
//! client may ask for the events of its own runs only.

pub mod acp;
pub mod attach;
pub mod hub;
pub mod letscode;
pub mod runs;
pub mod token_hello;
pub mod zi;
pub mod zut;
mod zut_inflight;

use std::ffi::OsString;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use runs::{Answer, Claim, OwnRuns};

/// A wire protocol.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dialect {
    /// zut RPC v1.
    #[default]
    Zut,
    /// letscode-rpc/1.
    Letscode,
    /// Zi RPC v1.
    Zi,
    /// Agent Client Protocol v1.
    Acp,
}

/// What a client frame asks of the hub.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    /// A request for the child: its `id` (as the client wrote it) and its
    /// command or method name.
    Forward { id: Option<Value>, command: String },
    /// The dialect's hello after authentication, answered by the gateway;
    /// `refusal` is a fatal answer that closes the client (a letscode
    /// major-version mismatch).
    Hello {
        id: Option<Value>,
        refusal: Option<Bytes>,
        own_runs: OwnRuns,
    },
    /// letscode `bye`: this client leaves, the child stays.
    Bye { id: Option<Value> },
    /// Zi `connection.set_events`: this client's event mode.
    SetEvents { id: Value, all: bool },
    /// ACP `session/new` or `session/load` (of `session`): answered by
    /// the gateway with the project's one session.
    Session {
        id: Value,
        load: bool,
        session: Option<String>,
    },
    /// A notification for the child (no id, no answer): ACP
    /// `session/cancel`.
    Notify { command: String },
    /// The client's answer to a request of the child (ACP
    /// `session/request_permission`), by the gateway id it was sent under.
    Answer { id: Value },
    /// Nothing to do and nothing to say (a notification an observer may
    /// not send).
    Ignore,
    /// Rejected before reaching the child; the reply to send.
    Reject(Bytes),
}

/// What a child line is.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// An answer to the request with gateway id `id`; `last` when no more
    /// answers to it follow (letscode `ack` is not the last).
    Reply { id: String, last: bool },
    /// An event for every client.
    Event(EventKind),
    /// A request of the child for its clients (ACP), with the child's id.
    Ask { id: Value },
    /// Not for clients (handshake frames, `bye`, answers without a
    /// routable id); the reason, for a debug log.
    Drop(&'static str),
}

/// What the hub tracks of an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// A run began (letscode and Zi `agent_start`).
    RunStart,
    /// A run ended (zut `done`, letscode and Zi `agent_end`).
    RunEnd,
    /// zut `usage` (cumulative token counts for metrics).
    Usage,
    /// Trails the run that just ended (Zi `agent_settled`).
    RunTail,
    Other,
}

/// How the gateway greets a new child.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildGreeting {
    TokenHello,
    Ready,
    /// The gateway's own requests ([`acp::Greeter`]).
    Requests,
}

/// The client's hello, read before it is attached.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientHello {
    pub id: Option<Value>,
    pub token: Option<String>,
    pub resume_after: Option<u64>,
    pub own_runs: OwnRuns,
}

impl Dialect {
    pub fn as_str(self) -> &'static str {
        match self {
            Dialect::Zut => "zut",
            Dialect::Letscode => "letscode",
            Dialect::Zi => "zi",
            Dialect::Acp => "acp",
        }
    }

    /// Arguments that select the dialect in `corral-agent rpc`.
    pub fn child_args(self) -> Vec<OsString> {
        match self {
            Dialect::Zut => Vec::new(),
            Dialect::Letscode => vec!["--dialect".into(), "letscode".into()],
            // The gateway bounds each client; the child serves them all.
            Dialect::Zi => vec![
                "--dialect".into(),
                "zi".into(),
                "--max-in-flight".into(),
                zi::CHILD_IN_FLIGHT.to_string().into(),
            ],
            Dialect::Acp => vec!["--dialect".into(), "acp".into()],
        }
    }

    /// Whether the child authenticates the gateway with a token hello
    /// (zut); the other dialects trust their stdio pipes.
    pub fn child_token(self) -> bool {
        self == Dialect::Zut
    }

    /// How the gateway greets a child: a token hello (zut), waiting for
    /// its `ready` (letscode, Zi), or requests of its own (ACP).
    pub fn child_greeting(self) -> ChildGreeting {
        match self {
            Dialect::Zut => ChildGreeting::TokenHello,
            Dialect::Letscode | Dialect::Zi => ChildGreeting::Ready,
            Dialect::Acp => ChildGreeting::Requests,
        }
    }

    /// Whether a client authenticated by its upgrade request is greeted
    /// at once (letscode and Zi clients wait for `ready` before writing),
    /// rather than after its first frame (zut).
    pub fn greets_first(self) -> bool {
        self != Dialect::Zut
    }

    /// Reads a client's first frame as this dialect's hello; `None` when it
    /// is not one; `Err` with a message when it is one but malformed.
    pub fn client_hello(self, frame: &Map<String, Value>) -> Option<Result<ClientHello, String>> {
        match self {
            Dialect::Zut => zut::client_hello(frame),
            Dialect::Letscode => letscode::client_hello(frame),
            Dialect::Zi => zi::client_hello(frame),
            Dialect::Acp => acp::client_hello(frame),
        }
    }

    /// What a client frame asks for; `observer` limits it to reading.
    pub fn inbound(self, frame: &Map<String, Value>, observer: bool) -> Inbound {
        match self {
            Dialect::Zut => zut::inbound(frame, observer),
            Dialect::Letscode => letscode::inbound(frame, observer),
            Dialect::Zi => zi::inbound(frame, observer),
            Dialect::Acp => acp::inbound(frame, observer),
        }
    }

    /// Classifies a child line; `None` when it is not a JSON object with a
    /// `type`.
    pub fn outbound(self, line: &[u8]) -> Option<Outbound> {
        match self {
            Dialect::Zut => zut::outbound(line),
            Dialect::Letscode => letscode::outbound(line),
            Dialect::Zi => zi::outbound(line),
            Dialect::Acp => acp::outbound(line),
        }
    }

    /// A child's answer as its client should see it: the client's own id
    /// back, and the run it started or queued (`run`). `None` when the
    /// line is not a JSON object.
    pub fn restore_id(
        self,
        line: &[u8],
        original: Option<Value>,
        run: Option<&str>,
    ) -> Option<Bytes> {
        let Ok(Value::Object(mut frame)) = serde_json::from_slice::<Value>(line) else {
            return None;
        };
        if let Some(run) = run {
            match self {
                Dialect::Zut => zut::name_run(&mut frame, run),
                Dialect::Letscode => letscode::name_run(&mut frame, run),
                Dialect::Zi => zi::name_run(&mut frame, run),
                Dialect::Acp => {}
            }
        }
        Some(match self {
            Dialect::Zut => {
                match original {
                    Some(id) => frame.insert("id".into(), id),
                    None => frame.shift_remove("id"),
                };
                to_bytes(&Value::Object(frame))
            }
            Dialect::Letscode | Dialect::Acp => {
                frame.insert("id".into(), original.unwrap_or(Value::Null));
                to_bytes(&Value::Object(frame))
            }
            Dialect::Zi => {
                frame.insert("id".into(), original.unwrap_or(Value::Null));
                zi::unstamped(frame)
            }
        })
    }

    /// A child event as it goes into the replay ring: with the project's
    /// `seq`, the id of the run it belongs to (`run`), and, for Zi,
    /// without the child's own `sequence`.
    pub fn event_bytes(self, line: &[u8], seq: u64, run: Option<&str>) -> Option<Bytes> {
        match self {
            Dialect::Zi => zi::event_bytes(line, seq, run),
            Dialect::Acp => acp::event_bytes(line, seq),
            _ => zut::stamp(line, seq, run.map(|run| (zut::RUN_FIELD, run))),
        }
    }

    /// An event the gateway makes up (`child_started`, `child_exited`,
    /// `error`, the end of a run cut short), with its `seq` and its run.
    pub fn gateway_event(self, kind: &str, fields: Value, seq: u64, run: Option<&str>) -> Bytes {
        match self {
            Dialect::Zi => zi::session_event(kind, fields, seq, run),
            Dialect::Acp => acp::gateway_event(kind, fields, seq),
            _ => zut::event(kind, fields, seq, run),
        }
    }

    /// Puts a W3C `traceparent` into a run-starting request for the child:
    /// top-level in zut and letscode, in `params._meta` in ACP. Zi records
    /// are decoded strictly (unknown fields are refused), so they carry none.
    pub fn put_trace_context(self, frame: &mut Map<String, Value>, traceparent: String) {
        let field = corral_telemetry::TRACEPARENT.to_string();
        match self {
            Dialect::Zut | Dialect::Letscode => {
                frame.insert(field, Value::String(traceparent));
            }
            Dialect::Acp => {
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
            Dialect::Zi => {}
        }
    }

    /// What a request for the child may do to runs.
    pub fn run_claim(self, command: &str, frame: &Map<String, Value>) -> Claim {
        match self {
            Dialect::Zut => zut::run_claim(command),
            Dialect::Letscode => letscode::run_claim(command),
            Dialect::Zi => zi::run_claim(command, frame),
            Dialect::Acp => Claim::None,
        }
    }

    /// What the child's answer `line` to a `command` says of runs.
    pub fn run_answer(self, command: &str, line: &[u8]) -> Answer {
        match self {
            Dialect::Zut => zut::run_answer(command, line),
            Dialect::Letscode => letscode::run_answer(command, line),
            Dialect::Zi => zi::run_answer(command, line),
            Dialect::Acp => Answer::Nothing,
        }
    }

    /// The events that end a run its child cannot finish (it died or was
    /// stopped), as `(type, fields)` for [`Dialect::gateway_event`].
    pub fn run_aborted(self, error: &str) -> Vec<(&'static str, Value)> {
        match self {
            Dialect::Zut => zut::run_aborted(error),
            Dialect::Letscode => letscode::run_aborted(error),
            Dialect::Zi => zi::run_aborted(error),
            Dialect::Acp => vec![("error", serde_json::json!({ "message": error }))],
        }
    }
}

/// Serialises a value as a line body (no LF), with U+2028/U+2029 escaped.
pub fn to_bytes(value: &Value) -> Bytes {
    let mut out = serde_json::to_vec(value).unwrap_or_default();
    corral_protocol::ndjson::escape_line_separators(&mut out);
    Bytes::from(out)
}

/// A line without surrounding whitespace.
fn trim(line: &[u8]) -> &[u8] {
    let start = line
        .iter()
        .position(|b| !b.is_ascii_whitespace())
        .unwrap_or(line.len());
    let end = line
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    &line[start..end]
}

/// The `type` of a line that starts with it (`{"type":"name",`), as the
/// children write events; `None` for any other shape, which then takes the
/// full parse. Lets the hub route a large event (a letscode
/// `message_update` repeats the whole partial message) without scanning
/// it: the bytes pass through untouched either way.
fn leading_type(line: &[u8]) -> Option<&str> {
    let rest = trim(line).strip_prefix(br#"{"type":""#)?;
    type_name(rest)
}

/// A JSON string's contents up to its closing quote, when it has no
/// escapes and is followed by more fields (`",`).
fn type_name(rest: &[u8]) -> Option<&str> {
    let end = rest.iter().position(|b| *b == b'"' || *b == b'\\')?;
    if rest[end] != b'"' || rest.get(end + 1) != Some(&b',') {
        return None;
    }
    std::str::from_utf8(&rest[..end]).ok()
}

/// The fields any dialect reads of a child line that takes the full parse.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    /// `Some(Value::Null)` for `"id": null`, `None` when there is no `id`.
    #[serde(default, deserialize_with = "present")]
    id: Option<Value>,
    /// Zi's `session_event` payload.
    #[serde(default)]
    event: Option<Value>,
}

/// Parses a child line's envelope, when the line is a JSON object.
fn envelope(line: &[u8]) -> Option<Envelope> {
    let trimmed = trim(line);
    if trimmed.first() != Some(&b'{') {
        return None;
    }
    serde_json::from_slice(trimmed).ok()
}

/// `Some(value)` for a field that is present, `null` included (a letscode
/// control message carries `"id": null`; a domain event has no `id`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// A non-negative integer field, `None` when absent or `null`.
fn resume_field(value: Option<&Value>, name: &str) -> Result<Option<u64>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` must be a non-negative integer")),
    }
}

/// A token field: a string, or absent.
fn token_field(value: Option<&Value>) -> Result<Option<String>, String> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(token)) => Ok(Some(token.clone())),
        Some(_) => Err("`token` must be a string".into()),
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_runs;
