//! Moving bytes for an allowed request, once its upstream connection is
//! open: a CONNECT tunnel (200, then the upgraded stream copied both
//! ways), or a plain-HTTP request sent upstream in origin form with its
//! hop-by-hop headers removed and the response streamed back unbuffered.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::header::{
    HeaderName, HeaderValue, CONNECTION, HOST, PROXY_AUTHENTICATE, PROXY_AUTHORIZATION, TE,
    TRAILER, TRANSFER_ENCODING, UPGRADE,
};
use axum::http::{HeaderMap, Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::request::{bad_gateway, Wanted};

/// Headers that belong to one hop, never forwarded (besides those the
/// `Connection` header names). Hyper frames bodies itself, so
/// `Transfer-Encoding` is dropped and set again as the body needs.
const HOP_BY_HOP: [HeaderName; 9] = [
    CONNECTION,
    HeaderName::from_static("proxy-connection"),
    HeaderName::from_static("keep-alive"),
    PROXY_AUTHORIZATION,
    PROXY_AUTHENTICATE,
    TE,
    TRAILER,
    TRANSFER_ENCODING,
    UPGRADE,
];

/// Removes hop-by-hop headers, the ones `Connection` names first.
pub fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(CONNECTION)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(&HOP_BY_HOP) {
        headers.remove(name);
    }
}

/// Answers 200 to a CONNECT and, once hyper hands over the connection,
/// copies bytes between it and `upstream` until either side closes.
/// `keep` (the connection's place under the limits) lives as long as the
/// tunnel.
pub fn tunnel<K: Send + 'static>(
    request: Request<Incoming>,
    upstream: TcpStream,
    keep: K,
) -> Response<Body> {
    let upgrade = hyper::upgrade::on(request);
    tokio::spawn(async move {
        let _keep = keep;
        let mut upstream = upstream;
        match upgrade.await {
            Ok(upgraded) => {
                let mut tool = TokioIo::new(upgraded);
                if let Err(e) = tokio::io::copy_bidirectional(&mut tool, &mut upstream).await {
                    tracing::debug!(error = %e, "egress tunnel ended with an error");
                }
            }
            Err(e) => tracing::debug!(error = %e, "egress tunnel: no upgrade"),
        }
    });
    Response::new(Body::empty())
}

/// Sends `request` to `upstream` in origin form with `Host` set from
/// the URL, and answers with the upstream's response, body streamed.
pub async fn forward(
    request: Request<Incoming>,
    upstream: TcpStream,
    wanted: &Wanted,
) -> Response<Body> {
    let peer = upstream
        .peer_addr()
        .map_or_else(|_| wanted.target(), |a: SocketAddr| a.to_string());
    let (mut parts, body) = request.into_parts();
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    parts.uri = match Uri::try_from(path) {
        Ok(uri) => uri,
        Err(_) => return bad_gateway(&format!("upstream {peer}: cannot write the path")),
    };
    parts.version = Version::HTTP_11;
    strip_hop_by_hop(&mut parts.headers);
    match HeaderValue::from_str(&wanted.authority) {
        Ok(host) => parts.headers.insert(HOST, host),
        Err(_) => return bad_gateway(&format!("upstream {peer}: cannot write the host")),
    };
    let (mut sender, connection) =
        match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return bad_gateway(&format!("upstream {peer}: {e}")),
        };
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "egress upstream connection ended with an error");
        }
    });
    match sender.send_request(Request::from_parts(parts, body)).await {
        Ok(response) => {
            let (mut parts, body) = response.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            parts.version = Version::HTTP_11;
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => bad_gateway(&format!("upstream {peer}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_go() {
        let mut headers = HeaderMap::new();
        for (name, value) in [
            ("connection", "keep-alive, X-Secret"),
            ("x-secret", "1"),
            ("proxy-authorization", "Basic eA=="),
            ("proxy-connection", "keep-alive"),
            ("keep-alive", "timeout=5"),
            ("te", "trailers"),
            ("upgrade", "websocket"),
            ("accept", "*/*"),
            ("user-agent", "t"),
        ] {
            headers.append(name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut headers);
        let mut left: Vec<&str> = headers.keys().map(HeaderName::as_str).collect();
        left.sort_unstable();
        assert_eq!(left, ["accept", "user-agent"]);
    }
}
