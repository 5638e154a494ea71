//! `GET /v1/projects/{project}/rpc[?resume_after=SEQ][&own_runs=true]
//! [&client_id=ID]`: one WebSocket client of a project.
//!
//! Before the upgrade: origin allowlist, and a token in an
//! `Authorization: Bearer` header if there is one (401, or 429 with
//! `Retry-After`), then the project name and directory (400/404) — in
//! that order, so only a client with a valid token learns whether a
//! project exists. A client so authenticated is attached at once, in
//! every dialect, and receives events without sending anything (resuming
//! after `?resume_after=`, only its own runs' events with
//! `?own_runs=true`, as the earlier connection `?client_id=` names).
//! Without a header token a request that is no upgrade gets 401; an
//! upgrade is answered `101` whatever the project, and the client must
//! send the dialect's hello with a token first, within `--hello-timeout`
//! and `--max-hello-bytes` (`preauth`); only then is the project looked
//! up. Then the client is attached to the project's hub and `session`
//! runs its reader and writer.
//!
//! An authenticated client takes a place under its token's
//! `--max-connections-per-token` before it is attached (before any agent
//! is spawned for it); with none left it gets the dialect's refusal and
//! close 1013: the condition is transient (it clears as soon as another
//! session of the token ends), not a fault of this connection, and 1013
//! is the code clients already retry with a backoff.
//!
//! Sessions opened and closed, and authenticated clients refused, are
//! recorded in the audit log (`audit`); refusals before a valid
//! credential are not.
//!
//! Close codes: 1008 authentication failed, 1009 more than
//! `--max-hello-bytes` before authentication or a frame over
//! `--max-frame-bytes`, 1002 invalid framing before authentication, 1013
//! try again later (no agent slot, shutting down, throttled, evicted
//! before the hello, the token's `--max-connections-per-token` reached),
//! 1011 the agent cannot start, 1001 the gateway is going away, 4000 too
//! slow (out of the replay ring, or over `--client-buffer-bytes` /
//! `--total-client-buffer-bytes`), 4004 no such project (after a valid
//! hello).

mod audit;
pub mod close;
mod frame;
mod handshake;
mod hello;
mod preauth;
mod session;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use tokio_tungstenite::tungstenite::protocol::{Role as WsRole, WebSocketConfig};
use tokio_tungstenite::WebSocketStream;

use crate::access::Purpose;
use crate::auth::{self, AuthFailure};
use crate::client_addr::ClientAddr;
use crate::dialect::OwnRuns;
use crate::guard;
use crate::hub::Join;
use crate::listener::ConnectionSlot;
use crate::projects;
use crate::state::AppState;
pub use audit::refused as audit_refused;
use close::CloseCode;
use handshake::Io;
pub use hello::{session_role, Hello};
pub use session::{Gone, Inlet, Next, Outlet, ReadEnd};

/// The upgrade request's query.
#[derive(Debug, serde::Deserialize)]
pub struct RpcQuery {
    /// Resume point for a client authenticated by its header.
    resume_after: Option<u64>,
    /// Own runs only, for a client authenticated by its header.
    own_runs: Option<String>,
    /// The client id of an earlier connection whose runs are this one's.
    client_id: Option<String>,
}

