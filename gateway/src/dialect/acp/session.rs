//! The project's one ACP session as the gateway answers it to every
//! editor: what `initialize` says the gateway honours, the answers to
//! `session/new|load|resume|close|list`, the pages of history asked of
//! the child for one editor's load, a reset for everyone, and the session
//! state (modes, config options) kept current for editors that come later.
//!
//! Choices where ACP is silent (a gateway shares one session between
//! editors):
//! - `sessionCapabilities` are the gateway's, not the agent's: `list`,
//!   `resume` and `close`; `loadSession` is always true (the gateway
//!   replays the conversation itself when the agent cannot). There is no
//!   fork: `session/fork` and `session/delete` are refused with
//!   `-32601`.
//! - `session/list` lists the projects the identity may open, one
//!   session each: `cwd` is the virtual path `/projects/NAME` (never the
//!   host's), `title` the project's name, `sessionId` the session kept for
//!   it, or `corral-project:NAME` for a project that never ran (loading
//!   that id opens the project's session). One connection serves one
//!   project (its URL): the others are listed for the editor to open
//!   another connection to.
//! - `_corral/session/reset` starts a fresh conversation for everyone
//!   (the agent's `session/new`); `session/new` from an editor only joins.
//! - History items are `session/update` notifications with
//!   `_meta.corral.replay: true` and no `seq`: they are not events of the
//!   live stream, so no `seq` is ever delivered twice.

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::{error, error_code, result, to_bytes};
use crate::dialect::rules::{HistoryPage, ListedSession};
use crate::dialect::Open;
use corral_protocol::acp::{method, JSONRPC, PROTOCOL_VERSION};

/// The gateway's own request for a page of the conversation.
pub const HISTORY: &str = "_corral/session/history";
/// A client's request for a fresh conversation for everyone.
pub const RESET: &str = "_corral/session/reset";
/// Methods the gateway refuses: it shares one session, which no editor
/// may fork or delete.
pub const REFUSED: [&str; 2] = ["session/fork", "session/delete"];
/// Prefix of the id a project that never ran is listed under.
pub const PROJECT_ID_PREFIX: &str = "corral-project:";
/// Where a listed project's working directory appears to be.
pub const VIRTUAL_ROOT: &str = "/projects/";
/// Longest history cursor taken from a child.
const MAX_CURSOR: usize = 4096;

/// The answer to a client's `initialize`: the agent's own answer with the
/// session capabilities the gateway honours, and what the gateway says of
/// itself in `_meta.corral`.
pub fn initialize_answer(id: Option<&Value>, hello: &Map<String, Value>, gateway: Value) -> Bytes {
    let mut answer = match hello.get("initialize") {
        Some(Value::Object(answer)) => answer.clone(),
        _ => Map::new(),
    };
    answer
        .entry("protocolVersion")
        .or_insert(json!(PROTOCOL_VERSION));
    let capabilities = answer
        .entry("agentCapabilities")
        .or_insert_with(|| json!({}));
    if !capabilities.is_object() {
        *capabilities = json!({});
    }
    capabilities["loadSession"] = json!(true);
    capabilities["sessionCapabilities"] = json!({"list": {}, "resume": {}, "close": {}});
    answer.insert("_meta".into(), json!({ "corral": gateway }));
    result(id, Value::Object(answer))
}

/// The session state the agent answered its `session/new|load` with (or
/// its reset), without the id: what every editor opening it is told.
pub fn session_state(answer: &Value) -> Value {
    let mut state = match answer {
        Value::Object(state) => state.clone(),
        _ => Map::new(),
    };
    state.remove("sessionId");
    Value::Object(state)
}

/// The answer to a client opening the session: the agent's session state
/// (modes, models, config options, anything else it said), the id for a
/// `session/new`, and the gateway's `meta` in `_meta.corral`.
pub fn opened(id: &Value, hello: &Map<String, Value>, open: Open, meta: Value) -> Bytes {
    let mut answer = match hello.get("session") {
        Some(Value::Object(state)) => state.clone(),
        _ => Map::new(),
    };
    if open == Open::New {
        let session = hello.get("sessionId").cloned().unwrap_or(json!(""));
        answer.insert("sessionId".into(), session);
    }
    let agent_meta = answer.entry("_meta").or_insert_with(|| json!({}));
    if !agent_meta.is_object() {
        *agent_meta = json!({});
    }
    agent_meta["corral"] = meta;
    result(Some(id), Value::Object(answer))
}

/// Whether `asked` names the session of `project`.
pub fn names_session(hello: &Map<String, Value>, project: &str, asked: &str) -> bool {
    hello.get("sessionId").and_then(Value::as_str) == Some(asked)
        || asked
            .strip_prefix(PROJECT_ID_PREFIX)
            .is_some_and(|name| name == project)
}

/// The refusal of a load or resume of another session.
pub fn unknown(id: &Value, hello: &Map<String, Value>, asked: Option<&str>) -> Bytes {
    let session = hello.get("sessionId").and_then(Value::as_str).unwrap_or("");
    let message = format!(
        "unknown session {:?}: this project's session is {session:?} (one connection serves one project)",
        asked.unwrap_or("")
    );
    error(Some(id), error_code::RESOURCE_NOT_FOUND, &message)
}

/// The id a project is listed under.
pub fn listed_id(listed: &ListedSession) -> String {
    listed
        .session
        .clone()
        .unwrap_or_else(|| format!("{PROJECT_ID_PREFIX}{}", listed.project))
}

