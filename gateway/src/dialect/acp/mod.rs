//! Agent Client Protocol v1 (JSON-RPC 2.0, one message per line).
//!
//! Through the gateway:
//! - **One session per project, owned by the gateway.** The gateway greets
//!   the child itself: `initialize`, then `session/load` of the session it
//!   kept in its state directory (when the agent can load sessions), else
//!   `session/new` ([`Greeter`]). Clients' `initialize`, `session/new`,
//!   `session/load`, `session/resume`, `session/close` and `session/list`
//!   are answered by the gateway ([`session`] says how): `new` joins the
//!   session, `load` replays the whole conversation first (asked of the
//!   child with `_corral/session/history`, else the replay ring), `resume`
//!   replays after the `seq` the client saw, `close` stops this client
//!   following it; the child never hears of them.
//! - **Events follow the session**: a client gets the project's events
//!   and the agent's requests only once it has opened the session, and
//!   not after it closed it, so nothing precedes its `initialize` answer.
//! - **Authentication**: an `Authorization: Bearer` header, or the first
//!   message is `initialize` with `params._meta.corral.token` (and
//!   optionally `resumeAfter`).
//! - **Ids**: requests get gateway ids on the way to the child; a
//!   notification (`session/cancel`) goes as it is.
//! - **Events**: `session/update` and the child's other notifications go
//!   to every client in the session with the project's `seq` in
//!   `params._meta.corral.seq`; the gateway's own events are
//!   `_corral/event` notifications. The `seq` space is the gateway
//!   process's: `_meta.corral.epoch` in the answers names it, and changes
//!   when the gateway restarts.
//! - **Requests from the agent** (`session/request_permission`) go to
//!   every client under a gateway id, and again to a client that opens
//!   the session while they wait; the first answer goes to the agent, the
//!   other clients get `$/cancel_request` and a `_corral/request_resolved`
//!   notification with the outcome.

pub mod mcp;
mod rules;
pub mod session;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{to_bytes, ClientHello, EventKind, Inbound, Open, Outbound, OwnRuns};
use crate::dialect::cost::{self, ReportedCost};

pub use corral_protocol::acp::error_code;
use corral_protocol::acp::{method, JSONRPC, PROTOCOL_VERSION};
pub use rules::Acp;

/// Methods an observer may call (the gateway answers them all).
pub const OBSERVER_METHODS: [&str; 6] = [
    method::INITIALIZE,
    method::SESSION_NEW,
    method::SESSION_LOAD,
    SESSION_RESUME,
    SESSION_CLOSE,
    SESSION_LIST,
];
pub const SESSION_RESUME: &str = "session/resume";
pub const SESSION_CLOSE: &str = "session/close";
pub const SESSION_LIST: &str = "session/list";
/// The gateway's own notifications.
pub const GATEWAY_EVENT: &str = "_corral/event";
pub const REQUEST_RESOLVED: &str = "_corral/request_resolved";
const CANCEL_REQUEST: &str = "$/cancel_request";
/// Ids of the gateway's greeting requests to the child.
const INIT_ID: &str = "corral-init";
const SESSION_ID: &str = "corral-session";

/// The `_meta.corral` object of a message's params, when present.
fn corral_meta(frame: &Map<String, Value>) -> Option<&Map<String, Value>> {
    frame
        .get("params")?
        .get("_meta")?
        .get("corral")?
        .as_object()
}

pub fn client_hello(frame: &Map<String, Value>) -> Option<Result<ClientHello, String>> {
    if frame.get("method").and_then(Value::as_str) != Some(method::INITIALIZE) {
        return None;
    }
    let empty = Map::new();
    let meta = corral_meta(frame).unwrap_or(&empty);
    Some((|| {
        Ok(ClientHello {
            id: frame.get("id").cloned(),
            token: super::token_field(meta.get("token"))?,
            resume_after: super::resume_field(meta.get("resumeAfter"), "resumeAfter")?,
            own_runs: OwnRuns::default(),
        })
    })())
}

