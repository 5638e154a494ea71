//! `GET /v1/projects/{project}/rpc[?resume_after=SEQ]`: one WebSocket
//! client of a project.
//!
//! Before the upgrade: origin allowlist, project name and directory. After
//! it: authentication, by the dialect's hello carrying the token in the
//! first frame within the hello timeout, or by an `Authorization: Bearer`
//! header on the upgrade request (a letscode or Zi client so authenticated
//! is greeted at once: it waits for `ready` before writing). Then attach
//! to the project's hub and run two halves: a reader turning text frames
//! into hub requests, and a writer sending what the client's feed yields.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::ws::rejection::WebSocketUpgradeRejection;
use axum::extract::ws::{CloseFrame, Message, Utf8Bytes, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Map, Value};

use crate::auth::{self, Role};
use crate::dialect::Dialect;
use crate::hub::{Delivery, HubHandle};
use crate::metrics::{Direction, Metrics};
use crate::projects;
use crate::registry::RegistryError;
use crate::server::AppState;

/// Policy violation: authentication failed.
const CLOSE_POLICY: u16 = 1008;
/// The gateway cannot serve the client (agent failed to start, ...).
const CLOSE_ERROR: u16 = 1011;
/// Try again later (too many agents, shutting down).
const CLOSE_AGAIN: u16 = 1013;
const CLOSE_GOING_AWAY: u16 = 1001;

/// The upgrade request's query.
#[derive(Debug, serde::Deserialize)]
pub struct RpcQuery {
    /// Resume point for a client that skips the in-band hello.
    resume_after: Option<u64>,
}

pub async fn upgrade(
    ws: Result<WebSocketUpgrade, WebSocketUpgradeRejection>,
    Path(project): Path<String>,
    Query(query): Query<RpcQuery>,
    headers: HeaderMap,
    State(state): State<Arc<AppState>>,
) -> Response {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if !auth::origin_allowed(
        header(header::ORIGIN),
        header(header::HOST),
        &state.allowed_origins,
    ) {
        return (StatusCode::FORBIDDEN, "origin not allowed\n").into_response();
    }
    let dir = match projects::resolve(&state.projects_root, &project) {
        Ok(dir) => dir,
        Err(e) => {
            let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::NOT_FOUND);
            return (status, format!("{e}\n")).into_response();
        }
    };
    let header_role = match auth::bearer(header(header::AUTHORIZATION)) {
        Some(token) => match state.tokens.session_role(token) {
            None => {
                state.metrics.auth_failure("invalid_token");
                return (StatusCode::UNAUTHORIZED, "invalid token\n").into_response();
            }
            Some(role) => Some(role),
        },
        None => None,
    };
    let ws = match ws {
        Ok(ws) => ws,
        Err(rejection) => return rejection.into_response(),
    };
    let max = state.max_frame_bytes;
    ws.max_frame_size(max)
        .max_message_size(max)
        .on_upgrade(move |socket| {
            let connections = state.connections.clone();
            let header = header_role.map(|role| (role, query.resume_after));
            connections.track_future(connection(socket, state, project, dir, header))
        })
}

/// What the client's first frame said.
struct Hello {
    role: Role,
    resume_after: Option<u64>,
    /// `Some(id)` when there is a hello to answer.
    answer: Option<Option<Value>>,
    /// A first frame that was not a hello (header auth only): a request.
    first_request: Option<Map<String, Value>>,
}

