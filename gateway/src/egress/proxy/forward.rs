//! Moving bytes for an allowed request, once its upstream connection is
//! open: a CONNECT tunnel (200, then the upgraded stream copied both
//! ways), or a plain-HTTP request sent upstream in origin form with its
//! hop-by-hop headers removed and the response streamed back unbuffered.

use std::net::SocketAddr;

use axum::body::Body;
use axum::http::header::{HeaderValue, HOST};
use axum::http::{Request, Response, Uri, Version};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::request::{bad_gateway, Wanted};

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
    crate::hop_by_hop::strip(&mut parts.headers);
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
            crate::hop_by_hop::strip(&mut parts.headers);
            parts.version = Version::HTTP_11;
            Response::from_parts(parts, Body::new(body))
        }
        Err(e) => bad_gateway(&format!("upstream {peer}: {e}")),
    }
}
