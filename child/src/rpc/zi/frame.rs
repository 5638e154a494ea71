//! Zi server frame bodies (`version` and `sequence` are stamped by the
//! encoder). Pure; no I/O.

use serde_json::{json, Value};

/// Operation failure codes of `ok: false` responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailCode {
    /// A bound on concurrent operations or queued input was reached.
    Capacity,
    /// The named thing (command, model, completion watch) does not exist.
    NotFound,
    /// The operation was admitted but did not complete normally.
    OperationFailed,
}

impl FailCode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailCode::Capacity => "capacity",
            FailCode::NotFound => "not_found",
            FailCode::OperationFailed => "operation_failed",
        }
    }
}

/// A successful correlated response.
pub fn ok(id: &str, method: &str, result: Value) -> Value {
    json!({"type": "response", "id": id, "method": method, "ok": true, "result": result})
}

/// A failed correlated response.
pub fn fail(id: &str, method: &str, code: FailCode, message: impl Into<String>) -> Value {
    json!({"type": "response", "id": id, "method": method, "ok": false,
        "error": {"code": code.as_str(), "message": message.into()}})
}

/// A recoverable rejection of one record (code `invalid_request`); `id` is
/// included when it could be read.
pub fn protocol_error(id: Option<&str>, message: impl Into<String>) -> Value {
    let mut frame = json!({"type": "protocol_error",
        "error": {"code": "invalid_request", "message": message.into()}});
    if let Some(id) = id {
        frame["id"] = json!(id);
    }
    frame
}

/// The fatal framing error (invalid UTF-8, an oversized record).
pub fn invalid_framing(code: &str, message: impl Into<String>) -> Value {
    json!({"type": "invalid_framing", "error": {"code": code, "message": message.into()}})
}
