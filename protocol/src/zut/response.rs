//! Server → client replies, and the typed `data` of the replies that have one.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::command::RequestId;
use super::message::{Extra, Message, ModelInfo, Usage};

/// `{"type":"response","id"?,"command"?,"success","data"?,"error"?}`.
///
/// `id` is omitted when the request had none; `command` is omitted only when
/// the request line was too broken to name one (invalid JSON, say).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Response {
    #[serde(rename = "type")]
    pub kind: ResponseTag,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<RequestId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    pub success: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The constant `"response"` tag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseTag {
    #[default]
    #[serde(rename = "response")]
    Response,
}

impl Response {
    pub fn ok(id: Option<RequestId>, command: &str, data: Option<Value>) -> Response {
        Response {
            kind: ResponseTag::Response,
            id,
            command: Some(command.to_string()),
            success: true,
            data,
            error: None,
        }
    }

    pub fn error(
        id: Option<RequestId>,
        command: Option<&str>,
        error: impl Into<String>,
    ) -> Response {
        Response {
            kind: ResponseTag::Response,
            id,
            command: command.map(str::to_string),
            success: false,
            data: None,
            error: Some(error.into()),
        }
    }
}

/// `data` of a successful `hello`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HelloData {
    pub protocol_version: u32,
    pub version: String,
    pub provider: String,
    pub model: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `data` of `get_state`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateData {
    pub provider: String,
    pub model: String,
    pub cwd: String,
    pub message_count: u64,
    pub busy: bool,
    /// Current reasoning level (an addition to the spec's example).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    pub usage: Usage,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `data` of `get_messages`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessagesData {
    pub messages: Vec<Message>,
}

/// `data` of `get_models`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelsData {
    pub models: Vec<ModelInfo>,
}
