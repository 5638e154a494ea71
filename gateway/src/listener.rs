//! The accept loop of the main listener (and of `--proxy-listen`, under
//! the same bounds): HTTP/1.1 (with upgrades) over hyper, and HTTP/2 by
//! prior knowledge (h2c: a connection that opens with the HTTP/2 preface,
//! `prior_knowledge`; at most [`H2_MAX_STREAMS`] streams each), under
//! these bounds.
//!
//! - `--max-connections`: at the cap, a connection that has not proved a
//!   valid credential (an authenticated WebSocket, a request the admin
//!   token was accepted for) is closed to make room — an idle keep-alive
//!   one first, then one that never sent a request, then the oldest
//!   (`slots`) — so a flood of
//!   idle sockets, unauthenticated WebSockets or keep-alive `GET /healthz`
//!   cannot lock out the admin API or a client with a token. A WebSocket
//!   keeps its place for its whole life ([`ConnectionSlot`] travels into
//!   the upgraded connection).
//! - `--ops-connections`: when every place is protected, a new connection
//!   takes one of a few reserved places on which only `/healthz`, `/readyz`
//!   and `/metrics` are answered, once, before it is closed (`ops`).
//!   Only when the reserve, too, cannot make room is a connection refused
//!   with a fixed `503` written without reading anything; it never reaches
//!   hyper or a task.
//! - `--header-timeout`: a connection that does not send a complete
//!   request head within it is closed (hyper's header read timeout on
//!   HTTP/1.1; on HTTP/2, a connection with no request by then).
//! - the open-file limit: when `accept` fails for lack of descriptors, one
//!   held in reserve is freed to take the waiting connection, answer it a
//!   fixed `503` and close it (`Reserve`), so clients are told at once
//!   instead of waiting in the backlog, and the loop never spins.
//!
//! Every request carries [`ConnectInfo`] (the peer address), its
//! [`ClientAddr`] (the peer, or on the proxy listener the address the
//! balancer forwarded) and the connection's [`ConnectionSlot`] as
//! extensions.

mod ops;
mod prior_knowledge;
mod slots;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use futures_util::future::Either;
use futures_util::FutureExt;
use hyper::body::Incoming;
use hyper::server::conn::{http1, http2};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::client_addr::{ClientAddr, Listeners, Via};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;
pub use ops::OPS_PATHS;
pub use slots::ConnectionSlot;
use slots::{Pool, Room};

/// The answer to a connection over the cap, written once without reading.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\nContent-Length: 29\r\nRetry-After: 1\r\nConnection: close\r\n\r\n\
too many connections; retry\n";

/// The answer to a connection taken with the reserved descriptor.
const NO_DESCRIPTORS: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\nContent-Length: 50\r\nRetry-After: 5\r\nConnection: close\r\n\r\n\
the gateway is at its open-file limit; retry later\n";

/// How long the loop pauses after an accept error it could not answer.
const ACCEPT_PAUSE: Duration = Duration::from_millis(50);
/// At most one warning about failing accepts per this period.
const ACCEPT_WARN_EVERY: Duration = Duration::from_secs(10);

/// How the accept loop bounds connections.
#[derive(Debug, Clone, Copy)]
pub struct ListenerLimits {
    pub max_connections: usize,
    /// Places beyond `max_connections` that answer only [`OPS_PATHS`].
    pub ops_connections: usize,
    pub header_timeout: Duration,
}

/// How many evicted connections may still be closing (their descriptors
/// not yet freed) while new ones are accepted in their place.
const EVICTIONS_IN_FLIGHT: usize = 64;

/// What a connection may ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Service {
    /// Everything.
    Full,
    /// One request for one of [`OPS_PATHS`], then close.
    OpsOnly,
}

