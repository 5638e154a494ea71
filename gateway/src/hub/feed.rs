//! Delivery of one project's frames to one client, in the child's order.
//!
//! Events are shared: the hub appends them to the [`Feed`] (the replay ring
//! plus a change signal) and each client reads after its own cursor, so a
//! slow client only lags; it never holds anyone up. Responses and
//! gateway-made frames for one client go through its bounded unicast queue,
//! each tagged with the last event `seq` that preceded it, which is how the
//! two sources merge back into the exact order the child produced.
//!
//! For a Zi client the feed also numbers every frame it sends (`sequence`,
//! per connection, gap-free) and drops `session_event`s while the client's
//! event mode is `none` (set in order through [`Unicast::Events`]).
//!
//! A client that asked for its own runs only skips run events whose
//! [`Audience`] does not include it (set in order through
//! [`Unicast::OwnRuns`]); live delivery and replay filter alike.
//!
//! Every frame queued for a client or handed to its writer is charged to
//! its [`ClientBudget`] until written (events when they are taken from the
//! ring, at most [`BATCH_BYTES`] or one frame at a time); a client over
//! its byte bound is closed with [`CloseCode::Lagged`] at once.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use bytes::Bytes;
use tokio::sync::{mpsc, watch};

use super::budget::{ClientBudget, Outgoing, Overflow};
use super::client_id::ClientId;
use super::ring::{Evicted, Frame, ReplayRing};
use super::runs::Audience;
use crate::dialect::Dialect;
use crate::metrics::Metrics;
use crate::ws::close::CloseCode;

/// Events handed to a client writer per wake-up, at most.
const BATCH: usize = 256;
/// Bytes of events handed to a client writer per wake-up: no more once
/// reached (but always one event, however big).
pub const BATCH_BYTES: usize = 1 << 20;

/// The shared event stream of a project.
#[derive(Debug)]
pub struct Feed {
    ring: Mutex<ReplayRing>,
    /// The newest `seq`, so waiting writers wake on a push.
    last: watch::Sender<u64>,
}

