//! JSON-RPC 2.0 envelopes: one input line read as a request, a
//! notification or a response (to a request the agent sent), and the
//! frames the agent writes. Pure, no I/O.

use corral_protocol::acp::{error_code, JSONRPC};
use corral_protocol::ndjson::{json_kind, FrameError};
use serde_json::{json, Map, Value};

/// A JSON-RPC error object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(error_code::INVALID_PARAMS, message)
    }

    pub fn internal(message: impl Into<String>) -> RpcError {
        RpcError::new(error_code::INTERNAL_ERROR, message)
    }
}

/// One input line, understood.
#[derive(Clone, Debug, PartialEq)]
pub enum Incoming {
    /// A call that must be answered (`id` is a string or a number).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A call without `id`: never answered, not even with an error.
    Notification { method: String, params: Value },
    /// The client's answer to a request of the agent's.
    Response {
        id: Value,
        result: Result<Value, RpcError>,
    },
}

/// A line that is no valid message: answered with this error, with the
/// line's `id` when it had a usable one (else `null`).
#[derive(Clone, Debug, PartialEq)]
pub struct Unreadable {
    pub id: Value,
    pub error: RpcError,
}

/// Reads one line (or the framing error it produced).
pub fn read(line: Result<Map<String, Value>, FrameError>) -> Result<Incoming, Unreadable> {
    let mut object = line.map_err(|e| {
        let error = match e {
            // Valid JSON, but no object (batches are not supported).
            FrameError::NotObject(_) => {
                RpcError::new(error_code::INVALID_REQUEST, format!("invalid request: {e}"))
            }
            _ => RpcError::new(error_code::PARSE_ERROR, format!("parse error: {e}")),
        };
        Unreadable {
            id: Value::Null,
            error,
        }
    })?;
    let id = object.remove("id");
    let usable_id = match &id {
        Some(id @ (Value::String(_) | Value::Number(_))) => Some(id.clone()),
        _ => None,
    };
    let invalid = |message: String| Unreadable {
        id: usable_id.clone().unwrap_or(Value::Null),
        error: RpcError::new(error_code::INVALID_REQUEST, message),
    };
    match object.get("jsonrpc") {
        Some(Value::String(version)) if version == JSONRPC => {}
        _ => return Err(invalid("invalid request: `jsonrpc` must be \"2.0\"".into())),
    }
    if id.is_some() && usable_id.is_none() && !matches!(id, Some(Value::Null)) {
        return Err(invalid(format!(
            "invalid request: `id` must be a string or a number, got {}",
            id.as_ref().map_or("nothing", json_kind)
        )));
    }
    let params = object.remove("params").unwrap_or(Value::Null);
    match (object.remove("method"), usable_id.clone()) {
        (Some(Value::String(method)), Some(id)) => Ok(Incoming::Request { id, method, params }),
        (Some(Value::String(method)), None) => Ok(Incoming::Notification { method, params }),
        (Some(other), _) => Err(invalid(format!(
            "invalid request: `method` must be a string, got {}",
            json_kind(&other)
        ))),
        (None, Some(id)) => response(id, &mut object).ok_or_else(|| {
            invalid("invalid request: neither `method` nor `result` or `error`".into())
        }),
        (None, None) => Err(invalid("invalid request: no `method`".into())),
    }
}

fn response(id: Value, object: &mut Map<String, Value>) -> Option<Incoming> {
    if let Some(result) = object.remove("result") {
        return Some(Incoming::Response {
            id,
            result: Ok(result),
        });
    }
    let error = object.remove("error")?;
    let code = error
        .get("code")
        .and_then(Value::as_i64)
        .unwrap_or(error_code::INTERNAL_ERROR);
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("the client reported an error")
        .to_string();
    Some(Incoming::Response {
        id,
        result: Err(RpcError { code, message }),
    })
}

/// Reads a method's params into their type; a mismatch is `-32602`.
pub fn params<T: serde::de::DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params)
        .map_err(|e| RpcError::invalid_params(format!("invalid params for {method}: {e}")))
}

/// A successful answer.
pub fn result(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": JSONRPC, "id": id, "result": result})
}

/// A failed answer.
pub fn error(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": JSONRPC, "id": id,
           "error": {"code": error.code, "message": error.message}})
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": JSONRPC, "method": method, "params": params})
}

/// A request of the agent's to the client.
pub fn request(id: &str, method: &str, params: Value) -> Value {
    json!({"jsonrpc": JSONRPC, "id": id, "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(value: Value) -> Result<Incoming, Unreadable> {
        match value {
            Value::Object(object) => read(Ok(object)),
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn requests_notifications_and_responses_are_told_apart() {
        assert_eq!(
            line(
                json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":1}})
            ),
            Ok(Incoming::Request {
                id: json!(1),
                method: "initialize".into(),
                params: json!({"protocolVersion":1})
            })
        );
        assert_eq!(
            line(json!({"jsonrpc":"2.0","method":"session/cancel","params":{"sessionId":"s"}})),
            Ok(Incoming::Notification {
                method: "session/cancel".into(),
                params: json!({"sessionId":"s"})
            })
        );
        assert_eq!(
            line(
                json!({"jsonrpc":"2.0","id":"perm-1","result":{"outcome":{"outcome":"cancelled"}}})
            ),
            Ok(Incoming::Response {
                id: json!("perm-1"),
                result: Ok(json!({"outcome":{"outcome":"cancelled"}}))
            })
        );
        assert_eq!(
            line(json!({"jsonrpc":"2.0","id":"fs-2","error":{"code":-32002,"message":"gone"}})),
            Ok(Incoming::Response {
                id: json!("fs-2"),
                result: Err(RpcError::new(-32002, "gone"))
            })
        );
    }

    #[test]
    fn bad_envelopes_get_invalid_request_with_their_id() {
        let bad = line(json!({"id":3,"method":"initialize"})).unwrap_err();
        assert_eq!(bad.id, json!(3));
        assert_eq!(bad.error.code, error_code::INVALID_REQUEST);
        let bad = line(json!({"jsonrpc":"2.0","id":{"x":1},"method":"m"})).unwrap_err();
        assert_eq!(
            (bad.id, bad.error.code),
            (Value::Null, error_code::INVALID_REQUEST)
        );
        let bad = line(json!({"jsonrpc":"2.0","id":"a","method":5})).unwrap_err();
        assert!(bad.error.message.contains("`method` must be a string"));
        let bad = line(json!({"jsonrpc":"2.0","id":"a"})).unwrap_err();
        assert_eq!(bad.id, json!("a"));
        let framing = read(Err(FrameError::TooLong { limit: 8 })).unwrap_err();
        assert_eq!(
            (framing.id, framing.error.code),
            (Value::Null, error_code::PARSE_ERROR)
        );
        let batch = read(Err(FrameError::NotObject("an array"))).unwrap_err();
        assert_eq!(batch.error.code, error_code::INVALID_REQUEST);
    }

    #[test]
    fn params_mismatch_is_invalid_params() {
        let error =
            params::<corral_protocol::acp::NewSessionParams>("session/new", json!({})).unwrap_err();
        assert_eq!(error.code, error_code::INVALID_PARAMS);
        assert!(error.message.contains("cwd"), "{}", error.message);
    }
}
