//! `/v1/projects/{project}/acp`: the Agent Client Protocol's remote
//! transport (the "Streamable HTTP & WebSocket" RFD), one endpoint per
//! project so that a balancer hashing by project keeps every request of a
//! connection on the gateway that runs the project's agent.
//!
//! - `GET` with `Upgrade: websocket`: a WebSocket, one JSON-RPC message
//!   per text frame; the `101` names an `Acp-Connection-Id`.
//! - `POST` with `Content-Type: application/json`: one JSON-RPC message.
//!   An `initialize` without `Acp-Connection-Id` opens a connection and is
//!   answered `200` with its JSON answer and the `Acp-Connection-Id`;
//!   everything else needs that header and is answered `202`, the answers
//!   coming on the stream. A batch is `501`; a session-scoped request with
//!   neither `Acp-Session-Id` nor `params.sessionId` is `400`.
//! - `GET` with `Accept: text/event-stream` (else `406`) and
//!   `Acp-Connection-Id` (else `400`): the connection's stream of every
//!   message for the client (one at a time, `409` for a second). With
//!   `Acp-Session-Id` too: a session-scoped stream, which stays open with
//!   keep-alives only (this gateway keeps one order for everything on the
//!   connection's stream; clients merge their streams).
//! - `DELETE` with `Acp-Connection-Id`: ends the connection (`202`).
//!
//! Every request carries `Authorization: Bearer` (the credentials and
//! scopes of every route, through [`crate::guard`]): none or a wrong one
//! is `401` (or `429` when throttled), before anything else is read. A
//! project the credential does not cover is `404`, the same answer as a
//! project that does not exist; so is an unknown `Acp-Connection-Id` or
//! one opened by another identity or for another project, or one the
//! request's credential may not open with the role it was opened with
//! (each request is checked as if it opened it). The endpoint is
//! served only by a gateway whose agents speak ACP (`--dialect acp`);
//! elsewhere it is `404`.
//!
//! Behind it, each connection is a client of the project's hub exactly
//! like a WebSocket client ([`crate::ws::serve`]): its place under
//! `--max-connections-per-token`, replay, permission requests, audit and
//! budgets are the same. It also holds a place under `--max-connections`
//! of its own ([`ConnectionSlot::another`]) from its `initialize` until
//! it ends, whatever TCP connections its requests come on; at the cap an
//! `initialize` is `503`. A `POST` body is at most `--max-frame-bytes` and
//! must arrive within `--hello-timeout`; frames wait for the stream in a
//! small queue counted against `--client-buffer-bytes`; a connection with
//! no stream open and no request for [`IDLE_GRACE`] is closed.

mod connection;
mod link;
mod message;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde_json::{json, Value};

use crate::access::{Denied, Identity, Purpose};
use crate::auth::{self, AuthFailure, Role};
use crate::client_addr::ClientAddr;
use crate::dialect::{Dialect, OwnRuns};
use crate::guard;
use crate::listener::ConnectionSlot;
use crate::projects;
use crate::state::AppState;
use crate::ws::{self, Hello};
use connection::{Connection, Outbox};
pub use connection::{Connections, IDLE_GRACE};
use link::{HttpInlet, HttpOutlet};
use message::Message;

pub const CONNECTION_HEADER: &str = "acp-connection-id";
pub const SESSION_HEADER: &str = "acp-session-id";

/// The longest wait for the answer to `initialize` (the project's agent
/// may have to start first).
const INITIALIZE_WAIT: Duration = Duration::from_secs(120);

/// The endpoint's route.
pub fn router() -> Router<Arc<AppState>> {
    Router::new().route(
        "/v1/projects/{project}/acp",
        get(get_endpoint)
            .post(post_endpoint)
            .delete(delete_endpoint),
    )
}

/// A refusal as plain text.
fn refuse(status: StatusCode, message: &str) -> Response {
    (status, format!("{message}\n")).into_response()
}

/// The one answer for a project that does not exist and one the
/// credential does not cover.
fn no_project(project: &str) -> Response {
    let shown: String = project.chars().take(64).collect();
    refuse(
        StatusCode::NOT_FOUND,
        &format!("no project {shown:?} that this credential may open"),
    )
}

/// A request's refusal (boxed: a response is large, and the happy path
/// should not carry its size).
type Refused = Box<Response>;

/// Who is asking, checked before anything else is read.
struct Caller {
    who: Identity,
    peer: IpAddr,
}

