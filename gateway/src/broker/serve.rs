//! The broker's accept loop: HTTP/1.1 on its Unix socket, at most
//! [`MAX_CONNECTIONS`] connections at once (further ones wait in the
//! listen queue), each given [`HEADER_TIMEOUT`] for a request's headers.
//! Runs on a thread of its own ([`super::spawn`]), so model calls never
//! queue behind the gateway's WebSocket work, nor it behind them.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::UnixListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{forward, Broker};

/// Connections served at once. Each is one descriptor of the gateway's
/// and, while a model call streams, one upstream connection too; an agent
/// keeps at most one idle connection to the broker.
pub const MAX_CONNECTIONS: usize = 1024;

/// Time a connection has to send a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause after a failed accept (out of descriptors, most likely), so the
/// loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves `listener` until `shutdown` is cancelled.
pub async fn serve(listener: UnixListener, broker: Arc<Broker>, shutdown: CancellationToken) {
    let limit = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            () = shutdown.cancelled() => return,
            permit = limit.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
        };
        let stream = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "model broker: accept failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        if !broker.peers.admits(&stream) {
            // Not an account children run as: closed unanswered, its
            // place freed at once.
            continue;
        }
        let broker = broker.clone();
        tokio::spawn(async move {
            let service = service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
                let broker = broker.clone();
                async move {
                    Ok::<_, Infallible>(forward::handle(&broker, request.map(Body::new)).await)
                }
            });
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), service)
                .await;
            drop(permit);
        });
    }
}
