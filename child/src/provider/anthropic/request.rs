//! Builds the Messages API request body from a [`ModelRequest`]: system and
//! tools with cache breakpoints, the transcript in strictly alternating
//! roles, and the thinking budget.

use corral_protocol::zut::ReasoningLevel;
use serde_json::{json, Map, Value};

use crate::provider::{catalogue, ModelRequest};
use crate::transcript::{Block, Message, Role};

/// The JSON body for `POST /v1/messages`.
pub(super) fn request_body(request: &ModelRequest) -> Value {
    let info = catalogue::find("anthropic", &request.model);
    let level = match info {
        Some(info) if !info.reasoning => ReasoningLevel::Off,
        _ => request.reasoning,
    };
    let (max_tokens, budget) = plan_tokens(level, request.max_output, info.map(|i| i.max_output));

    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("max_tokens".into(), json!(max_tokens));
    if !request.system.is_empty() {
        body.insert(
            "system".into(),
            json!([{"type": "text", "text": request.system, "cache_control": ephemeral()}]),
        );
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.input_schema}))
            .collect();
        if let Some(Value::Object(last)) = tools.last_mut() {
            last.insert("cache_control".into(), ephemeral());
        }
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("messages".into(), Value::Array(messages(&request.messages)));
    if let Some(budget) = budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": budget}),
        );
    }
    body.insert("stream".into(), Value::Bool(true));
    Value::Object(body)
}

fn ephemeral() -> Value {
    json!({"type": "ephemeral"})
}

/// Thinking budget per reasoning level (`None` = thinking disabled).
fn thinking_budget(level: ReasoningLevel) -> Option<u32> {
    match level {
        ReasoningLevel::Off => None,
        ReasoningLevel::Minimum => Some(1024),
        ReasoningLevel::Low => Some(2048),
        ReasoningLevel::Medium => Some(8192),
        ReasoningLevel::High => Some(16384),
        ReasoningLevel::Xhigh => Some(32000),
        ReasoningLevel::Max => Some(64000),
    }
}

/// Returns `(max_tokens, budget_tokens)` with `budget < max_tokens` as the
/// API requires. When the budget does not fit, `max_tokens` is raised to
/// budget + requested output (capped at the model's limit, or not raised for
/// a model missing from the catalogue); if that is still too small the budget
/// shrinks to `max_tokens - 1`, but never below the API minimum of 1024.
pub(super) fn plan_tokens(
    level: ReasoningLevel,
    max_output: u32,
    model_max: Option<u64>,
) -> (u32, Option<u32>) {
    let max_tokens = max_output.max(1);
    let Some(budget) = thinking_budget(level) else {
        return (max_tokens, None);
    };
    if budget < max_tokens {
        return (max_tokens, Some(budget));
    }
    let ceiling = model_max.map_or(max_tokens, |m| u32::try_from(m).unwrap_or(u32::MAX));
    let raised = budget
        .saturating_add(max_tokens)
        .min(ceiling)
        .max(max_tokens);
    let budget = budget.min(raised.saturating_sub(1)).max(1024);
    (raised.max(budget + 1), Some(budget))
}

/// Converts the transcript. Tool results become `user` messages; messages of
/// the same wire role are merged (the API requires alternation); blocks the
/// API would reject (empty text, unsigned thinking) are dropped; the last
/// block of the newest user message gets a cache breakpoint.
fn messages(transcript: &[Message]) -> Vec<Value> {
    let mut merged: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in transcript {
        let role = match message.role {
            Role::Assistant => "assistant",
            Role::User | Role::Tool => "user",
        };
        let blocks: Vec<Value> = message.content.iter().filter_map(block).collect();
        if blocks.is_empty() {
            continue;
        }
        match merged.last_mut() {
            Some((last_role, content)) if *last_role == role => content.extend(blocks),
            _ => merged.push((role, blocks)),
        }
    }
    if let Some((_, content)) = merged.iter_mut().rev().find(|(role, _)| *role == "user") {
        if let Some(Value::Object(last)) = content.last_mut() {
            last.insert("cache_control".into(), ephemeral());
        }
    }
    merged
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect()
}

