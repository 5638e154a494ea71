//! The token hello: how the gateway proves to a child that wants one
//! ([`DialectRules::child_token`](super::rules::DialectRules::child_token), zut) that it
//! holds the child's token, and learns the child's version, provider and
//! model. The request, how its answer is recognised and what it says.
//! Pure, no I/O.

use serde_json::{json, Map, Value};

/// Why the answer to a token hello is not a welcome.
#[derive(Debug, Clone, PartialEq)]
pub enum HelloFailure {
    /// The child refused (a wrong token), with its reason.
    Refused(String),
    /// The answer could not be understood.
    Malformed(String),
}

/// The hello request with gateway id `id`.
pub fn request(id: &str, token: &str) -> Value {
    json!({"id": id, "type": "hello", "token": token})
}

/// Whether `frame` is the answer to the hello with id `id`.
pub fn is_answer(frame: &Map<String, Value>, id: &str) -> bool {
    frame.get("type").and_then(Value::as_str) == Some("response")
        && frame.get("id").and_then(Value::as_str) == Some(id)
}

/// The answer's `data` object (empty if it has none), or why there is
/// none.
pub fn data(mut frame: Map<String, Value>) -> Result<Map<String, Value>, HelloFailure> {
    match frame.get("success") {
        Some(Value::Bool(true)) => match frame.remove("data") {
            None | Some(Value::Null) => Ok(Map::new()),
            Some(Value::Object(data)) => Ok(data),
            Some(_) => Err(HelloFailure::Malformed("`data` is not an object".into())),
        },
        Some(Value::Bool(false)) => {
            let error = frame.get("error").and_then(Value::as_str);
            Err(HelloFailure::Refused(
                error.unwrap_or("no error message").to_string(),
            ))
        }
        _ => Err(HelloFailure::Malformed(
            "`success` is missing or not a boolean".into(),
        )),
    }
}
