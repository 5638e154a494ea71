//! The offline `echo` provider: replies with the last user message (or a
//! short summary of the last tool results), streamed in a few deltas. It
//! never calls tools or the network; it exists for trying the agent without
//! an API key and for startup benchmarks.

use futures_util::future::BoxFuture;

use super::{
    EventStream, ModelRequest, ModelResponse, ModelStop, Provider, ProviderError, ProviderEvent,
    TokenUsage,
};
use crate::transcript::{Block, Message, Role};

/// Number of text deltas a reply is streamed in (at most).
const DELTAS: usize = 4;
/// Characters of a tool result quoted in the summary.
const QUOTE_CHARS: usize = 200;

#[derive(Clone, Copy, Debug, Default)]
pub struct EchoProvider;

impl EchoProvider {
    pub fn new() -> EchoProvider {
        EchoProvider
    }
}

impl Provider for EchoProvider {
    fn name(&self) -> &'static str {
        "echo"
    }

    fn cache_mode(&self) -> &'static str {
        "none"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let events = respond(&request).into_iter().map(Ok);
        let stream: EventStream = Box::pin(futures_util::stream::iter(events));
        Box::pin(std::future::ready(Ok(stream)))
    }
}

/// All events of the reply to `request`.
fn respond(request: &ModelRequest) -> Vec<ProviderEvent> {
    let reply = reply_text(&request.messages);
    let mut events: Vec<ProviderEvent> = split(&reply, DELTAS)
        .into_iter()
        .map(|piece| ProviderEvent::TextDelta(piece.to_owned()))
        .collect();
    let prompt_chars =
        request.system.chars().count() + request.messages.iter().map(message_chars).sum::<usize>();
    let usage = TokenUsage {
        input: tokens(prompt_chars),
        output: tokens(reply.chars().count()),
        ..TokenUsage::default()
    };
    events.push(ProviderEvent::Completed(ModelResponse {
        content: vec![Block::text(reply)],
        stop: ModelStop::EndTurn,
        usage,
    }));
    events
}

fn reply_text(messages: &[Message]) -> String {
    let Some(last) = messages.last() else {
        return "(echo) nothing to echo yet".to_owned();
    };
    if last.role != Role::Tool {
        let text = messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(Message::text)
            .unwrap_or_default();
        return if text.is_empty() {
            "(echo) empty message".to_owned()
        } else {
            text
        };
    }
    let mut summary = String::from("(echo) tool results:");
    for block in &last.content {
        if let Block::ToolResult {
            call_id,
            is_error,
            content,
        } = block
        {
            let status = if *is_error { "error" } else { "ok" };
            let text: String = content
                .iter()
                .filter_map(|b| match b {
                    Block::Text { text } => Some(text.as_str()),
                    _ => None,
                })
                .collect();
            let mut quote: String = text.chars().take(QUOTE_CHARS).collect();
            if quote.len() < text.len() {
                quote.push('…');
            }
            summary.push_str(&format!("\n- {call_id} ({status}): {quote}"));
        }
    }
    summary
}

/// Splits `text` into at most `parts` pieces of about equal length, on
/// character boundaries.
fn split(text: &str, parts: usize) -> Vec<&str> {
    let chars = text.chars().count();
    let per = chars.div_ceil(parts.max(1)).max(1);
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let cut = rest.char_indices().nth(per).map_or(rest.len(), |(i, _)| i);
        let (piece, tail) = rest.split_at(cut);
        pieces.push(piece);
        rest = tail;
    }
    pieces
}

fn message_chars(message: &Message) -> usize {
    message.content.iter().map(block_chars).sum()
}

fn block_chars(block: &Block) -> usize {
    match block {
        Block::Text { text } | Block::Thinking { text, .. } => text.chars().count(),
        Block::Image { data, .. } | Block::RedactedThinking { data } => data.len(),
        Block::ToolCall { name, args, .. } => name.len() + args.to_string().len(),
        Block::ToolResult { content, .. } => content.iter().map(block_chars).sum(),
    }
}

/// The usual rough estimate of four characters per token (at least one).
fn tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4).max(1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use corral_protocol::zut::ReasoningLevel;
    use futures_util::StreamExt;

    fn request(messages: Vec<Message>) -> ModelRequest {
        ModelRequest {
            model: "echo".into(),
            system: String::new(),
            messages,
            tools: vec![],
            reasoning: ReasoningLevel::Off,
            max_output: 100,
        }
    }

    #[tokio::test]
    async fn echoes_the_last_user_message_in_pieces() {
        let text = "héllo wörld, this is echo";
        let req = request(vec![Message::new(Role::User, vec![Block::text(text)])]);
        let events: Vec<_> = EchoProvider
            .stream(req)
            .await
            .unwrap()
            .map(Result::unwrap)
            .collect()
            .await;
        let deltas: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                ProviderEvent::TextDelta(d) => Some(d.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(deltas.len(), DELTAS);
        assert_eq!(deltas.concat(), text);
        let Some(ProviderEvent::Completed(response)) = events.last() else {
            panic!("no completion");
        };
        assert_eq!(response.content, vec![Block::text(text)]);
        assert_eq!(response.stop, ModelStop::EndTurn);
        assert_eq!(response.usage.output, 7);
        assert_eq!(response.usage.input, 7);
        assert!(!response.usage.cache_reported);
    }

    #[test]
    fn summarises_tool_results() {
        let messages = vec![
            Message::new(Role::User, vec![Block::text("go")]),
            Message::new(
                Role::Tool,
                vec![Block::ToolResult {
                    call_id: "t1".into(),
                    is_error: true,
                    content: vec![Block::text("x".repeat(300))],
                }],
            ),
        ];
        let reply = reply_text(&messages);
        assert!(
            reply.starts_with("(echo) tool results:\n- t1 (error): xxx"),
            "{reply}"
        );
        assert!(reply.ends_with('…'));
    }

    #[test]
    fn split_handles_short_and_empty_text() {
        assert_eq!(split("ab", 4), vec!["a", "b"]);
        assert_eq!(split("", 4), Vec::<&str>::new());
        assert_eq!(split("abcdefgh", 4), vec!["ab", "cd", "ef", "gh"]);
    }
}
