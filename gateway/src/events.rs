//! Recent gateway events for the dashboard's tail: a bounded in-memory
//! ring ([`EventLog`]) of what happened to children and clients — a child
//! started, a child exited and why, a project's restarts paused after a
//! crash loop, a slow client closed, a tool's outbound request refused by
//! the egress proxy — each with a gateway-wide `seq`.
//!
//! Fed by one watcher per hub ([`watch_hub`], started with the hub), which
//! follows the hub's published status, by the WebSocket layer when it
//! closes a client that fell behind, and by the egress proxy (at most one
//! refusal per project and target per second; the proxy counts the rest
//! in `missed`). Served by `GET /v1/events`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::hub::{ChildState, HubHandle, HubStatus, LastExit};

/// Events kept; older ones are dropped.
pub const CAPACITY: usize = 256;

/// One thing that happened, as `/v1/events` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GatewayEvent {
    /// Gateway-wide, from 1, increasing.
    pub seq: u64,
    /// Milliseconds since the Unix epoch.
    pub time_ms: u64,
    pub project: String,
    /// `child_started`, `child_exited`, `crash_loop`, `slow_client_closed`
    /// or `egress_refused`.
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// Why a child exited (`crashed`, `hung`, `idle`, `admin`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// `child_exited`: children that started and exited between two looks
    /// of the watcher. `egress_refused`: refusals of the same target not
    /// shown since the previous event for it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub missed: Option<u32>,
    /// `egress_refused`: the `host:port` a tool asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// `egress_refused`: the rule that refused it (`blocked-range:loopback`,
    /// `deny:*.example.com`, `not-allowed`, `over-limit:per-project`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
}

/// What to record; [`EventLog::record`] adds `seq` and the time.
#[derive(Debug, Clone)]
pub struct Change {
    pub kind: &'static str,
    pub pid: Option<u32>,
    pub exit: Option<LastExit>,
    pub missed: Option<u32>,
    pub target: Option<String>,
    pub rule: Option<String>,
}

impl Change {
    fn new(kind: &'static str, pid: Option<u32>) -> Change {
        Change {
            kind,
            pid,
            exit: None,
            missed: None,
            target: None,
            rule: None,
        }
    }
}

/// The ring of recent events.
#[derive(Debug, Default)]
pub struct EventLog {
    inner: Mutex<Ring>,
}

#[derive(Debug, Default)]
struct Ring {
    last_seq: u64,
    events: VecDeque<GatewayEvent>,
}

