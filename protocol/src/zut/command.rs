//! Client → server requests: an optional `id` plus a `type`-tagged command.
//!
//! Parsing is two-step so that every failure can still be answered: the
//! envelope (`id`, `type`) is read first, then the command's own fields.
//! Unknown fields are ignored (the schema only grows within v1).

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::message::ImageInput;
use super::reasoning::{ReasoningLevel, SET_REASONING_ERROR};
use crate::ndjson::json_kind;
use crate::permission::{PermissionMode, PermissionOption};

/// A request id: a string or a number, echoed exactly as given.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RequestId {
    Str(String),
    Num(serde_json::Number),
}

impl RequestId {
    /// Reads an `id` field: absent or `null` is no id; anything but a string
    /// or number is an error.
    pub fn from_field(value: Option<&Value>) -> Result<Option<RequestId>, String> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(RequestId::Str(s.clone()))),
            Some(Value::Number(n)) => Ok(Some(RequestId::Num(n.clone()))),
            Some(other) => Err(format!(
                "`id` must be a string or a number, got {}",
                json_kind(other)
            )),
        }
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestId::Str(s) => f.write_str(s),
            RequestId::Num(n) => write!(f, "{n}"),
        }
    }
}

impl From<&str> for RequestId {
    fn from(s: &str) -> Self {
        RequestId::Str(s.to_string())
    }
}

/// Every command of zut RPC v1.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Command {
    Hello {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    Prompt {
        message: String,
        /// Absent and `[]` are both kept as given, so requests round-trip.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        images: Option<Vec<ImageInput>>,
    },
    Abort,
    Compact,
    GetState,
    GetMessages,
    Clear,
    SetModel {
        model: String,
    },
    SetReasoning {
        /// Read as zut reads it: aliases, any case, and missing, `null`
        /// or `""` for off ([`ReasoningLevel::from_alias`]).
        #[serde(default, deserialize_with = "reasoning_alias")]
        reasoning: ReasoningLevel,
    },
    GetModels,
    Ping,
    /// Extension: the answer to a `permission_request` event.
    PermissionReply {
        request_id: String,
        option: PermissionOption,
    },
    /// Extension: changes the permission mode.
    SetPermissionMode {
        mode: PermissionMode,
    },
}

/// The `reasoning` field of `set_reasoning`: a string read through the
/// zut aliases; absent or `null` means off.
fn reasoning_alias<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<ReasoningLevel, D::Error> {
    use serde::de::Error as _;
    match Value::deserialize(deserializer)? {
        Value::Null => Ok(ReasoningLevel::Off),
        Value::String(text) => ReasoningLevel::from_alias(&text)
            .ok_or_else(|| D::Error::custom(format!("{SET_REASONING_ERROR}, got {text:?}"))),
        other => Err(D::Error::custom(format!(
            "`reasoning` must be a string, got {}",
            json_kind(&other)
        ))),
    }
}

/// Names of all commands, as they appear in `type`.
pub const COMMAND_NAMES: [&str; 13] = [
    "hello",
    "prompt",
    "abort",
    "compact",
    "get_state",
    "get_messages",
    "clear",
    "set_model",
    "set_reasoning",
    "get_models",
    "ping",
    "permission_reply",
    "set_permission_mode",
];

impl Command {
    /// The wire name (`type`) of this command.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Hello { .. } => "hello",
            Command::Prompt { .. } => "prompt",
            Command::Abort => "abort",
            Command::Compact => "compact",
            Command::GetState => "get_state",
            Command::GetMessages => "get_messages",
            Command::Clear => "clear",
            Command::SetModel { .. } => "set_model",
            Command::SetReasoning { .. } => "set_reasoning",
            Command::GetModels => "get_models",
            Command::Ping => "ping",
            Command::PermissionReply { .. } => "permission_reply",
            Command::SetPermissionMode { .. } => "set_permission_mode",
        }
    }
}

/// A parsed request line.
#[derive(Clone, Debug, PartialEq)]
pub struct Request {
    pub id: Option<RequestId>,
    pub command: Command,
}

/// A request that could not be understood, with what is known of it so the
/// error response can still be correlated.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct RequestError {
    pub id: Option<RequestId>,
    /// The `type`, when the line had a string one.
    pub command: Option<String>,
    pub message: String,
}