/// `header`: the role an `Authorization` header proved, with the query's
/// resume point.
async fn connection(
    socket: WebSocket,
    state: Arc<AppState>,
    project: String,
    dir: PathBuf,
    header: Option<(Role, Option<u64>)>,
) {
    let (mut sink, mut stream) = socket.split();
    let dialect = state.dialect;
    let hello = match header {
        Some((role, resume_after)) if dialect.greets_first() => Ok(Hello {
            role,
            resume_after,
            answer: None,
            first_request: None,
        }),
        _ => tokio::select! {
            hello = read_hello(&mut stream, &state, header) => hello,
            _ = state.shutdown.cancelled() => {
                close(&mut sink, CLOSE_GOING_AWAY, "the gateway is shutting down").await;
                return;
            }
        },
    };
    let hello = match hello {
        Ok(hello) => hello,
        Err((id, reason, error)) => {
            state.metrics.auth_failure(reason);
            tracing::info!(%project, "client refused: {error}");
            let reply = dialect.refusal(id.as_ref(), "unauthorized", &error);
            let _ = sink.send(text(reply)).await;
            close(&mut sink, CLOSE_POLICY, &error).await;
            return;
        }
    };
    let attached = state
        .registry
        .attach(
            &project,
            dir,
            hello.role,
            hello.resume_after,
            hello.answer.clone(),
        )
        .await;
    let (hub, attached) = match attached {
        Ok(ok) => ok,
        Err(error) => {
            tracing::warn!(%project, "cannot attach client: {error}");
            let id = hello.answer.clone().flatten();
            let reply = dialect.refusal(id.as_ref(), "unavailable", &error.to_string());
            let _ = sink.send(text(reply)).await;
            let code = match error {
                RegistryError::Full(_) | RegistryError::ShuttingDown => CLOSE_AGAIN,
                RegistryError::Attach(_) => CLOSE_ERROR,
            };
            close(&mut sink, code, &error.to_string()).await;
            return;
        }
    };
    let client = attached.client;
    tracing::debug!(%project, client, role = hello.role.as_str(), "client attached");
    if let Some(frame) = hello.first_request {
        hub.request(client, frame).await;
    }
    let writer = write_loop(sink, attached.feed, state.metrics.clone());
    let reader = read_loop(stream, &hub, client, state.clone());
    tokio::select! {
        _ = writer => {}
        _ = reader => {}
    }
    hub.detach(client).await;
    tracing::debug!(%project, client, "client detached");
}

/// A refused hello: the id to answer, the metric reason, the message.
type Refusal = (Option<Value>, &'static str, String);

/// Waits for the first frame and authenticates: the dialect's hello with
/// a token, or (zut, with a header) anything.
async fn read_hello(
    stream: &mut SplitStream<WebSocket>,
    state: &AppState,
    header: Option<(Role, Option<u64>)>,
) -> Result<Hello, Refusal> {
    let header_role = header.map(|(role, _)| role);
    let query_resume = header.and_then(|(_, resume)| resume);
    let first =
        tokio::time::timeout(state.hello_timeout, next_object(stream, &state.metrics)).await;
    let frame = match first {
        Err(_) => {
            return match header_role {
                Some(role) => Ok(Hello {
                    role,
                    resume_after: query_resume,
                    answer: None,
                    first_request: None,
                }),
                None => Err((
                    None,
                    "hello_timeout",
                    format!("no hello within {} s", state.hello_timeout.as_secs()),
                )),
            }
        }
        Ok(None) => {
            return Err((
                None,
                "not_hello",
                "the connection closed before the hello".into(),
            ))
        }
        Ok(Some(Err(error))) => return Err((None, "not_hello", error)),
        Ok(Some(Ok(frame))) => frame,
    };
    let id = frame.get("id").cloned();
    let hello = match state.dialect.client_hello(&frame) {
        Some(Ok(hello)) => hello,
        Some(Err(error)) => return Err((id, "not_hello", error)),
        None => {
            return match header_role {
                Some(role) => Ok(Hello {
                    role,
                    resume_after: query_resume,
                    answer: None,
                    first_request: Some(frame),
                }),
                None => Err((id, "not_hello", hello_required(state.dialect))),
            }
        }
    };
    let role = match &hello.token {
        Some(token) => match state.tokens.session_role(token) {
            None => {
                return Err((
                    id,
                    "invalid_token",
                    "authentication failed: invalid token".into(),
                ))
            }
            Some(role) => role,
        },
        None => match header_role {
            Some(role) => role,
            None => {
                return Err((
                    id,
                    "missing_token",
                    "authentication failed: the hello has no token".into(),
                ))
            }
        },
    };
    Ok(Hello {
        role,
        resume_after: hello.resume_after.or(query_resume),
        answer: Some(hello.id),
        first_request: None,
    })
}

/// What an unauthenticated client must send first.
fn hello_required(dialect: Dialect) -> String {
    let hello = match dialect {
        Dialect::Zut => r#"{"type":"hello","token":…}"#,
        Dialect::Letscode => r#"{"cmd":"hello","token":…}"#,
        Dialect::Zi => r#"{"version":1,"id":…,"method":"connection.hello","params":{"token":…}}"#,
    };
    format!("authentication required: the first message must be {hello}")
}

/// The next text frame as a JSON object; `None` when the socket ends.
async fn next_object(
    stream: &mut SplitStream<WebSocket>,
    metrics: &Metrics,
) -> Option<Result<Map<String, Value>, String>> {
    loop {
        match stream.next().await? {
            Ok(Message::Text(text)) => {
                metrics.frame(Direction::ClientToGateway, text.len());
                let parsed = parse(text.as_str());
                if parsed.is_err() {
                    metrics.invalid_frames.with_label_values(&["client"]).inc();
                }
                return Some(parsed);
            }
            Ok(Message::Binary(_)) => {
                metrics.invalid_frames.with_label_values(&["client"]).inc();
                return Some(Err(
                    "binary frames are not supported; send JSON text frames".into(),
                ));
            }
            Ok(Message::Close(_)) | Err(_) => return None,
            Ok(Message::Ping(_)) | Ok(Message::Pong(_)) => continue,
        }
    }
}

fn parse(text: &str) -> Result<Map<String, Value>, String> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    corral_protocol::ndjson::parse_object(text.as_bytes()).map_err(|e| e.to_string())
}

