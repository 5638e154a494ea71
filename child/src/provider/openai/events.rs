//! Decodes the Chat Completions chunk stream (`choices[0].delta`, indexed
//! tool-call fragments, `finish_reason`, the final usage chunk, `[DONE]`)
//! into provider events and the assembled response. Also accepts the
//! reasoning deltas local servers send (`reasoning_content` / `reasoning`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use crate::provider::sse::SseEvent;
use crate::provider::stream::StreamDecoder;
use crate::provider::{
    parse_tool_args, ModelResponse, ModelStop, ProviderError, ProviderEvent, TokenUsage,
};
use crate::transcript::Block;

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Vec<Choice>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
    reasoning: Option<String>,
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    index: Option<u64>,
    id: Option<String>,
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<PromptDetails>,
    completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Deserialize)]
struct PromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct CompletionDetails {
    reasoning_tokens: Option<u64>,
}

/// A tool call being streamed.
#[derive(Default)]
struct Call {
    id: String,
    name: String,
    args: String,
    /// `ToolUseStart` was emitted (only once the name is known).
    started: bool,
    ended: bool,
}

/// Accumulates one response.
#[derive(Default)]
pub(super) struct OpenAiDecoder {
    text: String,
    thinking: String,
    /// Tool calls by their `index` in the stream.
    calls: BTreeMap<u64, Call>,
    finish_reason: Option<String>,
    usage: TokenUsage,
}

impl StreamDecoder for OpenAiDecoder {
    fn event(&mut self, event: &SseEvent) -> Result<Vec<ProviderEvent>, ProviderError> {
        let mut out = Vec::new();
        if event.data.trim() == "[DONE]" {
            self.complete(&mut out);
            return Ok(out);
        }
        let chunk: Chunk = serde_json::from_str(&event.data)
            .map_err(|err| ProviderError::Protocol(format!("cannot parse stream chunk: {err}")))?;
        if let Some(error) = chunk.error {
            return Err(stream_error(&error));
        }
        if let Some(choice) = chunk.choices.and_then(|c| c.into_iter().next()) {
            if let Some(delta) = choice.delta {
                self.delta(delta, &mut out);
            }
            if let Some(reason) = choice.finish_reason {
                self.finish_reason = Some(reason);
                self.close_calls(&mut out);
            }
        }
        if let Some(usage) = chunk.usage {
            self.apply_usage(&usage);
        }
        Ok(out)
    }

    fn end(&mut self) -> Result<Vec<ProviderEvent>, ProviderError> {
        if self.finish_reason.is_none() {
            return Err(ProviderError::Transport(
                "response stream ended before [DONE]".into(),
            ));
        }
        let mut out = Vec::new();
        self.complete(&mut out);
        Ok(out)
    }
}

impl OpenAiDecoder {
    fn delta(&mut self, delta: Delta, out: &mut Vec<ProviderEvent>) {
        if let Some(reasoning) = delta
            .reasoning_content
            .or(delta.reasoning)
            .filter(|r| !r.is_empty())
        {
            self.thinking.push_str(&reasoning);
            out.push(ProviderEvent::ThinkingDelta(reasoning));
        }
        if let Some(text) = delta.content.filter(|t| !t.is_empty()) {
            self.text.push_str(&text);
            out.push(ProviderEvent::TextDelta(text));
        }
        for fragment in delta.tool_calls.unwrap_or_default() {
            self.tool_fragment(fragment, out);
        }
    }

    /// Adds one tool-call fragment. `ToolUseStart` waits until the name is
    /// known; arguments received before that are replayed after it.
    fn tool_fragment(&mut self, fragment: ToolCallDelta, out: &mut Vec<ProviderEvent>) {
        let key = self.call_key(&fragment);
        let call = self.calls.entry(key).or_default();
        if let Some(id) = fragment.id.filter(|id| !id.is_empty()) {
            if call.id.is_empty() {
                call.id = id;
            }
        }
        let (name, args) = fragment
            .function
            .map(|f| (f.name.unwrap_or_default(), f.arguments.unwrap_or_default()))
            .unwrap_or_default();
        if !call.started {
            call.name.push_str(&name);
        }
        call.args.push_str(&args);
        if !call.started && !call.name.is_empty() {
            start_call(key, call, out);
        } else if call.started && !args.is_empty() {
            out.push(ProviderEvent::ToolUseArgs {
                id: call.id.clone(),
                delta: args,
            });
        }
    }