impl Feed {
    pub fn new(ring: ReplayRing) -> Feed {
        let (last, _) = watch::channel(ring.last_seq());
        Feed {
            ring: Mutex::new(ring),
            last,
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, ReplayRing> {
        self.ring.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn push(&self, frame: Frame) {
        let seq = frame.seq;
        self.ring().push(frame);
        self.last.send_replace(seq);
    }

    pub fn last_seq(&self) -> u64 {
        self.ring().last_seq()
    }

    /// Where a client that asked to resume after `resume_after` starts, and
    /// whether events it wanted are gone.
    pub fn start_cursor(&self, resume_after: Option<u64>) -> (u64, bool) {
        let ring = self.ring();
        match resume_after {
            None => (ring.last_seq(), false),
            Some(after) if after >= ring.last_seq() => (ring.last_seq(), false),
            Some(after) => match ring.after(after, 0) {
                Ok(_) => (after, false),
                Err(Evicted { first_retained }) => (first_retained - 1, true),
            },
        }
    }

    /// `(frames retained, bytes retained, frames evicted)`.
    pub fn stats(&self) -> (usize, usize, u64) {
        let ring = self.ring();
        (ring.len(), ring.bytes(), ring.evicted())
    }

    fn after(&self, cursor: u64) -> Result<Vec<Frame>, Evicted> {
        self.ring().after(cursor, BATCH)
    }

    fn subscribe(&self) -> watch::Receiver<u64> {
        self.last.subscribe()
    }
}

/// Something for one client only.
#[derive(Debug, PartialEq)]
pub enum Unicast {
    /// A frame to send once every event up to `after_seq` has been sent
    /// (charged to the client's budget).
    Frame { after_seq: u64, bytes: Outgoing },
    /// Close the connection (after everything before it).
    Close {
        after_seq: u64,
        code: CloseCode,
        reason: String,
    },
    /// Zi `connection.set_events`: from here on, send `session_event`s
    /// (`all`) or not.
    Events { after_seq: u64, all: bool },
    /// From here on, send only the run events of client id `owner`
    /// (`Some`) or every event (`None`).
    OwnRuns {
        after_seq: u64,
        owner: Option<ClientId>,
    },
    /// Go back to the events after `to` (or the oldest the ring still
    /// holds), then go on: what is queued after this comes after them
    /// (ACP `session/resume` after a `seq`, and `session/load` from the
    /// ring). Events already sent are never sent again.
    Rewind { after_seq: u64, to: u64 },
    /// From here on, take events without sending them (`true`: the client
    /// does not follow the session) or send them again (`false`).
    Mute { after_seq: u64, on: bool },
}

impl Unicast {
    fn after_seq(&self) -> u64 {
        match self {
            Unicast::Frame { after_seq, .. }
            | Unicast::Close { after_seq, .. }
            | Unicast::Events { after_seq, .. }
            | Unicast::OwnRuns { after_seq, .. }
            | Unicast::Rewind { after_seq, .. }
            | Unicast::Mute { after_seq, .. } => *after_seq,
        }
    }
}

/// What a client writer sends next.
#[derive(Debug, PartialEq)]
pub enum Delivery {
    /// Frames to write, each charged until it is.
    Frames(Vec<Outgoing>),
    /// Stop: close the socket with this code and reason.
    Close { code: CloseCode, reason: String },
}

/// One client's view of the feed.
pub struct ClientFeed {
    feed: Arc<Feed>,
    cursor: u64,
    /// `cursor`, readable by the hub for the admin API's lag figure.
    shared_cursor: Arc<AtomicU64>,
    changed: watch::Receiver<u64>,
    unicast: mpsc::Receiver<Unicast>,
    held: VecDeque<Unicast>,
    /// What is queued for this client, in bytes, and whether it was
    /// closed for too many.
    budget: Arc<ClientBudget>,
    metrics: Arc<Metrics>,
    /// Events a client may lag before it counts as catching up from the
    /// ring (its outbox size).
    lag_limit: u64,
    catching_up: bool,
    /// The project's dialect: how frames are numbered and which events a
    /// client may turn off.
    dialect: Dialect,
    /// The last `sequence` sent (Zi); `None` for dialects without one.
    sequence: Option<u64>,
    /// A [`Unicast::Rewind`] came due: move the cursor back to this
    /// before going on.
    rewind: Option<u64>,
    /// The highest `seq` sent: an event is never sent twice, whatever
    /// rewinds (a connection sees each `seq` once, in order).
    sent: u64,
    /// Events are taken without being sent ([`Unicast::Mute`]).
    muted: bool,
    /// Event mode (Zi `connection.set_events`): `false` drops the events
    /// a client may turn off.
    events: bool,
    /// Own runs: the client id whose run events this client gets; `None`
    /// for all events.
    owner: Option<ClientId>,
}

impl std::fmt::Debug for ClientFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientFeed")
            .field("cursor", &self.cursor)
            .finish_non_exhaustive()
    }
}

impl ClientFeed {
    pub fn new(
        feed: Arc<Feed>,
        cursor: u64,
        unicast: mpsc::Receiver<Unicast>,
        budget: Arc<ClientBudget>,
        metrics: Arc<Metrics>,
        lag_limit: usize,
    ) -> ClientFeed {
        let changed = feed.subscribe();
        ClientFeed {
            feed,
            cursor,
            shared_cursor: Arc::new(AtomicU64::new(cursor)),
            changed,
            unicast,
            held: VecDeque::new(),
            budget,
            metrics,
            lag_limit: u64::try_from(lag_limit).unwrap_or(u64::MAX),
            catching_up: false,
            dialect: Dialect::default(),
            sequence: None,
            rewind: None,
            sent: 0,
            muted: false,
            events: true,
            owner: None,
        }
    }

