//! The message shape of `get_messages`, `user_message` and
//! `assistant_message`, plus the other data shapes responses carry.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::tagged::tagged_enum;

/// Fields a newer peer sent that this version does not know; kept so they
/// survive a round trip.
pub type Extra = Map<String, Value>;

/// One transcript message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: String,
    pub content: Vec<ContentBlock>,
    pub time: String,
    #[serde(flatten)]
    pub extra: Extra,
}

tagged_enum! {
    /// One piece of message content.
    pub enum ContentBlock {
        Text(TextBlock) = "text",
        Image(ImageBlock) = "image",
        ToolCall(ToolCallBlock) = "tool_call",
        ToolResult(ToolResultBlock) = "tool_result",
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextBlock {
    pub text: String,
    #[serde(flatten)]
    pub extra: Extra,
}

/// An image, reported by size rather than content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageBlock {
    pub mime_type: String,
    pub bytes: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCallBlock {
    pub id: String,
    pub name: String,
    pub args: Value,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResultBlock {
    pub call_id: String,
    pub is_error: bool,
    pub content: Vec<ContentBlock>,
    #[serde(flatten)]
    pub extra: Extra,
}

impl ContentBlock {
    pub fn text(text: impl Into<String>) -> ContentBlock {
        ContentBlock::Text(TextBlock {
            text: text.into(),
            extra: Extra::new(),
        })
    }
}

/// An image attached to a `prompt`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImageInput {
    pub mime_type: String,
    /// Base64-encoded image bytes.
    pub data: String,
}

/// Token and cost counters, per turn or cumulative.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    /// `null` when the backend does not report reasoning tokens.
    pub reasoning: Option<u64>,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cache_measured_prompt: u64,
    pub cache_measured_read: u64,
    pub cost_usd: f64,
}

/// One entry of `get_models`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    pub id: String,
    pub provider: String,
    pub context_window: u64,
    pub max_output: u64,
    pub reasoning: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One item of the session checklist (`plan_update`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanItem {
    pub step: String,
    pub status: String,
}
