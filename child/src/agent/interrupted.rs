//! Tool calls a crash interrupted. Calls are journaled before they run and
//! results as each finishes, so after a restart the last assistant message
//! may hold calls with no result: they get [`INTERRUPTED`] as an error
//! result, the model learns what happened, and nothing re-runs by itself.

use crate::transcript::{Block, Message, Role};

/// The result text of a tool call whose agent died while it ran.
pub const INTERRUPTED: &str = "interrupted: the agent restarted";

/// The ids of the trailing assistant message's tool calls that no result
/// answers, in call order. Only the tail counts: the last assistant message
/// followed by nothing but tool messages.
pub fn unanswered_calls(messages: &[Message]) -> Vec<String> {
    let Some(last) = messages.iter().rposition(|m| m.role != Role::Tool) else {
        return Vec::new();
    };
    if messages[last].role != Role::Assistant {
        return Vec::new();
    }
    let answered: Vec<&str> = messages[last + 1..]
        .iter()
        .flat_map(|m| &m.content)
        .filter_map(|b| match b {
            Block::ToolResult { call_id, .. } => Some(call_id.as_str()),
            _ => None,
        })
        .collect();
    messages[last]
        .tool_calls()
        .map(|(id, _, _)| id)
        .filter(|id| !answered.contains(id))
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(id: &str) -> Block {
        Block::ToolCall {
            id: id.into(),
            name: "bash".into(),
            args: json!({}),
        }
    }

    fn result(id: &str) -> Block {
        Block::ToolResult {
            call_id: id.into(),
            is_error: false,
            content: vec![],
        }
    }

    fn user(text: &str) -> Message {
        Message::new(Role::User, vec![Block::text(text)])
    }

    #[test]
    fn calls_without_results_at_the_tail_are_unanswered() {
        let asked = Message::new(
            Role::Assistant,
            vec![Block::text("go"), call("a"), call("b")],
        );
        let mut messages = vec![user("do it"), asked];
        assert_eq!(unanswered_calls(&messages), ["a", "b"]);
        messages.push(Message::new(Role::Tool, vec![result("a")]));
        assert_eq!(unanswered_calls(&messages), ["b"]);
        messages[2].content.push(result("b"));
        assert!(unanswered_calls(&messages).is_empty());
    }

    #[test]
    fn anything_but_an_assistant_tail_has_nothing_unanswered() {
        assert!(unanswered_calls(&[]).is_empty());
        assert!(unanswered_calls(&[user("hi")]).is_empty());
        let answered = Message::new(Role::Assistant, vec![Block::text("hello")]);
        assert!(unanswered_calls(&[user("hi"), answered]).is_empty());
        // An older unanswered call followed by a user turn is not the tail.
        let old = Message::new(Role::Assistant, vec![call("x")]);
        assert!(unanswered_calls(&[old, user("next")]).is_empty());
    }
}
