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

/// Codes of `protocol_error` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolCode {
    /// The line is not JSON.
    InvalidJson,
    /// The record's shape or a field is wrong, or its id is in flight.
    InvalidRequest,
    /// No such method.
    UnknownMethod,
    /// `version` is not 1.
    UnsupportedVersion,
    /// Invalid UTF-8 or an oversized record: the connection ends.
    InvalidFraming,
}

impl ProtocolCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolCode::InvalidJson => "invalid_json",
            ProtocolCode::InvalidRequest => "invalid_request",
            ProtocolCode::UnknownMethod => "unknown_method",
            ProtocolCode::UnsupportedVersion => "unsupported_version",
            ProtocolCode::InvalidFraming => "invalid_framing",
        }
    }
}

/// A rejection of one record, `code` and `message` at the top level; `id`
/// is included when it could be read.
pub fn protocol_error(id: Option<&str>, code: ProtocolCode, message: impl Into<String>) -> Value {
    let mut frame = json!({"type": "protocol_error", "code": code.as_str(),
        "message": message.into()});
    if let Some(id) = id {
        frame["id"] = json!(id);
    }
    frame
}
