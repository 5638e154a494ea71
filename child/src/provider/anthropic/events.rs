//! Decodes the Messages API event stream (`message_start`,
//! `content_block_*`, `message_delta`, `message_stop`, `ping`, `error`) into
//! provider events and the assembled response.

use std::collections::BTreeMap;

use serde::Deserialize;
use tracing::debug;

use crate::provider::sse::SseEvent;
use crate::provider::stream::StreamDecoder;
use crate::provider::{
    parse_tool_args, ModelResponse, ModelStop, ProviderError, ProviderEvent, TokenUsage,
};
use crate::transcript::Block;

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: StartBlock,
    },
    ContentBlockDelta {
        index: u64,
        delta: Delta,
    },
    ContentBlockStop {
        index: u64,
    },
    MessageDelta {
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<Usage>,
    },
    MessageStop,
    Ping,
    Error {
        error: ApiError,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<Usage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: Option<String>,
    },
    RedactedThinking {
        data: String,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: String },
    #[serde(rename = "signature_delta")]
    Signature { signature: String },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Deserialize)]
struct Usage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ApiError {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

/// A content block being streamed.
enum Partial {
    Text(String),
    Thinking {
        text: String,
        signature: String,
    },
    Redacted(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
        ended: bool,
    },
}

/// Accumulates one response. Deltas for blocks of kinds we do not know
/// (server tools, citations) are ignored.
#[derive(Default)]
pub(super) struct AnthropicDecoder {
    blocks: BTreeMap<u64, Partial>,
    usage: TokenUsage,
    stop_reason: Option<String>,
}

impl StreamDecoder for AnthropicDecoder {
    fn event(&mut self, event: &SseEvent) -> Result<Vec<ProviderEvent>, ProviderError> {
        let wire: WireEvent = serde_json::from_str(&event.data).map_err(|err| {
            ProviderError::Protocol(format!(
                "cannot parse {} event: {err}",
                event.event.as_deref().unwrap_or("stream")
            ))
        })?;
        let mut out = Vec::new();
        match wire {
            WireEvent::MessageStart { message } => {
                self.usage.cache_reported = true;
                if let Some(usage) = message.usage {
                    self.apply_usage(&usage);
                }
            }
            WireEvent::ContentBlockStart {
                index,
                content_block,
            } => {
                let partial = match content_block {
                    StartBlock::Text { text } => {
                        push_nonempty(&mut out, &text, ProviderEvent::TextDelta);
                        Partial::Text(text)
                    }
                    StartBlock::Thinking {
                        thinking,
                        signature,
                    } => {
                        push_nonempty(&mut out, &thinking, ProviderEvent::ThinkingDelta);
                        Partial::Thinking {
                            text: thinking,
                            signature: signature.unwrap_or_default(),
                        }
                    }
                    StartBlock::RedactedThinking { data } => Partial::Redacted(data),
                    StartBlock::ToolUse { id, name } => {
                        out.push(ProviderEvent::ToolUseStart {
                            id: id.clone(),
                            name: name.clone(),
                        });
                        Partial::ToolUse {
                            id,
                            name,
                            json: String::new(),
                            ended: false,
                        }
                    }
                    StartBlock::Unknown => {
                        debug!(index, "ignoring content block of unknown type");
                        return Ok(out);
                    }
                };
                self.blocks.insert(index, partial);
            }
            WireEvent::ContentBlockDelta { index, delta } => {
                match (self.blocks.get_mut(&index), delta) {
                    (Some(Partial::Text(text)), Delta::Text { text: delta }) => {
                        text.push_str(&delta);
                        out.push(ProviderEvent::TextDelta(delta));
                    }
                    (Some(Partial::Thinking { text, .. }), Delta::Thinking { thinking }) => {
                        text.push_str(&thinking);
                        out.push(ProviderEvent::ThinkingDelta(thinking));
                    }
                    (
                        Some(Partial::Thinking { signature, .. }),
                        Delta::Signature { signature: delta },
                    ) => {
                        signature.push_str(&delta);
                    }
                    (Some(Partial::ToolUse { .. }), Delta::InputJson { partial_json })
                        if partial_json.is_empty() => {}
                    (
                        Some(Partial::ToolUse { id, json, .. }),
                        Delta::InputJson { partial_json },
                    ) => {
                        json.push_str(&partial_json);
                        out.push(ProviderEvent::ToolUseArgs {
                            id: id.clone(),
                            delta: partial_json,
                        });
                    }
                    _ => debug!(index, "ignoring delta that does not fit its content block"),
                }
            }
            WireEvent::ContentBlockStop { index } => {
                if let Some(Partial::ToolUse { id, ended, .. }) = self.blocks.get_mut(&index) {
                    *ended = true;
                    out.push(ProviderEvent::ToolUseEnd { id: id.clone() });
                }
            }
            WireEvent::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let Some(usage) = usage {
                    self.apply_usage(&usage);
                }
            }
            WireEvent::MessageStop => self.complete(&mut out),
            WireEvent::Ping | WireEvent::Unknown => {}
            WireEvent::Error { error } => return Err(stream_error(error)),
        }
        Ok(out)
    }

