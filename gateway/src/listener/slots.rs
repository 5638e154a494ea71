//! A connection's place under a cap ([`ConnectionSlot`]) and the pools of
//! places ([`Pool`]): when a pool is full, a connection that is not
//! protected is closed to make room for the new one. An idle keep-alive
//! connection goes first (its peer has its answers and an HTTP client
//! reconnects on its own, as nginx also drains them first), then one that
//! sent no complete request within [`SILENT_GRACE`] of being accepted,
//! then the oldest: a newcomer that sent its request and waits for the
//! answer or is saying hello is not closed while a flood of kept-alive or
//! silent sockets is open. A newcomer still in its first round trip is
//! not silent yet: were it, a flood of sockets that each sent a request
//! (WebSocket upgrades that never say hello) would close every newcomer
//! before its request arrived, as the only silent connection.
//!
//! A connection is protected only once it has proved it holds a valid
//! credential: a WebSocket that authenticated, or a plain request the
//! admin token was accepted for. Anything else (an idle socket, a `GET
//! /healthz` kept alive, a WebSocket still waiting for its hello) stays
//! evictable for its whole life, so an unauthenticated flood can take
//! places only until someone newer needs one.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How long after its accept a connection without a complete request head
/// counts as silent (evicted before older ones that sent theirs). Far more
/// than a client needs to send its request once connected.
pub const SILENT_GRACE: Duration = Duration::from_secs(1);

/// One open connection's place in a `Pool`; freed when the last clone
/// drops (the HTTP connection, its requests, its WebSocket).
#[derive(Debug)]
pub struct ConnectionSlot {
    /// The open count of the pool the place belongs to.
    open: Arc<AtomicUsize>,
    /// The pool's cap.
    cap: usize,
    metrics: Arc<Metrics>,
    /// Whether a request head arrived (a header timeout after one is an
    /// idle keep-alive connection ending, not a refusal).
    served: AtomicBool,
    /// Set once the connection proved a valid credential. Unprotected
    /// connections are closed when the pool is full.
    protected: AtomicBool,
    /// An answer went out and no request is in progress (never for an
    /// upgraded connection): closed first to make room.
    idle: AtomicBool,
    /// Cancelled to close this connection to make room.
    evict: CancellationToken,
    /// When it was accepted.
    accepted: Instant,
}

impl ConnectionSlot {
    /// Keeps this connection from being closed to make room. Call only
    /// once the connection presented a valid credential.
    pub fn protect(&self) {
        self.protected.store(true, Ordering::SeqCst);
    }

    /// Whether [`ConnectionSlot::protect`] was called.
    pub fn is_protected(&self) -> bool {
        self.protected.load(Ordering::SeqCst)
    }

    /// Another place in this connection's pool, for something that outlives
    /// its request and counts as a connection of its own (a Streamable
    /// HTTP connection of the ACP endpoint); `None` at the pool's cap.
    /// The place is protected, never closed to make room, and freed when
    /// the last clone drops.
    pub fn another(&self) -> Option<Arc<ConnectionSlot>> {
        self.open
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |open| {
                (open < self.cap).then_some(open + 1)
            })
            .ok()?;
        self.metrics.connections.inc();
        Some(Arc::new(ConnectionSlot {
            open: self.open.clone(),
            cap: self.cap,
            metrics: self.metrics.clone(),
            served: AtomicBool::new(true),
            protected: AtomicBool::new(true),
            idle: AtomicBool::new(false),
            evict: CancellationToken::new(),
            accepted: Instant::now(),
        }))
    }

    /// Completes when the connection is to be closed to make room.
    pub async fn evicted(&self) {
        self.evict.cancelled().await;
    }

    /// Notes that a request head arrived: the connection is busy.
    pub(super) fn request_started(&self) {
        self.served.store(true, Ordering::SeqCst);
        self.idle.store(false, Ordering::SeqCst);
    }

    /// Notes that the request was answered; `upgraded` when the answer
    /// handed the connection over (a WebSocket), which is never idle.
    pub(super) fn request_answered(&self, upgraded: bool) {
        self.idle.store(!upgraded, Ordering::SeqCst);
    }

    /// Whether a request head ever arrived.
    pub(super) fn was_served(&self) -> bool {
        self.served.load(Ordering::SeqCst)
    }

    /// No request head within [`SILENT_GRACE`] of the accept, as of `now`.
    fn is_silent(&self, now: Instant) -> bool {
        !self.was_served() && now.saturating_duration_since(self.accepted) >= SILENT_GRACE
    }

    pub(super) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// A place in a pool of its own, for tests of what protects it.
    #[cfg(test)]
    pub(crate) fn unpooled(metrics: &Arc<Metrics>) -> Arc<ConnectionSlot> {
        Pool::new(1, 0).take(metrics)
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::SeqCst);
        self.metrics.connections.dec();
    }
}

