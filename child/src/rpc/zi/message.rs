//! Transcript messages as Zi shows them, and the completion evidence a
//! watch keeps of them. Pure; no I/O.
//!
//! A message is the transcript wire shape (see [`crate::rpc::transcript_wire`]); an
//! assistant message adds `stopReason` (`stop`, `length`, `toolUse`,
//! `error` or `aborted`) and, for a failed or aborted step, `errorMessage`.

use serde_json::{json, Value};

use crate::rpc::transcript_wire::wire_message;
use crate::transcript::{Message, Role, StopReason};

/// Completion text projection bound.
pub const MAX_COMPLETION_TEXT: usize = 50 * 1024;
/// Provider error projection bound.
pub const MAX_COMPLETION_ERROR: usize = 8 * 1024;

/// Zi's name for a stop reason.
pub fn stop_reason_name(stop: StopReason) -> &'static str {
    match stop {
        StopReason::Stop => "stop",
        StopReason::Length => "length",
        StopReason::ToolUse => "toolUse",
        StopReason::Error => "error",
        StopReason::Aborted => "aborted",
    }
}

/// One transcript message as a Zi message.
pub fn message(message: &Message) -> Value {
    let mut value = json!(wire_message(message));
    if message.role == Role::Assistant {
        // Journals written before stop reasons were recorded.
        let stop = message
            .stop_reason
            .unwrap_or(if message.tool_calls().next().is_some() {
                StopReason::ToolUse
            } else {
                StopReason::Stop
            });
        value["stopReason"] = json!(stop_reason_name(stop));
        if let Some(error) = &message.error {
            value["errorMessage"] = json!(error);
        }
    }
    value
}

/// The assistant message of a step that failed or was aborted before the
/// model's answer was complete, as it goes out in `message_end`: what was
/// streamed, and why it ended.
pub fn failed_step(streamed: &str, stop: StopReason, error: &str) -> Value {
    let content: Vec<Value> = if streamed.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "text", "text": streamed})]
    };
    json!({"role": "assistant", "content": content, "time": crate::transcript::now_rfc3339(),
        "stopReason": stop_reason_name(stop), "errorMessage": error})
}

/// What a completion watch keeps of the latest assistant `message_end`.
#[derive(Debug, Clone, PartialEq)]
pub struct Latest {
    pub text: String,
    pub stop_reason: String,
    pub error: Option<String>,
}

impl Latest {
    /// From a Zi assistant message (as sent in `message_end`).
    pub fn of(message: &Value) -> Latest {
        let text = message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|block| block["type"] == "text")
            .filter_map(|block| block["text"].as_str())
            .collect();
        Latest {
            text,
            stop_reason: message["stopReason"].as_str().unwrap_or("stop").to_string(),
            error: message["errorMessage"].as_str().map(str::to_string),
        }
    }

    /// The `completion` object of an `await_idle` result.
    pub fn completion(&self) -> Value {
        let (text, _) = clip(&self.text, MAX_COMPLETION_TEXT);
        let mut completion = json!({
            "text": text,
            "stopReason": self.stop_reason,
            "originalBytes": self.text.len(),
            "omittedBytes": self.text.len() - text.len(),
        });
        if let Some(error) = &self.error {
            completion["error"] = json!(clip(error, MAX_COMPLETION_ERROR).0);
        }
        completion
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
pub fn clip(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::transcript::Block;

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip("héllo", 2), ("h", true));
        assert_eq!(clip("abc", 3), ("abc", false));
    }

    #[test]
    fn assistant_messages_say_how_they_ended() {
        let answer = Message::assistant(vec![Block::text("hi")], StopReason::Stop);
        assert_eq!(message(&answer)["stopReason"], "stop");
        let failed = Message::failed_step(Vec::new(), StopReason::Error, "503".into());
        let failed = message(&failed);
        assert_eq!(failed["stopReason"], "error");
        assert_eq!(failed["errorMessage"], "503");
        let old = Message::new(Role::Assistant, vec![Block::text("x")]);
        assert_eq!(message(&old)["stopReason"], "stop");
        let user = message(&Message::new(Role::User, vec![Block::text("q")]));
        assert!(user.get("stopReason").is_none());
    }

    #[test]
    fn completions_are_clipped_with_their_byte_counts() {
        let long = Latest {
            text: "x".repeat(60 * 1024),
            stop_reason: "stop".into(),
            error: None,
        };
        let c = long.completion();
        assert_eq!(c["text"].as_str().map(str::len), Some(MAX_COMPLETION_TEXT));
        assert_eq!(c["originalBytes"], 61440);
        assert_eq!(c["omittedBytes"], 10240);
        assert!(c.get("error").is_none());
        let failed = Latest::of(&failed_step("", StopReason::Error, "down"));
        assert_eq!(
            failed.completion(),
            json!({"text": "", "stopReason": "error", "originalBytes": 0,
                "omittedBytes": 0, "error": "down"})
        );
    }
}
