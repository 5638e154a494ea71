//! Builds the Chat Completions request body from a [`ModelRequest`]: system
//! message first, tool calls and results in OpenAI's shapes, images as data
//! URLs, and `reasoning_effort` when reasoning is on.

use corral_protocol::zut::ReasoningLevel;
use serde_json::{json, Map, Value};

use crate::provider::{catalogue, ModelRequest};
use crate::transcript::{Block, Message, Role};

/// The JSON body for `POST {base}/chat/completions`.
pub(super) fn request_body(request: &ModelRequest) -> Value {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in &request.messages {
        convert(message, &mut messages);
    }

    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools = request
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.input_schema,
                }})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
    }
    if let Some(effort) = reasoning_effort(&request.model, request.reasoning) {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    body.insert("max_completion_tokens".into(), json!(request.max_output));
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    Value::Object(body)
}

/// The effort to send, or `None` to leave the field out: reasoning off, or a
/// catalogued model that does not reason (OpenAI rejects the field there).
/// Levels above `high` clamp to `high`; `minimal` exists only for GPT-5
/// models, so other models get `low` instead.
fn reasoning_effort(model: &str, level: ReasoningLevel) -> Option<&'static str> {
    if catalogue::find("openai", model).is_some_and(|m| !m.reasoning) {
        return None;
    }
    Some(match level {
        ReasoningLevel::Off => return None,
        ReasoningLevel::Minimum if model.starts_with("gpt-5") => "minimal",
        ReasoningLevel::Minimum | ReasoningLevel::Low => "low",
        ReasoningLevel::Medium => "medium",
        ReasoningLevel::High | ReasoningLevel::Xhigh | ReasoningLevel::Max => "high",
    })
}

/// Appends the wire messages for one transcript message.
///
/// Chat Completions has no error flag or images in `tool` messages: a failed
/// result's text is prefixed with `Error: `, and images returned by tools
/// follow all `tool` messages as one `user` message of image parts (the
/// `tool` messages must directly follow the assistant's `tool_calls`).
/// Thinking blocks are not sent back.
fn convert(message: &Message, out: &mut Vec<Value>) {
    match message.role {
        Role::User => {
            if let Some(content) = user_content(&message.content) {
                out.push(json!({"role": "user", "content": content}));
            }
        }
        Role::Assistant => {
            let text = message.text();
            let calls: Vec<Value> = message
                .tool_calls()
                .map(|(id, name, args)| {
                    // Arguments that failed to parse are replayed verbatim.
                    let arguments = match args {
                        Value::String(raw) => raw.clone(),
                        other => other.to_string(),
                    };
                    json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
                })
                .collect();
            let mut wire = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                if text.is_empty() {
                    wire["content"] = Value::Null;
                }
                wire["tool_calls"] = Value::Array(calls);
            }
            out.push(wire);
        }
        Role::Tool => {
            let mut follow_up = Vec::new();
            for block in &message.content {
                let Block::ToolResult {
                    call_id,
                    is_error,
                    content,
                } = block
                else {
                    follow_up.extend(content_part(block));
                    continue;
                };
                let text: String = content
                    .iter()
                    .filter_map(|b| match b {
                        Block::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                let text = match (*is_error, text.is_empty()) {
                    (true, true) => "Error (no output)".to_owned(),
                    (true, false) => format!("Error: {text}"),
                    (false, true) => "(no output)".to_owned(),
                    (false, false) => text,
                };
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text}));
                let images: Vec<Value> = content
                    .iter()
                    .filter(|b| matches!(b, Block::Image { .. }))
                    .filter_map(content_part)
                    .collect();
                if !images.is_empty() {
                    let label = format!("Image output of tool call {call_id}:");
                    follow_up.push(json!({"type": "text", "text": label}));
                    follow_up.extend(images);
                }
            }
            if !follow_up.is_empty() {
                out.push(json!({"role": "user", "content": follow_up}));
            }
        }
    }
}

