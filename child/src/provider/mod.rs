//! LLM providers: one trait, a request/response model shared by all backends,
//! and the error type the agent's retry loop classifies.
//!
//! A provider turns one [`ModelRequest`] into a stream of [`ProviderEvent`]s:
//! deltas for live display, then exactly one [`ProviderEvent::Completed`]
//! holding the assembled assistant message. Retrying is the agent's job
//! (it reports attempts to clients); providers only classify errors.

pub mod anthropic;
pub mod catalogue;
pub mod echo;
mod http;
pub mod openai;
pub mod sse;
mod stream;

pub use http::route_through_socket;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use corral_protocol::zut::ReasoningLevel;
use futures_util::future::BoxFuture;
use futures_util::Stream;
use serde_json::Value;

use crate::transcript::{Block, Message};

/// A tool as offered to the model.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the tool's arguments (an object schema).
    pub input_schema: Value,
}

/// Everything one model call needs.
#[derive(Clone, Debug)]
pub struct ModelRequest {
    pub model: String,
    pub system: String,
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub reasoning: ReasoningLevel,
    /// Upper bound on output tokens for this call.
    pub max_output: u32,
}

/// Why the model stopped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelStop {
    /// The model finished its answer.
    EndTurn,
    /// The model wants tool results before it continues.
    ToolUse,
    /// The output limit was hit.
    MaxTokens,
    /// Anything else the backend reported (refusal, content filter, ...).
    Other(String),
}

/// Token counts of one model call, as the backend reported them (shared
/// with the gateway, which prices them the same way).
pub use corral_protocol::catalogue::TokenUsage;

/// The assembled result of one model call.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelResponse {
    /// Content blocks in order: thinking, text and tool calls.
    pub content: Vec<Block>,
    pub stop: ModelStop,
    pub usage: TokenUsage,
}

/// One streaming notification from a provider.
#[derive(Clone, Debug, PartialEq)]
pub enum ProviderEvent {
    TextDelta(String),
    ThinkingDelta(String),
    ToolUseStart {
        id: String,
        name: String,
    },
    ToolUseArgs {
        id: String,
        delta: String,
    },
    ToolUseEnd {
        id: String,
    },
    /// Always the last event of a successful stream.
    Completed(ModelResponse),
}

pub type EventStream = Pin<Box<dyn Stream<Item = Result<ProviderEvent, ProviderError>> + Send>>;

/// A backend that can run model calls.
pub trait Provider: Send + Sync {
    /// Wire name: `anthropic`, `openai` or `echo`.
    fn name(&self) -> &'static str;
    /// How prompt caching works on this backend, reported in `cache_diagnostics`.
    fn cache_mode(&self) -> &'static str;
    /// Starts one model call. The future resolves once the backend accepted
    /// the request (HTTP status checked); the stream yields its events.
    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>>;
}

/// Creates the provider named `name` (`anthropic`, `openai` or `echo`).
///
/// A missing or empty `api_key` falls back to the provider's environment
/// variable (`ANTHROPIC_API_KEY`, `OPENAI_API_KEY`). OpenAI may run without a
/// key only against a custom `base_url` (local servers need none). `base_url`
/// follows each SDK's convention: without `/v1` for Anthropic, with it for
/// OpenAI. Nothing is connected or loaded here.
pub fn build(
    name: &str,
    api_key: Option<String>,
    base_url: Option<String>,
) -> Result<Arc<dyn Provider>, ProviderError> {
    let key = |env: &str| {
        api_key
            .clone()
            .filter(|k| !k.is_empty())
            .or_else(|| std::env::var(env).ok().filter(|k| !k.is_empty()))
    };
    let base_url = base_url.filter(|b| !b.is_empty());
    match name {
        "anthropic" => {
            let key = key(anthropic::KEY_ENV).ok_or_else(|| missing_key(anthropic::KEY_ENV))?;
            Ok(Arc::new(anthropic::AnthropicProvider::new(
                key,
                base_url.as_deref(),
            )))
        }
        "openai" => {
            let key = match (key(openai::KEY_ENV), &base_url) {
                (Some(key), _) => key,
                (None, Some(_)) => String::new(),
                (None, None) => return Err(missing_key(openai::KEY_ENV)),
            };
            Ok(Arc::new(openai::OpenAiProvider::new(
                key,
                base_url.as_deref(),
            )))
        }
        "echo" => Ok(Arc::new(echo::EchoProvider)),
        other => Err(ProviderError::Config(format!(
            "unknown provider `{other}` (expected anthropic, openai or echo)"
        ))),
    }
}