/// How many of the oldest evictable connections are searched for an idle
/// one before the oldest is taken instead (bounds the work per accept).
const IDLE_SEARCH: usize = 256;

/// Connections in accept order, for finding the one to close.
/// Holds weak references: a closed connection simply drops out.
#[derive(Default)]
struct EvictionQueue {
    order: VecDeque<Weak<ConnectionSlot>>,
}

impl EvictionQueue {
    fn push(&mut self, slot: &Arc<ConnectionSlot>) {
        self.order.push_back(Arc::downgrade(slot));
    }

    /// Signals a live, unprotected connection to close, the first of:
    /// the oldest idle keep-alive one, the oldest silent one (no complete
    /// request head within [`SILENT_GRACE`]; both among the first
    /// [`IDLE_SEARCH`] evictable ones), the oldest. Returns whether there was one.
    /// Entries of closed, protected or already evicted connections met
    /// on the way are dropped (protection never ends).
    fn evict(&mut self) -> bool {
        let now = Instant::now();
        let mut index = 0;
        let mut searched = 0;
        let mut silent = None;
        while index < self.order.len() && searched < IDLE_SEARCH {
            let Some(slot) = self.order[index].upgrade() else {
                self.order.remove(index);
                continue;
            };
            if slot.is_protected() || slot.evict.is_cancelled() {
                self.order.remove(index);
                continue;
            }
            if slot.idle.load(Ordering::SeqCst) {
                self.order.remove(index);
                slot.evict.cancel();
                return true;
            }
            if silent.is_none() && slot.is_silent(now) {
                silent = Some(index);
            }
            index += 1;
            searched += 1;
        }
        // Every entry before `index` is live and evictable now.
        let chosen = silent.unwrap_or(0);
        if chosen < index {
            if let Some(slot) = self.order.remove(chosen).and_then(|weak| weak.upgrade()) {
                slot.evict.cancel();
                return true;
            }
        }
        // Nothing was searched (an empty queue): nothing to evict.
        false
    }

    /// Forgets closed connections once the queue has grown past `bound`.
    fn prune(&mut self, bound: usize) {
        if self.order.len() > bound {
            self.order.retain(|weak| weak.strong_count() > 0);
        }
    }
}

/// Whether a pool has a place for one more connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Room {
    /// Under the cap.
    Free,
    /// The oldest unprotected connection was told to close.
    MadeByEviction,
    /// Every connection is protected (or too many are still closing).
    Full,
}

/// A capped set of connections and its eviction order.
pub(super) struct Pool {
    cap: usize,
    /// How many evicted connections may still be closing (their
    /// descriptors not yet freed) while new ones take their places.
    in_flight: usize,
    open: Arc<AtomicUsize>,
    queue: EvictionQueue,
}

impl Pool {
    pub(super) fn new(cap: usize, in_flight: usize) -> Pool {
        Pool {
            cap,
            in_flight,
            open: Arc::new(AtomicUsize::new(0)),
            queue: EvictionQueue::default(),
        }
    }

