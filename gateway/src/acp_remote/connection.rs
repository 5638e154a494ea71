//! Streamable HTTP connections of the ACP endpoint: what one holds (the
//! project and identity it belongs to, the way into its session task, the
//! frames waiting for its stream), the registry they are found in by
//! `Acp-Connection-Id`, and when an idle one ends.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::auth::Role;
use crate::hub::budget::Outgoing;
use crate::metrics::Metrics;
use crate::ws::close::CloseCode;

/// How long a connection lives with no stream open and no request: a
/// client that went away without `DELETE` is detached from its project
/// after this (an open `GET` stream keeps it, whatever its silence).
pub const IDLE_GRACE: Duration = Duration::from_secs(60);

/// Session-scoped `GET` streams one connection may hold at once (they
/// carry only keep-alives: everything goes on the connection's stream).
pub const MAX_SESSION_STREAMS: usize = 8;

/// Messages waiting between the `POST`s and the session task; a `POST`
/// waits for room (the hub takes them as fast as the child's queue).
pub const INBOX_MESSAGES: usize = 16;

/// Frames waiting between the session task and the `GET` stream (each
/// still counted against the client's `--client-buffer-bytes`); when no
/// stream reads them, the client falls behind like a slow WebSocket.
pub const OUTBOX_FRAMES: usize = 32;

/// The frames of a connection's stream: those taken while the
/// `initialize` answer was awaited, then the session task's.
pub struct Outbox {
    pub held: VecDeque<Outgoing>,
    pub rx: mpsc::Receiver<Outgoing>,
}

/// One Streamable HTTP connection.
pub struct Connection {
    pub id: String,
    /// The project of the endpoint it was opened on.
    pub project: String,
    /// The credential key of the identity that opened it: only the same
    /// identity may use it.
    pub owner: String,
    /// The role its session runs with: a request must come with a
    /// credential that may open the project with this very role (another
    /// JWT of the same `sub` may be an observer's, or cover other
    /// projects).
    pub role: Role,
    /// Into the session task (what `POST`s carry).
    pub inbox: mpsc::Sender<Map<String, Value>>,
    /// Held by the one `GET` stream that reads it (or by the `initialize`
    /// answer's wait).
    pub outbox: Arc<tokio::sync::Mutex<Outbox>>,
    /// Cancelled when the connection ends (`DELETE`, idle, or its session
    /// ended): streams finish, the session task detaches.
    pub ended: CancellationToken,
    /// Why the gateway ended the session, once it did.
    pub closed: Mutex<Option<(CloseCode, String)>>,
    /// When a request last came or a stream last closed.
    last_active: Mutex<Instant>,
    /// Open `GET` streams (the connection's and session-scoped ones).
    streams: AtomicUsize,
    /// Open session-scoped `GET` streams.
    pub session_streams: AtomicUsize,
}

/// A new connection, the receiving end of its inbox and the sending end
/// of its outbox.
pub type Opened = (
    Arc<Connection>,
    mpsc::Receiver<Map<String, Value>>,
    mpsc::Sender<Outgoing>,
);

impl Connection {
    /// A new connection with a fresh id; `None` when the system has no
    /// randomness to make one.
    pub fn new(project: &str, owner: String, role: Role) -> Option<Opened> {
        let id = fresh_id()?;
        let (inbox, inbox_rx) = mpsc::channel(INBOX_MESSAGES);
        let (outbox_tx, rx) = mpsc::channel(OUTBOX_FRAMES);
        let connection = Arc::new(Connection {
            id,
            project: project.to_string(),
            owner,
            role,
            inbox,
            outbox: Arc::new(tokio::sync::Mutex::new(Outbox {
                held: VecDeque::new(),
                rx,
            })),
            ended: CancellationToken::new(),
            closed: Mutex::new(None),
            last_active: Mutex::new(Instant::now()),
            streams: AtomicUsize::new(0),
            session_streams: AtomicUsize::new(0),
        });
        Some((connection, inbox_rx, outbox_tx))
    }

    /// Notes activity (a request, a stream that closed).
    pub fn touch(&self) {
        if let Ok(mut at) = self.last_active.lock() {
            *at = Instant::now();
        }
    }

