//! The Anthropic Messages API provider (streaming): `POST {base}/v1/messages`
//! with `x-api-key` and `anthropic-version`, explicit prompt-cache
//! breakpoints, and extended thinking. Body building lives in `request`,
//! stream decoding in `events`.

mod events;
mod request;

use std::fmt;

use futures_util::future::BoxFuture;
use tracing::debug;

use super::{http, stream, EventStream, ModelRequest, Provider, ProviderError};

/// Environment variable holding the API key.
pub const KEY_ENV: &str = "ANTHROPIC_API_KEY";
/// Default API base (SDK convention: without `/v1`).
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
const API_VERSION: &str = "2023-06-01";

/// Streams model calls from the Anthropic Messages API. Construction is
/// cheap; the HTTP client is created on the first call.
pub struct AnthropicProvider {
    api_key: String,
    /// Full URL of the messages endpoint.
    endpoint: String,
}

impl AnthropicProvider {
    /// `base_url` follows the SDK convention (no `/v1`); `None` means
    /// [`DEFAULT_BASE_URL`]. A trailing slash is ignored.
    pub fn new(api_key: impl Into<String>, base_url: Option<&str>) -> AnthropicProvider {
        let base = base_url.unwrap_or(DEFAULT_BASE_URL).trim_end_matches('/');
        AnthropicProvider {
            api_key: api_key.into(),
            endpoint: format!("{base}/v1/messages"),
        }
    }

    /// The URL requests are sent to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl fmt::Debug for AnthropicProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnthropicProvider")
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

impl Provider for AnthropicProvider {
    fn name(&self) -> &'static str {
        "anthropic"
    }

    fn cache_mode(&self) -> &'static str {
        "explicit"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let endpoint = self.endpoint.clone();
        let api_key = self.api_key.clone();
        Box::pin(async move {
            let body = request::request_body(&request);
            debug!(model = %request.model, %endpoint, messages = request.messages.len(), "anthropic request");
            let response = http::client()?
                .post(&endpoint)
                .header("x-api-key", api_key)
                .header("anthropic-version", API_VERSION)
                .json(&body)
                .send()
                .await
                .map_err(|err| http::transport(&err))?;
            let response = http::check_response(response, KEY_ENV).await?;
            Ok(stream::decode(
                response.bytes_stream(),
                events::AnthropicDecoder::default(),
            ))
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::provider::http::test_server;
    use crate::provider::{ModelStop, ProviderEvent};
    use crate::transcript::{Block, Message, Role};
    use corral_protocol::zut::ReasoningLevel;
    use futures_util::StreamExt;

    fn request() -> ModelRequest {
        ModelRequest {
            model: "claude-haiku-4-5".into(),
            system: String::new(),
            messages: vec![Message::new(Role::User, vec![Block::text("hi")])],
            tools: vec![],
            reasoning: ReasoningLevel::Off,
            max_output: 1024,
        }
    }

    #[test]
    fn endpoint_follows_the_sdk_convention() {
        assert_eq!(
            AnthropicProvider::new("k", None).endpoint(),
            "https://api.anthropic.com/v1/messages"
        );
        assert_eq!(
            AnthropicProvider::new("k", Some("http://127.0.0.1:9/")).endpoint(),
            "http://127.0.0.1:9/v1/messages"
        );
        assert!(!format!("{:?}", AnthropicProvider::new("secret", None)).contains("secret"));
    }

    #[tokio::test]
    async fn streams_a_reply_over_http() {
        let sse = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\n\n\
                   event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
                   event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hello\"}}\n\n\
                   event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n\
                   event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
        let server =
            test_server::serve_once(200, &[("content-type", "text/event-stream")], sse).await;
        let provider = AnthropicProvider::new("sk-test", Some(&server.base_url));
        let events: Vec<_> = provider.stream(request()).await.unwrap().collect().await;
        let Some(Ok(ProviderEvent::Completed(response))) = events.last() else {
            panic!("no completion: {events:?}");
        };
        assert_eq!(response.stop, ModelStop::EndTurn);
        assert_eq!(response.content, vec![Block::text("hello")]);

        let seen = server.request().await;
        assert!(
            seen.head.starts_with("POST /v1/messages HTTP/1.1\r\n"),
            "{}",
            seen.head
        );
        let head = seen.head.to_ascii_lowercase();
        assert!(head.contains("x-api-key: sk-test\r\n"));
        assert!(head.contains("anthropic-version: 2023-06-01\r\n"));
        assert!(head.contains("content-type: application/json\r\n"));
        assert_eq!(seen.body["stream"], serde_json::json!(true));
    }

    #[tokio::test]
    async fn http_errors_are_classified() {
        let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        let server =
            test_server::serve_once(401, &[("content-type", "application/json")], body).await;
        let provider = AnthropicProvider::new("bad", Some(&server.base_url));
        let err = provider.stream(request()).await.err().unwrap();
        assert_eq!(
            err.to_string(),
            "authentication failed (HTTP 401): invalid x-api-key; check --api-key or ANTHROPIC_API_KEY"
        );
        assert!(!err.is_retryable());

        let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
        let server = test_server::serve_once(429, &[("retry-after", "7")], body).await;
        let provider = AnthropicProvider::new("k", Some(&server.base_url));
        let err = provider.stream(request()).await.err().unwrap();
        assert!(err.is_retryable());
        assert_eq!(err.retry_after(), Some(std::time::Duration::from_secs(7)));
        assert_eq!(err.to_string(), "rate limited (HTTP 429): slow down");
    }

    #[tokio::test]
    async fn refused_connection_is_a_transport_error() {
        let addr = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap()
        };
        let provider = AnthropicProvider::new("k", Some(&format!("http://{addr}")));
        let err = provider.stream(request()).await.err().unwrap();
        assert!(matches!(err, ProviderError::Transport(_)), "{err:?}");
    }
}