/// Client frames → hub requests; malformed ones get an error reply in order.
async fn read_loop(
    mut stream: SplitStream<WebSocket>,
    hub: &HubHandle,
    client: u64,
    state: Arc<AppState>,
) {
    loop {
        let next = tokio::select! {
            next = next_object(&mut stream, &state.metrics) => next,
            _ = state.shutdown.cancelled() => {
                // The hub closes this client once its child has stopped;
                // keep reading so the close handshake completes.
                next_object(&mut stream, &state.metrics).await
            }
        };
        match next {
            None => return,
            Some(Ok(frame)) => hub.request(client, frame).await,
            Some(Err(error)) => hub.reply(client, state.dialect.malformed(&error)).await,
        }
    }
}

/// Feed → socket, until the feed says close or the socket fails.
async fn write_loop(
    mut sink: SplitSink<WebSocket, Message>,
    mut feed: crate::hub::ClientFeed,
    metrics: Arc<Metrics>,
) {
    loop {
        match feed.next().await {
            Delivery::Frames(frames) => {
                for frame in frames {
                    metrics.frame(Direction::GatewayToClient, frame.len());
                    if sink.feed(text(frame)).await.is_err() {
                        return;
                    }
                }
                if sink.flush().await.is_err() {
                    return;
                }
            }
            Delivery::Close { code, reason } => {
                close(&mut sink, code, &reason).await;
                return;
            }
        }
    }
}

fn text(bytes: bytes::Bytes) -> Message {
    // Frames are built from JSON text, so they are UTF-8.
    match Utf8Bytes::try_from(bytes) {
        Ok(text) => Message::Text(text),
        Err(_) => Message::Text(Utf8Bytes::from_static("{}")),
    }
}

async fn close(sink: &mut SplitSink<WebSocket, Message>, code: u16, reason: &str) {
    // Close reasons are limited to 123 bytes.
    let mut reason = reason.to_string();
    while reason.len() > 123 {
        reason.pop();
    }
    let frame = CloseFrame {
        code,
        reason: Utf8Bytes::from(reason),
    };
    let _ = sink.send(Message::Close(Some(frame))).await;
    let _ = sink.close().await;
}