    /// Counts an open stream until the returned guard drops.
    pub fn stream_opened(self: &Arc<Self>) -> StreamGuard {
        self.streams.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self.clone())
    }

    /// Completes once the connection has been idle for [`IDLE_GRACE`]:
    /// no stream open and no request for that long.
    pub async fn idle(&self) {
        loop {
            let since = self
                .last_active
                .lock()
                .map_or_else(|_| Instant::now(), |at| *at);
            tokio::time::sleep_until(since + IDLE_GRACE).await;
            let since = self
                .last_active
                .lock()
                .map_or_else(|_| Instant::now(), |at| *at);
            let open = self.streams.load(Ordering::Relaxed);
            if open == 0 && since + IDLE_GRACE <= Instant::now() {
                return;
            }
            if open > 0 {
                self.touch();
            }
        }
    }

    /// Whether `owner` on `project` may use this connection.
    pub fn belongs_to(&self, project: &str, owner: &str) -> bool {
        self.project == project && self.owner == owner
    }
}

/// An open stream of a connection; closing it counts as activity.
pub struct StreamGuard(Arc<Connection>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::Relaxed);
        self.0.touch();
    }
}

/// 128 random bits, hex: unguessable, and no credential on its own (every
/// request also carries the token of the identity that opened it).
pub fn fresh_id() -> Option<String> {
    let mut bytes = [0u8; 16];
    if getrandom::getrandom(&mut bytes).is_err() {
        tracing::error!("no randomness for an ACP connection id: the connection is refused");
        return None;
    }
    Some(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The open connections, by id.
#[derive(Default)]
pub struct Connections {
    open: Mutex<HashMap<String, Arc<Connection>>>,
}

impl Connections {
    pub fn insert(&self, connection: Arc<Connection>, metrics: &Metrics) {
        if let Ok(mut open) = self.open.lock() {
            if open.insert(connection.id.clone(), connection).is_none() {
                metrics.acp_http_connections.inc();
            }
        }
    }

    /// The connection `id` if `owner` may use it on `project`; `None`
    /// alike for one that does not exist and one of someone else.
    pub fn get(&self, id: &str, project: &str, owner: &str) -> Option<Arc<Connection>> {
        let open = self.open.lock().ok()?;
        open.get(id)
            .filter(|c| c.belongs_to(project, owner))
            .cloned()
    }

    pub fn remove(&self, id: &str, metrics: &Metrics) {
        if let Ok(mut open) = self.open.lock() {
            if open.remove(id).is_some() {
                metrics.acp_http_connections.dec();
            }
        }
    }

    pub fn len(&self) -> usize {
        self.open.lock().map_or(0, |open| open.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_long_random_hex() {
        let (a, _, _) = Connection::new("p", "k".into(), Role::Client).unwrap();
        let (b, _, _) = Connection::new("p", "k".into(), Role::Client).unwrap();
        assert_eq!(a.id.len(), 32);
        assert!(a.id.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a.id, b.id);
    }

    #[test]
    fn a_connection_is_found_only_by_its_owner_on_its_project() {
        let metrics = Metrics::new().unwrap();
        let connections = Connections::default();
        let (c, _, _) = Connection::new("alpha", "token:a".into(), Role::Client).unwrap();
        connections.insert(c.clone(), &metrics);
        assert!(connections.get(&c.id, "alpha", "token:a").is_some());
        assert!(connections.get(&c.id, "beta", "token:a").is_none());
        assert!(connections.get(&c.id, "alpha", "token:b").is_none());
        assert!(connections.get("nope", "alpha", "token:a").is_none());
        assert_eq!(metrics.acp_http_connections.get(), 1);
        connections.remove(&c.id, &metrics);
        assert!(connections.is_empty());
        assert_eq!(metrics.acp_http_connections.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn idle_only_without_streams_and_requests() {
        let (c, _, _) = Connection::new("p", "k".into(), Role::Client).unwrap();
        let stream = c.stream_opened();
        // With a stream open, it never goes idle.
        let waited = tokio::time::timeout(IDLE_GRACE * 3, c.idle()).await;
        assert!(waited.is_err());
        drop(stream);
        let start = Instant::now();
        c.idle().await;
        assert!(start.elapsed() >= IDLE_GRACE);
        // A request pushes it back.
        let (c, _, _) = Connection::new("p", "k".into(), Role::Client).unwrap();
        tokio::time::sleep(IDLE_GRACE / 2).await;
        c.touch();
        let start = Instant::now();
        c.idle().await;
        assert!(start.elapsed() >= IDLE_GRACE);
    }
}