/// The dialect, origin and bearer token checks every method starts with.
fn authenticate(state: &AppState, peer: IpAddr, headers: &HeaderMap) -> Result<Caller, Refused> {
    if state.dialect != Dialect::Acp {
        return Err(Box::new(refuse(
            StatusCode::NOT_FOUND,
            "this gateway's agents do not speak ACP; the ACP endpoint needs --dialect acp",
        )));
    }
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if !auth::origin_allowed(
        header(header::ORIGIN),
        header(header::HOST),
        &state.allowed_origins,
    ) {
        state.metrics.auth_failure(AuthFailure::Origin);
        return Err(Box::new(refuse(
            StatusCode::FORBIDDEN,
            "origin not allowed",
        )));
    }
    let Some(token) = auth::bearer(header(header::AUTHORIZATION)) else {
        state.metrics.auth_failure(AuthFailure::MissingToken);
        let mut response = refuse(
            StatusCode::UNAUTHORIZED,
            "authentication required: Authorization: Bearer TOKEN",
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return Err(Box::new(response));
    };
    match guard::identify(state, peer, token, Purpose::Session) {
        Ok(who) => Ok(Caller { who, peer }),
        Err(refused) => {
            state.metrics.auth_failure(refused.failure());
            Err(Box::new(refused.into_response(false)))
        }
    }
}

/// The role the caller has on `project` and its directory; out of scope
/// and missing answer alike.
async fn open_project(
    state: &AppState,
    caller: &Caller,
    project: &str,
) -> Result<(Role, PathBuf), Response> {
    let role = match guard::session_role(&caller.who, project) {
        Ok(role) => role,
        Err(denied) => {
            ws::audit_refused(
                state,
                &caller.who,
                caller.peer,
                project,
                crate::audit::denied_reason(denied),
            );
            state.metrics.auth_failure(AuthFailure::Forbidden);
            return Err(match denied {
                Denied::OutOfScope => no_project(project),
                Denied::Expired => refuse(
                    StatusCode::UNAUTHORIZED,
                    "authentication failed: the credential has expired",
                ),
                Denied::WrongRole => refuse(
                    StatusCode::FORBIDDEN,
                    "authentication failed: this credential may not open sessions",
                ),
            });
        }
    };
    match projects::lookup(&state.projects_root, project).await {
        Ok(dir) => Ok((role, dir)),
        Err(error) => {
            ws::audit_refused(state, &caller.who, caller.peer, project, "no_such_project");
            Err(match error.http_status() {
                400 => refuse(StatusCode::BAD_REQUEST, &error.to_string()),
                503 => refuse(StatusCode::SERVICE_UNAVAILABLE, &error.to_string()),
                _ => no_project(project),
            })
        }
    }
}

/// The caller's client, before it is attached.
fn hello(state: &AppState, caller: Caller, role: Role) -> Hello {
    Hello {
        credential: state.token_slots.credential(&caller.who.key()),
        who: Arc::new(caller.who),
        peer: caller.peer,
        role,
        resume_after: None,
        answer: None,
        own_runs: OwnRuns::default(),
    }
}

/// Keeps the connection a request came on from being closed to make room
/// ([`crate::listener`]): its token was good.
fn protect_connection(request: &Request) {
    if let Some(slot) = request.extensions().get::<Arc<ConnectionSlot>>() {
        slot.protect();
    }
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The connection a request names, if it may use it.
fn named_connection(
    state: &AppState,
    caller: &Caller,
    project: &str,
    headers: &HeaderMap,
) -> Result<Arc<Connection>, Refused> {
    let Some(id) = header_text(headers, CONNECTION_HEADER) else {
        return Err(Box::new(refuse(
            StatusCode::BAD_REQUEST,
            "Acp-Connection-Id header required",
        )));
    };
    let unknown = || Box::new(refuse(StatusCode::NOT_FOUND, "unknown Acp-Connection-Id"));
    let connection = state
        .acp_connections
        .get(id, project, &caller.who.key())
        .ok_or_else(unknown)?;
    // The identity's key is not the credential: another JWT of the same
    // `sub` may observe only, or cover other projects. Each request is
    // checked as if it opened the connection, and must get its role.
    match guard::session_role(&caller.who, project) {
        Ok(role) if role == connection.role => Ok(connection),
        _ => Err(unknown()),
    }
}

async fn get_endpoint(
    Path(project): Path<String>,
    State(state): State<Arc<AppState>>,
    ClientAddr(peer): ClientAddr,
    request: Request,
) -> Response {
    let caller = match authenticate(&state, peer, request.headers()) {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    protect_connection(&request);
    if request.headers().contains_key(header::UPGRADE) {
        let (role, dir) = match open_project(&state, &caller, &project).await {
            Ok(opened) => opened,
            Err(refused) => return refused,
        };
        let hello = hello(&state, caller, role);
        let mut headers = HeaderMap::new();
        // Names the connection, as the transport says; a WebSocket needs
        // no id afterwards (it is the connection).
        let Some(id) = connection::fresh_id() else {
            return refuse(
                StatusCode::SERVICE_UNAVAILABLE,
                "no randomness for a connection id",
            );
        };
        if let Ok(id) = HeaderValue::from_str(&id) {
            headers.insert(CONNECTION_HEADER, id);
        }
        return ws::upgrade_authenticated(request, state, project, hello, dir, headers);
    }
    let accepts = header_text(request.headers(), header::ACCEPT.as_str())
        .is_some_and(|accept| accept.contains("text/event-stream"));
    if !accepts {
        return refuse(
            StatusCode::NOT_ACCEPTABLE,
            "a stream needs Accept: text/event-stream (or a WebSocket upgrade)",
        );
    }
    let connection = match named_connection(&state, &caller, &project, request.headers()) {
        Ok(connection) => connection,
        Err(refused) => return *refused,
    };
    connection.touch();
    let mut response = if header_text(request.headers(), SESSION_HEADER).is_some() {
        match link::session_stream(connection.clone()) {
            Some(stream) => stream.into_response(),
            None => return refuse(StatusCode::CONFLICT, "too many session streams open"),
        }
    } else {
        let Ok(outbox) = connection.outbox.clone().try_lock_owned() else {
            return refuse(
                StatusCode::CONFLICT,
                "the connection's stream is already open",
            );
        };
        link::connection_stream(connection.clone(), outbox)
    };
    if let Ok(id) = HeaderValue::from_str(&connection.id) {
        response.headers_mut().insert(CONNECTION_HEADER, id);
    }
    response
}

async fn delete_endpoint(
    Path(project): Path<String>,
    State(state): State<Arc<AppState>>,
    ClientAddr(peer): ClientAddr,
    request: Request,
) -> Response {
    let headers = request.headers();
    let caller = match authenticate(&state, peer, headers) {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    protect_connection(&request);
    let connection = match named_connection(&state, &caller, &project, headers) {
        Ok(connection) => connection,
        Err(refused) => return *refused,
    };
    connection.ended.cancel();
    state.acp_connections.remove(&connection.id, &state.metrics);
    StatusCode::ACCEPTED.into_response()
}

async fn post_endpoint(
    Path(project): Path<String>,
    State(state): State<Arc<AppState>>,
    ClientAddr(peer): ClientAddr,
    request: Request,
) -> Response {
    let caller = match authenticate(&state, peer, request.headers()) {
        Ok(caller) => caller,
        Err(refused) => return *refused,
    };
    protect_connection(&request);
    let json = header_text(request.headers(), header::CONTENT_TYPE.as_str()).is_some_and(|t| {
        t.split(';')
            .next()
            .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"))
    });
    if !json {
        return refuse(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "Content-Type must be application/json",
        );
    }
    let headers = request.headers().clone();
    let slot = request.extensions().get::<Arc<ConnectionSlot>>().cloned();
    let body = match read_body(&state, request.into_body()).await {
        Ok(body) => body,
        Err(refused) => return refused,
    };
    let mut message = match Message::parse(&body) {
        Ok(message) => message,
        Err(refusal) => {
            let status = StatusCode::from_u16(refusal.status()).unwrap_or(StatusCode::BAD_REQUEST);
            return refuse(status, &refusal.to_string());
        }
    };
    if !headers.contains_key(CONNECTION_HEADER) {
        let Some(id) = message.initialize_id().cloned() else {
            return refuse(
                StatusCode::BAD_REQUEST,
                "Acp-Connection-Id header required (only initialize opens a connection)",
            );
        };
        // A place under `--max-connections` of its own, for its whole
        // life: it outlives the request's TCP connection, and one TCP
        // connection may open many.
        let place = match slot.map(|slot| slot.another()) {
            Some(None) => {
                state.metrics.connection_refused("max_connections");
                let mut refused = refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many connections (--max-connections); retry",
                );
                refused
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return refused;
            }
            Some(Some(place)) => Some(place),
            None => None,
        };
        return initialize(state, caller, project, message, id, place).await;
    }
    let connection = match named_connection(&state, &caller, &project, &headers) {
        Ok(connection) => connection,
        Err(refused) => return *refused,
    };
    if let Err(refusal) = message.apply_session_header(header_text(&headers, SESSION_HEADER)) {
        return refuse(StatusCode::BAD_REQUEST, &refusal.to_string());
    }
    connection.touch();
    let sent = tokio::select! {
        sent = connection.inbox.send(message.frame) => sent.is_ok(),
        () = connection.ended.cancelled() => false,
    };
    if !sent {
        return refuse(StatusCode::NOT_FOUND, "the connection has ended");
    }
    StatusCode::ACCEPTED.into_response()
}

/// The body of a `POST`, at most `--max-frame-bytes`, within
/// `--hello-timeout`.
async fn read_body(state: &AppState, body: Body) -> Result<Bytes, Response> {
    let max = state.max_frame_bytes;
    let too_large = || {
        refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            &format!("a message is larger than {max} bytes (--max-frame-bytes)"),
        )
    };
    let read = axum::body::to_bytes(body, max);
    match tokio::time::timeout(state.hello_timeout, read).await {
        Err(_) => Err(refuse(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive within --hello-timeout",
        )),
        Ok(Err(_)) => {
            state.metrics.invalid_frame("client", "too_large");
            Err(too_large())
        }
        Ok(Ok(body)) => Ok(body),
    }
}

/// Opens a connection for `initialize` (id `id`): attaches its client to
/// the project's hub, sends the request, and answers with the answer.
/// `place` is its place under `--max-connections`, held until it ends.
async fn initialize(
    state: Arc<AppState>,
    caller: Caller,
    project: String,
    message: Message,
    id: Value,
    place: Option<Arc<ConnectionSlot>>,
) -> Response {
    let (role, dir) = match open_project(&state, &caller, &project).await {
        Ok(opened) => opened,
        Err(refused) => return refused,
    };
    let owner = caller.who.key();
    let hello = hello(&state, caller, role);
    let Some((connection, inbox_rx, outbox_tx)) = Connection::new(&project, owner, role) else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            "no randomness for a connection id",
        );
    };
    // Room for it: the channel is fresh.
    if connection.inbox.try_send(message.frame).is_err() {
        return refuse(StatusCode::INTERNAL_SERVER_ERROR, "the connection failed");
    }
    state
        .acp_connections
        .insert(connection.clone(), &state.metrics);
    let task = {
        let state = state.clone();
        let connection = connection.clone();
        async move {
            let _place = place;
            let mut outlet = HttpOutlet {
                tx: Some(outbox_tx),
                connection: connection.clone(),
            };
            let mut inlet = HttpInlet {
                rx: inbox_rx,
                connection: connection.clone(),
                metrics: state.metrics.clone(),
            };
            ws::serve(&mut outlet, &mut inlet, state.clone(), &project, dir, hello).await;
            connection.ended.cancel();
            state.acp_connections.remove(&connection.id, &state.metrics);
        }
    };
    state.shutdown.spawn(task);
    let outbox = connection.outbox.clone().lock_owned().await;
    let answer = tokio::time::timeout(INITIALIZE_WAIT, answer_of(outbox, &id)).await;
    match answer {
        Ok(Some(answer)) => {
            connection.touch();
            let mut response = (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                answer,
            )
                .into_response();
            if let Ok(value) = HeaderValue::from_str(&connection.id) {
                response.headers_mut().insert(CONNECTION_HEADER, value);
            }
            response
        }
        failed => {
            connection.ended.cancel();
            state.acp_connections.remove(&connection.id, &state.metrics);
            let reason = match failed {
                Err(_) => "the agent did not answer initialize in time".to_string(),
                _ => connection
                    .closed
                    .lock()
                    .ok()
                    .and_then(|closed| closed.as_ref().map(|(_, reason)| reason.clone()))
                    .unwrap_or_else(|| "the connection closed".into()),
            };
            let error = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32000, "message": reason}});
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                error.to_string(),
            )
                .into_response()
        }
    }
}

/// Reads the connection's outbox until the answer to request `id`, keeping
/// what came before it for the stream; `None` if the session ended first.
async fn answer_of(mut outbox: tokio::sync::OwnedMutexGuard<Outbox>, id: &Value) -> Option<Bytes> {
    loop {
        let frame = outbox.rx.recv().await?;
        let answers = serde_json::from_slice::<Value>(&frame).is_ok_and(|v| {
            v.get("method").is_none()
                && v.get("id") == Some(id)
                && (v.get("result").is_some() || v.get("error").is_some())
        });
        if answers {
            let (bytes, charge) = frame.into_parts();
            drop(charge);
            return Some(bytes);
        }
        outbox.held.push_back(frame);
    }
}
