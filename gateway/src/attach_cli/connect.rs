//! Opening a session: the token (`--token-file`, else `--token` or
//! `CORRAL_TOKEN`), the WebSocket upgrade (ws:// or wss://) carrying
//! `Authorization: Bearer`, and the greeting as the dialect has it: a
//! hello and its answer, or the `ready` the gateway sends at once (it is
//! the first line the tool reads). Every failure is an [`AttachError`] that knows
//! its exit code. `--own-runs` adds `own_runs=true` to the URL's query.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::Value;
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::{EXIT_FAILURE, EXIT_USAGE};
use crate::auth::Secret;
use crate::config::{read_token_file, AttachArgs, ConfigError};
use crate::dialect::Dialect;

/// The socket of one session.
pub type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How long the TCP/TLS connect and the upgrade may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long the hello may take to be answered. Longer than the gateway's
/// default agent start timeout (15 s), so a slow start is reported by the
/// gateway, with its reason, rather than cut short here.
const HELLO_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest incoming frame or message. The gateway's own limit applies to
/// agent lines (16 MiB by default) and adds a `seq`; this leaves headroom.
const MAX_FRAME_IN: usize = 64 * 1024 * 1024;

/// An open, authenticated session.
pub struct Session {
    pub ws: Ws,
    /// `data` of the gateway's hello response, to answer a local hello.
    pub hello: Value,
    /// Text frames that came before the hello response (normally none);
    /// they belong on stdout first.
    pub early: Vec<String>,
}

/// Why no session could be opened.
#[derive(Debug, thiserror::Error)]
pub enum AttachError {
    #[error("no token: pass --token-file FILE, or set CORRAL_TOKEN (or --token)")]
    NoToken,
    #[error(transparent)]
    TokenFile(#[from] ConfigError),
    #[error("the token contains characters that cannot be sent in an HTTP header")]
    TokenNotSendable,
    #[error("invalid URL {url:?}: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("cannot connect to {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("the gateway refused the connection to {url}: HTTP {status}{detail}")]
    Refused {
        url: String,
        status: String,
        detail: String,
    },
    #[error("no {what} from {url} within {} s", .limit.as_secs())]
    Timeout {
        url: String,
        what: &'static str,
        limit: Duration,
    },
    #[error("the gateway refused the hello: {0}")]
    HelloRefused(String),
    #[error("the connection closed before the hello was answered ({0})")]
    Closed(String),
}

impl AttachError {
    /// 2 for what the user must fix in the invocation, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        match self {
            AttachError::NoToken
            | AttachError::TokenFile(_)
            | AttachError::TokenNotSendable
            | AttachError::BadUrl { .. } => EXIT_USAGE,
            _ => EXIT_FAILURE,
        }
    }
}

/// The token to present: the first of `--token-file`, else `--token` /
/// `CORRAL_TOKEN`, trimmed.
pub fn token(args: &AttachArgs) -> Result<Secret, AttachError> {
    let token = match &args.token_file {
        Some(path) => read_token_file(path)?.into_iter().next().map(|(t, _)| t),
        None => args.token.clone(),
    };
    token
        .map(|t| Secret::new(t.expose().trim()))
        .filter(|t| !t.expose().is_empty())
        .ok_or(AttachError::NoToken)
}

/// Connects and waits for the greeting (after a hello, for zut).
/// `own_runs`: receive only the events of this session's runs.
pub async fn open(
    url: &str,
    token: &Secret,
    dialect: Dialect,
    own_runs: bool,
) -> Result<Session, AttachError> {
    let request = if own_runs {
        upgrade_request(&with_own_runs(url), token)?
    } else {
        upgrade_request(url, token)?
    };
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_IN))
        .max_frame_size(Some(MAX_FRAME_IN));
    let connect = tokio_tungstenite::connect_async_with_config(request, Some(config), false);
    let (mut ws, _) = within(url, "connection", CONNECT_TIMEOUT, connect)
        .await?
        .map_err(|e| connect_error(url, e))?;
    let Some(hello) = dialect.rules().attach_hello(token.expose()) else {
        let greeting = ready(&mut ws);
        let (hello, text) = within(url, "ready", HELLO_TIMEOUT, greeting).await??;
        return Ok(Session {
            ws,
            hello,
            early: vec![text],
        });
    };
    ws.send(Message::text(hello))
        .await
        .map_err(|e| connect_error(url, e))?;
    let mut early = Vec::new();
    let answer = hello_answer(&mut ws, dialect, &mut early);
    let hello = within(url, "hello response", HELLO_TIMEOUT, answer).await??;
    Ok(Session { ws, hello, early })
}

/// `future`'s output, or a timeout naming `what` did not come from `url`.
async fn within<T>(
    url: &str,
    what: &'static str,
    limit: Duration,
    future: impl std::future::Future<Output = T>,
) -> Result<T, AttachError> {
    timeout(limit, future)
        .await
        .map_err(|_| AttachError::Timeout {
            url: url.to_string(),
            what,
            limit,
        })
}

/// `url` asking for this session's own runs only.
fn with_own_runs(url: &str) -> String {
    let (base, fragment) = url
        .split_once('#')
        .map_or((url, None), |(b, f)| (b, Some(f)));
    let separator = if base.contains('?') { '&' } else { '?' };
    let mut out = format!("{base}{separator}own_runs=true");
    if let Some(fragment) = fragment {
        out.push('#');
        out.push_str(fragment);
    }
    out
}

