//! The HTTP server: routes and graceful shutdown.
//!
//! Endpoints:
//! - `GET /healthz` — the process is alive (always 200).
//! - `GET /readyz` — 200 while accepting clients, 503 once shutting down.
//! - `GET /v1/projects` — admin token (`Authorization: Bearer`): every
//!   running child with project, pid, state, busy, clients, restarts, uptime.
//! - `GET /v1/projects/{project}/rpc` — the WebSocket endpoint ([`crate::ws`]).

use std::future::IntoFuture;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::auth::{self, Role, Tokens};
use crate::registry::Registry;

/// Everything request handlers share.
pub struct AppState {
    pub registry: Arc<Registry>,
    pub tokens: Tokens,
    pub projects_root: PathBuf,
    pub allowed_origins: Vec<String>,
    pub hello_timeout: Duration,
    pub max_frame_bytes: usize,
    /// Cancelled when the gateway starts shutting down.
    pub shutdown: CancellationToken,
    /// Refused hellos and bad tokens, for metrics.
    pub auth_failures: AtomicU64,
    /// Open WebSocket connections, so shutdown can wait for their close
    /// frames to go out.
    pub connections: TaskTracker,
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/v1/projects", get(projects))
        .route("/v1/projects/{project}/rpc", get(crate::ws::upgrade))
        .with_state(state)
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.shutdown.is_cancelled() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    } else {
        "ready\n".into_response()
    }
}

/// The refusal for a request without the admin bearer token, if it lacks one.
pub fn admin_refusal(state: &AppState, headers: &HeaderMap) -> Option<Response> {
    let presented = auth::bearer(
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    match presented.and_then(|token| state.tokens.role_of(token)) {
        Some(Role::Admin) => None,
        _ => Some(
            (
                StatusCode::UNAUTHORIZED,
                Json(json!({"error": "admin token required"})),
            )
                .into_response(),
        ),
    }
}

async fn projects(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    if let Some(refused) = admin_refusal(&state, &headers) {
        return refused;
    }
    let now = SystemTime::now();
    let list: Vec<_> = state
        .registry
        .list()
        .into_iter()
        .map(|s| {
            let uptime = s
                .ready_since
                .filter(|_| s.pid.is_some())
                .and_then(|t| now.duration_since(t).ok())
                .map(|d| d.as_secs());
            json!({
                "project": s.project,
                "pid": s.pid,
                "state": s.state,
                "busy": s.busy,
                "clients": s.clients,
                "restarts": s.restarts,
                "uptime_secs": uptime,
                "last_seq": s.last_seq,
            })
        })
        .collect();
    Json(json!({ "projects": list })).into_response()
}

/// Serves until `shutdown` is cancelled, then stops every child (within
/// `grace`) and waits (bounded) for connections to close.
pub async fn run(
    listener: TcpListener,
    state: Arc<AppState>,
    grace: Duration,
) -> std::io::Result<()> {
    let shutdown = state.shutdown.clone();
    let registry = state.registry.clone();
    let connections = state.connections.clone();
    let app = router(state).into_make_service_with_connect_info::<SocketAddr>();
    let server =
        axum::serve(listener, app).with_graceful_shutdown(shutdown.clone().cancelled_owned());
    let drain = async {
        shutdown.cancelled().await;
        if tokio::time::timeout(grace, registry.shutdown())
            .await
            .is_err()
        {
            tracing::warn!(
                grace_secs = grace.as_secs(),
                "children did not stop within the grace"
            );
        }
        // Stopped hubs have told their clients to close; let them finish.
        connections.close();
        if tokio::time::timeout(Duration::from_secs(2), connections.wait())
            .await
            .is_err()
        {
            tracing::warn!(
                open = connections.len(),
                "some connections did not close in time"
            );
        }
    };
    let both = async {
        let (result, ()) = tokio::join!(server.into_future(), drain);
        result
    };
    let deadline = async {
        shutdown.cancelled().await;
        tokio::time::sleep(grace + Duration::from_secs(5)).await;
    };
    tokio::select! {
        result = both => result,
        () = deadline => {
            tracing::warn!("connections did not close in time; exiting anyway");
            Ok(())
        }
    }
}
