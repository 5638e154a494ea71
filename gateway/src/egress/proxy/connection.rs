//! One tool connection: its preamble (which project it speaks for), then
//! HTTP/1.1 served by hyper, each request decided on its own, so a second
//! request on a kept-alive connection is judged like the first.

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use corral_protocol::egress::{parse_preamble, MAX_PREAMBLE};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use super::limits::Slot;
use super::request::{self, Kind, Wanted};
use super::{forward, Shared, MAX_HEAD};
use crate::egress::{Decision, Host, Target};

/// One connection that named a live secret.
struct Conn {
    project: Arc<str>,
    shared: Arc<Shared>,
    /// The connection's place under the limits, freed when the last
    /// holder (the connection, or a tunnel it became) is gone.
    _slot: Slot,
}

/// Serves one accepted connection until it closes.
pub(super) async fn serve(mut stream: UnixStream, mut slot: Slot, shared: Arc<Shared>) {
    let head_timeout = shared.config.head_timeout;
    let line = tokio::time::timeout(head_timeout, read_preamble(&mut stream)).await;
    let project = match &line {
        Ok(Some(line)) => parse_preamble(line).and_then(|s| shared.registry.project_of(s)),
        _ => None,
    };
    let Some(project) = project else {
        // Closed without a word: nothing tells a guesser what was wrong.
        shared.report.unknown("no valid preamble");
        return;
    };
    let project: Arc<str> = project.into();
    if let Err(over) = slot.claim(project.clone()) {
        // Answered at once and closed: a connection over its project's
        // limit must not hold a place under the total limit meanwhile.
        drop(slot);
        shared.report.over_limit(&project, over.label());
        let _ = stream.write_all(&request::over_limit(over.label())).await;
        return;
    }
    let conn = Arc::new(Conn {
        project,
        shared: shared.clone(),
        _slot: slot,
    });
    let service = hyper::service::service_fn(move |request| handle(request, conn.clone()));
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .max_buf_size(MAX_HEAD)
        .serve_connection(TokioIo::new(stream), service)
        .with_upgrades()
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "egress connection ended with an error");
    }
}

/// The first line, read byte by byte so that nothing after it is taken
/// from the stream; `None` if it is longer than [`MAX_PREAMBLE`], not
/// UTF-8, or the connection ends first.
async fn read_preamble(stream: &mut UnixStream) -> Option<String> {
    let mut line = Vec::with_capacity(MAX_PREAMBLE);
    let mut byte = [0u8; 1];
    while line.len() < MAX_PREAMBLE {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        if byte[0] == b'\n' {
            return String::from_utf8(line).ok();
        }
        line.push(byte[0]);
    }
    None
}

/// Decides one request and carries it out.
async fn handle(request: Request<Incoming>, conn: Arc<Conn>) -> Result<Response<Body>, Infallible> {
    let shared = &conn.shared;
    let project = &*conn.project;
    let wanted = match request::wanted(&request) {
        Ok(wanted) => wanted,
        Err(why) => {
            shared.report.malformed(project, why);
            return Ok(request::bad_request(why));
        }
    };
    let method = (wanted.kind == Kind::Forward).then(|| request.method().clone());
    let (decision, addrs) = decide(shared, project, &wanted, method).await;
    let rule = decision.to_string();
    if !decision.is_allowed() {
        shared
            .report
            .refused(project, &wanted.host, wanted.port, &rule);
        return Ok(request::refused(request.method(), &wanted, project, &rule));
    }
    shared
        .report
        .allowed(project, &wanted.host, wanted.port, &rule);
    let upstream = match connect(&addrs, wanted.port, shared.config.connect_timeout).await {
        Ok(upstream) => upstream,
        Err(what) => return Ok(request::bad_gateway(&what)),
    };
    Ok(match wanted.kind {
        Kind::Tunnel => forward::tunnel(request, upstream, conn.clone()),
        Kind::Forward => forward::forward(request, upstream, &wanted).await,
    })
}

/// The policy's decision, and the addresses it covered (the only ones
/// the proxy may connect to). A name is resolved once, and not at all if
/// the policy refuses it whatever its addresses.
async fn decide(
    shared: &Shared,
    project: &str,
    wanted: &Wanted,
    method: Option<hyper::Method>,
) -> (Decision, Vec<IpAddr>) {
    let policy = shared.registry.policy_for(project);
    let host = Host::parse(&wanted.host);
    let resolved = match &host {
        Host::Ip(ip) => vec![*ip],
        Host::Name(name) => {
            if let Some(refusal) = policy.refuse_name(name, wanted.port) {
                return (Decision::Refused(refusal), Vec::new());
            }
            let limit = shared.config.connect_timeout;
            shared
                .config
                .resolver
                .resolve(name, wanted.port, limit)
                .await
        }
    };
    let target = Target {
        host,
        port: wanted.port,
        resolved,
        method,
    };
    let decision = policy.decide_on(&target, &shared.config.own_addresses);
    (decision, target.resolved)
}

/// A connection to the first of `addrs` that answers, each tried within
/// `limit`; or the last failure, as a 502 says it.
async fn connect(addrs: &[IpAddr], port: u16, limit: Duration) -> Result<TcpStream, String> {
    let mut last = String::from("no address to connect to");
    for &ip in addrs {
        let addr = SocketAddr::new(ip, port);
        match tokio::time::timeout(limit, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => last = format!("connect to {addr}: {}", e.kind()),
            Err(_) => last = format!("connect to {addr}: timed out"),
        }
    }
    Err(last)
}