    /// Finds a place for a new connection, evicting if it must.
    pub(super) fn room(&mut self) -> Room {
        let open = self.open.load(Ordering::SeqCst);
        if open < self.cap {
            Room::Free
        } else if open < self.cap.saturating_add(self.in_flight) && self.queue.evict() {
            Room::MadeByEviction
        } else {
            Room::Full
        }
    }

    /// Takes a place (after [`Pool::room`] said there is one).
    pub(super) fn take(&mut self, metrics: &Arc<Metrics>) -> Arc<ConnectionSlot> {
        self.open.fetch_add(1, Ordering::SeqCst);
        metrics.connections.inc();
        let slot = Arc::new(ConnectionSlot {
            open: self.open.clone(),
            cap: self.cap,
            metrics: metrics.clone(),
            served: AtomicBool::new(false),
            protected: AtomicBool::new(false),
            idle: AtomicBool::new(false),
            evict: CancellationToken::new(),
            accepted: Instant::now(),
        });
        self.queue.push(&slot);
        self.queue
            .prune(self.cap.saturating_mul(2).saturating_add(self.in_flight));
        slot
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics() -> Arc<Metrics> {
        Arc::new(Metrics::new().unwrap())
    }

    #[test]
    fn the_oldest_unprotected_live_connection_is_evicted_first() {
        let metrics = metrics();
        let mut pool = Pool::new(4, 1);
        let closed = pool.take(&metrics);
        let authenticated = pool.take(&metrics);
        let idle = pool.take(&metrics);
        let newer = pool.take(&metrics);
        drop(closed);
        authenticated.protect();
        assert!(pool.queue.evict());
        assert!(idle.evict.is_cancelled());
        assert!(!authenticated.evict.is_cancelled() && !newer.evict.is_cancelled());
        assert!(pool.queue.evict());
        assert!(newer.evict.is_cancelled());
        assert!(!pool.queue.evict(), "only protected connections are left");
        assert_eq!(pool.open.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn a_served_request_alone_does_not_protect_a_connection() {
        let metrics = metrics();
        let mut pool = Pool::new(2, 4);
        let healthz = pool.take(&metrics);
        healthz.request_started();
        healthz.request_answered(false);
        let admin = pool.take(&metrics);
        admin.request_started();
        admin.protect();
        admin.request_answered(false);
        assert_eq!(pool.room(), Room::MadeByEviction);
        assert!(healthz.evict.is_cancelled(), "served but unprotected");
        assert!(!admin.evict.is_cancelled());
    }

    #[test]
    fn idle_keep_alive_connections_go_before_older_newcomers() {
        let metrics = metrics();
        let mut pool = Pool::new(8, 8);
        let fresh = pool.take(&metrics);
        let awaiting_hello = pool.take(&metrics);
        awaiting_hello.request_started();
        awaiting_hello.request_answered(true);
        let mid_request = pool.take(&metrics);
        mid_request.request_started();
        let (idle_old, idle_new) = (pool.take(&metrics), pool.take(&metrics));
        for idle in [&idle_old, &idle_new] {
            idle.request_started();
            idle.request_answered(false);
        }
        assert!(pool.queue.evict());
        assert!(idle_old.evict.is_cancelled());
        assert!(pool.queue.evict());
        assert!(idle_new.evict.is_cancelled());
        // Then the oldest, whatever it is doing.
        for expected in [&fresh, &awaiting_hello, &mid_request] {
            assert!(pool.queue.evict());
            assert!(expected.evict.is_cancelled());
        }
        assert!(!pool.queue.evict());
    }

    #[test]
    fn another_place_counts_under_the_cap_until_dropped() {
        let metrics = metrics();
        let mut pool = Pool::new(3, 0);
        let request = pool.take(&metrics);
        let first = request.another().unwrap();
        assert!(first.is_protected());
        assert_eq!(pool.open.load(Ordering::SeqCst), 2);
        let second = first.another().unwrap();
        assert!(request.another().is_none(), "at the cap");
        assert_eq!(pool.room(), Room::Full, "never closed to make room");
        // The request's connection closing leaves the others counted.
        drop(request);
        assert_eq!(pool.open.load(Ordering::SeqCst), 2);
        assert_eq!(metrics.connections.get(), 2);
        drop((first, second));
        assert_eq!(pool.open.load(Ordering::SeqCst), 0);
        assert_eq!(metrics.connections.get(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn silent_connections_go_before_older_ones_that_sent_a_request() {
        let metrics = metrics();
        let mut pool = Pool::new(8, 8);
        let awaiting_hello = pool.take(&metrics);
        awaiting_hello.request_started();
        awaiting_hello.request_answered(true);
        let silent = pool.take(&metrics);
        tokio::time::advance(SILENT_GRACE).await;
        assert!(pool.queue.evict());
        assert!(silent.evict.is_cancelled());
        assert!(!awaiting_hello.evict.is_cancelled());
        assert!(pool.queue.evict());
        assert!(awaiting_hello.evict.is_cancelled());
    }

    /// A flood of upgraded sockets that never say hello: the newcomer,
    /// its request not read yet, is not taken for a silent one (it would
    /// be the only one, and closed for every flood connection).
    #[tokio::test(start_paused = true)]
    async fn a_newcomer_is_not_silent_during_its_first_round_trip() {
        let metrics = metrics();
        let mut pool = Pool::new(8, 8);
        let flood: Vec<_> = (0..3)
            .map(|_| {
                let slot = pool.take(&metrics);
                slot.request_started();
                slot.request_answered(true);
                slot
            })
            .collect();
        tokio::time::advance(Duration::from_secs(5)).await;
        let newcomer = pool.take(&metrics);
        tokio::time::advance(SILENT_GRACE / 2).await;
        for slot in &flood {
            assert!(pool.queue.evict());
            assert!(slot.evict.is_cancelled());
            assert!(!newcomer.evict.is_cancelled());
        }
        assert!(pool.queue.evict());
        assert!(newcomer.evict.is_cancelled());
    }

    #[test]
    fn a_connection_busy_again_is_not_idle() {
        let metrics = metrics();
        let mut pool = Pool::new(8, 8);
        let older = pool.take(&metrics);
        let again = pool.take(&metrics);
        again.request_started();
        again.request_answered(false);
        again.request_started();
        older.request_started();
        assert!(pool.queue.evict());
        assert!(older.evict.is_cancelled(), "nothing idle: the oldest");
        assert!(!again.evict.is_cancelled());
    }

    #[test]
    fn a_pool_of_protected_connections_is_full() {
        let metrics = metrics();
        let mut pool = Pool::new(2, 4);
        assert_eq!(pool.room(), Room::Free);
        let slots: Vec<_> = (0..2).map(|_| pool.take(&metrics)).collect();
        for slot in &slots {
            slot.protect();
        }
        assert_eq!(pool.room(), Room::Full);
        drop(slots);
        assert_eq!(pool.room(), Room::Free, "closing frees places");
    }

    #[test]
    fn evictions_still_closing_are_bounded() {
        let metrics = metrics();
        let mut pool = Pool::new(1, 2);
        // Evicted connections whose tasks have not closed them yet keep
        // their places; only `in_flight` of them may pile up.
        let mut held = vec![pool.take(&metrics)];
        for _ in 0..2 {
            assert_eq!(pool.room(), Room::MadeByEviction);
            held.push(pool.take(&metrics));
        }
        assert_eq!(pool.room(), Room::Full);
        held.remove(0);
        assert_eq!(pool.room(), Room::MadeByEviction);
        assert_eq!(metrics.connections.get(), 2);
    }
}
