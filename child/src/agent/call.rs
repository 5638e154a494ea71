//! One model call: request lifecycle events, retries with backoff, and
//! streaming deltas to the output, ending in the assembled response.

use futures_util::StreamExt;

use super::{retry, trace};
use super::{AgentEvent, RunCtx};
use crate::provider::{ModelRequest, ModelResponse, ProviderError, ProviderEvent};
use crate::transcript::Block;

/// Prompts shorter than this (estimated) are not worth caching; providers
/// ignore cache markers below roughly this size.
const CACHE_MIN_TOKENS: usize = 1024;

/// Why a model call produced no response.
pub(crate) enum CallError {
    /// Cancelled; `partial` holds the text streamed before the abort.
    Aborted { partial: String },
    /// Failed for good (not retryable, or out of attempts).
    Failed(String),
}

/// Runs `request`, retrying transient failures that happen before any
/// content was streamed (after that, a retry would repeat text clients
/// already showed).
pub(crate) async fn call_model(
    ctx: &RunCtx<'_>,
    request: ModelRequest,
    continuation: bool,
) -> Result<ModelResponse, CallError> {
    let provider = ctx.shared.provider.clone();
    let eligible = estimate_tokens(&request) >= CACHE_MIN_TOKENS;
    let mut attempt = 1;
    loop {
        ctx.emit(AgentEvent::RequestStarted {
            provider: provider.name(),
            model: request.model.clone(),
            attempt,
            max_attempts: retry::MAX_ATTEMPTS,
        })
        .await;
        ctx.emit(AgentEvent::CacheDiagnostics {
            eligible,
            mode: provider.cache_mode(),
            continuation,
        })
        .await;
        let mut partial = String::new();
        let outcome = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return Err(CallError::Aborted { partial }),
            opened = provider.stream(request.clone()) => match opened {
                Ok(stream) => {
                    ctx.emit(AgentEvent::AssistantStart).await;
                    consume(ctx, stream, &mut partial).await
                }
                Err(e) => Err(Attempt::Failed { error: e, streamed: false }),
            },
        };
        let (error, streamed) = match outcome {
            Ok(response) => return Ok(response),
            Err(Attempt::Aborted) => return Err(CallError::Aborted { partial }),
            Err(Attempt::Failed { error, streamed }) => (error, streamed),
        };
        if streamed || !error.is_retryable() || attempt >= retry::MAX_ATTEMPTS {
            tracing::warn!(attempt, error = %error, "model call failed");
            return Err(CallError::Failed(error.to_string()));
        }
        attempt += 1;
        trace::record_attempts(&tracing::Span::current(), attempt);
        let delay = retry::delay(attempt, error.retry_after(), retry::jitter());
        tracing::info!(attempt, delay_ms = delay.as_millis() as u64, error = %error, "retrying model call");
        ctx.emit(AgentEvent::RetryScheduled {
            attempt,
            max_attempts: retry::MAX_ATTEMPTS,
            delay,
        })
        .await;
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return Err(CallError::Aborted { partial: String::new() }),
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

enum Attempt {
    Aborted,
    Failed {
        error: ProviderError,
        streamed: bool,
    },
}

/// Forwards deltas until the provider completes, fails or the run is
/// cancelled.
async fn consume(
    ctx: &RunCtx<'_>,
    mut stream: crate::provider::EventStream,
    partial: &mut String,
) -> Result<ModelResponse, Attempt> {
    let mut streamed = false;
    loop {
        let next = tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => return Err(Attempt::Aborted),
            next = stream.next() => next,
        };
        let event = match next {
            Some(Ok(event)) => event,
            Some(Err(error)) => return Err(Attempt::Failed { error, streamed }),
            None => {
                return Err(Attempt::Failed {
                    error: ProviderError::Transport(
                        "the response stream ended before the message was complete".into(),
                    ),
                    streamed,
                })
            }
        };
        let event = match event {
            ProviderEvent::Completed(response) => return Ok(response),
            ProviderEvent::TextDelta(delta) => {
                partial.push_str(&delta);
                AgentEvent::TextDelta(delta)
            }
            ProviderEvent::ThinkingDelta(delta) => AgentEvent::ThinkingDelta(delta),
            ProviderEvent::ToolUseStart { id, name } => AgentEvent::ToolUseStart { id, name },
            ProviderEvent::ToolUseArgs { id, delta } => AgentEvent::ToolUseArgs { id, delta },
            ProviderEvent::ToolUseEnd { id } => AgentEvent::ToolUseEnd { id },
        };
        streamed = true;
        ctx.emit(event).await;
    }
}

/// A rough prompt size: four bytes per token.
fn estimate_tokens(request: &ModelRequest) -> usize {
    let mut bytes = request.system.len();
    for message in &request.messages {
        for block in &message.content {
            bytes += match block {
                Block::Text { text } | Block::Thinking { text, .. } => text.len(),
                Block::ToolCall { args, .. } => args.to_string().len(),
                Block::ToolResult { content, .. } => content
                    .iter()
                    .map(|b| match b {
                        Block::Text { text } => text.len(),
                        _ => 1000,
                    })
                    .sum(),
                Block::Image { .. } | Block::RedactedThinking { .. } => 1000,
            };
        }
    }
    bytes / 4
}