    /// Sends only the run events of client id `owner` (and events outside
    /// runs).
    pub fn with_owner(mut self, owner: Option<ClientId>) -> ClientFeed {
        self.owner = owner;
        self
    }

    /// Starts taking events without sending them, until a
    /// [`Unicast::Mute`] says otherwise (a client that has not opened its
    /// session yet).
    pub fn muted(mut self, muted: bool) -> ClientFeed {
        self.muted = muted;
        self
    }

    /// Whether this client is sent `event` (numbered `seq`).
    fn wants(&self, seq: u64, bytes: &Bytes, audience: &Audience) -> bool {
        !self.muted
            && seq > self.sent
            && (self.events || !self.is_optional_event(bytes))
            && self.owner.is_none_or(|owner| audience.includes(owner))
    }

    /// Whether a stored frame is an event this client may have turned off
    /// (the dialect's event filter).
    fn is_optional_event(&self, bytes: &[u8]) -> bool {
        let filter = self.dialect.rules().event_filter();
        filter.is_some_and(|filter| filter.is_optional_event(bytes))
    }

    /// Speaks `dialect`: when it numbers frames per connection (Zi
    /// `sequence`), every frame sent is numbered from 1.
    pub fn with_dialect(mut self, dialect: Dialect) -> ClientFeed {
        self.dialect = dialect;
        self.sequence = dialect.rules().sequenced().then_some(0);
        self
    }

    /// A frame stamped with the next `sequence`, if the dialect numbers
    /// frames.
    fn stamp(&mut self, bytes: Bytes) -> Bytes {
        match self.sequence.as_mut() {
            Some(sequence) => {
                *sequence += 1;
                self.dialect.rules().stamp(&bytes, *sequence)
            }
            None => bytes,
        }
    }

    /// An event out: stamped and charged.
    fn out_event(&mut self, bytes: Bytes, out: &mut Vec<Outgoing>) -> Result<(), Overflow> {
        let bytes = self.stamp(bytes);
        let charge = self.budget.charge(bytes.len())?;
        out.push(Outgoing::new(bytes, charge));
        Ok(())
    }

    /// The client's budget, which says when it must stop at once.
    pub fn budget(&self) -> Arc<ClientBudget> {
        self.budget.clone()
    }

    /// The close of a client over its byte bound; what was queued for it
    /// is dropped.
    fn overflowed(&mut self, why: Overflow) -> Delivery {
        self.held.clear();
        self.unicast.close();
        while self.unicast.try_recv().is_ok() {}
        Delivery::Close {
            code: CloseCode::Lagged,
            reason: self.budget.message(why),
        }
    }

    /// The `seq` of the last event delivered.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// A live view of the cursor.
    pub fn shared_cursor(&self) -> Arc<AtomicU64> {
        self.shared_cursor.clone()
    }

    /// Publishes the cursor and counts the start of each catch-up episode
    /// (the client lagging more than its outbox).
    fn track_lag(&mut self) {
        self.shared_cursor.store(self.cursor, Ordering::Relaxed);
        let lag = self.feed.last_seq().saturating_sub(self.cursor);
        if lag > self.lag_limit && !self.catching_up {
            self.catching_up = true;
            self.metrics.slow_client_catchups.inc();
        } else if lag == 0 {
            self.catching_up = false;
        }
    }