/// A page of `session/list`.
pub fn listed(id: &Value, sessions: &[ListedSession], next: Option<&str>) -> Bytes {
    let sessions: Vec<Value> = sessions
        .iter()
        .map(|listed| {
            let mut info = json!({
                "sessionId": listed_id(listed),
                "cwd": format!("{VIRTUAL_ROOT}{}", listed.project),
                "title": listed.project,
            });
            if let Some(updated) = listed.updated.and_then(rfc3339) {
                info["updatedAt"] = json!(updated);
            }
            info
        })
        .collect();
    let mut answer = json!({ "sessions": sessions });
    if let Some(next) = next {
        answer["nextCursor"] = json!(next);
    }
    result(Some(id), answer)
}

fn rfc3339(at: std::time::SystemTime) -> Option<String> {
    time::OffsetDateTime::from(at)
        .format(&time::format_description::well_known::Rfc3339)
        .ok()
}

/// The request for a page of the conversation after `cursor`.
pub fn history_request(hello: &Map<String, Value>, gid: &str, cursor: Option<&str>) -> String {
    let session = hello.get("sessionId").cloned().unwrap_or(Value::Null);
    let mut params = json!({ "sessionId": session });
    if let Some(cursor) = cursor {
        params["cursor"] = json!(cursor);
    }
    let frame = json!({"jsonrpc": JSONRPC, "id": gid, "method": HISTORY, "params": params});
    format!("{frame}\n")
}

/// The child's answer to a history request: its updates as
/// `session/update` notifications marked as history.
pub fn history_page(line: &[u8]) -> HistoryPage {
    let Ok(Value::Object(mut frame)) = serde_json::from_slice::<Value>(line) else {
        return HistoryPage::Failed("an answer that is not a JSON object".into());
    };
    if let Some(failure) = frame.get("error") {
        if failure.get("code").and_then(Value::as_i64) == Some(error_code::METHOD_NOT_FOUND) {
            return HistoryPage::Unsupported;
        }
        let message = failure
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("an error without a message");
        return HistoryPage::Failed(message.to_string());
    }
    let Some(Value::Object(mut answer)) = frame.remove("result") else {
        return HistoryPage::Failed("an answer without a result".into());
    };
    let Some(Value::Array(updates)) = answer.remove("updates") else {
        return HistoryPage::Failed("an answer without `updates`".into());
    };
    let next = match answer.remove("nextCursor") {
        None | Some(Value::Null) => None,
        Some(Value::String(next)) if next.len() <= MAX_CURSOR => Some(next),
        Some(_) => return HistoryPage::Failed("an invalid `nextCursor`".into()),
    };
    let frames = updates
        .into_iter()
        .filter_map(|item| match item {
            Value::Object(mut params) if params.contains_key("update") => {
                params.insert("_meta".into(), json!({"corral": {"replay": true}}));
                let frame = json!({"jsonrpc": JSONRPC, "method": method::SESSION_UPDATE,
                    "params": params});
                Some(to_bytes(&frame))
            }
            _ => None,
        })
        .collect();
    HistoryPage::Updates { frames, next }
}

/// The agent's `session/new` that starts a fresh conversation.
pub fn reset(hello: &Map<String, Value>) -> Map<String, Value> {
    let cwd = hello.get("cwd").cloned().unwrap_or(json!("/"));
    let Value::Object(frame) = json!({"jsonrpc": JSONRPC, "method": method::SESSION_NEW,
        "params": {"cwd": cwd, "mcpServers": []}})
    else {
        unreachable!("a literal object");
    };
    frame
}

/// Takes the agent's answer to a reset into the hello data.
pub fn reset_done(hello: &mut Map<String, Value>, line: &[u8]) -> bool {
    let Ok(frame) = serde_json::from_slice::<Value>(line) else {
        return false;
    };
    let Some(answer) = frame.get("result") else {
        return false;
    };
    if let Some(session) = answer.get("sessionId").and_then(Value::as_str) {
        hello.insert("sessionId".into(), json!(session));
    }
    hello.insert("session".into(), session_state(answer));
    true
}

/// Keeps the session state current with an update: the mode after a
/// `current_mode_update`, the config options after a
/// `config_option_update` (and the mode, when one of them is the mode).
pub fn follow_update(hello: &mut Map<String, Value>, line: &[u8]) {
    const MODE: &[u8] = b"current_mode_update";
    const CONFIG: &[u8] = b"config_option_update";
    let mentions = |mark: &[u8]| line.windows(mark.len()).any(|w| w == mark);
    if !mentions(MODE) && !mentions(CONFIG) {
        return;
    }
    let Ok(frame) = serde_json::from_slice::<Value>(line) else {
        return;
    };
    if frame.get("method").and_then(Value::as_str) != Some(method::SESSION_UPDATE) {
        return;
    }
    let Some(update) = frame.pointer("/params/update") else {
        return;
    };
    let Some(Value::Object(state)) = hello.get_mut("session") else {
        return;
    };
    let mode = match update.get("sessionUpdate").and_then(Value::as_str) {
        Some("current_mode_update") => update.get("currentModeId").and_then(Value::as_str),
        Some("config_option_update") => {
            let Some(options) = update.get("configOptions").filter(|o| o.is_array()) else {
                return;
            };
            state.insert("configOptions".into(), options.clone());
            options
                .as_array()
                .into_iter()
                .flatten()
                .find(|o| o.get("category").and_then(Value::as_str) == Some("mode"))
                .and_then(|o| o.get("currentValue"))
                .and_then(Value::as_str)
        }
        _ => return,
    };
    if let (Some(mode), Some(Value::Object(modes))) = (mode, state.get_mut("modes")) {
        modes.insert("currentModeId".into(), json!(mode));
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