pub async fn upgrade(
    Path(project): Path<String>,
    Query(query): Query<RpcQuery>,
    State(state): State<Arc<AppState>>,
    ClientAddr(peer): ClientAddr,
    mut request: Request,
) -> Response {
    let headers = request.headers();
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if !auth::origin_allowed(
        header(header::ORIGIN),
        header(header::HOST),
        &state.allowed_origins,
    ) {
        state.metrics.auth_failure(AuthFailure::Origin);
        return (StatusCode::FORBIDDEN, "origin not allowed\n").into_response();
    }
    let own_runs = match OwnRuns::from_query(query.own_runs.as_deref(), query.client_id.as_deref())
    {
        Ok(own_runs) => own_runs,
        Err(e) => return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
    };
    // The token first: only a valid one learns whether the project exists,
    // and only one covering the project.
    let header_auth = match auth::bearer(header(header::AUTHORIZATION)) {
        Some(token) => match guard::identify(&state, peer, token, Purpose::Session) {
            Ok(who) => {
                let role = match hello::session_role(&state, &who, peer, &project) {
                    Ok(role) => role,
                    Err((reason, message)) => {
                        state.metrics.auth_failure(reason);
                        return (StatusCode::FORBIDDEN, format!("{message}\n")).into_response();
                    }
                };
                match projects::lookup(&state.projects_root, &project).await {
                    Ok(dir) => Some((who, role, dir)),
                    Err(e) => {
                        audit::refused(&state, &who, peer, &project, "no_such_project");
                        let status =
                            StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::NOT_FOUND);
                        return (status, format!("{e}\n")).into_response();
                    }
                }
            }
            Err(refused) => {
                state.metrics.auth_failure(refused.failure());
                return refused.into_response(false);
            }
        },
        None if !headers.contains_key(header::UPGRADE) => {
            state.metrics.auth_failure(AuthFailure::MissingToken);
            let message = "authentication required: a bearer token, or a WebSocket upgrade and a hello with a token";
            return (StatusCode::UNAUTHORIZED, format!("{message}\n")).into_response();
        }
        None => None,
    };
    let upgrade = match handshake::prepare(&mut request) {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    // The connection's place under --max-connections, held while it
    // lives, and kept from eviction as soon as its token is known good.
    let slot = request.extensions_mut().remove::<Arc<ConnectionSlot>>();
    if let (Some(slot), Some(_)) = (&slot, &header_auth) {
        slot.protect();
    }
    let (response, on_upgrade) = upgrade.accept();
    let shutdown = state.shutdown.clone();
    shutdown.spawn(async move {
        let io = match on_upgrade.await {
            Ok(upgraded) => hyper_util::rt::TokioIo::new(upgraded),
            Err(e) => {
                tracing::debug!(%project, error = %e, "the upgrade did not complete");
                return;
            }
        };
        let header = header_auth.map(|(who, role, dir)| {
            let hello = Hello {
                credential: state.token_slots.credential(&who.key()),
                who: Arc::new(who),
                peer,
                role,
                resume_after: query.resume_after,
                answer: None,
                own_runs,
            };
            (hello, dir)
        });
        connection(io, state, project, peer, header, slot.as_deref()).await;
    });
    response
}

/// Answers the upgrade of a client its `Authorization` header already
/// proved (`hello`, for the project in `dir`) and runs it once upgraded:
/// the WebSocket side of the ACP endpoint ([`crate::acp_remote`]).
/// `headers` are added to the `101`.
pub fn upgrade_authenticated(
    mut request: Request,
    state: Arc<AppState>,
    project: String,
    hello: Hello,
    dir: PathBuf,
    headers: axum::http::HeaderMap,
) -> Response {
    let upgrade = match handshake::prepare(&mut request) {
        Ok(upgrade) => upgrade,
        Err(rejection) => return rejection.into_response(),
    };
    let slot = request.extensions_mut().remove::<Arc<ConnectionSlot>>();
    if let Some(slot) = &slot {
        slot.protect();
    }
    let (mut response, on_upgrade) = upgrade.accept();
    response.headers_mut().extend(headers);
    let peer = hello.peer;
    let shutdown = state.shutdown.clone();
    shutdown.spawn(async move {
        let io = match on_upgrade.await {
            Ok(upgraded) => hyper_util::rt::TokioIo::new(upgraded),
            Err(e) => {
                tracing::debug!(%project, error = %e, "the upgrade did not complete");
                return;
            }
        };
        connection(
            io,
            state,
            project,
            peer,
            Some((hello, dir)),
            slot.as_deref(),
        )
        .await;
    });
    response
}

