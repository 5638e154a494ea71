//! `session/load`'s replay: the conversation as the `session/update`
//! notifications a client would have seen live — user and agent message
//! chunks, thoughts, tool calls with their results, and plans — and the
//! same updates in bounded pages for `_corral/session/history`. Pure.

use std::collections::HashMap;
use std::path::Path;

use corral_protocol::acp::{ContentBlock, SessionUpdate, ToolCallStatus, ToolCallUpdate};
use serde_json::{json, Value};

use super::encoder::plan_update;
use super::rpc::RpcError;
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

/// Bytes of updates one `_corral/session/history` answer holds at most,
/// so that the answer (with its envelope) stays under 1 MiB. An update
/// larger than this comes alone in its page.
pub const PAGE_BYTES: usize = 1_000_000;

/// One page of the history: `session/update` params, in order.
#[derive(Debug, PartialEq)]
pub struct Page {
    pub updates: Vec<Value>,
    /// Where the next page starts; `None` on the last page.
    pub next_cursor: Option<String>,
}

/// The page of `updates` that starts at `cursor` (the start without one),
/// each as the params of a `session/update` for `session`, filling at
/// most `budget` bytes but holding at least one update.
///
/// A cursor names a position and the conversation it was made for (a
/// hash of its first update): a cursor from another session, or from
/// before a clear or a compaction, is refused rather than read against
/// a conversation it does not belong to.
pub fn page(
    session: &str,
    updates: &[SessionUpdate],
    cursor: Option<&str>,
    budget: usize,
) -> Result<Page, RpcError> {
    let wrapped: Vec<Value> = updates
        .iter()
        .map(|update| json!({"sessionId": session, "update": update}))
        .collect();
    let fingerprint = fingerprint(session, wrapped.first());
    let start = match cursor {
        None => 0,
        Some(cursor) => read_cursor(cursor, fingerprint)
            .filter(|start| *start <= wrapped.len())
            .ok_or_else(|| {
                RpcError::invalid_params(
                    "invalid or outdated history cursor; ask again without one",
                )
            })?,
    };
    let mut used = 0;
    let mut end = start;
    for item in &wrapped[start..] {
        let size = serde_json::to_vec(item).map_or(0, |bytes| bytes.len()) + 1;
        if end > start && used + size > budget {
            break;
        }
        used += size;
        end += 1;
    }
    let next_cursor = (end < wrapped.len()).then(|| format!("h1.{end}.{fingerprint:016x}"));
    Ok(Page {
        updates: wrapped[start..end].to_vec(),
        next_cursor,
    })
}

fn read_cursor(cursor: &str, fingerprint: u64) -> Option<usize> {
    let mut parts = cursor.strip_prefix("h1.")?.splitn(2, '.');
    let start = parts.next()?.parse().ok()?;
    let made_for = u64::from_str_radix(parts.next()?, 16).ok()?;
    (made_for == fingerprint).then_some(start)
}

/// FNV-1a of the session id and the conversation's first update.
fn fingerprint(session: &str, first: Option<&Value>) -> u64 {
    let first = first.map(Value::to_string).unwrap_or_default();
    session
        .bytes()
        .chain([0])
        .chain(first.bytes())
        .fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
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

    fn chunks(texts: &[&str]) -> Vec<SessionUpdate> {
        texts
            .iter()
            .map(|t| SessionUpdate::AgentMessageChunk {
                content: ContentBlock::text(*t),
            })
            .collect()
    }

    fn texts(page: &Page) -> Vec<&str> {
        page.updates
            .iter()
            .map(|u| u["update"]["content"]["text"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn history_pages_are_bounded_and_chain_by_cursor() {
        let updates = chunks(&["a", "b", "c", "d", "e"]);
        let one = serde_json::to_vec(&json!({"sessionId": "s", "update": &updates[0]}))
            .unwrap()
            .len()
            + 1;
        let first = page("s", &updates, None, 2 * one).unwrap();
        assert_eq!(texts(&first), ["a", "b"]);
        assert_eq!(first.updates[0]["sessionId"], "s");
        let cursor = first.next_cursor.clone().unwrap();
        let second = page("s", &updates, Some(&cursor), 2 * one).unwrap();
        assert_eq!(texts(&second), ["c", "d"]);
        let third = page("s", &updates, second.next_cursor.as_deref(), 2 * one).unwrap();
        assert_eq!(texts(&third), ["e"]);
        assert_eq!(third.next_cursor, None);
        // A budget smaller than one update still makes progress.
        let tiny = page("s", &updates, None, 1).unwrap();
        assert_eq!(texts(&tiny), ["a"]);
        // Everything fits: one page, no cursor.
        let all = page("s", &updates, None, PAGE_BYTES).unwrap();
        assert_eq!(all.updates.len(), 5);
        assert_eq!(all.next_cursor, None);
        assert_eq!(
            page("s", &[], None, PAGE_BYTES).unwrap().updates,
            Vec::<Value>::new()
        );
    }

    #[test]
    fn cursors_of_another_conversation_are_refused() {
        let updates = chunks(&["a", "b", "c"]);
        let cursor = page("s", &updates, None, 1).unwrap().next_cursor.unwrap();
        let cleared = chunks(&["x", "y", "z"]);
        for (session, updates, cursor) in [
            ("s", &cleared, cursor.as_str()),
            ("t", &updates, cursor.as_str()),
            ("s", &updates, "h1.9.0"),
            ("s", &updates, "garbage"),
        ] {
            let error = page(session, updates, Some(cursor), PAGE_BYTES).unwrap_err();
            assert_eq!(error.code, corral_protocol::acp::error_code::INVALID_PARAMS);
        }
    }

    #[test]
    fn the_history_renders_exactly_what_load_replays() {
        let messages = [
            Message::new(Role::User, vec![Block::text("hi")]),
            Message::assistant(vec![Block::text("hello")], StopReason::Stop),
        ];
        let replayed = replay(&messages, Path::new("/p"));
        let history = page("s", &replayed, None, PAGE_BYTES).unwrap();
        let params: Vec<Value> = replayed
            .iter()
            .map(|u| json!({"sessionId": "s", "update": u}))
            .collect();
        assert_eq!(history.updates, params);
        assert_eq!(
            history.updates[0]["update"]["sessionUpdate"],
            "user_message_chunk"
        );
    }
}
