//! The HTTP server: routes and graceful shutdown. Connections are
//! accepted and bounded by [`crate::listener`].
//!
//! Endpoints:
//! - `GET /healthz` — the process is alive (always 200).
//! - `GET /readyz` — 200 while accepting clients, 503 once shutting down.
//! - `GET /v1/projects/{project}/rpc` — the WebSocket endpoint ([`crate::ws`]).
//! - `GET|POST|DELETE /v1/projects/{project}/acp` — ACP's remote transport
//!   (Streamable HTTP and WebSocket, [`crate::acp_remote`]).
//! - the admin API and `/metrics` ([`crate::admin`]).
//! - `GET /` — the dashboard and console ([`crate::dashboard`]).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::middleware::from_fn;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::client_addr::Listeners;
use crate::listener::ListenerLimits;
use crate::state::AppState;

/// Every route; the plain HTTP ones under [`crate::layers::http`], the
/// WebSocket one outside it.
pub fn router(state: Arc<AppState>) -> Router {
    let http = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(crate::admin::metrics)
                .route_layer(from_fn(crate::layers::protect_admin_connection)),
        )
        .merge(crate::admin::router())
        .merge(crate::dashboard::router());
    Router::new()
        .route("/v1/projects/{project}/rpc", get(crate::ws::upgrade))
        .merge(crate::acp_remote::router())
        .merge(crate::layers::http(http))
        .with_state(state)
}

async fn readyz(State(state): State<Arc<AppState>>) -> Response {
    if state.shutdown.is_started() {
        (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response()
    } else {
        "ready\n".into_response()
    }
}

/// How long connections and the other tracked tasks get to end after
/// the children have stopped (or the shutdown grace ran out): time for
/// close frames and in-flight HTTP answers to go out.
pub const DRAIN_MARGIN: Duration = Duration::from_secs(5);

/// Serves until the shutdown starts, then stops every child (within
/// `grace`) and waits for every tracked task (connections, hubs,
/// evictions) within what is left of `grace` plus [`DRAIN_MARGIN`].
pub async fn run(
    listeners: Listeners,
    state: Arc<AppState>,
    limits: ListenerLimits,
    grace: Duration,
) {
    let shutdown = state.shutdown.clone();
    let registry = state.registry.clone();
    let metrics = state.metrics.clone();
    let app = router(state);
    // Returns once the shutdown has started; its connections are tracked.
    crate::listener::serve(listeners, app, limits, metrics, shutdown.clone()).await;
    let deadline = tokio::time::Instant::now() + grace + DRAIN_MARGIN;
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
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    if let Err(open) = shutdown.drain(left).await {
        tracing::warn!(open, "tasks did not end in time; exiting anyway");
    }
}