/// `header`: the client an `Authorization` header proved, with the
/// query's resume point and own-runs wish, and its project's directory.
async fn connection(
    mut io: Io,
    state: Arc<AppState>,
    project: String,
    peer: IpAddr,
    header: Option<(Hello, PathBuf)>,
    slot: Option<&ConnectionSlot>,
) {
    let max = state.max_frame_bytes;
    let config = WebSocketConfig::default()
        .read_buffer_size(state.ws_buffer_bytes)
        .write_buffer_size(state.ws_buffer_bytes)
        .max_frame_size(Some(max))
        .max_message_size(Some(max));
    let (hello, dir, socket) = match header {
        Some((hello, dir)) => {
            let socket = WebSocketStream::from_raw_socket(io, WsRole::Server, Some(config)).await;
            (hello, dir, socket)
        }
        None => {
            let read = tokio::select! {
                read = hello::read_hello(&mut io, &state, peer, &project) => read,
                ended = ended_early(slot, &state) => {
                    close_early(&mut io, ended).await;
                    return;
                }
            };
            let (hello, leftover) = match read {
                Ok(read) => read,
                Err(refusal) => {
                    state.metrics.auth_failure(refusal.reason);
                    tracing::info!(%project, %peer, "client refused: {}", refusal.message);
                    let id = refusal.id.as_ref();
                    refuse(
                        &mut io,
                        &state,
                        id,
                        "unauthorized",
                        &refusal.message,
                        refusal.code,
                    )
                    .await;
                    return;
                }
            };
            // Authenticated: now it may learn whether the project exists.
            // Until the slot is protected below, it may still be evicted
            // (the lookup runs off the event loop and may take a while).
            let found = tokio::select! {
                found = projects::lookup(&state.projects_root, &project) => found,
                ended = ended_early(slot, &state) => {
                    close_early(&mut io, ended).await;
                    return;
                }
            };
            let dir = match found {
                Ok(dir) => dir,
                Err(error) => {
                    tracing::info!(%project, %peer, "client refused: {error}");
                    audit::refused(&state, &hello.who, peer, &project, "no_such_project");
                    let code = match error.http_status() {
                        503 => CloseCode::TryAgain,
                        _ => CloseCode::NoProject,
                    };
                    let id = hello.answer.clone().flatten();
                    let message = error.to_string();
                    refuse(&mut io, &state, id.as_ref(), "not_found", &message, code).await;
                    return;
                }
            };
            slot.inspect(|s| s.protect());
            let socket =
                WebSocketStream::from_partially_read(io, leftover, WsRole::Server, Some(config))
                    .await;
            (hello, dir, socket)
        }
    };
    attached(socket, state, project, dir, hello).await;
}

/// Answers the hello with the dialect's refusal and closes with `code`.
async fn refuse(
    io: &mut Io,
    state: &AppState,
    id: Option<&serde_json::Value>,
    kind: &str,
    message: &str,
    code: CloseCode,
) {
    let reply = state.dialect.rules().refusal(id, kind, message);
    let _ = preauth::send_text(io, &reply).await;
    preauth::close(io, code, message).await;
}

/// Completes when `slot` is to be closed to make room; never without one.
/// Why a connection not yet protected ends before it is attached.
enum EndedEarly {
    Evicted,
    ShuttingDown,
}

/// Resolves when the unprotected connection must end: its slot was
/// evicted, or the gateway is shutting down.
async fn ended_early(slot: Option<&ConnectionSlot>, state: &AppState) -> EndedEarly {
    tokio::select! {
        () = evicted(slot) => EndedEarly::Evicted,
        () = state.shutdown.started() => EndedEarly::ShuttingDown,
    }
}

/// Closes a connection that ended early, saying why.
async fn close_early(io: &mut Io, why: EndedEarly) {
    match why {
        EndedEarly::Evicted => {
            preauth::close(
                io,
                CloseCode::TryAgain,
                "the gateway is at --max-connections: unauthenticated connections are closed first",
            )
            .await;
        }
        EndedEarly::ShuttingDown => {
            preauth::close(io, CloseCode::GoingAway, "the gateway is shutting down").await;
        }
    }
}

async fn evicted(slot: Option<&ConnectionSlot>) {
    match slot {
        Some(slot) => slot.evicted().await,
        None => std::future::pending().await,
    }
}

/// Attaches an authenticated WebSocket client and runs it until either
/// side ends.
async fn attached(
    socket: session::Socket,
    state: Arc<AppState>,
    project: String,
    dir: PathBuf,
    hello: Hello,
) {
    let (mut sink, mut stream) = socket.split();
    let end = serve(
        &mut session::WsOutlet(&mut sink),
        &mut session::WsInlet(&mut stream),
        state.clone(),
        &project,
        dir,
        hello,
    )
    .await;
    if end == Some(Ended::Read(ReadEnd::TooLarge)) {
        let reason = format!(
            "a frame is larger than {max} bytes (--max-frame-bytes)",
            max = state.max_frame_bytes
        );
        tracing::info!(%project, "{reason}");
        session::close(&mut sink, CloseCode::TooBig, &reason).await;
        if let Ok(mut socket) = stream.reunite(sink) {
            preauth::linger(socket.get_mut()).await;
        }
    }
}

