//! Byte bounds on what the gateway holds for its clients. A client's
//! outbox is every frame queued for it or in its writer's hands and not yet
//! handed to its socket; each is bounded by `--client-buffer-bytes`, all of
//! them together by `--total-client-buffer-bytes`. A [`Charge`] counts one
//! frame's bytes for as long as the frame lives, so the counts are exact.
//!
//! A charge that would take a client over its own bound closes that client.
//! One that would take the total over its bound closes the clients that
//! hold the most, from the largest, until the rest fits (the charging
//! client itself when nobody holds more), so a client that never reads
//! cannot get the frames of a client that reads refused. A closed client's
//! bytes are released when its writer drops them; until then they count.

use std::cmp::Reverse;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use bytes::Bytes;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// Which bound a client went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overflow {
    /// Its own outbox (`--client-buffer-bytes`).
    Client,
    /// All outboxes together (`--total-client-buffer-bytes`), and it held
    /// the most.
    Total,
}

impl Overflow {
    pub const ALL: [Overflow; 2] = [Overflow::Client, Overflow::Total];

    /// The `reason` label of `corral_client_buffer_closes_total`.
    pub fn as_str(self) -> &'static str {
        match self {
            Overflow::Client => "client_buffer",
            Overflow::Total => "total_client_buffer",
        }
    }
}

/// The gateway-wide bounds and the total of every outbox.
pub struct Budgets {
    client_cap: usize,
    total_cap: usize,
    /// Bytes of every live [`Charge`].
    total: AtomicUsize,
    /// Every client's budget, to find the largest outboxes when the total
    /// is exceeded.
    clients: Mutex<HashMap<u64, Weak<ClientBudget>>>,
    ids: AtomicU64,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budgets")
            .field("client_cap", &self.client_cap)
            .field("total_cap", &self.total_cap)
            .field("total", &self.total())
            .finish_non_exhaustive()
    }
}

impl Budgets {
    pub fn new(client_cap: usize, total_cap: usize, metrics: Arc<Metrics>) -> Arc<Budgets> {
        Arc::new(Budgets {
            client_cap,
            total_cap,
            total: AtomicUsize::new(0),
            clients: Mutex::new(HashMap::new()),
            ids: AtomicU64::new(0),
            metrics,
        })
    }

    /// A new client's budget, empty and open.
    pub fn client(self: &Arc<Self>) -> Arc<ClientBudget> {
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        let budget = Arc::new(ClientBudget {
            id,
            budgets: self.clone(),
            used: AtomicUsize::new(0),
            overflow: OnceLock::new(),
            closed: CancellationToken::new(),
        });
        self.registry().insert(id, Arc::downgrade(&budget));
        budget
    }

    /// Bytes held for all clients now.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<ClientBudget>>> {
        self.clients.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, len: usize) {
        self.total.fetch_add(len, Ordering::Relaxed);
        self.metrics.client_buffer_bytes.add(gauge(len));
    }

    fn sub(&self, len: usize) {
        self.total.fetch_sub(len, Ordering::Relaxed);
        self.metrics.client_buffer_bytes.sub(gauge(len));
    }

    /// The total is `total` after `requester`'s new charge: closes the
    /// clients holding more than `requester`, largest first, until the
    /// rest fits. Whether it fits now (counting the bytes of closed
    /// clients as gone: their writers are dropping them).
    fn make_room(&self, requester: &ClientBudget, total: usize) -> bool {
        // Collected under the lock, dropped after it (a last reference
        // dropped unregisters itself).
        let live: Vec<Arc<ClientBudget>> =
            self.registry().values().filter_map(Weak::upgrade).collect();
        let mut leaving: usize = live
            .iter()
            .filter(|c| c.overflow().is_some())
            .map(|c| c.used())
            .sum();
        let mine = requester.used();
        let mut larger: Vec<(usize, &Arc<ClientBudget>)> = live
            .iter()
            .filter(|c| c.id != requester.id && c.overflow().is_none())
            .map(|c| (c.used(), c))
            .filter(|(used, _)| *used > mine)
            .collect();
        larger.sort_by_key(|(used, _)| Reverse(*used));
        for (used, victim) in larger {
            if total.saturating_sub(leaving) <= self.total_cap {
                break;
            }
            victim.close(Overflow::Total);
            leaving += used;
        }
        total.saturating_sub(leaving) <= self.total_cap
    }
}

fn gauge(len: usize) -> i64 {
    i64::try_from(len).unwrap_or(i64::MAX)
}

/// One client's outbox bytes, and whether it was closed for them.
pub struct ClientBudget {
    id: u64,
    budgets: Arc<Budgets>,
    used: AtomicUsize,
    /// Set once, when the client went over a bound.
    overflow: OnceLock<Overflow>,
    /// Cancelled with `overflow`, so the client's writer stops at once
    /// (even in the middle of a write its socket does not take).
    closed: CancellationToken,
}