    fn end(&mut self) -> Result<Vec<ProviderEvent>, ProviderError> {
        Err(ProviderError::Transport(
            "response stream ended before message_stop".into(),
        ))
    }
}

impl AnthropicDecoder {
    /// Counters are cumulative: later reports replace earlier ones.
    fn apply_usage(&mut self, usage: &Usage) {
        let set = |field: &mut u64, value: Option<u64>| {
            if let Some(value) = value {
                *field = value;
            }
        };
        set(&mut self.usage.input, usage.input_tokens);
        set(&mut self.usage.output, usage.output_tokens);
        set(&mut self.usage.cache_read, usage.cache_read_input_tokens);
        set(
            &mut self.usage.cache_write,
            usage.cache_creation_input_tokens,
        );
    }

    fn complete(&mut self, out: &mut Vec<ProviderEvent>) {
        let mut content = Vec::new();
        for partial in std::mem::take(&mut self.blocks).into_values() {
            match partial {
                Partial::Text(text) if !text.is_empty() => content.push(Block::Text { text }),
                Partial::Text(_) => {}
                Partial::Thinking { text, signature }
                    if !text.is_empty() || !signature.is_empty() =>
                {
                    content.push(Block::Thinking {
                        text,
                        signature: (!signature.is_empty()).then_some(signature),
                    });
                }
                Partial::Thinking { .. } => {}
                Partial::Redacted(data) => content.push(Block::RedactedThinking { data }),
                Partial::ToolUse {
                    id,
                    name,
                    json,
                    ended,
                } => {
                    if !ended {
                        out.push(ProviderEvent::ToolUseEnd { id: id.clone() });
                    }
                    content.push(Block::ToolCall {
                        id,
                        name,
                        args: parse_tool_args(&json),
                    });
                }
            }
        }
        let stop = match self.stop_reason.take().as_deref() {
            Some("end_turn" | "stop_sequence") => ModelStop::EndTurn,
            Some("tool_use") => ModelStop::ToolUse,
            Some("max_tokens") => ModelStop::MaxTokens,
            Some(other) => ModelStop::Other(other.to_owned()),
            None => ModelStop::Other("missing stop_reason".into()),
        };
        out.push(ProviderEvent::Completed(ModelResponse {
            content,
            stop,
            usage: std::mem::take(&mut self.usage),
        }));
    }
}

fn push_nonempty(out: &mut Vec<ProviderEvent>, text: &str, event: fn(String) -> ProviderEvent) {
    if !text.is_empty() {
        out.push(event(text.to_owned()));
    }
}

/// Classifies an `error` event sent after the stream started.
fn stream_error(error: ApiError) -> ProviderError {
    match error.kind.as_str() {
        "overloaded_error" => ProviderError::Overloaded {
            message: error.message,
            retry_after: None,
        },
        "rate_limit_error" => ProviderError::Overloaded {
            message: format!("rate limited: {}", error.message),
            retry_after: None,
        },
        // An internal error on the API side: the same request usually works.
        "api_error" => {
            ProviderError::Transport(format!("stream aborted by API error: {}", error.message))
        }
        kind => ProviderError::Protocol(format!("{kind}: {}", error.message)),
    }
}

#[cfg(test)]
#[path = "events_tests.rs"]
mod tests;
