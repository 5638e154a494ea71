//! The frames a hub makes up or answers itself and the rules it applies
//! per client, for its project's dialect: failed requests, refusals, the
//! health request and the stop request, the greeting and the hello answer, the
//! reply to a letscode `bye` and to Zi `connection.set_events`, per-client
//! admission, the state snapshot a Zi greeting needs, what a zut response
//! says of runs and the model, and the check of a child's `ready`. Pure,
//! no I/O.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{acp, letscode, zi, zut, Dialect};

/// What a dialect's admission rules may ask of one client's requests in
/// flight.
pub trait ClientRequests {
    /// Whether the client has a request with this `id` in flight.
    fn has_id(&self, id: &Value) -> bool;
    /// How many of the client's requests are in flight, not counting
    /// those for `command`.
    fn count_except(&self, command: &str) -> usize;
}

/// What an answer of the child tells the hub besides its client's reply.
#[derive(Debug, Default, PartialEq)]
pub struct ResponseNews {
    /// The request started a run (zut has no start event).
    pub run_started: bool,
    /// The model the child now uses.
    pub model: Option<String>,
}

impl Dialect {
    /// What an unauthenticated client must send first, as a refusal
    /// message.
    pub fn hello_required(self) -> String {
        let hello = match self {
            Dialect::Zut => r#"{"type":"hello","token":…}"#,
            Dialect::Letscode => r#"{"cmd":"hello","token":…}"#,
            Dialect::Zi => {
                r#"{"version":1,"id":…,"method":"connection.hello","params":{"token":…}}"#
            }
            Dialect::Acp => {
                r#"{"jsonrpc":"2.0","id":…,"method":"initialize","params":{"_meta":{"corral":{"token":…}},…}}"#
            }
        };
        format!("authentication required: the first message must be {hello}")
    }

    /// Checks the child's `ready` line: a letscode child must speak
    /// letscode-rpc/1 (any 1.x). The error says what it speaks instead.
    pub fn check_ready(self, ready: &Map<String, Value>) -> Result<(), String> {
        if self != Dialect::Letscode {
            return Ok(());
        }
        let protocol = ready.get("protocol").and_then(Value::as_str);
        if protocol.is_some_and(corral_protocol::letscode::speaks) {
            return Ok(());
        }
        Err(format!(
            "the child speaks {}, not {}",
            protocol.unwrap_or("an unnamed protocol"),
            letscode::PROTOCOL
        ))
    }

    /// The request (with id `id`) for the state snapshot a new client's
    /// greeting carries (Zi's `session.get_state`); `None` when the
    /// greeting needs none.
    pub fn state_request(self, id: &str) -> Option<String> {
        (self == Dialect::Zi).then(|| zi::get_state_line(id))
    }

    /// Whether each client's frames carry a connection-local `sequence`
    /// its feed stamps on the way out (Zi).
    pub fn sequenced(self) -> bool {
        self == Dialect::Zi
    }

    /// The answer to a request the child will never answer. `acked`: the
    /// child had acknowledged it (a letscode prompt whose run started).
    pub fn request_failed(
        self,
        id: Option<&Value>,
        command: &str,
        acked: bool,
        error: &str,
    ) -> Bytes {
        match self {
            Dialect::Zut => zut::response(id, Some(command), Err(error.to_string())),
            Dialect::Letscode if acked && command == "prompt" => letscode::done(id),
            Dialect::Letscode => letscode::error(id, error, false),
            Dialect::Zi => zi::failed(id, command, "operation_failed", error),
            Dialect::Acp => acp::error(id, acp::error_code::INTERNAL_ERROR, error),
        }
    }

    /// The reply to a client frame that could not be read (not JSON, not
    /// an object, binary).
    pub fn malformed(self, error: &str) -> Bytes {
        match self {
            Dialect::Zut => zut::response(None, None, Err(error.to_string())),
            Dialect::Letscode => letscode::error(None, error, false),
            Dialect::Zi => zi::malformed(error),
            Dialect::Acp => acp::error(None, acp::error_code::PARSE_ERROR, error),
        }
    }

    /// The refusal of a client that cannot be attached (authentication, or
    /// the agent cannot start), sent just before the socket closes. Zi
    /// refusals are complete frames (`sequence` 1): nothing else precedes
    /// them.
    pub fn refusal(self, id: Option<&Value>, code: &str, error: &str) -> Bytes {
        match self {
            Dialect::Zut => zut::response(id, Some("hello"), Err(error.to_string())),
            Dialect::Letscode => letscode::error(id, error, true),
            Dialect::Zi => zi::stamp(&zi::protocol_error(id, code, error), 1),
            Dialect::Acp => acp::error(id, -32000, error),
        }
    }

