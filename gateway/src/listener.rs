//! The main listener's accept loop: HTTP/1.1 (with upgrades) over hyper,
//! under two bounds.
//!
//! - `--max-connections`: a connection over the cap is refused at accept,
//!   with a fixed `503` written without reading anything and the socket
//!   closed; it never reaches hyper or a task. A WebSocket keeps its slot
//!   for its whole life ([`ConnectionSlot`] travels into the upgraded
//!   connection).
//! - `--header-timeout`: a connection that does not send a complete
//!   request head within it is closed (hyper's header read timeout).
//!
//! Every request carries [`ConnectInfo`] (the peer address) and the
//! connection's [`ConnectionSlot`] as extensions.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::ConnectInfo;
use axum::Router;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use crate::metrics::Metrics;

/// The answer to a connection over the cap, written once without reading.
const OVER_CAPACITY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\n\
Content-Type: text/plain\r\nContent-Length: 29\r\nRetry-After: 1\r\nConnection: close\r\n\r\n\
too many connections; retry\n";

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
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        self.metrics.connections.dec();
    }
}

/// Accepts until `shutdown`, then lets open HTTP connections finish their
/// requests (upgraded WebSockets are the caller's to wait for).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: ListenerLimits,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let tasks = TaskTracker::new();
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = shutdown.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                // EMFILE and friends: the headroom is gone; let it recover.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if open.load(Ordering::SeqCst) >= limits.max_connections {
            refuse(stream, &metrics);
            continue;
        }
        open.fetch_add(1, Ordering::SeqCst);
        metrics.connections.inc();
        let slot = Arc::new(ConnectionSlot {
            open: open.clone(),
            metrics: metrics.clone(),
            served: AtomicBool::new(false),
        });
        if let Err(e) = stream.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
        let connection = serve_connection(
            stream,
            peer,
            slot,
            router.clone(),
            limits.header_timeout,
            shutdown.clone(),
        );
        tasks.spawn(connection);
    }
    tasks.close();
    tasks.wait().await;
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
    slot: Arc<ConnectionSlot>,
    router: Router,
    header_timeout: Duration,
    shutdown: CancellationToken,
) {
    let request_slot = slot.clone();
    let service = hyper::service::service_fn(move |mut request: hyper::Request<Incoming>| {
        request_slot.served.store(true, Ordering::SeqCst);
        request.extensions_mut().insert(ConnectInfo(peer));
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
