//! The WebSocket opening handshake (RFC 6455 §4.2) on an HTTP/1.1
//! request: checks the upgrade headers, answers `101`, and hands over the
//! raw connection, so the gateway decides how it reads the first bytes
//! (see [`super::preauth`]) before tungstenite takes over.

use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;

/// The raw connection after the handshake.
pub type Io = TokioIo<Upgraded>;

/// Why a request is not a WebSocket upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rejection {
    #[error("a WebSocket upgrade must be a GET")]
    MethodNotGet,
    #[error("`Connection` must include `upgrade`")]
    Connection,
    #[error("`Upgrade` must be `websocket`")]
    Upgrade,
    #[error("`Sec-WebSocket-Version` must be 13")]
    Version,
    #[error("`Sec-WebSocket-Key` is missing")]
    Key,
    #[error("this connection cannot be upgraded")]
    NotUpgradable,
}

impl IntoResponse for Rejection {
    fn into_response(self) -> Response {
        let status = match self {
            Rejection::MethodNotGet => StatusCode::METHOD_NOT_ALLOWED,
            Rejection::NotUpgradable => StatusCode::UPGRADE_REQUIRED,
            _ => StatusCode::BAD_REQUEST,
        };
        (status, format!("{self}\n")).into_response()
    }
}

/// A valid upgrade request, not yet answered.
#[derive(Debug)]
pub struct Upgrade {
    accept: String,
    on_upgrade: OnUpgrade,
}

/// Checks `request` and takes its upgrade handle.
pub fn prepare(request: &mut Request) -> Result<Upgrade, Rejection> {
    if request.method() != Method::GET {
        return Err(Rejection::MethodNotGet);
    }
    let headers = request.headers();
    if !has_token(headers, header::CONNECTION, "upgrade") {
        return Err(Rejection::Connection);
    }
    if !has_token(headers, header::UPGRADE, "websocket") {
        return Err(Rejection::Upgrade);
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION) != Some(&HeaderValue::from_static("13")) {
        return Err(Rejection::Version);
    }
    let key = headers
        .get(header::SEC_WEBSOCKET_KEY)
        .ok_or(Rejection::Key)?;
    let accept = derive_accept_key(key.as_bytes());
    let on_upgrade = request
        .extensions_mut()
        .remove::<OnUpgrade>()
        .ok_or(Rejection::NotUpgradable)?;
    Ok(Upgrade { accept, on_upgrade })
}

impl Upgrade {
    /// The `101 Switching Protocols` answer and the future of the raw
    /// connection (ready once the answer is sent).
    pub fn accept(self) -> (Response, OnUpgrade) {
        let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
        headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        if let Ok(accept) = HeaderValue::from_str(&self.accept) {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        (response, self.on_upgrade)
    }
}

/// Whether the comma-separated header `name` lists `token`
/// (case-insensitive).
fn has_token(headers: &HeaderMap, name: header::HeaderName, token: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.trim().eq_ignore_ascii_case(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(method: Method, headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder().method(method).uri("/v1/projects/a/rpc");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::empty()).unwrap()
    }

    const GOOD: [(&str, &str); 4] = [
        ("connection", "keep-alive, Upgrade"),
        ("upgrade", "websocket"),
        ("sec-websocket-version", "13"),
        ("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ=="),
    ];

    #[test]
    fn checks_each_header() {
        let mut post = request(Method::POST, &GOOD);
        assert_eq!(prepare(&mut post).unwrap_err(), Rejection::MethodNotGet);
        for (i, expected) in [
            Rejection::Connection,
            Rejection::Upgrade,
            Rejection::Version,
            Rejection::Key,
        ]
        .into_iter()
        .enumerate()
        {
            let mut headers = GOOD.to_vec();
            headers.remove(i);
            let mut req = request(Method::GET, &headers);
            assert_eq!(prepare(&mut req).unwrap_err(), expected);
        }
        // A request that did not come through hyper cannot be upgraded.
        let mut req = request(Method::GET, &GOOD);
        assert_eq!(prepare(&mut req).unwrap_err(), Rejection::NotUpgradable);
    }

    #[test]
    fn accept_key_is_the_rfc_example() {
        // RFC 6455 §1.3.
        assert_eq!(
            derive_accept_key(b"dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }
}