/// One transcript block in wire form, or `None` if it must not be sent.
fn block(block: &Block) -> Option<Value> {
    Some(match block {
        Block::Text { text } if text.is_empty() => return None,
        Block::Text { text } => json!({"type": "text", "text": text}),
        Block::Image { mime_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": mime_type, "data": data},
        }),
        // Thinking from another backend has no signature; the API rejects it.
        Block::Thinking {
            signature: None, ..
        } => return None,
        Block::Thinking {
            text,
            signature: Some(signature),
        } => json!({"type": "thinking", "thinking": text, "signature": signature}),
        Block::RedactedThinking { data } => json!({"type": "redacted_thinking", "data": data}),
        Block::ToolCall { id, name, args } => {
            // Arguments that were not a JSON object (see `parse_tool_args`)
            // cannot be replayed; the tool result already explains the error.
            let input = if args.is_object() {
                args.clone()
            } else {
                json!({})
            };
            json!({"type": "tool_use", "id": id, "name": name, "input": input})
        }
        Block::ToolResult {
            call_id,
            is_error,
            content,
        } => {
            let mut result = json!({"type": "tool_result", "tool_use_id": call_id});
            let parts: Vec<Value> = content
                .iter()
                .filter(|b| matches!(b, Block::Text { .. } | Block::Image { .. }))
                .filter_map(self::block)
                .collect();
            if !parts.is_empty() {
                result["content"] = Value::Array(parts);
            }
            if *is_error {
                result["is_error"] = Value::Bool(true);
            }
            result
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::provider::ToolSpec;

    fn msg(role: Role, content: Vec<Block>) -> Message {
        Message::new(role, content)
    }

    fn request(reasoning: ReasoningLevel, max_output: u32) -> ModelRequest {
        ModelRequest {
            model: "claude-sonnet-4-5".into(),
            system: "be brief".into(),
            messages: vec![
                msg(
                    Role::User,
                    vec![
                        Block::text("look"),
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
                            signature: Some("sig".into()),
                        },
                        Block::Thinking {
                            text: "foreign".into(),
                            signature: None,
                        },
                        Block::RedactedThinking { data: "enc".into() },
                        Block::text(""),
                        Block::ToolCall {
                            id: "tu_1".into(),
                            name: "read".into(),
                            args: json!({"path": "a.rs"}),
                        },
                        Block::ToolCall {
                            id: "tu_2".into(),
                            name: "ls".into(),
                            args: json!("{broken"),
                        },
                    ],
                ),
                msg(
                    Role::Tool,
                    vec![
                        Block::ToolResult {
                            call_id: "tu_1".into(),
                            is_error: false,
                            content: vec![
                                Block::text("fn main"),
                                Block::Image {
                                    mime_type: "image/jpeg".into(),
                                    data: "BBBB".into(),
                                },
                            ],
                        },
                        Block::ToolResult {
                            call_id: "tu_2".into(),
                            is_error: true,
                            content: vec![],
                        },
                    ],
                ),
                msg(Role::User, vec![Block::text("and now?")]),
            ],
            tools: vec![
                ToolSpec {
                    name: "read".into(),
                    description: "Read".into(),
                    input_schema: json!({"type": "object"}),
                },
                ToolSpec {
                    name: "ls".into(),
                    description: "List".into(),
                    input_schema: json!({"type": "object"}),
                },
            ],
            reasoning,
            max_output,
        }
    }

    #[test]
    fn body_from_transcript() {
        let body = request_body(&request(ReasoningLevel::Off, 8192));
        let expected = json!({
            "model": "claude-sonnet-4-5",
            "max_tokens": 8192,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "tools": [
                {"name": "read", "description": "Read", "input_schema": {"type": "object"}},
                {"name": "ls", "description": "List", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
            ],
            "messages": [
                {"role": "user", "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
                ]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "enc"},
                    {"type": "tool_use", "id": "tu_1", "name": "read", "input": {"path": "a.rs"}},
                    {"type": "tool_use", "id": "tu_2", "name": "ls", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu_1", "content": [
                        {"type": "text", "text": "fn main"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "BBBB"}},
                    ]},
                    {"type": "tool_result", "tool_use_id": "tu_2", "is_error": true},
                    {"type": "text", "text": "and now?", "cache_control": {"type": "ephemeral"}},
                ]},
            ],
            "stream": true,
        });
        assert_eq!(body, expected);
    }

    #[test]
    fn thinking_budget_is_sent_when_enabled() {
        let body = request_body(&request(ReasoningLevel::Medium, 32000));
        assert_eq!(
            body["thinking"],
            json!({"type": "enabled", "budget_tokens": 8192})
        );
        assert_eq!(body["max_tokens"], json!(32000));

        let mut old = request(ReasoningLevel::High, 4096);
        old.model = "claude-3-5-haiku-20241022".into();
        let body = request_body(&old);
        assert!(body.get("thinking").is_none());
        assert_eq!(body["max_tokens"], json!(4096));
    }

    #[test]
    fn budget_fits_below_max_tokens() {
        use ReasoningLevel::*;
        assert_eq!(plan_tokens(Off, 8192, Some(64000)), (8192, None));
        assert_eq!(plan_tokens(High, 32000, Some(64000)), (32000, Some(16384)));
        // Raised to budget + output, capped at the model's limit.
        assert_eq!(plan_tokens(Medium, 4096, Some(64000)), (12288, Some(8192)));
        assert_eq!(plan_tokens(Max, 32000, Some(64000)), (64000, Some(63999)));
        assert_eq!(plan_tokens(Xhigh, 32000, Some(32000)), (32000, Some(31999)));
        // Unknown model: not raised, budget shrinks but stays >= 1024.
        assert_eq!(plan_tokens(Medium, 4096, None), (4096, Some(4095)));
        assert_eq!(plan_tokens(Minimum, 500, None), (1025, Some(1024)));
    }

    #[test]
    fn same_role_messages_merge_and_empty_ones_vanish() {
        let out = messages(&[
            msg(Role::User, vec![Block::text("a")]),
            msg(Role::User, vec![Block::text("")]),
            msg(Role::User, vec![Block::text("b")]),
            msg(Role::Assistant, vec![Block::text("c")]),
        ]);
        assert_eq!(
            Value::Array(out),
            json!([
                {"role": "user", "content": [
                    {"type": "text", "text": "a"},
                    {"type": "text", "text": "b", "cache_control": {"type": "ephemeral"}},
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "c"}]},
            ])
        );
    }
}
