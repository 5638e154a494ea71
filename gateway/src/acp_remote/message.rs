//! What a Streamable HTTP `POST` carries, checked before anything reaches
//! the hub: one JSON-RPC message (a batch is refused), whether it is the
//! `initialize` that opens a connection, and the `Acp-Session-Id` header
//! reconciled with `params.sessionId`. Pure: no I/O.

use serde_json::{Map, Value};

/// Methods scoped to one session: they need an `Acp-Session-Id` header or
/// a `params.sessionId` (the transport RFD's list, as the Rust SDK's
/// client and server apply it).
const SESSION_SCOPED: [&str; 10] = [
    "session/prompt",
    "session/cancel",
    "session/close",
    "session/delete",
    "session/fork",
    "session/load",
    "session/resume",
    "session/set_config_option",
    "session/set_mode",
    "session/set_model",
];

/// Why a `POST` body is refused, with the HTTP status it gets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// A JSON array: batches are not part of the transport (`501`).
    #[error("JSON-RPC batches are not supported; send one message per request")]
    Batch,
    /// Not one JSON object (`400`).
    #[error("the body is not a JSON-RPC message: {0}")]
    Malformed(String),
    /// `Acp-Session-Id` and `params.sessionId` disagree, or a
    /// session-scoped method names no session (`400`).
    #[error("{0}")]
    Session(&'static str),
}

impl Refusal {
    pub fn status(&self) -> u16 {
        match self {
            Refusal::Batch => 501,
            Refusal::Malformed(_) | Refusal::Session(_) => 400,
        }
    }
}

/// One message from a client.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub frame: Map<String, Value>,
}

impl Message {
    /// Parses a `POST` body.
    pub fn parse(body: &[u8]) -> Result<Message, Refusal> {
        let start = body.iter().position(|b| !b.is_ascii_whitespace());
        if start.is_some_and(|at| body[at] == b'[') {
            return Err(Refusal::Batch);
        }
        match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(frame)) => Ok(Message { frame }),
            Ok(_) => Err(Refusal::Malformed("not a JSON object".into())),
            Err(e) => Err(Refusal::Malformed(e.to_string())),
        }
    }

    /// The method, for a request or a notification.
    pub fn method(&self) -> Option<&str> {
        self.frame.get("method").and_then(Value::as_str)
    }

    /// The id of a request (`None` for notifications and `"id": null`).
    pub fn id(&self) -> Option<&Value> {
        self.frame.get("id").filter(|id| !id.is_null())
    }

    /// The `initialize` request that opens a connection: its id.
    pub fn initialize_id(&self) -> Option<&Value> {
        (self.method() == Some("initialize")).then(|| self.id())?
    }

    /// Reconciles the `Acp-Session-Id` header with `params.sessionId`:
    /// the header fills a missing field, a different one is refused, and
    /// a session-scoped method must name its session one way or the other.
    pub fn apply_session_header(&mut self, header: Option<&str>) -> Result<(), Refusal> {
        let Some(method) = self.method().map(str::to_string) else {
            // Responses and the like carry no session.
            return Ok(());
        };
        if method.starts_with("$/") {
            return Ok(());
        }
        if let Some(header) = header {
            let params = self
                .frame
                .entry("params")
                .or_insert_with(|| Value::Object(Map::new()));
            let Value::Object(params) = params else {
                return Err(Refusal::Session(
                    "Acp-Session-Id needs object params (or none)",
                ));
            };
            match params.get("sessionId") {
                None => {
                    params.insert("sessionId".into(), Value::String(header.to_string()));
                }
                Some(Value::String(named)) if named == header => {}
                Some(_) => {
                    return Err(Refusal::Session(
                        "Acp-Session-Id does not match params.sessionId",
                    ))
                }
            }
        }
        let named = self
            .frame
            .get("params")
            .and_then(|p| p.get("sessionId"))
            .is_some_and(Value::is_string);
        if SESSION_SCOPED.contains(&method.as_str()) && !named {
            return Err(Refusal::Session(
                "a session-scoped request needs Acp-Session-Id or params.sessionId",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(value: Value) -> Message {
        Message::parse(value.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn batches_and_non_objects_are_refused_with_their_status() {
        let batch = Message::parse(b"  [{\"jsonrpc\":\"2.0\"}]").unwrap_err();
        assert_eq!(batch, Refusal::Batch);
        assert_eq!(batch.status(), 501);
        for body in [&b"42"[..], b"{", b"", b"\"x\""] {
            let refused = Message::parse(body).unwrap_err();
            assert!(matches!(refused, Refusal::Malformed(_)), "{body:?}");
            assert_eq!(refused.status(), 400);
        }
    }

    #[test]
    fn only_an_initialize_request_with_an_id_opens_a_connection() {
        let init = message(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize"}));
        assert_eq!(init.initialize_id(), Some(&json!(0)));
        let note = message(json!({"jsonrpc": "2.0", "method": "initialize"}));
        assert_eq!(note.initialize_id(), None);
        let null = message(json!({"jsonrpc": "2.0", "id": null, "method": "initialize"}));
        assert_eq!(null.initialize_id(), None);
        let other = message(json!({"jsonrpc": "2.0", "id": 1, "method": "session/list"}));
        assert_eq!(other.initialize_id(), None);
    }

    #[test]
    fn the_session_header_fills_params_and_must_agree_with_them() {
        let mut prompt = message(json!({"id": 1, "method": "session/prompt", "params": {}}));
        prompt.apply_session_header(Some("s1")).unwrap();
        assert_eq!(prompt.frame["params"]["sessionId"], "s1");

        let mut bare = message(json!({"id": 1, "method": "session/cancel"}));
        bare.apply_session_header(Some("s1")).unwrap();
        assert_eq!(bare.frame["params"]["sessionId"], "s1");

        let mut other = message(json!({"id": 1, "method": "session/prompt",
            "params": {"sessionId": "s2"}}));
        assert!(other.apply_session_header(Some("s1")).is_err());

        let mut array = message(json!({"id": 1, "method": "session/prompt", "params": [1]}));
        assert!(array.apply_session_header(Some("s1")).is_err());
    }

    #[test]
    fn a_session_scoped_request_must_name_its_session() {
        let mut prompt = message(json!({"id": 1, "method": "session/prompt", "params": {}}));
        assert!(prompt.apply_session_header(None).is_err());
        let mut named = message(json!({"id": 1, "method": "session/load",
            "params": {"sessionId": "s"}}));
        assert!(named.apply_session_header(None).is_ok());
        // Not session-scoped, or not a request at all.
        let mut list = message(json!({"id": 1, "method": "session/list"}));
        assert!(list.apply_session_header(None).is_ok());
        let mut answer = message(json!({"id": "g1", "result": {}}));
        assert!(answer.apply_session_header(Some("s")).is_ok());
        assert!(answer.frame.get("params").is_none());
        let mut cancel = message(json!({"method": "$/cancel_request", "params": {"requestId": 1}}));
        cancel.apply_session_header(Some("s")).unwrap();
        assert!(cancel.frame["params"].get("sessionId").is_none());
    }
}
