//! Zi request records: validation of the envelope (`version`, `id`,
//! `method`) and of each method's parameters, as strictly as the reference
//! decoder: unknown fields, missing fields and out-of-range values are all
//! rejected before launch. Pure; no I/O.
//!
//! Checks run in the reference's order: `version` (answered with the id
//! when it is readable), `id`, `method`, then the method's own fields.

use serde_json::{Map, Value};

use super::frame::ProtocolCode;

pub use corral_protocol::zi::{MAX_ID_BYTES, VERSION};
/// Messages (and outcomes) per page, at most and by default.
pub const PAGE_COUNT: u64 = 100;
/// Longest prompt text.
pub const MAX_PROMPT_BYTES: usize = 8 * 1024 * 1024;
/// Longest completion id.
pub const MAX_COMPLETION_ID: usize = 256;
/// Longest command name and arguments.
pub const MAX_COMMAND_NAME: usize = 64;
pub const MAX_COMMAND_ARGUMENTS: usize = 256 * 1024;
/// Longest model provider or model id.
pub const MAX_MODEL_FIELD: usize = 256;
/// Thinking levels as Zi spells them.
pub const THINKING_LEVELS: [&str; 7] = ["off", "minimal", "low", "medium", "high", "xhigh", "max"];
/// Largest integer a JavaScript client can send exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Every method this server admits.
pub const METHODS: [&str; 14] = [
    "session.get_state",
    "session.get_messages",
    "session.get_outcomes",
    "session.prompt",
    "session.interrupt",
    "session.await_idle",
    "connection.set_events",
    "command.list",
    "command.invoke",
    "model.list",
    "model.select",
    "thinking.list",
    "thinking.select",
    "mcp.select",
];

/// A request whose envelope and parameters are valid.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: String,
    pub method: &'static str,
    /// The checked `params` (empty when the method takes none or they were
    /// left out).
    pub params: Map<String, Value>,
}

/// Why a record was rejected before launch; `id` is echoed when readable.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub id: Option<String>,
    pub code: ProtocolCode,
    pub message: String,
}

impl Rejection {
    fn new(id: Option<&str>, code: ProtocolCode, message: impl Into<String>) -> Rejection {
        Rejection {
            id: id.map(str::to_string),
            code,
            message: message.into(),
        }
    }
}

/// Whether a method takes `params`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Params {
    None,
    Optional,
    Required,
}