impl Request {
    pub fn new(id: Option<RequestId>, command: Command) -> Request {
        Request { id, command }
    }

    /// Interprets one JSON object as a request.
    pub fn from_object(mut object: Map<String, Value>) -> Result<Request, RequestError> {
        let id = RequestId::from_field(object.get("id")).map_err(|message| RequestError {
            id: None,
            command: object
                .get("type")
                .and_then(Value::as_str)
                .map(str::to_string),
            message,
        })?;
        object.remove("id");
        let fail = |command: Option<String>, message: String| RequestError {
            id: id.clone(),
            command,
            message,
        };
        let name = match object.get("type") {
            Some(Value::String(name)) => name.clone(),
            Some(other) => {
                return Err(fail(
                    None,
                    format!("`type` must be a string, got {}", json_kind(other)),
                ))
            }
            None => return Err(fail(None, "missing field `type`".to_string())),
        };
        if !COMMAND_NAMES.contains(&name.as_str()) {
            return Err(fail(
                Some(name.clone()),
                format!(
                    "unknown command {name:?}; known commands: {}",
                    COMMAND_NAMES.join(", ")
                ),
            ));
        }
        match serde_json::from_value::<Command>(Value::Object(object)) {
            Ok(command) => Ok(Request { id, command }),
            Err(e) => Err(fail(
                Some(name.clone()),
                format!("invalid {name} command: {e}"),
            )),
        }
    }

    /// The request as a JSON object (`id` first when present).
    pub fn to_value(&self) -> Value {
        let mut out = Map::new();
        if let Some(id) = &self.id {
            out.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
        }
        if let Ok(Value::Object(fields)) = serde_json::to_value(&self.command) {
            out.extend(fields);
        }
        Value::Object(out)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(value: Value) -> Result<Request, RequestError> {
        let Value::Object(object) = value else {
            panic!("not an object")
        };
        Request::from_object(object)
    }

    fn level(value: Value) -> ReasoningLevel {
        match parse(value).expect("parses").command {
            Command::SetReasoning { reasoning } => reasoning,
            other => panic!("not set_reasoning: {other:?}"),
        }
    }

    #[test]
    fn set_reasoning_reads_zut_aliases_and_defaults_to_off() {
        let set = |reasoning: Value| json!({"type":"set_reasoning","reasoning":reasoning});
        assert_eq!(level(set(json!("MAXIMUM"))), ReasoningLevel::Xhigh);
        assert_eq!(level(set(json!(" min "))), ReasoningLevel::Minimum);
        assert_eq!(level(set(json!("none"))), ReasoningLevel::Off);
        assert_eq!(level(set(json!(""))), ReasoningLevel::Off);
        assert_eq!(level(set(Value::Null)), ReasoningLevel::Off);
        assert_eq!(
            level(json!({"id":"1","type":"set_reasoning"})),
            ReasoningLevel::Off
        );
    }

    #[test]
    fn the_permission_extension_commands_parse() {
        let reply = parse(
            json!({"id":"9","type":"permission_reply","request_id":"perm-1","option":"allow_always"}),
        )
        .expect("parses");
        assert_eq!(
            reply.command,
            Command::PermissionReply {
                request_id: "perm-1".into(),
                option: PermissionOption::AllowAlways
            }
        );
        let mode = parse(json!({"type":"set_permission_mode","mode":"read-only"})).expect("parses");
        assert_eq!(
            mode.command,
            Command::SetPermissionMode {
                mode: PermissionMode::ReadOnly
            }
        );
        let error =
            parse(json!({"id":"x","type":"permission_reply","request_id":"perm-1","option":"yes"}))
                .expect_err("refused");
        assert_eq!(error.command.as_deref(), Some("permission_reply"));
        assert!(error.message.contains("allow_once"), "{error}");
    }

    #[test]
    fn set_reasoning_refuses_other_values_with_the_zut_text() {
        let error = parse(json!({"id":"r","type":"set_reasoning","reasoning":"extreme"}))
            .expect_err("refused");
        assert_eq!(error.id, Some(RequestId::from("r")));
        assert_eq!(error.command.as_deref(), Some("set_reasoning"));
        assert!(error.message.contains(SET_REASONING_ERROR), "{error}");
        let error = parse(json!({"type":"set_reasoning","reasoning":3})).expect_err("refused");
        assert!(error.message.contains("must be a string"), "{error}");
    }
}
