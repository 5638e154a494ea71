//! The ops reserve: `--ops-connections` places beyond `--max-connections`
//! for `/healthz`, `/readyz` and `/metrics`, so that probes and scrapes are
//! answered even when every regular place is held by an authenticated
//! client (unauthenticated connections never fill the cap: they are
//! evicted). A connection on the reserve gets one answer and is closed;
//! any other request on it gets the fixed `503`. The reserve evicts its
//! own oldest connection for a new one, so a flood can churn it but never
//! hold it.
//!
//! Chosen over a separate `--ops-listen` port: probes, load balancers and
//! scrapers keep using the address they already know, and nothing new
//! needs to be firewalled.

use axum::body::Body;
use axum::http::{header, HeaderValue, Request, Response, StatusCode};

/// The paths answered on the reserve.
pub const OPS_PATHS: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// Whether `request` may be answered on the reserve.
pub fn answered<B>(request: &Request<B>) -> bool {
    OPS_PATHS.contains(&request.uri().path())
}

/// The answer to any other request on the reserve: the same as for a
/// connection refused at the cap.
pub fn over_capacity() -> Response<Body> {
    let mut response = Response::new(Body::from("too many connections; retry\n"));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).unwrap()
    }

    #[test]
    fn only_the_ops_paths_are_answered() {
        for path in ["/healthz", "/readyz", "/metrics", "/healthz?verbose=1"] {
            assert!(answered(&get(path)), "{path}");
        }
        for path in [
            "/",
            "/v1/projects",
            "/v1/projects/alpha/rpc",
            "/healthz/",
            "/metrics/../v1/projects",
        ] {
            assert!(!answered(&get(path)), "{path}");
        }
    }

    #[test]
    fn everything_else_gets_a_503_that_closes() {
        let response = over_capacity();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(response.headers()[header::CONNECTION], "close");
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
    }
}
