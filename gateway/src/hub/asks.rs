//! Requests of the child for its clients (the dialect's
//! [`ChildAsks`](crate::dialect::rules::ChildAsks) capability; ACP
//! `session/request_permission`):
//! each goes to every client under a gateway id, and again to a client
//! that attaches while it waits; the first answer goes to the child and
//! the other clients hear the outcome; one nobody answers within
//! `--permission-timeout` is answered for them.

use serde_json::{Map, Value};
use tokio::time::Instant;

use super::actor::Hub;
use super::ask_queue::Ask;
use super::client_id::ClientId;
use super::gateway_id::GatewayId;
use crate::dialect::rules::ChildAsks;

/// Requests of one child that may wait for an answer at once; more are
/// answered for the clients at once (a runaway agent cannot fill the
/// gateway's memory with them).
pub(super) const MAX_WAITING: usize = 64;

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
        let gid = self.mint.ask();
        let Some(bytes) = rules.for_clients(line, &gid.to_string()) else {
            return;
        };
        tracing::debug!(project = %self.project, %gid, %method, "the agent asks its clients");
        for client in self.clients.in_session() {
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
    pub(super) fn client_answer(
        &mut self,
        client: ClientId,
        frame: &Map<String, Value>,
        id: &Value,
    ) {
        let asked = id.as_str().and_then(GatewayId::parse);
        let Some(ask) = asked.and_then(|gid| self.asks.take(gid)) else {
            tracing::debug!(project = %self.project, client = client.get(), %id, "dropped an answer to no waiting request");
            return;
        };
        let Some(rules) = self.settings.dialect.rules().child_asks() else {
            return;
        };
        let line = rules.answer_for_child(frame, &ask.child_id);
        if let Err(refused) = self.send_line(line) {
            tracing::warn!(project = %self.project, ?refused, "could not pass an answer to the agent");
        }
        self.audit_now(client, &ask.method, frame);
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
        answered_by: Option<ClientId>,
    ) {
        let frames = rules.resolved(&ask.gid.to_string(), outcome);
        let clients = self.clients.in_session().into_iter();
        for client in clients.filter(|c| Some(*c) != answered_by) {
            for frame in &frames {
                self.unicast(client, frame.clone());
            }
        }
    }
}