/// Accepts until the shutdown starts. Each connection is a task on the
/// shutdown's tracker that, once the shutdown starts, finishes the request
/// in flight and closes.
pub async fn serve(
    listeners: Listeners,
    router: Router,
    limits: ListenerLimits,
    metrics: Arc<Metrics>,
    shutdown: Shutdown,
) {
    let mut regular = Pool::new(limits.max_connections, EVICTIONS_IN_FLIGHT);
    let mut reserve_places = Pool::new(limits.ops_connections, limits.ops_connections);
    let mut reserve = Reserve::new();
    let mut warned: Option<tokio::time::Instant> = None;
    loop {
        let (accepted, via) = tokio::select! {
            accepted = listeners.accept() => accepted,
            () = shutdown.started() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                let exhausted = crate::fdlimit::exhausted(&e);
                if exhausted {
                    metrics.connection_refused("no_descriptors");
                }
                if warned.is_none_or(|at| at.elapsed() >= ACCEPT_WARN_EVERY) {
                    warned = Some(tokio::time::Instant::now());
                    tracing::warn!(error = %e, "accept failed (further failures within 10 s are not logged)");
                }
                // With the reserve, the waiting connection is answered and
                // the next accept can go on; else let the headroom recover.
                if !(exhausted && reserve.refuse_one(listeners.get(via))) {
                    tokio::time::sleep(ACCEPT_PAUSE).await;
                }
                continue;
            }
        };
        let (pool, service, room) = match regular.room() {
            Room::Full => {
                metrics.connection_refused("max_connections");
                let room = reserve_places.room();
                (&mut reserve_places, Service::OpsOnly, room)
            }
            room => (&mut regular, Service::Full, room),
        };
        match room {
            Room::Free => {}
            Room::MadeByEviction => {
                metrics.connection_refused("evicted");
                // Let the evicted connection's task close it (its
                // descriptor and place are freed there) first.
                tokio::task::yield_now().await;
            }
            Room::Full => {
                refuse(stream);
                continue;
            }
        }
        let slot = pool.take(&metrics);
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let connection = serve_connection(
            stream,
            Peer { addr: peer, via },
            slot,
            service,
            router.clone(),
            limits.header_timeout,
            shutdown.token().clone(),
        );
        shutdown.spawn(connection);
    }
}

/// One descriptor held open (on `/dev/null`) for the moment the process
/// has none left: freed, it lets the accept loop take the connection that
/// is waiting, tell it so and close it.
struct Reserve(Option<std::fs::File>);

impl Reserve {
    fn new() -> Reserve {
        Reserve(std::fs::File::open("/dev/null").ok())
    }

    /// Frees the reserve, accepts one waiting connection with it, answers
    /// [`NO_DESCRIPTORS`] and closes it, then reserves again. False when
    /// there was no reserve or no connection was waiting.
    fn refuse_one(&mut self, listener: &TcpListener) -> bool {
        if self.0.take().is_none() {
            self.0 = std::fs::File::open("/dev/null").ok();
            return false;
        }
        let refused = match listener.accept().now_or_never() {
            Some(Ok((stream, _))) => {
                // A fresh socket's send buffer is empty; the close says the
                // rest if even this fails.
                let _ = stream.try_write(NO_DESCRIPTORS);
                true
            }
            _ => false,
        };
        self.0 = std::fs::File::open("/dev/null").ok();
        refused
    }
}

/// Over the cap and the reserve: one write that cannot block, then close.
fn refuse(stream: TcpStream) {
    // A fresh socket's send buffer is empty; if even this fails, the
    // close alone says it.
    let _ = stream.try_write(OVER_CAPACITY);
}

/// Where a connection came from: the TCP peer and the listener it used.
#[derive(Debug, Clone, Copy)]
struct Peer {
    addr: SocketAddr,
    via: Via,
}

