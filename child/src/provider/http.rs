//! HTTP plumbing shared by the Anthropic and OpenAI providers: the lazily
//! built client, turning error responses into classified [`ProviderError`]s
//! (with `retry-after` honoured), and checking that a 2xx is an event stream.

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use reqwest::header::{HeaderMap, CONTENT_TYPE};
use reqwest::Response;
use serde_json::Value;

use super::sse::error_chain;
use super::ProviderError;

/// Error bodies longer than this are cut; they are only shown to the user.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// Characters of a non-JSON error body quoted in the message.
const MAX_QUOTED: usize = 300;

/// The gateway's model-key broker, when model calls go through it
/// (`--model-socket`): its socket's `O_PATH` descriptor, held for the
/// process's life, and the path connections follow to it.
struct ModelSocket {
    _socket: OwnedFd,
    path: PathBuf,
}

static MODEL_SOCKET: OnceLock<ModelSocket> = OnceLock::new();

/// Sends every model call through `socket` (an `O_PATH` descriptor of the
/// broker's Unix socket, opened before the sandbox hid its path) instead
/// of the network: connect(2) follows `/proc/self/fd/N` to it, and the
/// URL's host is not resolved. Call before the first model call.
pub fn route_through_socket(socket: OwnedFd) {
    let path = PathBuf::from(format!("/proc/self/fd/{}", socket.as_raw_fd()));
    let _ = MODEL_SOCKET.set(ModelSocket {
        _socket: socket,
        path,
    });
}