    /// Where a fragment belongs: its `index`; servers that omit it get
    /// matched by id, else a new id opens a new call and no id continues
    /// the latest one.
    fn call_key(&self, fragment: &ToolCallDelta) -> u64 {
        if let Some(index) = fragment.index {
            return index;
        }
        let last = self.calls.last_key_value().map(|(k, _)| *k);
        match fragment.id.as_deref().filter(|id| !id.is_empty()) {
            Some(id) => self
                .calls
                .iter()
                .find(|(_, c)| c.id == id)
                .map(|(k, _)| *k)
                .unwrap_or_else(|| last.map_or(0, |k| k + 1)),
            None => last.unwrap_or(0),
        }
    }

    fn close_calls(&mut self, out: &mut Vec<ProviderEvent>) {
        for (key, call) in self.calls.iter_mut() {
            if !call.started {
                start_call(*key, call, out);
            }
            if !call.ended {
                call.ended = true;
                out.push(ProviderEvent::ToolUseEnd {
                    id: call.id.clone(),
                });
            }
        }
    }

    fn apply_usage(&mut self, usage: &Usage) {
        let cached = usage
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens);
        self.usage = TokenUsage {
            input: usage
                .prompt_tokens
                .unwrap_or(0)
                .saturating_sub(cached.unwrap_or(0)),
            output: usage.completion_tokens.unwrap_or(0),
            reasoning: usage
                .completion_tokens_details
                .as_ref()
                .and_then(|d| d.reasoning_tokens),
            cache_read: cached.unwrap_or(0),
            cache_write: 0,
            cache_reported: cached.is_some(),
        };
    }

    fn complete(&mut self, out: &mut Vec<ProviderEvent>) {
        self.close_calls(out);
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(Block::Thinking {
                text: std::mem::take(&mut self.thinking),
                signature: None,
            });
        }
        if !self.text.is_empty() {
            content.push(Block::Text {
                text: std::mem::take(&mut self.text),
            });
        }
        let has_calls = !self.calls.is_empty();
        for call in std::mem::take(&mut self.calls).into_values() {
            content.push(Block::ToolCall {
                id: call.id,
                name: call.name,
                args: parse_tool_args(&call.args),
            });
        }
        // Some local servers report `stop` even when the turn made tool calls.
        let stop = match self.finish_reason.take().as_deref() {
            _ if has_calls => ModelStop::ToolUse,
            Some("stop") => ModelStop::EndTurn,
            Some("length") => ModelStop::MaxTokens,
            Some(other) => ModelStop::Other(other.to_owned()),
            None => ModelStop::Other("missing finish_reason".into()),
        };
        out.push(ProviderEvent::Completed(ModelResponse {
            content,
            stop,
            usage: std::mem::take(&mut self.usage),
        }));
    }
}

/// Emits `ToolUseStart` (and any arguments buffered so far), inventing an id
/// for servers that send none.
fn start_call(key: u64, call: &mut Call, out: &mut Vec<ProviderEvent>) {
    if call.id.is_empty() {
        call.id = format!("call_{key}");
    }
    call.started = true;
    out.push(ProviderEvent::ToolUseStart {
        id: call.id.clone(),
        name: call.name.clone(),
    });
    if !call.args.is_empty() {
        out.push(ProviderEvent::ToolUseArgs {
            id: call.id.clone(),
            delta: call.args.clone(),
        });
    }
}

/// Classifies an error object sent inside the stream (`{"error":{...}}`, or
/// a bare string from some compatible servers).
fn stream_error(error: &Value) -> ProviderError {
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .or(error.as_str())
        .unwrap_or("unknown error")
        .to_owned();
    let kinds: Vec<&str> = ["type", "code"]
        .iter()
        .filter_map(|k| error.get(k).and_then(Value::as_str))
        .collect();
    let any = |names: &[&str]| kinds.iter().any(|k| names.contains(k));
    if any(&["server_error", "internal_error"]) {
        ProviderError::Transport(format!("stream aborted by server error: {message}"))
    } else if any(&[
        "rate_limit_exceeded",
        "rate_limit_error",
        "overloaded_error",
        "server_overloaded",
    ]) {
        ProviderError::Overloaded {
            message,
            retry_after: None,
        }
    } else if let Some(kind) = kinds.first() {
        ProviderError::Protocol(format!("{kind}: {message}"))
    } else {
        ProviderError::Protocol(message)
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
