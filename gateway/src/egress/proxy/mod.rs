//! The gateway's egress proxy: the only way out of a sandboxed tool's
//! network namespace. Tools reach it through a relay in their namespace
//! and the Unix socket `STATE/egress/proxy-ID.sock`; each connection opens
//! with the preamble line naming its project's per-spawn secret
//! (`corral_protocol::egress`), then speaks HTTP/1.1 proxy traffic:
//!
//! - `CONNECT host:port` → decided, then a byte tunnel (HTTPS);
//! - `GET http://host[:port]/path` (any method) → decided, then forwarded
//!   in origin form, hop-by-hop headers removed, response streamed;
//! - anything else → 400 with a one-line reason.
//!
//! Refusals are `403` with `X-Corral-Egress-Rule: <label>`; over a
//! connection limit `503`; an unreachable upstream `502`. A connection
//! without a valid secret is closed without a word. The proxy runs on a
//! thread of its own with its own single-threaded runtime, so tools'
//! downloads never compete with the gateway's WebSocket event loop.
//!
//! Tasks: one accept loop (until the stop token fires), one task per tool
//! connection, one per tunnel and one per forwarded request's upstream
//! connection. They all end with the runtime, after [`SHUTDOWN_GRACE`].

mod connection;
mod forward;
mod limits;
mod report;
mod request;
mod resolve;
#[cfg(test)]
mod tests;

use std::io;
use std::os::unix::net::UnixListener;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

pub use crate::child_socket::bind;
pub use limits::Over;
pub use report::EVENT_WINDOW;
pub use request::RULE_HEADER;
pub use resolve::{MappingError, Resolver, TEST_RESOLVE_ENV};

use super::Registry;
use crate::events::EventLog;
use crate::metrics::Metrics;
use limits::Limits;
use report::Report;

/// The longest request head (request line and headers) a tool may send;
/// a longer one is answered `431` and the connection closed. Generous for
/// proxy requests, which carry a tool's ordinary headers.
pub const MAX_HEAD: usize = 16 * 1024;

/// Default of [`ProxyConfig::max_connections`] (`--egress-max-connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 1024;
/// Default of [`ProxyConfig::max_per_project`].
pub const DEFAULT_MAX_PER_PROJECT: usize = per_project_share(DEFAULT_MAX_CONNECTIONS);

/// A project's share of `total` connections: a quarter, so one busy
/// project cannot starve the others (at least one).
pub const fn per_project_share(total: usize) -> usize {
    if total < 4 {
        1
    } else {
        total / 4
    }
}
/// Default of [`ProxyConfig::head_timeout`].
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// Default of [`ProxyConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long open tunnels and requests may go on after the stop token
/// fires before the proxy's runtime drops them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// A failed `accept` (out of descriptors, most often) is retried after
/// this pause rather than in a hot loop.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// The proxy's limits and resolver.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Open tool connections in total (each costs the gateway two
    /// descriptors); beyond it a connection gets `503` and is closed
    /// before anything is read.
    pub max_connections: usize,
    /// Open tool connections per project; beyond it each request on the
    /// connection gets `503`, then the connection is closed.
    pub max_per_project: usize,
    /// The preamble, and each request head, must arrive within this.
    pub head_timeout: Duration,
    /// Resolving a name, and connecting to each of its addresses, must
    /// succeed within this.
    pub connect_timeout: Duration,
    pub resolver: Resolver,
    /// This host's own addresses (its interfaces'), refused like a
    /// blocked range unless an operator exception names one.
    pub own_addresses: Vec<std::net::IpAddr>,
    /// The accounts that may connect (the children's).
    pub peers: crate::child_socket::Peers,
}

impl Default for ProxyConfig {
    fn default() -> ProxyConfig {
        ProxyConfig {
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_per_project: DEFAULT_MAX_PER_PROJECT,
            head_timeout: DEFAULT_HEAD_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            resolver: Resolver::system(),
            own_addresses: Vec::new(),
            peers: crate::child_socket::Peers::default(),
        }
    }
}

/// What every connection task shares.
#[derive(Debug)]
struct Shared {
    registry: Arc<Registry>,
    report: Report,
    config: ProxyConfig,
    limits: Arc<Limits>,
}

/// Serves `listener` on a thread of its own, with its own current-thread
/// tokio runtime, until `stop` fires; returns the thread's handle (it
/// ends at most [`SHUTDOWN_GRACE`] after `stop`).
pub fn spawn(
    listener: UnixListener,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    events: Arc<EventLog>,
    config: ProxyConfig,
    stop: CancellationToken,
) -> io::Result<JoinHandle<()>> {
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let limits = Limits::new(
        config.max_connections,
        config.max_per_project,
        metrics.egress_connections.clone(),
    );
    let shared = Arc::new(Shared {
        registry,
        report: Report::new(metrics, events),
        config,
        limits,
    });
    std::thread::Builder::new()
        .name("corral-egress".into())
        .spawn(move || {
            runtime.block_on(accept_loop(listener, shared, stop));
            runtime.shutdown_timeout(SHUTDOWN_GRACE);
        })
}

async fn accept_loop(listener: UnixListener, shared: Arc<Shared>, stop: CancellationToken) {
    let listener = match tokio::net::UnixListener::from_std(listener) {
        Ok(listener) => listener,
        Err(e) => {
            tracing::error!(error = %e, "egress proxy cannot listen");
            return;
        }
    };
    loop {
        let stream = tokio::select! {
            () = stop.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(error = %e, "egress proxy cannot accept");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        if !shared.config.peers.admits(&stream) {
            // Not an account children run as: closed unanswered.
            shared.report.unknown("not a child's account");
            continue;
        }
        match shared.limits.open() {
            Ok(slot) => {
                tokio::spawn(connection::serve(stream, slot, shared.clone()));
            }
            Err(over) => {
                shared.report.unknown(over.label());
                // A fresh socket's send buffer is empty: this cannot block,
                // and if it fails the close says enough.
                let _ = stream.try_write(&request::over_limit(over.label()));
            }
        }
    }
}
