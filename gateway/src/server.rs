//! The HTTP server: routes and graceful shutdown. Connections are
//! accepted and bounded by [`crate::listener`].
//!
//! Endpoints:
//! - `GET /healthz` — the process is alive (always 200).
//! - `GET /readyz` — 200 while accepting clients, 503 once shutting down.
//! - `GET /v1/projects/{project}/rpc` — the WebSocket endpoint ([`crate::ws`]).
//! - the admin API and `/metrics` ([`crate::admin`]).
//! - `GET /` — the dashboard and console ([`crate::dashboard`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::{from_fn, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::auth::Tokens;
use crate::client_addr::Listeners;
use crate::listener::{ConnectionSlot, ListenerLimits};
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::shutdown::Shutdown;
use crate::throttle::AuthThrottle;
use crate::token_slots::TokenSlots;

/// Everything request handlers share.
pub struct AppState {
    /// What clients speak (the children's dialect).
    pub dialect: crate::dialect::Dialect,
    pub registry: Arc<Registry>,
    pub tokens: Tokens,
    pub projects_root: PathBuf,
    pub allowed_origins: Vec<String>,
    pub hello_timeout: Duration,
    /// Bytes a WebSocket client may send before it is authenticated.
    pub max_hello_bytes: usize,
    pub max_frame_bytes: usize,
    /// Read and write buffer of each WebSocket connection.
    pub ws_buffer_bytes: usize,
    /// Failure budgets per source address, against guessing tokens
    /// ([`crate::guard`] checks every token through it).
    pub throttle: AuthThrottle,
    /// Open WebSocket sessions per credential
    /// (`--max-connections-per-token`).
    pub token_slots: Arc<TokenSlots>,
    /// Started when the gateway starts shutting down; tracks the tasks
    /// (connections, hubs, admin stops) it waits for before exiting.
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
    /// When the gateway started, for `/v1/stats`.
    pub started: std::time::Instant,
    /// How children are confined (for `/v1/stats`).
    pub confinement: crate::admin::ConfinementStatus,
}

/// Every route; the plain HTTP ones under [`crate::layers::http`], the
/// WebSocket one outside it.
pub fn router(state: Arc<AppState>) -> Router {
    let http = Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route(
            "/metrics",
            get(crate::admin::metrics).route_layer(from_fn(protect_admin_connection)),
        )
        .merge(crate::admin::router())
        .merge(crate::dashboard::router());
    Router::new()
        .route("/v1/projects/{project}/rpc", get(crate::ws::upgrade))
        .merge(crate::layers::http(http))
        .with_state(state)
}

/// Keeps the connection of a request the admin token was accepted for
/// from being closed to make room ([`crate::listener`]). Layered only on
/// routes that answer nothing but refusals without that token, so a
/// success proves it, and this adds no token check of its own (none that
/// could bypass the throttle). Every other request leaves its connection
/// evictable.
pub async fn protect_admin_connection(request: Request, next: Next) -> Response {
    let slot = request.extensions().get::<Arc<ConnectionSlot>>().cloned();
    let response = next.run(request).await;
    if let (Some(slot), true) = (slot, response.status().is_success()) {
        slot.protect();
    }
    response
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

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use tower::ServiceExt;

    /// Whether a request answered `status` by a route under
    /// [`protect_admin_connection`] protects its connection.
    async fn protects(status: StatusCode) -> bool {
        let metrics = Arc::new(Metrics::new().unwrap());
        let slot = ConnectionSlot::unpooled(&metrics);
        let app: Router = Router::new()
            .route("/", get(move || async move { status }))
            .route_layer(from_fn(protect_admin_connection));
        let mut request = Request::get("/").body(Body::empty()).unwrap();
        request.extensions_mut().insert(slot.clone());
        let response = app.oneshot(request).await.unwrap();
        assert_eq!(response.status(), status);
        slot.is_protected()
    }

    #[tokio::test]
    async fn only_an_accepted_admin_request_protects_its_connection() {
        assert!(protects(StatusCode::OK).await);
        assert!(protects(StatusCode::ACCEPTED).await);
        for refused in [
            StatusCode::UNAUTHORIZED,
            StatusCode::FORBIDDEN,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::NOT_FOUND,
        ] {
            assert!(!protects(refused).await, "{refused}");
        }
    }
}