impl std::fmt::Debug for ClientBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientBudget")
            .field("used", &self.used())
            .field("overflow", &self.overflow())
            .finish_non_exhaustive()
    }
}

impl ClientBudget {
    /// Counts `len` more bytes for this client, or closes it when that
    /// takes it (or the total) over its bound.
    pub fn charge(self: &Arc<Self>, len: usize) -> Result<Charge, Overflow> {
        if let Some(why) = self.overflow() {
            return Err(why);
        }
        let charge = Charge::new(self.clone(), len);
        if self.used() > self.budgets.client_cap {
            self.close(Overflow::Client);
            return Err(Overflow::Client);
        }
        let total = self.budgets.total();
        if total > self.budgets.total_cap && !self.budgets.make_room(self, total) {
            self.close(Overflow::Total);
            return Err(Overflow::Total);
        }
        Ok(charge)
    }

    /// Checks, before a frame of about `len` bytes is made for this
    /// client, that its own bound would take it; closes it if not.
    pub fn check(&self, len: usize) -> Result<(), Overflow> {
        if let Some(why) = self.overflow() {
            return Err(why);
        }
        if self.used().saturating_add(len) > self.budgets.client_cap {
            self.close(Overflow::Client);
            return Err(Overflow::Client);
        }
        Ok(())
    }

    /// Bytes held for this client now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// The bound it went over, once it did.
    pub fn overflow(&self) -> Option<Overflow> {
        self.overflow.get().copied()
    }

    /// Completes once the client went over a bound.
    pub async fn closed(&self) {
        self.closed.cancelled().await;
    }

    /// The close reason a client gets for `why`.
    pub fn message(&self, why: Overflow) -> String {
        match why {
            Overflow::Client => format!(
                "client fell behind: more than {} bytes waited for it (--client-buffer-bytes); reconnect with resume_after",
                self.budgets.client_cap
            ),
            Overflow::Total => format!(
                "client fell behind: it held the most of the {} bytes all clients may hold (--total-client-buffer-bytes); reconnect with resume_after",
                self.budgets.total_cap
            ),
        }
    }

    fn close(&self, why: Overflow) {
        if self.overflow.set(why).is_ok() {
            let metrics = &self.budgets.metrics;
            metrics
                .client_buffer_closes
                .with_label_values(&[why.as_str()])
                .inc();
            metrics.slow_client_disconnects.inc();
            self.closed.cancel();
        }
    }

    fn add(&self, len: usize) {
        self.used.fetch_add(len, Ordering::Relaxed);
        self.budgets.add(len);
    }

    fn sub(&self, len: usize) {
        self.used.fetch_sub(len, Ordering::Relaxed);
        self.budgets.sub(len);
    }
}

impl Drop for ClientBudget {
    fn drop(&mut self) {
        self.budgets.registry().remove(&self.id);
    }
}

/// The bytes of one frame, counted against its client until dropped.
pub struct Charge {
    budget: Arc<ClientBudget>,
    len: usize,
}

impl Charge {
    fn new(budget: Arc<ClientBudget>, len: usize) -> Charge {
        budget.add(len);
        Charge { budget, len }
    }

    /// The frame was rewritten (a Zi `sequence` stamped in): count its new
    /// length. Never closes the client (a stamp adds a few bytes).
    fn resize(&mut self, len: usize) {
        if len > self.len {
            self.budget.add(len - self.len);
        } else {
            self.budget.sub(self.len - len);
        }
        self.len = len;
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.sub(self.len);
    }
}

/// A frame on its way to one client, with its charge (none for frames
/// made in tests).
pub struct Outgoing {
    bytes: Bytes,
    charge: Option<Charge>,
}

impl Outgoing {
    pub fn new(bytes: Bytes, charge: Charge) -> Outgoing {
        Outgoing {
            bytes,
            charge: Some(charge),
        }
    }

    /// The frame rewritten by `f`, still charged (for its new length).
    pub fn map(mut self, f: impl FnOnce(Bytes) -> Bytes) -> Outgoing {
        self.bytes = f(self.bytes);
        if let Some(charge) = self.charge.as_mut() {
            charge.resize(self.bytes.len());
        }
        self
    }

    /// The bytes, and the charge to drop once they are written.
    pub fn into_parts(self) -> (Bytes, Option<Charge>) {
        (self.bytes, self.charge)
    }
}

impl From<Bytes> for Outgoing {
    fn from(bytes: Bytes) -> Outgoing {
        Outgoing {
            bytes,
            charge: None,
        }
    }
}

impl std::ops::Deref for Outgoing {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.bytes
    }
}

impl PartialEq for Outgoing {
    fn eq(&self, other: &Outgoing) -> bool {
        self.bytes == other.bytes
    }
}

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.bytes.fmt(f)
    }
}

#[cfg(test)]
#[path = "budget_tests.rs"]
mod tests;