/// Checks a record: envelope first, then the method's fields.
pub fn parse(record: Map<String, Value>) -> Result<Request, Rejection> {
    let id = match record.get("id") {
        Some(Value::String(id)) if !id.is_empty() && id.len() <= MAX_ID_BYTES => Some(id.as_str()),
        _ => None,
    };
    let version = record.get("version");
    if version.and_then(Value::as_f64) != Some(VERSION as f64) {
        let shown = match version {
            None => "undefined".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        let message = format!("Unsupported RPC protocol version: {shown} (expected 1)");
        return Err(Rejection::new(
            id,
            ProtocolCode::UnsupportedVersion,
            message,
        ));
    }
    let Some(id) = id else {
        let message =
            format!("RPC request id must be a non-empty string of at most {MAX_ID_BYTES} bytes");
        return Err(Rejection::new(None, ProtocolCode::InvalidRequest, message));
    };
    let fail = |message: String| Rejection::new(Some(id), ProtocolCode::InvalidRequest, message);
    let Some(Value::String(name)) = record.get("method") else {
        return Err(fail("RPC request method must be a string".into()));
    };
    let Some(method) = METHODS.iter().find(|m| **m == name).copied() else {
        let message = format!("Unknown RPC method: {name}");
        return Err(Rejection::new(
            Some(id),
            ProtocolCode::UnknownMethod,
            message,
        ));
    };
    let params = check_params(&record, method).map_err(fail)?;
    Ok(Request {
        id: id.to_string(),
        method,
        params,
    })
}

/// The method's `params`, checked; `Err` is the message of an
/// `invalid_request`.
fn check_params(record: &Map<String, Value>, method: &str) -> Result<Map<String, Value>, String> {
    let (rule, keys, required): (Params, &[&str], &[&str]) = match method {
        "session.get_messages" | "session.get_outcomes" => {
            (Params::Optional, &["start", "limit"], &[])
        }
        "session.await_idle" => (Params::Optional, &["completionId"], &["completionId"]),
        "session.prompt" => (
            Params::Required,
            &["delivery", "text", "completionId"],
            &["delivery", "text"],
        ),
        "command.invoke" => (
            Params::Required,
            &["name", "arguments"],
            &["name", "arguments"],
        ),
        "connection.set_events" => (Params::Required, &["mode"], &["mode"]),
        "model.select" => (Params::Required, &["provider", "id"], &["provider", "id"]),
        "mcp.select" => (Params::Required, &["servers"], &["servers"]),
        "thinking.select" => (Params::Required, &["level", "scope"], &["level"]),
        _ => (Params::None, &[], &[]),
    };
    let envelope: &[&str] = match rule {
        Params::None => &["version", "id", "method"],
        _ => &["version", "id", "method", "params"],
    };
    let envelope_required = if rule == Params::Required {
        envelope
    } else {
        &envelope[..3]
    };
    require_keys(record, envelope, envelope_required)?;
    let params = match record.get("params") {
        None => Map::new(),
        Some(Value::Object(params)) => {
            require_keys(params, keys, required)?;
            check_values(method, params)?;
            params.clone()
        }
        Some(_) => return Err(format!("{method} params must be an object")),
    };
    Ok(params)
}

fn require_keys(
    value: &Map<String, Value>,
    allowed: &[&str],
    required: &[&str],
) -> Result<(), String> {
    if value.keys().any(|key| !allowed.contains(&key.as_str())) {
        return Err("RPC request contains unknown fields".into());
    }
    if required.iter().any(|key| !value.contains_key(*key)) {
        return Err("RPC request is missing required fields".into());
    }
    Ok(())
}

/// The value checks of each method's fields.
fn check_values(method: &str, params: &Map<String, Value>) -> Result<(), String> {
    let get = |key: &str| params.get(key);
    match method {
        "session.get_messages" | "session.get_outcomes" => {
            let noun = if method == "session.get_messages" {
                "Message"
            } else {
                "Outcome"
            };
            if get("start").is_some_and(|v| safe_uint(v).is_none()) {
                return Err(format!("{noun} start must be a non-negative integer"));
            }
            let limit = get("limit").map(safe_uint);
            if limit.is_some_and(|l| !(1..=PAGE_COUNT).contains(&l.unwrap_or(0))) {
                return Err(format!(
                    "{noun} limit must be an integer from 1 through {PAGE_COUNT}"
                ));
            }
        }
        "session.await_idle" => {
            bounded(
                get("completionId"),
                "Completion id",
                MAX_COMPLETION_ID,
                true,
            )?;
        }
        "session.prompt" => {
            let delivery = get("delivery").and_then(Value::as_str);
            if !matches!(
                delivery,
                Some("direct" | "steer" | "follow_up" | "continue")
            ) {
                return Err("Prompt delivery must be direct, steer, follow_up, or continue".into());
            }
            bounded(get("text"), "Prompt text", MAX_PROMPT_BYTES, false)?;
            if let Some(id) = get("completionId") {
                bounded(Some(id), "Completion id", MAX_COMPLETION_ID, true)?;
            }
        }
        "command.invoke" => {
            let name = bounded(get("name"), "Command name", MAX_COMMAND_NAME, true)?;
            if !is_kebab_case(name) {
                return Err("Command name must use lowercase kebab-case".into());
            }
            bounded(
                get("arguments"),
                "Command arguments",
                MAX_COMMAND_ARGUMENTS,
                false,
            )?;
        }
        "connection.set_events" => {
            let mode = get("mode").and_then(Value::as_str);
            if !matches!(mode, Some("all" | "none" | "activity")) {
                return Err("Event mode must be all, none, or activity".into());
            }
        }
        "model.select" => {
            bounded(get("provider"), "Model provider", MAX_MODEL_FIELD, true)?;
            bounded(get("id"), "Model id", MAX_MODEL_FIELD, true)?;
        }
        "thinking.select" => {
            let level = get("level").and_then(Value::as_str);
            if !level.is_some_and(|l| THINKING_LEVELS.contains(&l)) {
                return Err("Unsupported thinking level".into());
            }
            match get("scope") {
                None | Some(Value::Null) => {}
                Some(Value::String(s)) if s == "global" || s == "project" => {}
                Some(_) => return Err("Thinking scope must be global or project".into()),
            }
        }
        _ => {}
    }
    Ok(())
}

/// A string field of at most `max` bytes (and not empty, with
/// `non_empty`), in the reference's wording.
fn bounded<'a>(
    value: Option<&'a Value>,
    name: &str,
    max: usize,
    non_empty: bool,
) -> Result<&'a str, String> {
    match value {
        Some(Value::String(s)) if s.len() <= max && !(non_empty && s.is_empty()) => Ok(s),
        _ => {
            let kind = if non_empty {
                "a non-empty string"
            } else {
                "a string"
            };
            Err(format!("{name} must be {kind} of at most {max} bytes"))
        }
    }
}

/// A non-negative integer a JavaScript client could have sent (`3.0`
/// included).
fn safe_uint(value: &Value) -> Option<u64> {
    let n = match value.as_u64() {
        Some(n) => n,
        None => {
            let f = value.as_f64()?;
            if f.fract() != 0.0 || f < 0.0 || f > MAX_SAFE_INTEGER as f64 {
                return None;
            }
            f as u64
        }
    };
    (n <= MAX_SAFE_INTEGER).then_some(n)
}

/// `^[a-z][a-z0-9]*(-[a-z0-9]+)*$`.
fn is_kebab_case(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_lowercase())
        && name.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

/// Parameter readers, for requests [`parse`] accepted (`Err` is the message
/// of an `invalid_request`, for shapes it let through).
impl Request {
    pub fn str_param(&self, name: &str, max_bytes: usize) -> Result<Option<&str>, String> {
        match self.params.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.len() > max_bytes => {
                Err(format!("`{name}` is longer than {max_bytes} bytes"))
            }
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(format!("`{name}` must be a string")),
        }
    }

    pub fn required_str(&self, name: &str, max_bytes: usize) -> Result<&str, String> {
        self.str_param(name, max_bytes)?
            .ok_or_else(|| format!("`{name}` is required"))
    }

    pub fn u64_param(&self, name: &str) -> Result<Option<u64>, String> {
        match self.params.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(v) => safe_uint(v)
                .map(Some)
                .ok_or_else(|| format!("`{name}` must be a non-negative integer")),
        }
    }
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