    /// The health request sent to the child with id `id`: cheap, answered
    /// even while a run is active.
    pub fn ping_line(self, id: &str) -> String {
        let frame = match self {
            Dialect::Zut => serde_json::json!({"id": id, "type": "ping"}),
            Dialect::Letscode => {
                serde_json::json!({"cmd": "hello", "id": id, "protocol": letscode::PROTOCOL})
            }
            Dialect::Zi => return zi::get_state_line(id),
            Dialect::Acp => return acp::ping_line(id),
        };
        format!("{frame}\n")
    }

    /// The request that aborts the active run, with id `id` (ACP: the
    /// `session/cancel` notification of the child's session, from its
    /// `hello`).
    pub fn abort_line(self, id: &str, hello: &Map<String, Value>) -> String {
        let frame = match self {
            Dialect::Acp => return acp::cancel_line(hello),
            Dialect::Zut => serde_json::json!({"id": id, "type": "abort"}),
            Dialect::Letscode => serde_json::json!({"cmd": "abort", "id": id}),
            Dialect::Zi => {
                serde_json::json!({"version": 1, "id": id, "method": "session.interrupt"})
            }
        };
        format!("{frame}\n")
    }

    /// A frame as one client gets it, numbered `sequence` (for a dialect
    /// that is [`Dialect::sequenced`]).
    pub fn stamp(self, frame: &[u8], sequence: u64) -> Bytes {
        match self {
            Dialect::Zi => zi::stamp(frame, sequence),
            _ => Bytes::copy_from_slice(frame),
        }
    }

    /// Whether a stored frame is an event a client may turn off (Zi
    /// `session_event`s, by `connection.set_events`).
    pub fn is_optional_event(self, frame: &[u8]) -> bool {
        self == Dialect::Zi && zi::is_session_event(frame)
    }

    /// A new client's first frames before any hello answer: letscode and
    /// Zi send `ready` (built from the child's `hello`, or the Zi `state`
    /// snapshot); zut sends nothing.
    pub fn greeting(self, hello: &Map<String, Value>, gateway: Value, state: Value) -> Vec<Bytes> {
        match self {
            Dialect::Zut => Vec::new(),
            Dialect::Letscode => vec![letscode::ready(hello, gateway)],
            Dialect::Zi => vec![zi::ready(state, gateway)],
            Dialect::Acp => Vec::new(),
        }
    }

    /// The gateway's answer to a client's hello (`id` is its id). zut's
    /// carries the child's own `hello` data plus `gateway` (and `gap` when
    /// replay cannot be complete).
    pub fn hello_answer(
        self,
        id: Option<&Value>,
        hello: &Map<String, Value>,
        gateway: Value,
        gap: bool,
    ) -> Vec<Bytes> {
        match self {
            Dialect::Zut => {
                let mut data = hello.clone();
                data.insert("gateway".into(), gateway);
                if gap {
                    data.insert("gap".into(), Value::Bool(true));
                }
                vec![zut::response(
                    id,
                    Some("hello"),
                    Ok(Some(Value::Object(data))),
                )]
            }
            Dialect::Letscode => vec![letscode::ack(id), letscode::done(id)],
            Dialect::Zi => {
                let id = id.cloned().unwrap_or(Value::Null);
                let result = json!({ "gateway": gateway });
                vec![zi::ok(&id, "connection.hello", result)]
            }
            Dialect::Acp => vec![acp::hello_answer(id, hello, gateway)],
        }
    }

    /// The answer to a client that says it leaves (letscode `bye`).
    pub fn bye_ack(self, id: Option<&Value>) -> Bytes {
        letscode::ack(id)
    }

    /// The reply to a request from a client that said it leaves.
    pub fn after_bye(self, id: Option<&Value>) -> Bytes {
        letscode::error(id, "this client said bye; no more commands", false)
    }

    /// The last frames of a client that said it leaves, before its close.
    pub fn farewell(self, id: Option<&Value>) -> Vec<Bytes> {
        vec![letscode::done(id), letscode::bye()]
    }

    /// The reply to a client's choice of events (Zi
    /// `connection.set_events`).
    pub fn events_set(self, id: &Value, all: bool) -> Bytes {
        let mode = if all { "all" } else { "none" };
        zi::ok(id, "connection.set_events", json!({ "mode": mode }))
    }

    /// The dialect's per-client rules for a request before it is
    /// forwarded: `Err` holds the refusal. Zi: an id may be in flight once,
    /// and at most [`zi::CLIENT_IN_FLIGHT`] operations besides an
    /// interruption.
    pub fn admit(
        self,
        id: Option<&Value>,
        command: &str,
        requests: &dyn ClientRequests,
    ) -> Result<(), Bytes> {
        if self != Dialect::Zi {
            return Ok(());
        }
        if id.is_some_and(|id| requests.has_id(id)) {
            let message = "the request id is in flight; reuse it after its response";
            return Err(zi::protocol_error(id, "invalid_request", message));
        }
        let interrupt = "session.interrupt";
        let limit = zi::CLIENT_IN_FLIGHT;
        if command != interrupt && requests.count_except(interrupt) >= limit {
            let message = format!("at most {limit} operations may be in flight per connection");
            return Err(zi::failed(id, command, "capacity", &message));
        }
        Ok(())
    }