/// A user message's content: a plain string when it is only text (which
/// every compatible server accepts), content parts when it has images.
fn user_content(blocks: &[Block]) -> Option<Value> {
    let has_image = blocks.iter().any(|b| matches!(b, Block::Image { .. }));
    if !has_image {
        let text: String = blocks
            .iter()
            .filter_map(|b| match b {
                Block::Text { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        return (!text.is_empty()).then(|| Value::String(text));
    }
    Some(Value::Array(
        blocks.iter().filter_map(content_part).collect(),
    ))
}

fn content_part(block: &Block) -> Option<Value> {
    match block {
        Block::Text { text } if !text.is_empty() => Some(json!({"type": "text", "text": text})),
        Block::Image { mime_type, data } => Some(json!({
            "type": "image_url",
            "image_url": {"url": format!("data:{mime_type};base64,{data}")},
        })),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;

    fn msg(role: Role, content: Vec<Block>) -> Message {
        Message::new(role, content)
    }

    fn request(model: &str, reasoning: ReasoningLevel) -> ModelRequest {
        ModelRequest {
            model: model.into(),
            system: "be brief".into(),
            messages: vec![
                msg(
                    Role::User,
                    vec![Block::text("what is "), Block::text("this?")],
                ),
                msg(
                    Role::User,
                    vec![
                        Block::text("see"),
                        Block::Image {
                            mime_type: "image/png".into(),
                            data: "AAAA".into(),
                        },
                    ],
                ),
                msg(
                    Role::Assistant,
                    vec![
                        Block::Thinking {
                            text: "hmm".into(),
                            signature: None,
                        },
                        Block::ToolCall {
                            id: "call_1".into(),
                            name: "read".into(),
                            args: json!({"path": "a.rs"}),
                        },
                        Block::ToolCall {
                            id: "call_2".into(),
                            name: "shot".into(),
                            args: json!("{broken"),
                        },
                    ],
                ),
                msg(
                    Role::Tool,
                    vec![
                        Block::ToolResult {
                            call_id: "call_1".into(),
                            is_error: true,
                            content: vec![Block::text("no such file")],
                        },
                        Block::ToolResult {
                            call_id: "call_2".into(),
                            is_error: false,
                            content: vec![Block::Image {
                                mime_type: "image/jpeg".into(),
                                data: "BBBB".into(),
                            }],
                        },
                    ],
                ),
                msg(Role::Assistant, vec![Block::text("Done.")]),
            ],
            tools: vec![ToolSpec {
                name: "read".into(),
                description: "Read".into(),
                input_schema: json!({"type": "object"}),
            }],
            reasoning,
            max_output: 4096,
        }
    }

    #[test]
    fn body_from_transcript() {
        let body = request_body(&request("gpt-5", ReasoningLevel::Off));
        let expected = json!({
            "model": "gpt-5",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "what is this?"},
                {"role": "user", "content": [
                    {"type": "text", "text": "see"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a.rs\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "shot", "arguments": "{broken"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "Error: no such file"},
                {"role": "tool", "tool_call_id": "call_2", "content": "(no output)"},
                {"role": "user", "content": [
                    {"type": "text", "text": "Image output of tool call call_2:"},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,BBBB"}},
                ]},
                {"role": "assistant", "content": "Done."},
            ],
            "tools": [{"type": "function", "function": {"name": "read", "description": "Read", "parameters": {"type": "object"}}}],
            "max_completion_tokens": 4096,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        assert_eq!(body, expected);
    }

    #[test]
    fn reasoning_effort_is_clamped_and_only_sent_when_on() {
        let effort = |model: &str, level| {
            request_body(&request(model, level))
                .get("reasoning_effort")
                .cloned()
        };
        assert_eq!(effort("gpt-5", ReasoningLevel::Off), None);
        assert_eq!(
            effort("gpt-5", ReasoningLevel::Minimum),
            Some(json!("minimal"))
        );
        assert_eq!(effort("o3", ReasoningLevel::Minimum), Some(json!("low")));
        assert_eq!(
            effort("gpt-5-mini", ReasoningLevel::Medium),
            Some(json!("medium"))
        );
        assert_eq!(effort("gpt-5", ReasoningLevel::Max), Some(json!("high")));
        assert_eq!(effort("gpt-4o", ReasoningLevel::High), None);
        // Local models are unknown to the catalogue: pass the setting through.
        assert_eq!(
            effort("qwen3:8b", ReasoningLevel::Xhigh),
            Some(json!("high"))
        );
    }
}
