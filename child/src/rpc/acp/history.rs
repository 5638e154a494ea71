//! `session/load`'s replay: the conversation as the `session/update`
//! notifications a client would have seen live — user and agent message
//! chunks, thoughts, tool calls with their results, and plans. Pure.

use std::collections::HashMap;
use std::path::Path;

use corral_protocol::acp::{ContentBlock, SessionUpdate, ToolCallStatus, ToolCallUpdate};
use serde_json::Value;

use super::encoder::plan_update;
use super::tool_call;
use crate::transcript::{Block, Message, Role};

/// The updates that replay `messages`, in order.
pub fn replay<'a>(
    messages: impl IntoIterator<Item = &'a Message>,
    cwd: &Path,
) -> Vec<SessionUpdate> {
    let mut calls: HashMap<&str, (&str, &Value)> = HashMap::new();
    let mut out = Vec::new();
    for message in messages {
        for block in &message.content {
            match (message.role, block) {
                (Role::User, Block::Text { text }) => out.push(SessionUpdate::UserMessageChunk {
                    content: ContentBlock::text(text.clone()),
                }),
                (Role::User, Block::Image { mime_type, data }) => {
                    out.push(SessionUpdate::UserMessageChunk {
                        content: ContentBlock::Image {
                            data: data.clone(),
                            mime_type: mime_type.clone(),
                            uri: None,
                        },
                    })
                }
                (Role::Assistant, Block::Text { text }) => {
                    out.push(SessionUpdate::AgentMessageChunk {
                        content: ContentBlock::text(text.clone()),
                    })
                }
                (Role::Assistant, Block::Thinking { text, .. }) => {
                    out.push(SessionUpdate::AgentThoughtChunk {
                        content: ContentBlock::text(text.clone()),
                    })
                }
                (_, Block::ToolCall { id, name, args }) => {
                    calls.insert(id, (name, args));
                    out.push(SessionUpdate::ToolCall(tool_call::announce(
                        id, name, args, cwd,
                    )));
                }
                (
                    _,
                    Block::ToolResult {
                        call_id,
                        is_error,
                        content,
                    },
                ) => {
                    let (name, args) = calls
                        .get(call_id.as_str())
                        .copied()
                        .unwrap_or(("", &Value::Null));
                    let status = if *is_error {
                        ToolCallStatus::Failed
                    } else {
                        ToolCallStatus::Completed
                    };
                    out.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate {
                        tool_call_id: call_id.clone(),
                        status: Some(status),
                        content: Some(tool_call::result_content(
                            name, args, cwd, *is_error, content,
                        )),
                        ..ToolCallUpdate::default()
                    }));
                    if name == "plan" && !is_error {
                        out.extend(tool_call::plan_items(args).map(|items| plan_update(&items)));
                    }
                }
                _ => {}
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::transcript::StopReason;

    #[test]
    fn a_conversation_replays_as_chunks_and_tool_calls() {
        let call = Block::ToolCall {
            id: "t1".into(),
            name: "bash".into(),
            args: json!({"command": "ls"}),
        };
        let plan = Block::ToolCall {
            id: "t2".into(),
            name: "plan".into(),
            args: json!({"plan": [{"step": "one", "status": "in_progress"}]}),
        };
        let result = |id: &str, text: &str| Block::ToolResult {
            call_id: id.into(),
            is_error: false,
            content: vec![Block::text(text)],
        };
        let messages = [
            Message::new(Role::User, vec![Block::text("list files")]),
            Message::assistant(
                vec![
                    Block::Thinking {
                        text: "hm".into(),
                        signature: None,
                    },
                    Block::text("Looking."),
                    call,
                    plan,
                ],
                StopReason::ToolUse,
            ),
            Message::new(Role::Tool, vec![result("t1", "a.txt"), result("t2", "ok")]),
            Message::assistant(vec![Block::text("One file.")], StopReason::Stop),
        ];
        let updates: Vec<Value> = replay(&messages, Path::new("/p"))
            .into_iter()
            .map(|u| serde_json::to_value(u).unwrap())
            .collect();
        let kinds: Vec<&str> = updates
            .iter()
            .map(|u| u["sessionUpdate"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "user_message_chunk",
                "agent_thought_chunk",
                "agent_message_chunk",
                "tool_call",
                "tool_call",
                "tool_call_update",
                "tool_call_update",
                "plan",
                "agent_message_chunk"
            ]
        );
        assert_eq!(updates[3]["title"], "Run `ls`");
        assert_eq!(updates[5]["status"], "completed");
        assert_eq!(updates[5]["content"][0]["content"]["text"], "a.txt");
        assert_eq!(updates[7]["entries"][0]["status"], "in_progress");
    }
}