/// What a client message asks for.
pub fn inbound(frame: &Map<String, Value>, observer: bool) -> Inbound {
    let id = frame.get("id").cloned().filter(|id| !id.is_null());
    let Some(method) = frame.get("method") else {
        if let Some(id) = id.filter(|_| frame.contains_key("result") || frame.contains_key("error"))
        {
            if observer {
                return Inbound::Ignore;
            }
            return Inbound::AnswerAsk { id };
        }
        return Inbound::Reject(error(
            None,
            error_code::INVALID_REQUEST,
            "not a JSON-RPC request, notification or response",
        ));
    };
    let Some(method) = method.as_str() else {
        return Inbound::Reject(error(
            id.as_ref(),
            error_code::INVALID_REQUEST,
            "`method` must be a string",
        ));
    };
    if observer && !OBSERVER_METHODS.contains(&method) {
        let message = format!(
            "the observer role may not call `{method}`; observers may call {}",
            OBSERVER_METHODS.join(", ")
        );
        return match id {
            Some(id) => Inbound::Reject(error(Some(&id), error_code::INVALID_REQUEST, &message)),
            None => Inbound::Ignore,
        };
    }
    let params = frame.get("params");
    let session = || {
        params
            .and_then(|p| p.get("sessionId"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let Some(id) = id else {
        return match method {
            method::INITIALIZE
            | method::SESSION_NEW
            | method::SESSION_LOAD
            | SESSION_RESUME
            | SESSION_CLOSE
            | SESSION_LIST
            | session::RESET
            | mcp::SELECT => Inbound::Ignore,
            _ if session::REFUSED.contains(&method) => Inbound::Ignore,
            _ => Inbound::Notify {
                command: method.to_string(),
            },
        };
    };
    match method {
        method::INITIALIZE => Inbound::Hello {
            id: Some(id),
            refusal: None,
            own_runs: OwnRuns::default(),
        },
        method::SESSION_NEW | method::SESSION_LOAD | SESSION_RESUME => {
            let open = match method {
                method::SESSION_NEW => Open::New,
                method::SESSION_LOAD => Open::Load,
                _ => Open::Resume,
            };
            let empty = Map::new();
            let meta = corral_meta(frame).unwrap_or(&empty);
            let seen =
                super::resume_field(meta.get("resumeAfter"), "resumeAfter").and_then(|after| {
                    match meta.get("epoch") {
                        None | Some(Value::Null) => Ok((after, None)),
                        Some(Value::String(epoch)) => Ok((after, Some(epoch.clone()))),
                        Some(_) => Err("`epoch` must be a string".to_string()),
                    }
                });
            match seen {
                Ok((resume_after, epoch)) => Inbound::OpenSession {
                    id,
                    open,
                    session: session(),
                    resume_after,
                    epoch,
                    mcp_servers: mcp::editor_servers(params),
                },
                Err(message) => {
                    Inbound::Reject(error(Some(&id), error_code::INVALID_PARAMS, &message))
                }
            }
        }
        SESSION_CLOSE => Inbound::CloseSession { id },
        SESSION_LIST => Inbound::ListSessions {
            id,
            cursor: params
                .and_then(|p| p.get("cursor"))
                .and_then(Value::as_str)
                .map(str::to_string),
        },
        session::RESET => Inbound::ResetSession { id },
        mcp::SELECT => Inbound::Reject(error(
            Some(&id),
            error_code::METHOD_NOT_FOUND,
            crate::mcp::SELECT_REFUSED,
        )),
        _ if session::REFUSED.contains(&method) => {
            let message = format!(
                "`{method}` is not offered: the gateway shares one session per project between editors; `session/close` leaves it, `{}` starts a fresh conversation for everyone",
                session::RESET
            );
            Inbound::Reject(error(Some(&id), error_code::METHOD_NOT_FOUND, &message))
        }
        _ => Inbound::Forward {
            id: Some(id),
            command: method.to_string(),
        },
    }
}

/// Classifies a child message.
pub fn outbound(line: &[u8]) -> Option<Outbound> {
    let Ok(Value::Object(frame)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    let id = frame.get("id").filter(|id| !id.is_null());
    match (frame.get("method").and_then(Value::as_str), id) {
        (Some(_), Some(id)) => Some(Outbound::Ask { id: id.clone() }),
        (Some(_), None) => Some(Outbound::Event(EventKind::Other)),
        (None, Some(Value::String(id))) => Some(Outbound::Reply {
            id: id.clone(),
            last: true,
        }),
        (None, _) => Some(Outbound::Drop("a response without a gateway id")),
    }
}

/// A child notification as it goes into the replay ring: with the
/// project's `seq` in `params._meta.corral.seq`.
pub fn event_bytes(line: &[u8], seq: u64) -> Option<Bytes> {
    let Ok(Value::Object(mut frame)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    stamp(&mut frame, seq);
    Some(to_bytes(&Value::Object(frame)))
}

fn stamp(frame: &mut Map<String, Value>, seq: u64) {
    let params = frame
        .entry("params")
        .or_insert_with(|| Value::Object(Map::new()));
    if !params.is_object() {
        return;
    }
    let meta = &mut params["_meta"];
    if !meta.is_object() {
        *meta = json!({});
    }
    let corral = &mut meta["corral"];
    if !corral.is_object() {
        *corral = json!({});
    }
    corral["seq"] = json!(seq);
}

/// A gateway event (`child_started`, `child_exited`, `error`) as an
/// `_corral/event` notification.
pub fn gateway_event(kind: &str, fields: Value, seq: u64) -> Bytes {
    let mut params = Map::new();
    params.insert("type".into(), json!(kind));
    if let Value::Object(fields) = fields {
        params.extend(fields);
    }
    let mut frame = notification(GATEWAY_EVENT, Value::Object(params));
    stamp(&mut frame, seq);
    to_bytes(&Value::Object(frame))
}

fn notification(method: &str, params: Value) -> Map<String, Value> {
    let Value::Object(frame) = json!({"jsonrpc": JSONRPC, "method": method, "params": params})
    else {
        unreachable!("a literal object");
    };
    frame
}

/// A JSON-RPC error response.
pub fn error(id: Option<&Value>, code: i64, message: &str) -> Bytes {
    to_bytes(&json!({
        "jsonrpc": JSONRPC,
        "id": id.cloned().unwrap_or(Value::Null),
        "error": {"code": code, "message": message},
    }))
}

/// A JSON-RPC result response.
pub fn result(id: Option<&Value>, result: Value) -> Bytes {
    to_bytes(&json!({
        "jsonrpc": JSONRPC,
        "id": id.cloned().unwrap_or(Value::Null),
        "result": result,
    }))
}

/// A `usage_update` session update's `cost`, when it is in USD: what
/// the session cost so far.
pub fn reported_cost(line: &[u8]) -> Option<ReportedCost> {
    if !cost::mentions(line, b"usage_update") {
        return None;
    }
    let frame: Value = serde_json::from_slice(line).ok()?;
    if frame.get("method")? != method::SESSION_UPDATE {
        return None;
    }
    let update = frame.get("params")?.get("update")?;
    if update.get("sessionUpdate")? != "usage_update" {
        return None;
    }
    let spent = update.get("cost")?;
    let currency = spent.get("currency")?.as_str()?;
    if !currency.eq_ignore_ascii_case("USD") {
        return None;
    }
    cost::amount(spent.get("amount")).map(ReportedCost::SessionTotal)
}

/// `session/cancel` for the project's session (an admin abort).
pub fn cancel_line(hello: &Map<String, Value>) -> String {
    let session = hello.get("sessionId").cloned().unwrap_or(Value::Null);
    let frame = json!({"jsonrpc": JSONRPC, "method": method::SESSION_CANCEL,
        "params": {"sessionId": session}});
    format!("{frame}\n")
}

/// A health request: an extension method every JSON-RPC peer answers
/// (with `-32601` when it does not know it), even during a prompt.
pub fn ping_line(id: &str) -> String {
    format!(
        "{}\n",
        json!({"jsonrpc": JSONRPC, "id": id, "method": "_corral/ping"})
    )
}

/// A child request as the clients get it: under the gateway id `gid`.
pub fn ask_for_clients(line: &[u8], gid: &str) -> Option<Bytes> {
    let Ok(Value::Object(mut frame)) = serde_json::from_slice::<Value>(line) else {
        return None;
    };
    frame.insert("id".into(), json!(gid));
    Some(to_bytes(&Value::Object(frame)))
}

/// A client's answer as the child gets it: under the child's own id.
pub fn answer_for_child(frame: &Map<String, Value>, child_id: &Value) -> String {
    let mut frame = frame.clone();
    frame.insert("id".into(), child_id.clone());
    frame.insert("jsonrpc".into(), json!(JSONRPC));
    format!("{}\n", Value::Object(frame))
}

/// What the other clients hear once a request was answered (or given
/// up): `$/cancel_request`, then the outcome.
pub fn ask_resolved(gid: &str, outcome: &Value) -> Vec<Bytes> {
    let cancel = notification(CANCEL_REQUEST, json!({"requestId": gid}));
    let resolved = notification(
        REQUEST_RESOLVED,
        json!({"requestId": gid, "outcome": outcome}),
    );
    vec![
        to_bytes(&Value::Object(cancel)),
        to_bytes(&Value::Object(resolved)),
    ]
}

/// The answer the child gets when no client answered its request `method`
/// in time: a permission request is cancelled, anything else fails.
pub fn ask_unanswered(child_id: &Value, method_name: &str) -> String {
    let frame = if method_name == method::SESSION_REQUEST_PERMISSION {
        json!({"jsonrpc": JSONRPC, "id": child_id,
            "result": {"outcome": {"outcome": "cancelled"}}})
    } else {
        json!({"jsonrpc": JSONRPC, "id": child_id,
            "error": {"code": error_code::INTERNAL_ERROR, "message": "no client answered"}})
    };
    format!("{frame}\n")
}

/// The outcome a client's answer carries, for the other clients.
pub fn outcome_of(frame: &Map<String, Value>) -> Value {
    match (frame.get("result"), frame.get("error")) {
        (Some(result), _) => result.get("outcome").cloned().unwrap_or(result.clone()),
        (None, Some(error)) => json!({"error": error}),
        (None, None) => Value::Null,
    }
}

/// Whether a forwarded request begins work the project is busy with
/// until its answer (`session/prompt`).
pub fn is_run(command: &str) -> bool {
    command == method::SESSION_PROMPT
}

/// What a child's greeting does next.
#[derive(Debug, PartialEq)]
pub enum Greeting {
    /// Send this line and wait for its answer.
    Send(String),
    /// The child is ready: its hello data (ACP: `initialize`, `sessionId`,
    /// `session` (the rest of its session/new|load answer), `cwd`).
    Ready(Map<String, Value>),
}

/// The gateway's greeting of an ACP child: `initialize`, then
/// `session/load` of the kept session (when the agent can load one) or
/// `session/new`; a failed load falls back to `session/new`.
#[derive(Debug)]
pub struct Greeter {
    cwd: String,
    kept: Option<String>,
    initialize: Option<Value>,
    loading: bool,
}

impl Greeter {
    pub fn new(cwd: &str, kept: Option<String>) -> Greeter {
        Greeter {
            cwd: cwd.to_string(),
            kept,
            initialize: None,
            loading: false,
        }
    }

    /// The first line to send.
    pub fn start(&self) -> String {
        let frame = json!({"jsonrpc": JSONRPC, "id": INIT_ID, "method": method::INITIALIZE,
            "params": {"protocolVersion": PROTOCOL_VERSION,
                "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false},
                    "terminal": false}}});
        format!("{frame}\n")
    }

    /// Whether `frame` answers the greeting's request in flight.
    pub fn is_answer(frame: &Map<String, Value>) -> bool {
        !frame.contains_key("method")
            && matches!(
                frame.get("id").and_then(Value::as_str),
                Some(INIT_ID | SESSION_ID)
            )
    }

    /// Takes the answer to the request in flight.
    pub fn answer(&mut self, frame: &Map<String, Value>) -> Result<Greeting, String> {
        let failure = frame.get("error").map(|e| {
            e.get("message")
                .and_then(Value::as_str)
                .unwrap_or("an error without a message")
                .to_string()
        });
        let Some(initialize) = &self.initialize else {
            if let Some(failure) = failure {
                return Err(format!("the agent refused initialize: {failure}"));
            }
            let answer = frame.get("result").cloned().unwrap_or(Value::Null);
            let can_load = answer
                .pointer("/agentCapabilities/loadSession")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            self.initialize = Some(answer);
            return Ok(Greeting::Send(
                match self.kept.clone().filter(|_| can_load) {
                    Some(session) => {
                        self.loading = true;
                        self.session_line(method::SESSION_LOAD, Some(&session))
                    }
                    None => self.session_line(method::SESSION_NEW, None),
                },
            ));
        };
        if let Some(failure) = failure {
            if self.loading {
                tracing::info!(
                    "the agent could not load its session ({failure}); starting a new one"
                );
                self.loading = false;
                return Ok(Greeting::Send(self.session_line(method::SESSION_NEW, None)));
            }
            return Err(format!("the agent refused session/new: {failure}"));
        }
        let answer = frame.get("result").cloned().unwrap_or(Value::Null);
        let session = if self.loading {
            self.kept.clone()
        } else {
            answer
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let Some(session) = session else {
            return Err("the agent's session/new answer has no sessionId".into());
        };
        let mut hello = Map::new();
        hello.insert("initialize".into(), initialize.clone());
        hello.insert("sessionId".into(), json!(session));
        hello.insert("session".into(), session::session_state(&answer));
        hello.insert("cwd".into(), json!(self.cwd));
        Ok(Greeting::Ready(hello))
    }

    fn session_line(&self, name: &str, session: Option<&str>) -> String {
        let mut params = json!({"cwd": self.cwd, "mcpServers": []});
        if let Some(session) = session {
            params["sessionId"] = json!(session);
        }
        let frame = json!({"jsonrpc": JSONRPC, "id": SESSION_ID, "method": name, "params": params});
        format!("{frame}\n")
    }
}

#[cfg(test)]
mod tests;
