//! letscode-rpc/1 wire shapes: transcript messages and content blocks,
//! control frames, and the private frames the server hands its encoder.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::transcript::{Block, Message, Role};

pub use corral_protocol::letscode::PROTOCOL;
/// The key marking a frame the server sends to its encoder only.
const PRIVATE: &str = "letscode_private";

/// Frames the server hands the encoder so they land in order with the
/// agent's events; they are never written as they are.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Private {
    /// A prompt run starts (the agent sends this just before its first
    /// event). `reply` holds the id of the `prompt` command to `ack` now
    /// and `done` after `agent_end`; queued runs (follow-ups) have none.
    RunStart { reply: Option<Reply> },
    /// The last lines: `done` for a `bye` command (when there was one),
    /// then `bye`.
    Farewell { reply: Option<Reply> },
}

/// The command a private frame answers (a wrapper, so that a `null` id
/// survives the trip through JSON).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub id: Value,
}

impl Private {
    pub fn to_frame(&self) -> Value {
        json!({ PRIVATE: self })
    }

    /// The private frame inside `frame`, if it is one.
    pub fn from_frame(frame: &Value) -> Option<Private> {
        serde_json::from_value(frame.get(PRIVATE)?.clone()).ok()
    }
}

pub fn ready() -> Value {
    json!({"type": "ready", "protocol": PROTOCOL, "letscode": env!("CARGO_PKG_VERSION")})
}

pub fn ack(id: &Value) -> Value {
    json!({"type": "ack", "id": id})
}

pub fn done(id: &Value) -> Value {
    json!({"type": "done", "id": id})
}

pub fn bye() -> Value {
    json!({"type": "bye"})
}

/// A control error; `fatal` precedes a non-zero exit.
pub fn control_error(id: &Value, error: &str, recoverable: bool, fatal: bool) -> Value {
    let mut frame = json!({"type": "error", "id": id, "error": error, "recoverable": recoverable});
    if fatal {
        frame["fatal"] = json!(true);
    }
    frame
}

/// A transcript message: `{role, content, timestamp}`.
pub fn message(message: &Message) -> Value {
    json!({
        "role": role(message.role),
        "content": blocks(&message.content),
        "timestamp": message.time,
    })
}

pub fn role(role: Role) -> &'static str {
    match role {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// Content blocks; images become byte counts, encrypted reasoning is left
/// out.
pub fn blocks(blocks: &[Block]) -> Vec<Value> {
    blocks.iter().filter_map(block).collect()
}

fn block(block: &Block) -> Option<Value> {
    Some(match block {
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::Image { mime_type, data } => {
            let bytes = data.trim_end_matches('=').len() as u64 * 3 / 4;
            json!({"type": "image", "mime_type": mime_type, "bytes": bytes})
        }
        Block::Thinking { text, .. } => json!({"type": "thinking", "thinking": text}),
        Block::RedactedThinking { .. } => return None,
        Block::ToolCall { id, name, args } => {
            json!({"type": "tool_call", "id": id, "name": name, "arguments": args})
        }
        Block::ToolResult {
            call_id,
            is_error,
            content,
        } => tool_result(call_id, *is_error, content),
    })
}

/// A tool result block (also the `result` of `tool_execution_end`).
pub fn tool_result(call_id: &str, is_error: bool, content: &[Block]) -> Value {
    json!({
        "type": "tool_result",
        "tool_call_id": call_id,
        "is_error": is_error,
        "content": blocks(content),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_frames_round_trip_and_plain_frames_are_not_private() {
        for id in [json!("r1"), Value::Null] {
            let start = Private::RunStart {
                reply: Some(Reply { id }),
            };
            assert_eq!(Private::from_frame(&start.to_frame()), Some(start));
        }
        assert_eq!(Private::from_frame(&ack(&json!("r1"))), None);
    }

    #[test]
    fn messages_have_role_content_and_timestamp() {
        let m = Message::new(
            Role::Assistant,
            vec![
                Block::text("hi"),
                Block::RedactedThinking { data: "x".into() },
                Block::ToolCall {
                    id: "c1".into(),
                    name: "read".into(),
                    args: json!({"path": "a"}),
                },
            ],
        );
        let v = message(&m);
        assert_eq!(v["role"], "assistant");
        assert_eq!(v["timestamp"], json!(m.time));
        assert_eq!(
            v["content"],
            json!([{"type":"text","text":"hi"},
                   {"type":"tool_call","id":"c1","name":"read","arguments":{"path":"a"}}])
        );
    }

    #[test]
    fn control_errors_carry_fatal_only_when_set() {
        let e = control_error(&Value::Null, "x", true, false);
        assert_eq!(
            e,
            json!({"type":"error","id":null,"error":"x","recoverable":true})
        );
        assert_eq!(control_error(&json!(1), "x", false, true)["fatal"], true);
    }
}