    /// The metrics label of a request for `command`: the command itself
    /// when it is a known name (zut's command names, which cover
    /// letscode's too), `other` for the rest, so labels stay few.
    pub fn command_label(self, command: &str) -> &str {
        if corral_protocol::zut::COMMAND_NAMES.contains(&command) {
            command
        } else {
            "other"
        }
    }

    /// What the child's answer `line` to `command` tells the hub: a zut
    /// `prompt`/`compact` that started a run, the model after `set_model`.
    /// The other dialects say so in events.
    pub fn response_news(self, command: &str, line: &[u8]) -> ResponseNews {
        let mut news = ResponseNews::default();
        if self != Dialect::Zut {
            return news;
        }
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
}

pub use super::acp::Greeting;

/// How a hub greets a child with requests of its own (ACP), as a pure
/// state machine the supervisor drives.
pub trait ChildGreeter: Send + Sync {
    /// The first line to send.
    fn start(&self) -> String;
    /// Whether `frame` answers the greeting's request in flight.
    fn is_answer(&self, frame: &Map<String, Value>) -> bool;
    /// Takes that answer: the next line, or the child's hello data.
    fn answer(&mut self, frame: &Map<String, Value>) -> Result<Greeting, String>;
}

impl ChildGreeter for acp::Greeter {
    fn start(&self) -> String {
        acp::Greeter::start(self)
    }

    fn is_answer(&self, frame: &Map<String, Value>) -> bool {
        acp::Greeter::is_answer(frame)
    }

    fn answer(&mut self, frame: &Map<String, Value>) -> Result<Greeting, String> {
        acp::Greeter::answer(self, frame)
    }
}

impl Dialect {
    /// The greeter of a child that is greeted with requests
    /// ([`super::ChildGreeting::Requests`]): `cwd` is the project
    /// directory, `kept` the session the gateway kept from an earlier child.
    pub fn greeter(self, cwd: &str, kept: Option<String>) -> Option<Box<dyn ChildGreeter>> {
        match self {
            Dialect::Acp => Some(Box::new(acp::Greeter::new(cwd, kept))),
            _ => None,
        }
    }

    /// The session a child's hello names, for the gateway to keep and
    /// load again after a restart (ACP).
    pub fn kept_session(self, hello: &Map<String, Value>) -> Option<String> {
        match self {
            Dialect::Acp => hello
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_string),
            _ => None,
        }
    }

    /// The gateway's answer to ACP `session/new` / `session/load`.
    pub fn session_answer(
        self,
        id: &Value,
        hello: &Map<String, Value>,
        load: bool,
        session: Option<&str>,
    ) -> Bytes {
        acp::session_answer(id, hello, load, session)
    }

    /// Keeps the child's hello data current with an event it wrote (ACP:
    /// the session's mode after a `current_mode_update`, so a client that
    /// joins later is told the mode in force).
    pub fn hello_after(self, hello: &mut Map<String, Value>, line: &[u8]) {
        if self != Dialect::Acp {
            return;
        }
        if let Some(mode) = acp::mode_switched(line) {
            if let Some(Value::Object(modes)) = hello.get_mut("modes") {
                modes.insert("currentModeId".into(), Value::String(mode));
            }
        }
    }

    /// Whether a forwarded request keeps the project busy until its
    /// answer (ACP `session/prompt`; the other dialects say so in events).
    pub fn request_is_run(self, command: &str) -> bool {
        self == Dialect::Acp && acp::is_run(command)
    }

    /// A child request as clients get it, under the gateway id `gid`.
    pub fn ask_for_clients(self, line: &[u8], gid: &str) -> Option<Bytes> {
        acp::ask_for_clients(line, gid)
    }

    /// A client's answer to a child request, under the child's id.
    pub fn answer_for_child(self, frame: &Map<String, Value>, child_id: &Value) -> String {
        acp::answer_for_child(frame, child_id)
    }

    /// What the outcome of a client's answer is, for the other clients.
    pub fn answer_outcome(self, frame: &Map<String, Value>) -> Value {
        acp::outcome_of(frame)
    }

    /// What clients that did not answer request `gid` hear once it is
    /// settled with `outcome`.
    pub fn ask_resolved(self, gid: &str, outcome: &Value) -> Vec<Bytes> {
        acp::ask_resolved(gid, outcome)
    }

    /// The answer the child gets when nobody answered its request.
    pub fn ask_unanswered(self, child_id: &Value, method: &str) -> String {
        acp::ask_unanswered(child_id, method)
    }
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