/// Attaches an authenticated client to its project's hub and runs it
/// over any transport until either side ends: its place under
/// `--max-connections-per-token`, the revocation check, the audit
/// records, the reader and writer, and the end on revocation or expiry.
/// `None` when it could not be attached (it was told why and closed).
pub async fn serve<O: Outlet, I: Inlet>(
    outlet: &mut O,
    inlet: &mut I,
    state: Arc<AppState>,
    project: &str,
    dir: PathBuf,
    hello: Hello,
) -> Option<Ended> {
    let session = audit::Session {
        who: &hello.who,
        peer: hello.peer,
        role: hello.role,
        project,
    };
    // Held while the client is attached.
    let _token_slot = match state.token_slots.acquire(hello.credential) {
        Ok(place) => place,
        Err(full) => {
            state.metrics.connection_refused("per_token");
            tracing::info!(%project, "client refused: {full}");
            session.refused(&state, "connection_limit");
            refuse_attached(
                outlet,
                &state,
                &hello,
                CloseCode::TryAgain,
                &full.to_string(),
            )
            .await;
            return None;
        }
    };
    // Registered before the check, so a revocation in between is seen
    // either by the check or by the ticket.
    let ticket = state.live.register(hello.who.key());
    if !state.keyring.still_valid(&hello.who) {
        session.refused(&state, "revoked");
        let message = "authentication failed: the token was revoked";
        refuse_attached(outlet, &state, &hello, CloseCode::Revoked, message).await;
        return None;
    }
    let attached = state
        .registry
        .attach(
            project,
            dir,
            Join {
                who: hello.who.clone(),
                peer: Some(hello.peer),
                role: hello.role,
                resume_after: hello.resume_after,
                hello: hello.answer.clone(),
                own_runs: hello.own_runs,
            },
        )
        .await;
    let (hub, attached) = match attached {
        Ok(ok) => ok,
        Err(error) => {
            tracing::warn!(%project, "cannot attach client: {error}");
            session.not_opened(&state, error.close_code());
            refuse_attached(
                outlet,
                &state,
                &hello,
                error.close_code(),
                &error.to_string(),
            )
            .await;
            return None;
        }
    };
    let client = attached.client;
    tracing::debug!(%project, client = client.get(), role = hello.role.as_str(), actor = %hello.who.name, "client attached");
    session.opened(&state, client);
    let end = tokio::select! {
        closed = session::write_loop(outlet, attached.feed, state.metrics.clone()) => {
            if closed == Some(CloseCode::Lagged) {
                state.registry.events().slow_client_closed(project);
            }
            Ended::Written(closed)
        }
        end = session::read_loop(inlet, &hub, client, state.clone()) => Ended::Read(end),
        () = ticket.revoked() => Ended::Revoked,
        () = expiry(hello.who.expires) => Ended::Expired,
    };
    if let Ended::Revoked | Ended::Expired = end {
        let reason = match end {
            Ended::Revoked => "the token was revoked",
            _ => "the credential expired",
        };
        tracing::info!(%project, client = client.get(), actor = %hello.who.name, "session closed: {reason}");
        outlet.close(CloseCode::Revoked, reason).await;
        ticket.closed();
    }
    hub.detach(client).await;
    tracing::debug!(%project, client = client.get(), "client detached");
    session.closed(&state, client, end.audited());
    Some(end)
}

/// How an attached session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The client closed, or sent what ends it.
    Read(ReadEnd),
    /// The gateway closed it with this code, or (`None`) its socket
    /// failed.
    Written(Option<CloseCode>),
    /// Its credential was revoked.
    Revoked,
    /// Its credential expired.
    Expired,
}

impl Ended {
    /// How the audit log says it ended.
    fn audited(self) -> audit::Closed {
        match self {
            Ended::Read(ReadEnd::Closed) | Ended::Written(None) => audit::Closed::ByClient,
            Ended::Read(ReadEnd::TooLarge) => audit::Closed::TooLarge,
            Ended::Written(Some(code)) => audit::Closed::ByGateway(code),
            Ended::Revoked => audit::Closed::Revoked,
            Ended::Expired => audit::Closed::Expired,
        }
    }
}

/// Completes when a credential expiring at `at` has expired; never for
/// one that does not expire.
async fn expiry(at: Option<std::time::SystemTime>) {
    let Some(at) = at else {
        return std::future::pending().await;
    };
    // The wall clock decides, checked again after each sleep, so a clock
    // set forward or back is followed within a minute.
    loop {
        let left = at
            .duration_since(std::time::SystemTime::now())
            .unwrap_or_default();
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(std::time::Duration::from_secs(60))).await;
    }
}

/// Answers an authenticated client that cannot be attached with the
/// dialect's refusal (to its hello, if it sent one), then closes it.
async fn refuse_attached<O: Outlet>(
    outlet: &mut O,
    state: &AppState,
    hello: &Hello,
    code: CloseCode,
    message: &str,
) {
    let id = hello.answer.clone().flatten();
    let reply = state
        .dialect
        .rules()
        .refusal(id.as_ref(), "unavailable", message);
    if outlet.send(reply.into()).await.is_ok() {
        let _ = outlet.flush().await;
    }
    outlet.close(code, message).await;
}
