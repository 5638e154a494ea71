//! What a hub says to its clients itself: the events it makes up (with
//! the next `seq`), frames and closes for one client (a client whose
//! outbox is full, in frames or in bytes, is let go), and what clients
//! are owed when the child cannot answer any more (failed requests, runs
//! cut short).

use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde_json::Value;

use super::actor::Hub;
use super::budget::{Outgoing, Overflow};
use super::client_id::ClientId;
use super::feed::Unicast;
use super::ring::Frame;
use super::runs::{Audience, Run};
use crate::ws::close::CloseCode;

impl Hub {
    pub(super) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Appends a gateway-made event for everyone to the feed.
    pub(super) fn emit(&self, kind: &str, fields: Value) {
        self.emit_for(None, kind, fields);
    }

    /// Appends a gateway-made event to the feed, as part of `run`.
    pub(super) fn emit_for(&self, run: Option<&Run>, kind: &str, fields: Value) {
        let seq = self.next_seq();
        let run_id = run.map(|r| r.id.as_str());
        self.feed.push(Frame {
            seq,
            bytes: self
                .settings
                .dialect
                .rules()
                .gateway_event(kind, fields, seq, run_id),
            audience: run.map_or(Audience::Everyone, Run::audience),
        });
    }

    /// Sends a frame to one client. A client whose response queue is full
    /// (it sends requests but does not read), or that would hold more
    /// bytes than it may, is disconnected.
    pub(super) fn unicast(&mut self, client: ClientId, bytes: Bytes) {
        let Some(entry) = self.clients.get(client) else {
            return;
        };
        let bytes = match entry.budget.charge(bytes.len()) {
            Ok(charge) => Outgoing::new(bytes, charge),
            Err(why) => return self.let_go(client, why),
        };
        let after_seq = self.feed.last_seq();
        self.unicast_item(client, Unicast::Frame { after_seq, bytes });
    }

    /// Whether a frame of about `len` bytes may be made for `client`: a
    /// client that could not take it is let go before it is made.
    pub(super) fn has_room(&mut self, client: ClientId, len: usize) -> bool {
        let Some(entry) = self.clients.get(client) else {
            return false;
        };
        match entry.budget.check(len) {
            Ok(()) => true,
            Err(why) => {
                self.let_go(client, why);
                false
            }
        }
    }

    /// Forgets a client that went over a byte bound; its writer, woken by
    /// its budget, closes it with the slow-client code.
    fn let_go(&mut self, client: ClientId, why: Overflow) {
        tracing::warn!(project = %self.project, client = client.get(), bound = why.as_str(), "disconnecting a client over its outbox bytes");
        self.forget(client);
    }

    /// Forgets a client that detached or that the hub lets go (its
    /// detach, later, finds nothing): its requests' answers are dropped.
    pub(super) fn forget(&mut self, client: ClientId) {
        if self.clients.remove(client).is_none() {
            return;
        }
        self.pending.forget_client(client);
        self.leaving.retain(|(c, _)| *c != client);
        self.waiting.forget_client(client);
        self.start_idle_clock();
        self.publish();
    }

    /// Queues `item` for one client, or disconnects a client whose queue
    /// is full.
    pub(super) fn unicast_item(&mut self, client: ClientId, item: Unicast) {
        let Some(entry) = self.clients.get(client) else {
            return;
        };
        let after_seq = self.feed.last_seq();
        if entry.unicast.capacity() > 1 {
            if entry.unicast.try_send(item).is_ok() {
                return;
            }
        } else {
            // The last slot carries the reason.
            let _ = entry.unicast.try_send(Unicast::Close {
                after_seq,
                code: CloseCode::Policy,
                reason: "too many unread responses; the client must read its socket".into(),
            });
        }
        tracing::warn!(project = %self.project, client = client.get(), "disconnecting a client whose outbox is full");
        self.forget(client);
    }

    /// Fails every request still waiting for the child.
    pub(super) fn fail_pending(&mut self, error: &str) {
        self.asks_dropped();
        self.loads_dropped();
        self.audit_unanswered(error);
        let dialect = self.settings.dialect.rules();
        for pending in self.pending.drain() {
            let reply = dialect.request_failed(
                pending.original.as_ref(),
                &pending.command,
                pending.acked,
                error,
            );
            self.unicast(pending.client, reply);
        }
        self.dismiss_leaving();
    }

    /// Ends the run in flight for clients: the child cannot any more.
    pub(super) fn end_runs(&mut self, error: &str) {
        if let Some(cut) = self.runs.reset() {
            for (kind, fields) in self.settings.dialect.rules().run_aborted(error) {
                self.emit_for(cut.run.as_ref(), kind, fields);
            }
        }
        self.spending_idle();
        self.dismiss_leaving();
    }

    /// Tells one client to close (after everything queued for it).
    pub(super) fn close_client(&mut self, client: ClientId, code: CloseCode, reason: &str) {
        if let Some(entry) = self.clients.get(client) {
            let _ = entry.unicast.try_send(Unicast::Close {
                after_seq: self.feed.last_seq(),
                code,
                reason: reason.to_string(),
            });
        }
    }

    /// Tells every client to close, and forgets them.
    pub(super) fn close_clients(&mut self, code: CloseCode, reason: &str) {
        let after_seq = self.feed.last_seq();
        for client in self.clients.drain() {
            let _ = client.unicast.try_send(Unicast::Close {
                after_seq,
                code,
                reason: reason.to_string(),
            });
        }
        self.publish();
    }
}
