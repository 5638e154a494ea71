//! Requests of the child for its clients (the dialect's
//! [`ChildAsks`](crate::dialect::rules::ChildAsks) capability; ACP
//! `session/request_permission`):
//! each goes to every client under a gateway id, and again to a client
//! that attaches while it waits; the first answer goes to the child and
//! the other clients hear the outcome; one nobody answers within
//! `--permission-timeout` is answered for them.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::actor::Hub;
use crate::dialect::rules::ChildAsks;

/// Requests of one child that may wait for an answer at once; more are
/// answered for the clients at once (a runaway agent cannot fill the
/// gateway's memory with them).
pub(super) const MAX_WAITING: usize = 64;

/// A child request waiting for a client's answer.
#[derive(Debug, Clone)]
pub(super) struct Ask {
    pub gid: String,
    /// The id the child gave it.
    pub child_id: Value,
    pub method: String,
    /// The request as clients get it (under `gid`).
    pub bytes: Bytes,
    pub since: Instant,
}

/// The child's requests waiting for an answer, oldest first.
#[derive(Debug, Default)]
pub(super) struct Asks {
    next: u64,
    waiting: Vec<Ask>,
}

impl Asks {
    /// A fresh gateway id.
    pub fn next_gid(&mut self) -> String {
        self.next += 1;
        format!("corral-ask-{}", self.next)
    }

    pub fn push(&mut self, ask: Ask) {
        self.waiting.push(ask);
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn take(&mut self, gid: &str) -> Option<Ask> {
        let at = self.waiting.iter().position(|a| a.gid == gid)?;
        Some(self.waiting.remove(at))
    }

    pub fn waiting(&self) -> impl Iterator<Item = &Ask> {
        self.waiting.iter()
    }

    /// When the oldest request times out.
    pub fn deadline(&self, timeout: Duration) -> Option<Instant> {
        self.waiting.first().map(|a| a.since + timeout)
    }

    /// Removes and returns the requests older than `timeout` at `now`.
    pub fn expired(&mut self, now: Instant, timeout: Duration) -> Vec<Ask> {
        let (old, young) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|a| a.since + timeout <= now);
        self.waiting = young;
        old
    }

    pub fn drain(&mut self) -> Vec<Ask> {
        std::mem::take(&mut self.waiting)
    }
}

impl Hub {
    /// A request of the child (id `child_id`) for the clients.
    pub(super) fn child_ask(&mut self, line: &[u8], child_id: Value) {
        // Only a dialect whose child asks sends `Outbound::Ask`.
        let Some(rules) = self.settings.dialect.rules().child_asks() else {
            return;
        };
        let method = serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|f| f.get("method").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default();
        if self.asks.len() >= MAX_WAITING {
            tracing::warn!(project = %self.project, %method, "the agent has {MAX_WAITING} requests waiting for its clients; answering this one for them");
            let _ = self.send_line(rules.unanswered(&child_id, &method));
            return;
        }
        let gid = self.asks.next_gid();
        let Some(bytes) = rules.for_clients(line, &gid) else {
            return;
        };
        tracing::debug!(project = %self.project, %gid, %method, "the agent asks its clients");
        let clients: Vec<u64> = self.clients.keys().copied().collect();
        for client in clients {
            self.unicast(client, bytes.clone());
        }
        self.asks.push(Ask {
            gid,
            child_id,
            method,
            bytes,
            since: Instant::now(),
        });
    }

    /// A client's answer to the request it got as `id`: the first goes to
    /// the child; later ones (or answers to nothing) are dropped.
    pub(super) fn client_answer(&mut self, client: u64, frame: &Map<String, Value>, id: &Value) {
        let Some(ask) = id.as_str().and_then(|gid| self.asks.take(gid)) else {
            tracing::debug!(project = %self.project, client, %id, "dropped an answer to no waiting request");
            return;
        };
        let Some(rules) = self.settings.dialect.rules().child_asks() else {
            return;
        };
        let line = rules.answer_for_child(frame, &ask.child_id);
        if let Err(refused) = self.send_line(line) {
            tracing::warn!(project = %self.project, ?refused, "could not pass an answer to the agent");
        }
        let outcome = rules.outcome(frame);
        self.ask_settled(rules, &ask, &outcome, Some(client));
    }

    /// Answers, for the clients, the requests nobody answered in time.
    pub(super) fn asks_expired(&mut self) {
        let Some(rules) = self.settings.dialect.rules().child_asks() else {
            return;
        };
        let timeout = self.settings.permission_timeout;
        for ask in self.asks.expired(Instant::now(), timeout) {
            tracing::info!(project = %self.project, gid = %ask.gid, "no client answered the agent's request in time");
            let _ = self.send_line(rules.unanswered(&ask.child_id, &ask.method));
            self.ask_settled(rules, &ask, &rules.no_outcome(), None);
        }
    }

    /// The child is gone: its requests will never be answered.
    pub(super) fn asks_dropped(&mut self) {
        let Some(rules) = self.settings.dialect.rules().child_asks() else {
            return;
        };
        for ask in self.asks.drain() {
            self.ask_settled(rules, &ask, &rules.no_outcome(), None);
        }
    }

    /// Tells every client but `answered_by` how request `ask` ended.
    fn ask_settled(
        &mut self,
        rules: &dyn ChildAsks,
        ask: &Ask,
        outcome: &Value,
        answered_by: Option<u64>,
    ) {
        let frames = rules.resolved(&ask.gid, outcome);
        let clients: Vec<u64> = self
            .clients
            .keys()
            .copied()
            .filter(|c| Some(*c) != answered_by)
            .collect();
        for client in clients {
            for frame in &frames {
                self.unicast(client, frame.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ask(asks: &mut Asks, since: Instant) -> String {
        let gid = asks.next_gid();
        asks.push(Ask {
            gid: gid.clone(),
            child_id: json!(1),
            method: "session/request_permission".into(),
            bytes: Bytes::new(),
            since,
        });
        gid
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_request_times_out_first_and_each_is_taken_once() {
        let mut asks = Asks::default();
        let start = Instant::now();
        let first = ask(&mut asks, start);
        let second = ask(&mut asks, start + Duration::from_secs(5));
        let timeout = Duration::from_secs(10);
        assert_eq!(asks.deadline(timeout), Some(start + timeout));
        let expired = asks.expired(start + timeout, timeout);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].gid, first);
        assert!(asks.take(&first).is_none());
        assert!(asks.take(&second).is_some());
        assert!(asks.take(&second).is_none());
        assert_eq!(asks.deadline(timeout), None);
    }
}
