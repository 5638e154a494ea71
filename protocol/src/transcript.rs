//! The transcript as the agent keeps it: messages made of content blocks.
//!
//! This is the internal, lossless form (images keep their base64 data, thinking
//! blocks keep their signatures). The session journal stores it as is; the RPC
//! dialects convert it to their wire shapes. It lives here, beside the
//! journal's line format, so tools that check journals share the exact types.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who produced a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    Assistant,
    /// Results of the tool calls of the preceding assistant message.
    Tool,
}

/// Why an assistant step ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model gave its answer.
    Stop,
    /// The model hit its output limit.
    Length,
    /// The model asked for tools.
    ToolUse,
    /// The model call failed; `error` says why.
    Error,
    /// The run was aborted during this step.
    Aborted,
}

/// One transcript entry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Vec<Block>,
    /// RFC 3339 UTC timestamp of when the message was added.
    pub time: String,
    /// How the assistant step that wrote this message ended; `None` for
    /// other roles and in journals written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    /// Why a failed or aborted step ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One piece of a message's content.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    Text {
        text: String,
    },
    Image {
        mime_type: String,
        /// Base64 (standard alphabet, padded) image bytes.
        data: String,
    },
    /// Model reasoning. Anthropic requires it (with its signature) to be sent
    /// back unchanged when a thinking turn made tool calls.
    Thinking {
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        signature: Option<String>,
    },
    /// Reasoning the provider returned encrypted; only ever sent back.
    RedactedThinking {
        data: String,
    },
    ToolCall {
        id: String,
        name: String,
        args: Value,
    },
    ToolResult {
        call_id: String,
        is_error: bool,
        content: Vec<Block>,
    },
}

impl Block {
    pub fn text(text: impl Into<String>) -> Block {
        Block::Text { text: text.into() }
    }
}

impl Message {
    pub fn new(role: Role, content: Vec<Block>) -> Message {
        Message {
            role,
            content,
            time: now_rfc3339(),
            stop_reason: None,
            error: None,
        }
    }

    /// An assistant message that ended with `stop`.
    pub fn assistant(content: Vec<Block>, stop: StopReason) -> Message {
        Message {
            stop_reason: Some(stop),
            ..Message::new(Role::Assistant, content)
        }
    }

    /// The record of a step that failed or was aborted (`stop` is
    /// [`StopReason::Error`] or [`StopReason::Aborted`]): an assistant
    /// message holding what was streamed, if anything, and why it ended.
    pub fn failed_step(content: Vec<Block>, stop: StopReason, error: String) -> Message {
        Message {
            error: Some(error),
            ..Message::assistant(content, stop)
        }
    }

    /// Whether this only records that a step failed or was aborted: an
    /// assistant message with nothing in it. Such records stay out of
    /// model requests.
    pub fn is_failure_record(&self) -> bool {
        self.role == Role::Assistant
            && self.content.is_empty()
            && matches!(
                self.stop_reason,
                Some(StopReason::Error | StopReason::Aborted)
            )
    }

    /// The concatenated text blocks of this message.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Block::Text { text } = block {
                out.push_str(text);
            }
        }
        out
    }

    /// Tool calls made by this (assistant) message, in order.
    pub fn tool_calls(&self) -> impl Iterator<Item = (&str, &str, &Value)> {
        self.content.iter().filter_map(|b| match b {
            Block::ToolCall { id, name, args } => Some((id.as_str(), name.as_str(), args)),
            _ => None,
        })
    }
}

/// The current time as an RFC 3339 UTC timestamp with second precision.
pub fn now_rfc3339() -> String {
    let now = time::OffsetDateTime::now_utc();
    let now = now.replace_nanosecond(0).unwrap_or(now);
    now.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| String::from("1970-01-01T00:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_through_json() {
        let msg = Message::new(
            Role::Assistant,
            vec![
                Block::text("hi"),
                Block::ToolCall {
                    id: "t1".into(),
                    name: "read".into(),
                    args: serde_json::json!({"path": "a"}),
                },
            ],
        );
        let json = serde_json::to_string(&msg).unwrap();
        let back: Message = serde_json::from_str(&json).unwrap();
        assert_eq!(back, msg);
        assert!(msg.time.ends_with('Z'));
        assert_eq!(msg.tool_calls().count(), 1);
        assert!(!json.contains("stop_reason"), "{json}");
    }

    #[test]
    fn failure_records_round_trip_and_old_lines_still_load() {
        let failed = Message::failed_step(Vec::new(), StopReason::Error, "down".into());
        let json = serde_json::to_string(&failed).unwrap();
        assert!(json.contains(r#""stop_reason":"error""#), "{json}");
        let back: Message = serde_json::from_str(&json).unwrap();
        assert_eq!(back, failed);
        assert!(back.is_failure_record());
        let partial =
            Message::failed_step(vec![Block::text("so")], StopReason::Aborted, "x".into());
        assert!(
            !partial.is_failure_record(),
            "streamed text stays in context"
        );
        let old = r#"{"role":"assistant","content":[],"time":"2024-01-01T00:00:00Z"}"#;
        let old: Message = serde_json::from_str(old).unwrap();
        assert_eq!((old.stop_reason, old.error), (None, None));
    }
}