impl EventLog {
    pub fn new() -> EventLog {
        EventLog::default()
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn record(&self, project: &str, change: Change) {
        let time_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut ring = self.ring();
        ring.last_seq += 1;
        let exit = change.exit.as_ref();
        let event = GatewayEvent {
            seq: ring.last_seq,
            time_ms,
            project: project.to_string(),
            kind: change.kind,
            pid: change.pid,
            reason: exit.map(|e| e.reason.clone()),
            code: exit.and_then(|e| e.code),
            signal: exit.and_then(|e| e.signal),
            missed: change.missed,
            target: change.target,
            rule: change.rule,
        };
        if ring.events.len() == CAPACITY {
            ring.events.pop_front();
        }
        ring.events.push_back(event);
    }

    /// A client that fell behind was closed.
    pub fn slow_client_closed(&self, project: &str) {
        self.record(project, Change::new("slow_client_closed", None));
    }

    /// The egress proxy refused a tool's request to `target` (`host:port`)
    /// under `rule`; `missed` refusals of the same target were not
    /// recorded since the previous one.
    pub fn egress_refused(&self, project: &str, target: &str, rule: &str, missed: u32) {
        self.record(
            project,
            Change {
                target: Some(target.to_string()),
                rule: Some(rule.to_string()),
                missed: Some(missed).filter(|m| *m > 0),
                ..Change::new("egress_refused", None)
            },
        );
    }

    /// The kept events with a `seq` above `after`, oldest first, and the
    /// newest `seq` recorded so far.
    pub fn after(&self, after: u64) -> (Vec<GatewayEvent>, u64) {
        let ring = self.ring();
        let events = ring
            .events
            .iter()
            .filter(|e| e.seq > after)
            .cloned()
            .collect();
        (events, ring.last_seq)
    }
}

/// What a watcher saw at its last look.
#[derive(Debug, Clone, Default, PartialEq)]
struct Seen {
    pid: Option<u32>,
    restarts: u32,
    failed: bool,
}

impl Seen {
    fn of(status: &HubStatus) -> Seen {
        Seen {
            pid: status.pid,
            restarts: status.restarts,
            failed: status.state == ChildState::Failed,
        }
    }
}

/// The events between two looks at a hub: the child seen last time is
/// gone (exited, with the hub's latest exit), a new one runs, restarts
/// were paused, and restarts that happened unseen in between.
fn changes(before: &Seen, now: &HubStatus) -> Vec<Change> {
    let mut out = Vec::new();
    let started = now.pid.is_some() && now.pid != before.pid;
    let exited = before.pid.is_some() && now.pid != before.pid;
    // Every restart follows an exit (the hub counts it when it decides to
    // restart); exits beyond the one seen here were of children that
    // started and exited between two looks.
    let restarts = now.restarts.saturating_sub(before.restarts);
    let missed = restarts.saturating_sub(u32::from(exited));
    if exited || missed > 0 {
        out.push(Change {
            exit: now.last_exit.clone(),
            missed: Some(missed).filter(|m| *m > 0),
            ..Change::new("child_exited", before.pid.filter(|_| exited))
        });
    }
    if started {
        out.push(Change::new("child_started", now.pid));
    }
    if now.state == ChildState::Failed && !before.failed {
        out.push(Change {
            exit: now.last_exit.clone(),
            ..Change::new("crash_loop", None)
        });
    }
    out
}

/// Follows one hub's status until the hub ends, recording what changed.
/// It wakes when the hub publishes a new status (the hub's `watch` channel
/// keeps only the latest): a child that starts and exits between two looks
/// is counted (`missed` on the next exit event), not reported one by one;
/// the hub's last status says how its last child ended. The handle it
/// holds does not keep the hub alive past a stop: hubs end when stopped
/// (idle, admin, eviction, shutdown), not when their handles are dropped.
pub async fn watch_hub(hub: HubHandle, log: Arc<EventLog>) {
    let mut seen = Seen::default();
    let mut changes_of_hub = hub.status_changes();
    loop {
        let closed = tokio::select! {
            () = hub.closed() => true,
            changed = changes_of_hub.changed() => changed.is_err(),
        };
        let mut status = hub.status();
        if closed {
            // The child is gone with its hub, whatever the status says.
            status.pid = None;
        }
        for change in changes(&seen, &status) {
            log.record(&hub.project, change);
        }
        if closed {
            return;
        }
        seen = Seen::of(&status);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(pid: Option<u32>, restarts: u32, exit: Option<&str>) -> HubStatus {
        HubStatus {
            project: "p".into(),
            pid,
            state: if pid.is_some() {
                ChildState::Ready
            } else {
                ChildState::Backoff
            },
            busy: false,
            busy_since: None,
            clients: 0,
            client_list: Vec::new(),
            restarts,
            ready_since: None,
            last_activity: SystemTime::UNIX_EPOCH,
            last_seq: 0,
            last_exit: exit.map(|reason| LastExit {
                code: Some(1),
                signal: None,
                reason: reason.into(),
            }),
            model: None,
            usage: None,
            stderr_tail: None,
            mcp: Vec::new(),
        }
    }

    fn kinds(changes: &[Change]) -> Vec<&'static str> {
        changes.iter().map(|c| c.kind).collect()
    }

    #[test]
    fn a_new_child_is_a_start() {
        let got = changes(&Seen::default(), &status(Some(7), 0, None));
        assert_eq!(kinds(&got), ["child_started"]);
        assert_eq!(got[0].pid, Some(7));
        let seen = Seen::of(&status(Some(7), 0, None));
        assert!(changes(&seen, &status(Some(7), 0, None)).is_empty());
    }

    #[test]
    fn a_crash_then_a_restart_is_an_exit_with_its_reason_then_a_start() {
        let seen = Seen::of(&status(Some(7), 0, None));
        // The hub counts the restart when it decides on it.
        let backoff = status(None, 1, Some("crashed"));
        let got = changes(&seen, &backoff);
        assert_eq!(kinds(&got), ["child_exited"]);
        assert_eq!(got[0].pid, Some(7));
        assert_eq!(got[0].exit.as_ref().unwrap().reason, "crashed");
        assert_eq!(got[0].missed, None);
        let got = changes(&Seen::of(&backoff), &status(Some(8), 1, Some("crashed")));
        assert_eq!(kinds(&got), ["child_started"]);
        assert_eq!(got[0].pid, Some(8));
    }

    #[test]
    fn a_restart_between_two_looks_is_an_exit_and_a_start() {
        let seen = Seen::of(&status(Some(7), 0, None));
        let got = changes(&seen, &status(Some(8), 1, Some("restart")));
        assert_eq!(kinds(&got), ["child_exited", "child_started"]);
        assert_eq!((got[0].pid, got[0].missed), (Some(7), None));
        assert_eq!(got[1].pid, Some(8));
    }

    #[test]
    fn children_never_seen_are_counted_as_missed() {
        let seen = Seen::of(&status(Some(7), 0, None));
        let got = changes(&seen, &status(Some(10), 3, Some("crashed")));
        assert_eq!(kinds(&got), ["child_exited", "child_started"]);
        assert_eq!(got[0].missed, Some(2));
        let quiet = Seen::of(&status(None, 1, Some("crashed")));
        let got = changes(&quiet, &status(None, 2, Some("crashed")));
        assert_eq!(kinds(&got), ["child_exited"]);
        assert_eq!((got[0].pid, got[0].missed), (None, Some(1)));
    }

    #[test]
    fn a_crash_loop_is_reported_once() {
        let seen = Seen::of(&status(None, 4, Some("crashed")));
        let mut failed = status(None, 4, Some("crashed"));
        failed.state = ChildState::Failed;
        assert_eq!(kinds(&changes(&seen, &failed)), ["crash_loop"]);
        assert!(changes(&Seen::of(&failed), &failed).is_empty());
    }

    #[test]
    fn an_egress_refusal_names_its_target_and_rule() {
        let log = EventLog::new();
        log.egress_refused("p", "169.254.169.254:80", "blocked-range:link-local", 0);
        log.egress_refused("p", "a.test:443", "not-allowed", 3);
        let (events, _) = log.after(0);
        let json = serde_json::to_value(&events).unwrap();
        assert_eq!(json[0]["kind"], "egress_refused");
        assert_eq!(json[0]["target"], "169.254.169.254:80");
        assert_eq!(json[0]["rule"], "blocked-range:link-local");
        assert!(json[0].get("missed").is_none());
        assert_eq!(json[1]["missed"], 3);
        // Other kinds carry neither field.
        log.slow_client_closed("p");
        let (events, _) = log.after(2);
        let json = serde_json::to_value(&events[0]).unwrap();
        assert!(json.get("target").is_none() && json.get("rule").is_none());
    }

    #[test]
    fn the_ring_keeps_the_newest_events_in_order() {
        let log = EventLog::new();
        for pid in 0..(CAPACITY as u32 + 10) {
            log.record("p", Change::new("child_started", Some(pid)));
        }
        log.slow_client_closed("q");
        let (all, last) = log.after(0);
        assert_eq!(all.len(), CAPACITY);
        assert_eq!(last, CAPACITY as u64 + 11);
        assert_eq!(all.last().unwrap().kind, "slow_client_closed");
        assert!(all.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
        let (tail, _) = log.after(last - 2);
        assert_eq!(tail.len(), 2);
        assert!(log.after(last).0.is_empty());
    }
}
