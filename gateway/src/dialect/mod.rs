//! The wire dialects a child and its clients may speak: zut RPC v1 (the
//! default), letscode-rpc/1, Zi RPC v1 and the Agent Client Protocol.
//!
//! A dialect is one type: a [`DialectRules`] implementation in the
//! dialect's own module ([`zut`], [`letscode`], [`zi`], [`acp`]) holds
//! everything it means to the gateway: hello parsing, what a client frame
//! asks for ([`Inbound`]), what a child line is ([`Outbound`]), ids, runs,
//! replay stamping, every frame the gateway makes up itself, how the child
//! is started and greeted, and what `corral attach` answers itself. The
//! hub, the WebSocket layer, the supervisor and `corral attach` name no
//! dialect: they ask the project's rules, and the capabilities only some
//! dialects have ([`rules::Leave`], [`rules::EventFilter`],
//! [`rules::OneSession`], [`rules::ChildAsks`]).
//!
//! **Adding a dialect** = implement [`DialectRules`] in one file, and add
//! one line to the list: a variant of [`Dialect`] and its arm in
//! [`Dialect::rules`]. The trait has no default bodies, so the compiler
//! lists what the new dialect must decide. (`toy`, a test-only dialect,
//! shows it.) Everything here is pure (no I/O).
//!
//! Zi frames carry a connection-local `sequence`, so the hub stores and
//! queues Zi frames *unstamped* (`{"version":1,…}` without `sequence`) and
//! each client's feed stamps them on the way out
//! ([`DialectRules::sequenced`]).
//!
//! The own-runs extension ([`runs`]): every event of a run carries the
//! gateway's run id, the answer that starts or queues a run names it, and a
//! client may ask for the events of its own runs only.

pub mod acp;
pub mod attach;
pub mod audited;
pub mod cost;
pub mod hub;
pub mod letscode;
pub mod mcp_news;
pub mod rules;
pub mod runs;
pub mod token_hello;
#[cfg(test)]
mod toy;
pub mod zi;
pub mod zut;
mod zut_inflight;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

pub use audited::Audited;
pub use cost::ReportedCost;
pub use rules::DialectRules;
pub use runs::{Answer, Claim, OwnRuns};

/// A wire protocol: the one list of dialects. It only selects a
/// dialect's [`DialectRules`] ([`Dialect::rules`]).
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
    /// A dialect for the hub's unit tests, in `toy.rs`.
    #[cfg(test)]
    Toy,
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
    /// This client leaves, the child stays ([`rules::Leave`]; letscode
    /// `bye`).
    Leave { id: Option<Value> },
    /// This client's choice of events ([`rules::EventFilter`]; Zi
    /// `connection.set_events`): `all`, or without the optional ones.
    SetFilter { id: Value, all: bool },
    /// Opens the project's one session for this client (ACP
    /// `session/new`, `session/load`, `session/resume`), answered by the
    /// gateway ([`rules::OneSession`]): from then on the client gets the
    /// project's events. `session` is the id asked for (load, resume);
    /// `resume_after` and `epoch` what the client says it has seen.
    OpenSession {
        id: Value,
        open: Open,
        session: Option<String>,
        resume_after: Option<u64>,
        epoch: Option<String>,
        /// The MCP servers the client names for the session (ACP
        /// `mcpServers`), to be matched against the operator's.
        mcp_servers: Vec<crate::mcp::EditorServer>,
    },
    /// The client stops following the session (ACP `session/close`); the
    /// child and the other clients go on.
    CloseSession { id: Value },
    /// The sessions (projects) this client's identity may open, a page
    /// after `cursor` (ACP `session/list`).
    ListSessions { id: Value, cursor: Option<String> },
    /// A fresh conversation for everyone ([`rules::OneSession::reset`]).
    ResetSession { id: Value },
    /// A notification for the child (no id, no answer): ACP
    /// `session/cancel`.
    Notify { command: String },
    /// The client's answer to a request of the child
    /// ([`rules::ChildAsks`]; ACP `session/request_permission`), by the
    /// gateway id it was sent under.
    AnswerAsk { id: Value },
    /// Nothing to do and nothing to say (a notification an observer may
    /// not send).
    Ignore,
    /// Rejected before reaching the child; the reply to send.
    Reject(Bytes),
}

/// How a client opens the project's session ([`Inbound::OpenSession`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// Join it, from now on.
    New,
    /// Join it with the whole conversation first.
    Load,
    /// Join it, after what the client says it has seen.
    Resume,
}

/// What a child line is.
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    /// An answer to the request with gateway id `id`; `last` when no more
    /// answers to it follow (letscode `ack` is not the last).
    Reply { id: String, last: bool },
    /// An event for every client.
    Event(EventKind),
    /// A request of the child for its clients ([`rules::ChildAsks`]),
    /// with the child's id.
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
    /// The gateway's own requests ([`DialectRules::greeter`]).
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
    /// The rules of this dialect: the one place a dialect is picked.
    pub fn rules(self) -> &'static dyn DialectRules {
        match self {
            Dialect::Zut => &zut::Zut,
            Dialect::Letscode => &letscode::Letscode,
            Dialect::Zi => &zi::Zi,
            Dialect::Acp => &acp::Acp,
            #[cfg(test)]
            Dialect::Toy => &toy::Toy,
        }
    }

    /// The dialect called `name` (as `--dialect` spells it).
    pub fn named(name: &str) -> Option<Dialect> {
        <Dialect as clap::ValueEnum>::from_str(name, false).ok()
    }

    /// Every dialect.
    pub fn all() -> &'static [Dialect] {
        <Dialect as clap::ValueEnum>::value_variants()
    }
}

/// A child line as a JSON object, when it is one.
fn object_line(line: &[u8]) -> Option<Map<String, Value>> {
    match serde_json::from_slice::<Value>(line) {
        Ok(Value::Object(frame)) => Some(frame),
        _ => None,
    }
}

/// The `model` a child's hello data names.
fn model_field(hello: &Map<String, Value>) -> Option<&str> {
    hello.get("model").and_then(Value::as_str)
}

/// The metrics label of a request for `command`: the command itself when
/// it is one of zut's command names (which cover letscode's too), `other`
/// for the rest, so labels stay few.
fn known_command_label(command: &str) -> &str {
    if corral_protocol::zut::COMMAND_NAMES.contains(&command) {
        command
    } else {
        "other"
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
mod audited_tests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_runs;