    /// Waits for the next frames, in order. Ends with `Close` when the hub
    /// says so, when the hub is gone, or when the client fell so far behind
    /// that events it has not seen were evicted.
    pub async fn next(&mut self) -> Delivery {
        loop {
            if let Some(why) = self.budget.overflow() {
                return self.overflowed(why);
            }
            while let Ok(item) = self.unicast.try_recv() {
                self.held.push_back(item);
            }
            let events = match self.feed.after(self.cursor) {
                Ok(events) => events,
                Err(Evicted { first_retained }) => {
                    self.metrics.slow_client_disconnects.inc();
                    return Delivery::Close {
                        code: CloseCode::Lagged,
                        reason: format!(
                            "client fell behind: events {}..{} were dropped from the replay buffer; reconnect with resume_after and refetch get_messages",
                            self.cursor + 1,
                            first_retained
                        ),
                    };
                }
            };
            let mut out = Vec::new();
            let before = self.cursor;
            let mut taken = 0;
            for event in events {
                if let Some(close) = self.release(event.seq - 1, &mut out) {
                    return close_after(&mut self.held, out, close);
                }
                if self.rewind.is_some() || (taken > 0 && taken + event.bytes.len() > BATCH_BYTES) {
                    break;
                }
                self.cursor = event.seq;
                if self.wants(event.seq, &event.bytes, &event.audience) {
                    self.sent = event.seq;
                    taken += event.bytes.len();
                    if let Err(why) = self.out_event(event.bytes, &mut out) {
                        return self.overflowed(why);
                    }
                }
            }
            if self.rewind.is_none() {
                if let Some(close) = self.release(self.cursor, &mut out) {
                    return close_after(&mut self.held, out, close);
                }
            }
            if let Some(to) = self.rewind.take() {
                let (oldest, _) = self.feed.start_cursor(Some(to));
                self.cursor = self.cursor.min(oldest);
                if !out.is_empty() {
                    return Delivery::Frames(out);
                }
                continue;
            }
            if self.cursor != before || !out.is_empty() {
                self.track_lag();
            }
            if !out.is_empty() {
                return Delivery::Frames(out);
            }
            tokio::select! {
                changed = self.changed.changed() => {
                    if changed.is_err() {
                        return self.gone();
                    }
                }
                item = self.unicast.recv() => match item {
                    Some(item) => self.held.push_back(item),
                    None => return self.gone(),
                },
                () = self.budget.closed() => {}
            }
        }
    }

    /// The hub let this client go: for its bytes (it went over a bound and
    /// the hub dropped it) or because the hub ended.
    fn gone(&mut self) -> Delivery {
        match self.budget.overflow() {
            Some(why) => self.overflowed(why),
            None => hub_gone(),
        }
    }

    /// Moves held unicast items due at or before `upto` into `out`;
    /// returns a close that came due.
    fn release(&mut self, upto: u64, out: &mut Vec<Outgoing>) -> Option<(CloseCode, String)> {
        while self
            .held
            .front()
            .is_some_and(|item| item.after_seq() <= upto)
        {
            match self.held.pop_front() {
                Some(Unicast::Frame { bytes, .. }) => {
                    let frame = bytes.map(|bytes| self.stamp(bytes));
                    out.push(frame);
                }
                Some(Unicast::Close { code, reason, .. }) => return Some((code, reason)),
                Some(Unicast::Events { all, .. }) => self.events = all,
                Some(Unicast::OwnRuns { owner, .. }) => self.owner = owner,
                Some(Unicast::Mute { on, .. }) => self.muted = on,
                Some(Unicast::Rewind { to, .. }) => {
                    self.rewind = Some(to);
                    break;
                }
                None => break,
            }
        }
        None
    }
}

/// Frames released before a due close go out first; the close is held
/// back for the next call.
fn close_after(
    held: &mut VecDeque<Unicast>,
    out: Vec<Outgoing>,
    (code, reason): (CloseCode, String),
) -> Delivery {
    if out.is_empty() {
        Delivery::Close { code, reason }
    } else {
        held.push_front(Unicast::Close {
            after_seq: 0,
            code,
            reason,
        });
        Delivery::Frames(out)
    }
}

fn hub_gone() -> Delivery {
    Delivery::Close {
        code: CloseCode::GoingAway,
        reason: "the project's agent was stopped".into(),
    }
}

#[cfg(test)]
#[path = "feed_tests.rs"]
mod tests;
