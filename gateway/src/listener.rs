//! The accept loop of the main listener (and of `--proxy-listen`, under
//! the same bounds): HTTP/1.1 (with upgrades) over hyper, under two
//! bounds.
//!
//! - `--max-connections`: at the cap, the oldest connection that has not
//!   proved anything yet (no plain HTTP request, no authenticated
//!   WebSocket) is closed to make room, so a flood of idle or
//!   unauthenticated sockets cannot lock out `/healthz`, the admin API or
//!   a client with a token. Only when every connection is protected is a
//!   new one refused, with a fixed `503` written without reading anything;
//!   it never reaches hyper or a task. A WebSocket keeps its slot for its
//!   whole life ([`ConnectionSlot`] travels into the upgraded connection).
//! - `--header-timeout`: a connection that does not send a complete
//!   request head within it is closed (hyper's header read timeout).
//! - the open-file limit: when `accept` fails for lack of descriptors, one
//!   held in reserve is freed to take the waiting connection, answer it a
//!   fixed `503` and close it (`Reserve`), so clients are told at once
//!   instead of waiting in the backlog, and the loop never spins.
//!
//! Every request carries [`ConnectInfo`] (the peer address), its
//! [`ClientAddr`] (the peer, or on the proxy listener the address the
//! balancer forwarded) and the connection's [`ConnectionSlot`] as
//! extensions.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use futures_util::FutureExt;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use crate::client_addr::{ClientAddr, Listeners, Via};
use crate::metrics::Metrics;
use crate::shutdown::Shutdown;

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
    pub header_timeout: Duration,
}

/// One open connection's place under `--max-connections`; freed when the
/// last clone drops (the HTTP connection, its requests, its WebSocket).
#[derive(Debug)]
pub struct ConnectionSlot {
    open: Arc<AtomicUsize>,
    metrics: Arc<Metrics>,
    /// Whether a request head arrived (a header timeout after one is an
    /// idle keep-alive connection ending, not a refusal).
    served: AtomicBool,
    /// Set once the connection proved something: a plain HTTP request
    /// arrived, or its WebSocket authenticated. Unprotected connections
    /// are closed first when the cap is reached.
    protected: AtomicBool,
    /// Cancelled to close this connection to make room.
    evict: CancellationToken,
}

impl ConnectionSlot {
    /// Keeps this connection from being closed to make room.
    pub fn protect(&self) {
        self.protected.store(true, Ordering::SeqCst);
    }

    /// Completes when the connection is to be closed to make room.
    pub async fn evicted(&self) {
        self.evict.cancelled().await;
    }
}

/// Connections in accept order, for finding the oldest unprotected one.
/// Holds weak references: a closed connection simply drops out.
#[derive(Default)]
struct EvictionQueue {
    order: VecDeque<Weak<ConnectionSlot>>,
}

impl EvictionQueue {
    fn push(&mut self, slot: &Arc<ConnectionSlot>) {
        self.order.push_back(Arc::downgrade(slot));
    }

    /// Signals the oldest live, unprotected connection to close; returns
    /// whether there was one. Entries of closed or protected connections
    /// met on the way are dropped (protection never ends).
    fn evict_oldest(&mut self) -> bool {
        while let Some(weak) = self.order.pop_front() {
            let Some(slot) = weak.upgrade() else {
                continue;
            };
            if slot.protected.load(Ordering::SeqCst) || slot.evict.is_cancelled() {
                continue;
            }
            slot.evict.cancel();
            return true;
        }
        false
    }

    /// Forgets closed connections once the queue has grown past `bound`.
    fn prune(&mut self, bound: usize) {
        if self.order.len() > bound {
            self.order.retain(|weak| weak.strong_count() > 0);
        }
    }
}