async fn serve_connection(
    stream: TcpStream,
    Peer { addr: peer, via }: Peer,
    slot: Arc<ConnectionSlot>,
    service: Service,
    router: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    let request_slot = slot.clone();
    let handler = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request_slot.request_started();
        if service == Service::OpsOnly && !ops::answered(&request) {
            return Either::Left(std::future::ready(
                Ok::<_, Infallible>(ops::over_capacity()),
            ));
        }
        // Nothing here protects the connection: a WebSocket that
        // authenticates and a request with the admin token do, later.
        request.extensions_mut().insert(ConnectInfo(peer));
        let client = ClientAddr::of(peer, via, request.headers());
        request.extensions_mut().insert(client);
        request.extensions_mut().insert(request_slot.clone());
        let answered = request_slot.clone();
        Either::Right(router.clone().oneshot(request).map(move |response| {
            if let Ok(response) = &response {
                let upgraded = response.status() == hyper::StatusCode::SWITCHING_PROTOCOLS;
                answered.request_answered(upgraded);
            }
            response
        }))
    });
    if service == Service::Full {
        // The preface, or the request line, within --header-timeout.
        let sniffed = tokio::select! {
            sniffed = tokio::time::timeout(header_timeout, prior_knowledge::sniff(&stream)) => sniffed,
            () = slot.evicted(), if !shutdown.is_cancelled() => return,
            () = shutdown.cancelled() => return,
        };
        match sniffed {
            Ok(Ok(true)) => {
                serve_h2(stream, peer, &slot, handler, header_timeout, shutdown).await;
                return;
            }
            Ok(Ok(false)) => {}
            Ok(Err(e)) => {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
                return;
            }
            Err(_) => {
                slot.metrics().connection_refused("header_timeout");
                tracing::debug!(%peer, "closed a connection that sent no request in time");
                return;
            }
        }
    }
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        // A reserved place answers one request and is closed.
        .keep_alive(service == Service::Full)
        .serve_connection(TokioIo::new(stream), handler)
        .with_upgrades();
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = slot.evicted(), if !shutdown.is_cancelled() => {
            tracing::debug!(%peer, "closed an unauthenticated connection to make room");
            return;
        }
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        if e.is_timeout() && !slot.was_served() {
            slot.metrics().connection_refused("header_timeout");
            tracing::debug!(%peer, "closed a connection that sent no request in time");
        } else {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

/// Streams one HTTP/2 connection may have open at once.
pub const H2_MAX_STREAMS: u32 = 64;
/// Bytes of request headers an HTTP/2 request may carry.
pub const H2_MAX_HEADER_BYTES: u32 = 64 << 10;
/// Pings on an HTTP/2 connection, and how long an answer may take, so a
/// peer that vanished is noticed even while its streams are quiet.
const H2_KEEP_ALIVE: Duration = Duration::from_secs(30);
const H2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(20);

/// Serves a connection that opened with the HTTP/2 preface (h2c by prior
/// knowledge; there are no upgrades on HTTP/2), under the same eviction,
/// shutdown and `--header-timeout` as HTTP/1.1: one that has sent no
/// complete request head within it is closed (hyper has no such timeout
/// for HTTP/2, and a peer that answers pings would otherwise keep its
/// socket for good).
async fn serve_h2<S>(
    stream: TcpStream,
    peer: SocketAddr,
    slot: &ConnectionSlot,
    handler: S,
    header_timeout: Duration,
    shutdown: CancellationToken,
) where
    S: hyper::service::HttpService<Incoming> + Send + 'static,
    S::Future: Send + 'static,
    S::ResBody: Send + 'static,
    <S::ResBody as hyper::body::Body>::Data: Send,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let connection = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        .max_concurrent_streams(H2_MAX_STREAMS)
        .max_header_list_size(H2_MAX_HEADER_BYTES)
        .keep_alive_interval(H2_KEEP_ALIVE)
        .keep_alive_timeout(H2_KEEP_ALIVE_TIMEOUT)
        .serve_connection(TokioIo::new(stream), handler);
    tokio::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = slot.evicted(), if !shutdown.is_cancelled() => {
            tracing::debug!(%peer, "closed an unauthenticated connection to make room");
            return;
        }
        () = no_request_within(slot, header_timeout) => {
            slot.metrics().connection_refused("header_timeout");
            tracing::debug!(%peer, "closed an HTTP/2 connection that sent no request in time");
            return;
        }
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, error = %e, "HTTP/2 connection ended with an error");
    }
}

/// Completes once `timeout` has passed with no request head on the
/// connection; never once one arrived.
async fn no_request_within(slot: &ConnectionSlot, timeout: Duration) {
    tokio::time::sleep(timeout).await;
    if slot.was_served() {
        std::future::pending::<()>().await;
    }
}