/// The upgrade request for a ws:// or wss:// URL, with the bearer header.
fn upgrade_request(url: &str, token: &Secret) -> Result<Request, AttachError> {
    let bad = |reason: String| AttachError::BadUrl {
        url: url.to_string(),
        reason,
    };
    let mut request = url.into_client_request().map_err(|e| bad(e.to_string()))?;
    match request.uri().scheme_str() {
        Some("ws" | "wss") => {}
        other => {
            let scheme = other.unwrap_or("none");
            return Err(bad(format!("the scheme must be ws or wss, not {scheme}")));
        }
    }
    let mut bearer = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
        .map_err(|_| AttachError::TokenNotSendable)?;
    bearer.set_sensitive(true);
    request.headers_mut().insert(AUTHORIZATION, bearer);
    Ok(request)
}

/// Reads until the response to our hello: its `data` when it succeeded.
async fn hello_answer(
    ws: &mut Ws,
    dialect: Dialect,
    early: &mut Vec<String>,
) -> Result<Value, AttachError> {
    loop {
        let message = match ws.next().await {
            None => return Err(AttachError::Closed("no close frame".into())),
            Some(Err(e)) => return Err(AttachError::Closed(e.to_string())),
            Some(Ok(message)) => message,
        };
        let text = match message {
            Message::Text(text) => text,
            Message::Close(frame) => return Err(closed(frame)),
            _ => continue,
        };
        let frame: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        match dialect.rules().attach_hello_answer(&frame) {
            None => early.push(text.as_str().to_string()),
            Some(answer) => return answer.map_err(AttachError::HelloRefused),
        }
    }
}

/// Reads the first frame of a gateway that greets first: its `ready`
/// (parsed, and as sent), or its refusal.
async fn ready(ws: &mut Ws) -> Result<(Value, String), AttachError> {
    loop {
        let text = match ws.next().await {
            None => return Err(AttachError::Closed("no close frame".into())),
            Some(Err(e)) => return Err(AttachError::Closed(e.to_string())),
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(frame))) => {
                return Err(closed(frame));
            }
            Some(Ok(_)) => continue,
        };
        let frame: Value = serde_json::from_str(text.as_str()).unwrap_or(Value::Null);
        if frame["type"] == "ready" {
            return Ok((frame, text.as_str().to_string()));
        }
        return Err(AttachError::HelloRefused(
            crate::dialect::attach::refusal_reason(&frame),
        ));
    }
}

/// The gateway closed before the session opened.
fn closed(frame: Option<tokio_tungstenite::tungstenite::protocol::CloseFrame>) -> AttachError {
    AttachError::Closed(frame.map_or_else(
        || "no status code".to_string(),
        |f| format!("code {}: {}", u16::from(f.code), f.reason),
    ))
}

/// A failed connect or upgrade, with the gateway's HTTP answer if it sent one.
fn connect_error(url: &str, error: WsError) -> AttachError {
    match error {
        WsError::Http(response) => {
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default();
            let body: String = body.trim().chars().take(200).collect();
            AttachError::Refused {
                url: url.to_string(),
                status: response.status().to_string(),
                detail: if body.is_empty() {
                    String::new()
                } else {
                    format!(" ({body})")
                },
            }
        }
        WsError::Url(e) => AttachError::BadUrl {
            url: url.to_string(),
            reason: e.to_string(),
        },
        other => AttachError::Connect {
            url: url.to_string(),
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn args(token_file: Option<PathBuf>, token: Option<&str>) -> AttachArgs {
        AttachArgs {
            url: "ws://h/v1/projects/p/rpc".into(),
            token_file,
            token: token.map(Secret::new),
            dialect: Dialect::default(),
            own_runs: false,
        }
    }

    #[test]
    fn token_sources_and_exit_codes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "# mine\n  from-file-token  \n").unwrap();
        let t = token(&args(Some(file), Some("from-flag"))).unwrap();
        assert_eq!(t.expose(), "from-file-token", "the file wins");
        assert_eq!(token(&args(None, Some(" x "))).unwrap().expose(), "x");
        let err = token(&args(None, Some("  "))).unwrap_err();
        assert!(matches!(err, AttachError::NoToken) && err.exit_code() == EXIT_USAGE);
        let err = token(&args(Some(dir.path().join("missing")), None)).unwrap_err();
        assert_eq!(err.exit_code(), EXIT_USAGE);
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn own_runs_goes_in_the_query() {
        assert_eq!(
            with_own_runs("ws://h/v1/projects/p/rpc"),
            "ws://h/v1/projects/p/rpc?own_runs=true"
        );
        assert_eq!(
            with_own_runs("ws://h/p/rpc?resume_after=3"),
            "ws://h/p/rpc?resume_after=3&own_runs=true"
        );
    }

    #[test]
    fn upgrade_request_checks_the_url_and_carries_the_token() {
        let token = Secret::new("abc");
        let request = upgrade_request("wss://gw.example/v1/projects/p/rpc", &token).unwrap();
        assert_eq!(request.headers()[AUTHORIZATION], "Bearer abc");
        for url in ["http://gw/v1/projects/p/rpc", "not a url", "gw:7000"] {
            let err = upgrade_request(url, &token).unwrap_err();
            assert!(matches!(err, AttachError::BadUrl { .. }), "{url}: {err}");
        }
        let err = upgrade_request("ws://gw/", &Secret::new("a\nb")).unwrap_err();
        assert!(matches!(err, AttachError::TokenNotSendable));
        assert!(!err.to_string().contains("a\nb"));
    }
}