/// How many evicted connections may still be closing (their descriptors
/// not yet freed) while new ones are accepted in their place.
const EVICTIONS_IN_FLIGHT: usize = 64;

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        self.metrics.connections.dec();
    }
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
    let open = Arc::new(AtomicUsize::new(0));
    let mut queue = EvictionQueue::default();
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
        let now_open = open.load(Ordering::SeqCst);
        if now_open >= limits.max_connections {
            let room = now_open < limits.max_connections + EVICTIONS_IN_FLIGHT;
            if !(room && queue.evict_oldest()) {
                refuse(stream, &metrics);
                continue;
            }
            metrics.connection_refused("evicted");
            // Let the evicted connection's task close it (its descriptor
            // and slot are freed there) before taking another.
            tokio::task::yield_now().await;
        }
        open.fetch_add(1, Ordering::SeqCst);
        metrics.connections.inc();
        let slot = Arc::new(ConnectionSlot {
            open: open.clone(),
            metrics: metrics.clone(),
            served: AtomicBool::new(false),
            protected: AtomicBool::new(false),
            evict: CancellationToken::new(),
        });
        queue.push(&slot);
        queue.prune(2 * limits.max_connections + EVICTIONS_IN_FLIGHT);
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let connection = serve_connection(
            stream,
            peer,
            via,
            slot,
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

/// Over the cap: one write that cannot block, then close.
fn refuse(stream: TcpStream, metrics: &Metrics) {
    metrics.connection_refused("max_connections");
    // A fresh socket's send buffer is empty; if even this fails, the
    // close alone says it.
    let _ = stream.try_write(OVER_CAPACITY);
}

async fn serve_connection(
    stream: TcpStream,
    peer: SocketAddr,
    via: Via,
    slot: Arc<ConnectionSlot>,
    router: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    let request_slot = slot.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request_slot.served.store(true, Ordering::SeqCst);
        // A plain request proves the peer speaks HTTP; a WebSocket upgrade
        // is protected only once it authenticates.
        if !request.headers().contains_key(hyper::header::UPGRADE) {
            request_slot.protect();
        }
        request.extensions_mut().insert(ConnectInfo(peer));
        let client = ClientAddr::of(peer, via, request.headers());
        request.extensions_mut().insert(client);
        request.extensions_mut().insert(request_slot.clone());
        router.clone().oneshot(request)
    });
    let connection = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .serve_connection(TokioIo::new(stream), service)
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
        if e.is_timeout() && !slot.served.load(Ordering::SeqCst) {
            slot.metrics.connection_refused("header_timeout");
            tracing::debug!(%peer, "closed a connection that sent no request in time");
        } else {
            tracing::debug!(%peer, error = %e, "connection ended with an error");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(open: &Arc<AtomicUsize>, metrics: &Arc<Metrics>) -> Arc<ConnectionSlot> {
        open.fetch_add(1, Ordering::SeqCst);
        Arc::new(ConnectionSlot {
            open: open.clone(),
            metrics: metrics.clone(),
            served: AtomicBool::new(false),
            protected: AtomicBool::new(false),
            evict: CancellationToken::new(),
        })
    }

    #[test]
    fn the_oldest_unprotected_live_connection_is_evicted_first() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let open = Arc::new(AtomicUsize::new(0));
        let mut queue = EvictionQueue::default();
        let closed = slot(&open, &metrics);
        let authenticated = slot(&open, &metrics);
        let idle = slot(&open, &metrics);
        let newer = slot(&open, &metrics);
        for s in [&closed, &authenticated, &idle, &newer] {
            queue.push(s);
        }
        drop(closed);
        authenticated.protect();
        assert!(queue.evict_oldest());
        assert!(idle.evict.is_cancelled());
        assert!(!authenticated.evict.is_cancelled() && !newer.evict.is_cancelled());
        assert!(queue.evict_oldest());
        assert!(newer.evict.is_cancelled());
        assert!(!queue.evict_oldest(), "only protected connections are left");
        assert_eq!(open.load(Ordering::SeqCst), 3);
    }
}