/// The process-wide client, built on first use so that starting the agent
/// does not pay for TLS setup. Cloning a `reqwest::Client` shares its pool.
pub(crate) fn client() -> Result<reqwest::Client, ProviderError> {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let mut builder = reqwest::Client::builder()
        .user_agent(concat!("corral-agent/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        // Between two reads of the body; reasoning models can be silent a while.
        .read_timeout(Duration::from_secs(600));
    if let Some(socket) = MODEL_SOCKET.get() {
        // One idle connection kept to the broker: one descriptor, no more.
        builder = builder
            .unix_socket(socket.path.clone())
            .pool_max_idle_per_host(1);
    }
    let client = builder.build().map_err(|err| {
        ProviderError::Config(format!("cannot create HTTP client: {}", error_chain(&err)))
    })?;
    Ok(CLIENT.get_or_init(|| client).clone())
}

/// A failure to connect or to read the body.
pub(crate) fn transport(err: &reqwest::Error) -> ProviderError {
    ProviderError::Transport(error_chain(err))
}

/// Passes a successful event-stream response through; turns anything else
/// into a classified error. `key_env` names the API key variable for hints.
pub(crate) async fn check_response(
    response: Response,
    key_env: &str,
) -> Result<Response, ProviderError> {
    let status = response.status().as_u16();
    if response.status().is_success() {
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_ascii_lowercase();
        if content_type.is_empty() || content_type.contains("event-stream") {
            return Ok(response);
        }
        let body = read_bounded(response).await;
        return Err(ProviderError::Protocol(format!(
            "expected an event stream (HTTP {status}), got `{content_type}`: {}",
            error_message(&body, "empty body")
        )));
    }
    let retry_after = retry_after(response.headers());
    let reason = response.status().canonical_reason().unwrap_or("error");
    let body = read_bounded(response).await;
    Err(classify_status(
        status,
        &error_message(&body, reason),
        retry_after,
        key_env,
    ))
}

/// Reads at most [`MAX_ERROR_BODY`] bytes of a body, lossily decoded.
async fn read_bounded(mut response: Response) -> String {
    let mut body = Vec::new();
    while body.len() < MAX_ERROR_BODY {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(MAX_ERROR_BODY);
    String::from_utf8_lossy(&body).into_owned()
}

/// Builds the error for an HTTP error status, with a message that says what to do.
pub(crate) fn classify_status(
    status: u16,
    message: &str,
    retry_after: Option<Duration>,
    key_env: &str,
) -> ProviderError {
    let message = match status {
        401 | 403 => format!(
            "authentication failed (HTTP {status}): {message}; check --api-key or {key_env}"
        ),
        400 => format!("request rejected (HTTP {status}): {message}"),
        404 => format!("not found (HTTP {status}): {message}; check --base-url and --model"),
        429 => format!("rate limited (HTTP {status}): {message}"),
        529 => format!("provider overloaded (HTTP {status}): {message}"),
        500..=599 => format!("server error (HTTP {status}): {message}"),
        _ => format!("HTTP {status}: {message}"),
    };
    ProviderError::Http {
        status,
        message,
        retry_after,
    }
}

/// The human-readable part of an error body: `error.message` (Anthropic and
/// OpenAI), a bare `error` string (Ollama), `message` or `detail` (other
/// servers), else the start of the raw body, else `fallback`.
pub(crate) fn error_message(body: &str, fallback: &str) -> String {
    if let Ok(json) = serde_json::from_str::<Value>(body) {
        let candidates = [
            json.pointer("/error/message"),
            json.get("error"),
            json.get("message"),
            json.get("detail"),
        ];
        if let Some(text) = candidates.into_iter().flatten().find_map(Value::as_str) {
            return text.to_owned();
        }
    }
    let body = body.trim();
    if body.is_empty() {
        return fallback.to_owned();
    }
    match body.char_indices().nth(MAX_QUOTED) {
        Some((cut, _)) => format!("{}…", &body[..cut]),
        None => body.to_owned(),
    }
}

/// The wait the server asked for: `retry-after-ms` (milliseconds) wins over
/// `retry-after` (seconds, possibly fractional). HTTP-date values are ignored.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let number = |name: &str| -> Option<f64> {
        let value = headers
            .get(name)?
            .to_str()
            .ok()?
            .trim()
            .parse::<f64>()
            .ok()?;
        (value.is_finite() && value >= 0.0).then_some(value)
    };
    if let Some(ms) = number("retry-after-ms") {
        return Duration::try_from_secs_f64(ms / 1000.0).ok();
    }
    number("retry-after").and_then(|secs| Duration::try_from_secs_f64(secs).ok())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod test_server {
    //! A one-shot HTTP/1.1 server on `127.0.0.1:0` that records the request
    //! and answers with a canned response.

    use std::time::Duration;

    use serde_json::Value;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    /// The request the server received.
    pub(crate) struct Seen {
        /// Request line and headers, including the final blank line.
        pub(crate) head: String,
        /// The JSON body (`Null` if it was not JSON).
        pub(crate) body: Value,
    }

    pub(crate) struct TestServer {
        pub(crate) base_url: String,
        handle: JoinHandle<Seen>,
    }

    impl TestServer {
        pub(crate) async fn request(self) -> Seen {
            tokio::time::timeout(Duration::from_secs(5), self.handle)
                .await
                .unwrap()
                .unwrap()
        }
    }

    pub(crate) async fn serve_once(
        status: u16,
        headers: &[(&str, &str)],
        body: &str,
    ) -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let mut response = format!(
            "HTTP/1.1 {status} Canned\r\ncontent-length: {}\r\nconnection: close\r\n",
            body.len()
        );
        for (name, value) in headers {
            response.push_str(&format!("{name}: {value}\r\n"));
        }
        response.push_str("\r\n");
        response.push_str(body);
        let handle = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            let head_end = loop {
                let n = socket.read(&mut chunk).await.unwrap();
                assert!(n > 0, "client closed before sending headers");
                buf.extend_from_slice(&chunk[..n]);
                if let Some(pos) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                    break pos + 4;
                }
            };
            let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
            let length: usize = head
                .to_ascii_lowercase()
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            while buf.len() < head_end + length {
                let n = socket.read(&mut chunk).await.unwrap();
                assert!(n > 0, "client closed before sending the body");
                buf.extend_from_slice(&chunk[..n]);
            }
            let body =
                serde_json::from_slice(&buf[head_end..head_end + length]).unwrap_or(Value::Null);
            socket.write_all(response.as_bytes()).await.unwrap();
            let _ = socket.shutdown().await;
            Seen { head, body }
        });
        TestServer { base_url, handle }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn auth_failure_names_the_key_variable() {
        let body = r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#;
        let err = classify_status(
            401,
            &error_message(body, "Unauthorized"),
            None,
            "ANTHROPIC_API_KEY",
        );
        assert_eq!(
            err.to_string(),
            "authentication failed (HTTP 401): invalid x-api-key; check --api-key or ANTHROPIC_API_KEY"
        );
        assert!(!err.is_retryable());
    }

    #[test]
    fn error_message_shapes() {
        let openai =
            r#"{"error":{"message":"bad model","type":"invalid_request_error","code":null}}"#;
        assert_eq!(error_message(openai, "x"), "bad model");
        assert_eq!(
            error_message(r#"{"error":"model not found"}"#, "x"),
            "model not found"
        );
        assert_eq!(error_message(r#"{"detail":"nope"}"#, "x"), "nope");
        assert_eq!(
            error_message("  <html>bad gateway</html> ", "x"),
            "<html>bad gateway</html>"
        );
        assert_eq!(error_message("", "Bad Gateway"), "Bad Gateway");
        assert_eq!(
            error_message(&"é".repeat(400), "x").chars().count(),
            MAX_QUOTED + 1
        );
    }

    #[test]
    fn retry_after_headers() {
        let mut headers = HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("1.5"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(1500)));
        headers.insert("retry-after-ms", HeaderValue::from_static("250"));
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(250)));
        headers.remove("retry-after-ms");
        headers.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&headers), None);
        headers.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn rate_limit_and_overload_are_retryable() {
        let err = classify_status(429, "slow down", Some(Duration::from_secs(2)), "K");
        assert!(err.is_retryable());
        assert_eq!(err.retry_after(), Some(Duration::from_secs(2)));
        assert_eq!(err.to_string(), "rate limited (HTTP 429): slow down");
        assert!(classify_status(529, "overloaded", None, "K").is_retryable());
        assert!(classify_status(503, "down", None, "K").is_retryable());
        assert!(!classify_status(400, "bad", None, "K").is_retryable());
    }
}
