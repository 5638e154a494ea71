//! What the proxy tells the operator: `corral_egress_requests_total` for
//! every request, and for refusals an `egress_refused` event in the
//! dashboard's tail plus an info log line, both bounded by a
//! [`RefusalGate`] so that a tool retrying in a loop cannot flush the
//! event ring (or the log) of everything else.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::events::EventLog;
use crate::metrics::{Metrics, EGRESS_UNKNOWN_PROJECT};

/// At most one event and one info line per project and target in this
/// window; the refusals in between are counted and reported as `missed`
/// with the next event for that target (the metric counts every one).
pub const EVENT_WINDOW: Duration = Duration::from_secs(1);

/// Targets the gate remembers. When full, entries older than the window
/// are dropped; if none is, all are (their pending `missed` counts are
/// then lost; the metric still has them).
const MAX_TRACKED: usize = 1024;

/// Decides which refusals are shown, per project and target.
#[derive(Debug, Default)]
pub struct RefusalGate {
    seen: HashMap<(String, String), Seen>,
}

#[derive(Debug, Clone, Copy)]
struct Seen {
    /// When the last shown refusal of this target was.
    shown: Instant,
    /// Refusals since then that were not shown.
    suppressed: u32,
}

impl RefusalGate {
    /// `Some(missed)` if a refusal of `target` for `project` at `now` is
    /// to be shown, with the count of those not shown since the last one;
    /// `None` if it falls in the window of the last one.
    pub fn admit(&mut self, project: &str, target: &str, now: Instant) -> Option<u32> {
        let key = (project.to_string(), target.to_string());
        if let Some(seen) = self.seen.get_mut(&key) {
            if now.saturating_duration_since(seen.shown) < EVENT_WINDOW {
                seen.suppressed = seen.suppressed.saturating_add(1);
                return None;
            }
            let missed = seen.suppressed;
            *seen = Seen {
                shown: now,
                suppressed: 0,
            };
            return Some(missed);
        }
        if self.seen.len() >= MAX_TRACKED {
            self.seen
                .retain(|_, seen| now.saturating_duration_since(seen.shown) < EVENT_WINDOW);
            if self.seen.len() >= MAX_TRACKED {
                self.seen.clear();
            }
        }
        self.seen.insert(
            key,
            Seen {
                shown: now,
                suppressed: 0,
            },
        );
        Some(0)
    }
}

/// The proxy's metrics, events and log lines.
#[derive(Debug)]
pub struct Report {
    metrics: Arc<Metrics>,
    events: Arc<EventLog>,
    gate: Mutex<RefusalGate>,
}

impl Report {
    pub fn new(metrics: Arc<Metrics>, events: Arc<EventLog>) -> Report {
        Report {
            metrics,
            events,
            gate: Mutex::default(),
        }
    }

    /// A request the policy allowed.
    pub fn allowed(&self, project: &str, host: &str, port: u16, rule: &str) {
        self.metrics.egress_request(project, true);
        tracing::debug!(project, host, port, rule, "egress allowed");
    }

    /// A request refused by the policy or a limit: counted, and shown in
    /// the event tail and the log unless the gate holds it back.
    pub fn refused(&self, project: &str, host: &str, port: u16, rule: &str) {
        self.metrics.egress_request(project, false);
        let target = format!("{host}:{port}");
        let shown = self
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(project, &target, Instant::now());
        match shown {
            Some(missed) => {
                tracing::info!(project, host, port, rule, missed, "egress refused");
                self.events.egress_refused(project, &target, rule, missed);
            }
            None => tracing::debug!(project, host, port, rule, "egress refused"),
        }
    }

    /// A connection over its project's limit, answered 503 before its
    /// request was read: counted as refused, shown once a second per
    /// project (the target is not known).
    pub fn over_limit(&self, project: &str, rule: &str) {
        self.metrics.egress_request(project, false);
        let shown = self
            .gate
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .admit(project, rule, Instant::now());
        match shown {
            Some(missed) => {
                tracing::info!(project, rule, missed, "egress refused");
                self.events.egress_refused(project, "-", rule, missed);
            }
            None => tracing::debug!(project, rule, "egress refused"),
        }
    }

    /// A request that is not one a proxy serves (answered 400): counted
    /// as refused, logged at debug (a tool's mistake, not a policy event).
    pub fn malformed(&self, project: &str, why: &str) {
        self.metrics.egress_request(project, false);
        tracing::debug!(project, why, "egress: malformed request");
    }

    /// A connection without a valid secret, or over the total limit
    /// before its secret was read: counted under the unknown project.
    /// The secret itself is never logged.
    pub fn unknown(&self, why: &'static str) {
        self.metrics.egress_request(EGRESS_UNKNOWN_PROJECT, false);
        tracing::debug!(why, "egress: connection refused before a project was known");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_refusal_per_target_and_window_is_shown_and_the_rest_counted() {
        let mut gate = RefusalGate::default();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert_eq!(gate.admit("p", "a.test:443", t0), Some(0));
        assert_eq!(gate.admit("p", "a.test:443", ms(10)), None);
        assert_eq!(gate.admit("p", "a.test:443", ms(900)), None);
        // Another target, another project: their own windows.
        assert_eq!(gate.admit("p", "b.test:443", ms(20)), Some(0));
        assert_eq!(gate.admit("q", "a.test:443", ms(30)), Some(0));
        assert_eq!(gate.admit("p", "a.test:443", ms(1000)), Some(2));
        assert_eq!(gate.admit("p", "a.test:443", ms(2500)), Some(0));
    }

    #[test]
    fn the_gate_remembers_a_bounded_number_of_targets() {
        let mut gate = RefusalGate::default();
        let t0 = Instant::now();
        for i in 0..(MAX_TRACKED * 3) {
            assert_eq!(gate.admit("p", &format!("h{i}:80"), t0), Some(0));
            assert!(gate.seen.len() <= MAX_TRACKED);
        }
        let later = t0 + EVENT_WINDOW;
        assert_eq!(gate.admit("p", "new:80", later), Some(0));
        assert_eq!(gate.seen.len(), 1, "stale entries dropped");
    }
}
