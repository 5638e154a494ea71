//! The tower layers around every plain HTTP endpoint (`/healthz`,
//! `/readyz`, `/metrics`, the admin API, the dashboard): a request span
//! ([`TraceLayer`]), a timeout ([`HTTP_TIMEOUT`]) and the fixed response
//! headers. The WebSocket endpoint is not under them: a WebSocket lives
//! for hours and has its own limits ([`crate::ws`]). Also the middleware
//! that keeps an admin's connection from being evicted
//! ([`protect_admin_connection`]).

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::Router;
use tower_http::set_header::SetResponseHeaderLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultMakeSpan, DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::listener::ConnectionSlot;

/// How long a plain HTTP request may take before it is answered `503`:
/// every such handler answers from memory (or `/proc`) well within it.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// `router` with a request span (at debug level: the handlers log what
/// matters), [`HTTP_TIMEOUT`], and `X-Content-Type-Options: nosniff` on
/// every response (no browser guesses a type for JSON or metrics).
pub fn http<S: Clone + Send + Sync + 'static>(router: Router<S>) -> Router<S> {
    let trace = TraceLayer::new_for_http()
        .make_span_with(DefaultMakeSpan::new().level(Level::DEBUG))
        .on_response(DefaultOnResponse::new().level(Level::DEBUG))
        // A 503 from /readyz while stopping is an answer, not a failure.
        .on_failure(DefaultOnFailure::new().level(Level::DEBUG));
    // The last layer added is the outermost: the header is set on the
    // timeout's answer too.
    router
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            HTTP_TIMEOUT,
        ))
        .layer(SetResponseHeaderLayer::if_not_present(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ))
        .layer(trace)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use axum::body::Body;
    use axum::middleware::from_fn;
    use axum::routing::get;
    use tower::ServiceExt;

    fn app() -> Router {
        http(
            Router::new()
                .route("/fast", get(|| async { "ok" }))
                .route("/stuck", get(std::future::pending::<&'static str>)),
        )
    }

    async fn get_status(path: &str) -> (StatusCode, Option<HeaderValue>) {
        let request = Request::get(path).body(Body::empty()).unwrap();
        let response = app().oneshot(request).await.unwrap();
        let nosniff = response
            .headers()
            .get(header::X_CONTENT_TYPE_OPTIONS)
            .cloned();
        (response.status(), nosniff)
    }

    #[tokio::test(start_paused = true)]
    async fn a_stuck_handler_is_answered_503_after_the_timeout() {
        let (status, nosniff) = get_status("/stuck").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(nosniff.unwrap(), "nosniff");
    }

    #[tokio::test(start_paused = true)]
    async fn answers_carry_the_fixed_headers() {
        let (status, nosniff) = get_status("/fast").await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(nosniff.unwrap(), "nosniff");
    }

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
