//! Zi request records: validation of the envelope (`version`, `id`,
//! `method`, `params`) and typed readers for parameters. Pure; no I/O.

use serde_json::{Map, Value};

/// The only protocol version.
pub const VERSION: u64 = 1;
/// Longest request id, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// Every method this server admits.
pub const METHODS: [&str; 13] = [
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
];

/// A request whose envelope is valid.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub id: String,
    pub method: &'static str,
    /// `params` when it is an object, otherwise the other top-level fields.
    pub params: Map<String, Value>,
}

/// Why a record was rejected before launch; `id` is echoed when readable.
#[derive(Debug, Clone, PartialEq)]
pub struct Rejection {
    pub id: Option<String>,
    pub message: String,
}

impl Rejection {
    fn new(id: Option<&str>, message: impl Into<String>) -> Rejection {
        Rejection {
            id: id.map(str::to_string),
            message: message.into(),
        }
    }
}

/// Checks a record's envelope.
pub fn parse(mut record: Map<String, Value>) -> Result<Request, Rejection> {
    let id = match record.remove("id") {
        Some(Value::String(id)) if id.is_empty() => {
            return Err(Rejection::new(None, "`id` must not be empty"))
        }
        Some(Value::String(id)) if id.len() > MAX_ID_BYTES => {
            return Err(Rejection::new(
                None,
                format!("`id` is longer than {MAX_ID_BYTES} bytes"),
            ))
        }
        Some(Value::String(id)) => id,
        Some(_) => return Err(Rejection::new(None, "`id` must be a string")),
        None => return Err(Rejection::new(None, "`id` is required")),
    };
    let reject = |message: String| Err(Rejection::new(Some(&id), message));
    match record.remove("version") {
        Some(v) if v.as_u64() == Some(VERSION) => {}
        Some(v) => return reject(format!("unsupported protocol version {v}; expected 1")),
        None => return reject("`version` is required (1)".into()),
    }
    let method = match record.remove("method") {
        Some(Value::String(name)) => match METHODS.iter().find(|m| **m == name) {
            Some(method) => *method,
            None => return reject(format!("unknown method {name:?}")),
        },
        Some(_) => return reject("`method` must be a string".into()),
        None => return reject("`method` is required".into()),
    };
    let params = match record.remove("params") {
        Some(Value::Object(params)) => params,
        Some(Value::Null) | None => record,
        Some(_) => return reject("`params` must be an object".into()),
    };
    Ok(Request { id, method, params })
}

/// Parameter readers: `Err` is the message of an `invalid_request`.
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
            Some(v) => v
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("`{name}` must be a non-negative integer")),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn accepts_the_documented_request() {
        let r = parse(record(
            json!({"version":1,"id":"state-1","method":"session.get_state"}),
        ));
        assert_eq!(
            r.map(|r| (r.id, r.method)),
            Ok(("state-1".to_string(), "session.get_state"))
        );
    }

    #[test]
    fn rejects_bad_envelopes_with_the_id_when_readable() {
        let bad_version = parse(record(json!({"version":2,"id":"a","method":"model.list"})));
        assert_eq!(bad_version.map_err(|e| e.id), Err(Some("a".into())));
        let unknown = parse(record(json!({"version":1,"id":"b","method":"nope"})));
        assert_eq!(unknown.map_err(|e| e.id), Err(Some("b".into())));
        let numeric_id = parse(record(json!({"version":1,"id":7,"method":"model.list"})));
        assert_eq!(numeric_id.map_err(|e| e.id), Err(None));
        let long = "x".repeat(MAX_ID_BYTES + 1);
        let too_long = parse(record(json!({"version":1,"id":long,"method":"model.list"})));
        assert!(too_long.is_err());
    }

    #[test]
    fn params_come_from_params_or_top_level() {
        let nested = parse(record(
            json!({"version":1,"id":"a","method":"session.get_messages","params":{"start":3}}),
        ))
        .unwrap();
        assert_eq!(nested.u64_param("start"), Ok(Some(3)));
        let flat = parse(record(
            json!({"version":1,"id":"a","method":"session.get_messages","start":4}),
        ))
        .unwrap();
        assert_eq!(flat.u64_param("start"), Ok(Some(4)));
    }
}