fn missing_key(env: &str) -> ProviderError {
    ProviderError::Config(format!("no API key: set {env} or pass --api-key"))
}

/// Parses streamed tool-call arguments. Empty input means no arguments
/// (`{}`). Text that is not valid JSON is kept verbatim as a JSON string, so
/// the transcript shows what the model produced and the tool rejects the
/// non-object arguments with an error the model can react to.
pub fn parse_tool_args(raw: &str) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(serde_json::Map::new());
    }
    serde_json::from_str(raw).unwrap_or_else(|err| {
        tracing::debug!(%err, "tool call arguments are not valid JSON");
        Value::String(raw.to_owned())
    })
}

/// Why a model call failed.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    /// The backend answered with an error status.
    #[error("{message}")]
    Http {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// The connection failed or broke before a complete response arrived.
    #[error("connection error: {0}")]
    Transport(String),
    /// The backend reported it is overloaded (an error event inside the stream).
    #[error("provider overloaded: {message}")]
    Overloaded {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The stream carried something this client cannot interpret, or an
    /// error event that is not worth retrying.
    #[error("invalid response from provider: {0}")]
    Protocol(String),
    /// No credentials were configured.
    #[error("{0}")]
    Config(String),
}

impl ProviderError {
    /// Whether trying the same request again may succeed: rate limits,
    /// server errors, overload and broken connections.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProviderError::Http { status, .. } => {
                matches!(status, 408 | 409 | 425 | 429) || *status >= 500
            }
            ProviderError::Transport(_) | ProviderError::Overloaded { .. } => true,
            ProviderError::Protocol(_) | ProviderError::Config(_) => false,
        }
    }

    /// How long the backend asked us to wait, if it said so.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ProviderError::Http { retry_after, .. }
            | ProviderError::Overloaded { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn build_checks_names_and_keys() {
        assert_eq!(
            build("anthropic", Some("k".into()), None).unwrap().name(),
            "anthropic"
        );
        let local = build(
            "openai",
            Some(String::new()),
            Some("http://localhost:11434/v1".into()),
        );
        assert_eq!(local.unwrap().cache_mode(), "automatic");
        assert_eq!(build("echo", None, None).unwrap().cache_mode(), "none");
        let err = build("gemini", None, None).err().unwrap();
        assert_eq!(
            err.to_string(),
            "unknown provider `gemini` (expected anthropic, openai or echo)"
        );
        for (name, env) in [
            ("anthropic", anthropic::KEY_ENV),
            ("openai", openai::KEY_ENV),
        ] {
            if std::env::var_os(env).is_none() {
                let err = build(name, Some(String::new()), None).err().unwrap();
                assert_eq!(
                    err.to_string(),
                    format!("no API key: set {env} or pass --api-key")
                );
                assert!(!err.is_retryable());
            }
        }
    }

    #[test]
    fn tool_args_parsing() {
        assert_eq!(parse_tool_args(""), serde_json::json!({}));
        assert_eq!(parse_tool_args(" \n"), serde_json::json!({}));
        assert_eq!(parse_tool_args(r#"{"a":1}"#), serde_json::json!({"a": 1}));
        assert_eq!(parse_tool_args(r#"{"a":"#), serde_json::json!(r#"{"a":"#));
    }
}
