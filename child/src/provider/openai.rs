//! The OpenAI Chat Completions provider (streaming): `POST
//! {base}/chat/completions` where the base includes `/v1`, so any compatible
//! server (Ollama, vLLM, llama.cpp) works via `--base-url http://host:port/v1`.
//! Body building lives in `request`, stream decoding in `events`.

mod events;
mod request;

use std::fmt;

use futures_util::future::BoxFuture;
use tracing::debug;

use super::{http, stream, EventStream, ModelRequest, Provider, ProviderError};

/// Environment variable holding the API key.
pub const KEY_ENV: &str = "OPENAI_API_KEY";
/// Default API base (includes `/v1`).
pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Streams model calls from a Chat Completions endpoint. Construction is
/// cheap; the HTTP client is created on the first call.
pub struct OpenAiProvider {
    /// Empty for local servers that need no key (no `Authorization` header).
    api_key: String,
    /// Full URL of the chat completions endpoint.
    endpoint: String,
}

impl OpenAiProvider {
    /// `base_url` includes `/v1`; `None` means [`DEFAULT_BASE_URL`]. A
    /// trailing slash is ignored.
    pub fn new(api_key: impl Into<String>, base_url: Option<&str>) -> OpenAiProvider {
        let base = base_url.unwrap_or(DEFAULT_BASE_URL).trim_end_matches('/');
        OpenAiProvider {
            api_key: api_key.into(),
            endpoint: format!("{base}/chat/completions"),
        }
    }

    /// The URL requests are sent to.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }
}

impl fmt::Debug for OpenAiProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiProvider")
            .field("endpoint", &self.endpoint)
            .field("has_key", &!self.api_key.is_empty())
            .finish()
    }
}

impl Provider for OpenAiProvider {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn cache_mode(&self) -> &'static str {
        "automatic"
    }

    fn stream(
        &self,
        request: ModelRequest,
    ) -> BoxFuture<'static, Result<EventStream, ProviderError>> {
        let endpoint = self.endpoint.clone();
        let api_key = self.api_key.clone();
        Box::pin(async move {
            let body = request::request_body(&request);
            debug!(model = %request.model, %endpoint, messages = request.messages.len(), "openai request");
            let mut builder = http::client()?.post(&endpoint).json(&body);
            if !api_key.is_empty() {
                builder = builder.bearer_auth(api_key);
            }
            let response = builder.send().await.map_err(|err| http::transport(&err))?;
            let response = http::check_response(response, KEY_ENV).await?;
            Ok(stream::decode(
                response.bytes_stream(),
                events::OpenAiDecoder::default(),
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
            model: "llama3".into(),
            system: String::new(),
            messages: vec![Message::new(Role::User, vec![Block::text("hi")])],
            tools: vec![],
            reasoning: ReasoningLevel::Off,
            max_output: 256,
        }
    }

    #[test]
    fn endpoint_includes_the_v1_base() {
        assert_eq!(
            OpenAiProvider::new("k", None).endpoint(),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            OpenAiProvider::new("", Some("http://localhost:11434/v1/")).endpoint(),
            "http://localhost:11434/v1/chat/completions"
        );
        assert!(!format!("{:?}", OpenAiProvider::new("secret", None)).contains("secret"));
    }

    #[tokio::test]
    async fn streams_from_a_keyless_local_server() {
        let sse = "data: {\"choices\":[{\"delta\":{\"content\":\"hey\"}}]}\n\n\
                   data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n\
                   data: [DONE]\n\n";
        let server = test_server::serve_once(
            200,
            &[("content-type", "text/event-stream; charset=utf-8")],
            sse,
        )
        .await;
        let provider = OpenAiProvider::new("", Some(&format!("{}/v1", server.base_url)));
        let events: Vec<_> = provider.stream(request()).await.unwrap().collect().await;
        let Some(Ok(ProviderEvent::Completed(response))) = events.last() else {
            panic!("no completion: {events:?}");
        };
        assert_eq!(response.stop, ModelStop::EndTurn);
        assert_eq!(response.content, vec![Block::text("hey")]);

        let seen = server.request().await;
        assert!(
            seen.head
                .starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
            "{}",
            seen.head
        );
        assert!(!seen.head.to_ascii_lowercase().contains("authorization:"));
        assert_eq!(
            seen.body["messages"][0],
            serde_json::json!({"role": "user", "content": "hi"})
        );
    }

    #[tokio::test]
    async fn sends_the_bearer_key() {
        let server = test_server::serve_once(200, &[], "data: [DONE]\n\n").await;
        let provider = OpenAiProvider::new("sk-abc", Some(&server.base_url));
        let _ = provider
            .stream(request())
            .await
            .unwrap()
            .collect::<Vec<_>>()
            .await;
        let seen = server.request().await;
        assert!(
            seen.head
                .to_ascii_lowercase()
                .contains("authorization: bearer sk-abc\r\n"),
            "{}",
            seen.head
        );
    }

    #[tokio::test]
    async fn http_errors_are_classified() {
        let body = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        let server = test_server::serve_once(401, &[], body).await;
        let err = OpenAiProvider::new("bad", Some(&server.base_url))
            .stream(request())
            .await
            .err()
            .unwrap();
        assert_eq!(
            err.to_string(),
            "authentication failed (HTTP 401): Incorrect API key provided; check --api-key or OPENAI_API_KEY"
        );

        let body = r#"{"error":{"message":"Rate limit reached","type":"tokens","code":"rate_limit_exceeded"}}"#;
        let server = test_server::serve_once(
            429,
            &[("retry-after-ms", "1500"), ("retry-after", "2")],
            body,
        )
        .await;
        let err = OpenAiProvider::new("k", Some(&server.base_url))
            .stream(request())
            .await
            .err()
            .unwrap();
        assert!(err.is_retryable());
        assert_eq!(
            err.retry_after(),
            Some(std::time::Duration::from_millis(1500))
        );

        let server = test_server::serve_once(
            200,
            &[("content-type", "application/json")],
            r#"{"choices":[]}"#,
        )
        .await;
        let err = OpenAiProvider::new("k", Some(&server.base_url))
            .stream(request())
            .await
            .err()
            .unwrap();
        assert!(matches!(err, ProviderError::Protocol(_)), "{err:?}");
    }
}
