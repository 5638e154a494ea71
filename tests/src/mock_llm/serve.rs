//! The HTTP side: routes, and the per-request flow record → admit →
//! consume a turn → answer (error JSON, a hanging stream or paced SSE).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use super::turn::{plan, Plan, Turn, NO_TURN_LEFT};
use super::wire::{Ctx, Frame, Wire};
use super::{RecordedRequest, Shared};

/// The mock's routes; anything else gets a 404 naming the real endpoints.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/chat/completions", post(chat_completions))
        .fallback(no_route)
        // Agent transcripts can be large; the real APIs accept tens of MB.
        .layer(DefaultBodyLimit::max(32 * 1024 * 1024))
        .with_state(shared)
}

async fn messages(State(s): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    serve(&s, Wire::Anthropic, &headers, &body)
}

async fn chat_completions(
    State(s): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    serve(&s, Wire::OpenAi, &headers, &body)
}

async fn no_route(method: Method, uri: Uri) -> (StatusCode, String) {
    let msg = format!(
        "mock-llm: no route for {method} {uri}; it serves POST /v1/messages \
         and POST /v1/chat/completions"
    );
    (StatusCode::NOT_FOUND, msg)
}

/// Records the request, checks it, consumes a turn and answers with it.
fn serve(shared: &Shared, wire: Wire, headers: &HeaderMap, raw: &Bytes) -> Response {
    let parsed: Option<Value> = serde_json::from_slice(raw).ok();
    let (seq, key) = record(shared, wire, headers, raw, parsed.as_ref());
    let mut response = match wire.admit(headers, parsed.as_ref(), key.as_deref()) {
        Err(rejection) => wire.error(rejection.status, &rejection.message),
        Ok(body) => {
            let turn = shared.lock().script.pop_front();
            let turn = turn.unwrap_or_else(|| Turn::text(NO_TURN_LEFT));
            match plan(turn, || wire.last_tool_result(body)) {
                Plan::Status {
                    code,
                    retry_after,
                    body,
                } => scripted_error(wire, code, retry_after, body),
                Plan::Hang => streaming(futures_util::stream::pending(), shared),
                Plan::Reply(reply) => {
                    let usage = shared.lock().usage;
                    let ctx = Ctx {
                        seq,
                        nth: count_served(shared, wire),
                        body,
                        body_len: raw.len(),
                        created: SystemTime::now()
                            .duration_since(UNIX_EPOCH)
                            .map_or(0, |d| d.as_secs()),
                        usage,
                    };
                    streaming(paced(wire.render(&reply, &ctx)), shared)
                }
            }
        }
    };
    if let Ok(id) = HeaderValue::from_str(&format!("req_mock{seq:06}")) {
        response.headers_mut().insert(wire.request_id_header(), id);
    }
    response
}

/// Appends the request to the log; returns its 1-based number and the key
/// currently required.
fn record(
    shared: &Shared,
    wire: Wire,
    headers: &HeaderMap,
    raw: &Bytes,
    parsed: Option<&Value>,
) -> (usize, Option<String>) {
    let request = RecordedRequest {
        path: wire.path().to_string(),
        auth: header(headers, wire.auth_header()),
        headers: headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
            .collect(),
        body: parsed
            .cloned()
            .unwrap_or_else(|| Value::String(String::from_utf8_lossy(raw).into_owned())),
    };
    let mut st = shared.lock();
    st.requests.push(request);
    (st.requests.len(), st.api_key.clone())
}

/// Counts a reply for `wire`; returns how many it served before.
fn count_served(shared: &Shared, wire: Wire) -> usize {
    let mut st = shared.lock();
    let slot = match wire {
        Wire::Anthropic => &mut st.served.anthropic,
        Wire::OpenAi => &mut st.served.openai,
    };
    *slot += 1;
    *slot - 1
}

/// A [`Turn::Status`] answer: the provider's error JSON, plus `retry-after`.
fn scripted_error(wire: Wire, code: u16, retry_after: Option<u64>, message: String) -> Response {
    let Ok(status) = StatusCode::from_u16(code) else {
        let msg = format!("mock-llm: scripted status {code} is not an HTTP status");
        return wire.error(StatusCode::INTERNAL_SERVER_ERROR, &msg);
    };
    let message = if message.is_empty() {
        let reason = status.canonical_reason().unwrap_or("error");
        format!("mock-llm: scripted {code} {reason}")
    } else {
        message
    };
    let mut response = wire.error(status, &message);
    if let Some(secs) = retry_after {
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// Sends each frame after its delay.
fn paced(frames: Vec<Frame>) -> impl Stream<Item = String> + Send + 'static {
    futures_util::stream::iter(frames).then(|f| async move {
        if !f.delay.is_zero() {
            tokio::time::sleep(f.delay).await;
        }
        f.text
    })
}

/// A `200 text/event-stream` response whose body ends early if the mock is
/// dropped.
fn streaming(events: impl Stream<Item = String> + Send + 'static, shared: &Shared) -> Response {
    let mut shutdown = shared.shutdown.clone();
    let body = events
        .map(|text| Ok::<_, Infallible>(Bytes::from(text)))
        .take_until(async move {
            // Never sent on: this resolves only when the sender is dropped.
            let _ = shutdown.changed().await;
        });
    (
        [
            (CONTENT_TYPE, "text/event-stream; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// A header's value, when present and valid UTF-8.
pub fn header(headers: &HeaderMap, name: &str) -> Option<String> {
    headers.get(name)?.to_str().ok().map(str::to_string)
}
