//! Clients joining a hub: the attach (after a state snapshot when the
//! dialect's greeting needs one), the greeting and hello answer, and what
//! the gateway says of itself.

use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::actor::Hub;
use super::budget::Outgoing;
use super::child::SendError;
use super::client_id::ClientId;
use super::clients::Client;
use super::feed::{ClientFeed, Unicast};
use super::waiting::WaitingAttach;
use super::{AttachError, Attached, ChildState, Join};
use crate::auth::Role;

impl Hub {
    /// Attaches a client once the child is ready. When the dialect's
    /// greeting needs a fresh state snapshot (Zi), the attach completes
    /// when the child answers the request sent for it.
    pub(super) fn attach(&mut self, waiting: WaitingAttach) {
        // Minted before it is known to be needed: a number skipped is
        // never seen.
        let id = self.mint.state();
        let Some(line) = self.settings.dialect.rules().state_request(&id.to_string()) else {
            self.finish_attach(waiting, Value::Null);
            return;
        };
        if self.supervision.ready().is_none() {
            self.waiting.push_attach(waiting);
            return;
        }
        self.awaiting_state.insert(id, waiting);
        if let Err(refused) = self.send_line(line) {
            // Not sent: the attach waits for the next child, or fails now.
            if let Some(waiting) = self.awaiting_state.remove(&id) {
                match refused {
                    SendError::Gone => self.waiting.push_attach(waiting),
                    SendError::Full => {
                        let error =
                            AttachError::StartFailed("the agent is not reading its input".into());
                        let _ = waiting.reply.send(Err(error));
                    }
                }
            }
        }
    }

    /// Puts attaches that waited for a snapshot back in line for the next
    /// child (or refuses them when there will be none soon).
    pub(super) fn requeue_awaiting_state(&mut self) {
        for (_, waiting) in std::mem::take(&mut self.awaiting_state) {
            if self.supervision.state() == ChildState::Failed {
                let _ = waiting.reply.send(Err(AttachError::CrashLoop(
                    self.settings.restart.cooldown.as_secs(),
                )));
            } else {
                self.waiting.push_attach(waiting);
            }
        }
    }

    /// Registers the client and queues its greeting: the dialect's first
    /// frames (`state` is the snapshot, when the dialect needs one).
    pub(super) fn finish_attach(&mut self, waiting: WaitingAttach, state: Value) {
        let client = ClientId::mint();
        let own_runs = waiting.join.own_runs;
        let owner = own_runs.client_id.map_or(client, ClientId::named);
        let (unicast, rx) = mpsc::channel(self.settings.outbox_frames.max(4));
        let (cursor, gap) = self.feed.start_cursor(waiting.join.resume_after);
        let last_seq = self.feed.last_seq();
        let metrics = &self.settings.metrics;
        if waiting.join.resume_after.is_some() {
            metrics
                .replayed_events
                .inc_by(last_seq.saturating_sub(cursor));
        }
        if gap {
            metrics.replay_gaps.inc();
        }
        let budget = self.settings.budgets.client();
        let queue = |after_seq: u64, bytes: Bytes| {
            // A charge refused closes the client (its feed says so first).
            if let Ok(charge) = budget.charge(bytes.len()) {
                let bytes = Outgoing::new(bytes, charge);
                let _ = unicast.try_send(Unicast::Frame { after_seq, bytes });
            }
        };
        // Due before any event after the cursor: the first frames out.
        for bytes in self.greeting(owner, &waiting.join, gap, state) {
            queue(cursor, bytes);
        }
        // A client opens the project's session itself (ACP): until then it
        // gets no events and no requests of the child.
        let in_session = self.settings.dialect.rules().one_session().is_none();
        // Requests of the child still waiting for an answer, after what
        // the client replays.
        if in_session {
            for ask in self.asks.waiting() {
                queue(last_seq, ask.bytes.clone());
            }
        }
        let feed = ClientFeed::new(
            self.feed.clone(),
            cursor,
            rx,
            budget.clone(),
            self.settings.metrics.clone(),
            self.settings.outbox_frames,
        )
        .with_owner((own_runs.on == Some(true)).then_some(owner))
        .with_dialect(self.settings.dialect)
        .muted(!in_session);
        let attached = Attached {
            client,
            child_hello: self.hello.clone(),
            last_seq,
            gap,
            feed,
        };
        // Counted before the reply, so the registry never sees a moment
        // where the client is neither attaching nor attached.
        self.clients.insert(
            client,
            Client {
                who: waiting.join.who.clone(),
                peer: waiting.join.peer,
                role: waiting.join.role,
                owner,
                unicast,
                budget,
                cursor: attached.feed.shared_cursor(),
                in_session,
                loading: false,
                listing: Default::default(),
                resume_after: waiting.join.resume_after,
            },
        );
        self.publish();
        if waiting.reply.send(Ok(attached)).is_ok() {
            self.settings.metrics.client_connections.inc();
            self.idle_since = None;
        } else {
            self.clients.remove(client);
            self.publish();
        }
    }

    /// A new client's first frames: the dialect's greeting, then the
    /// answer to its hello (if it sent one). `owner` is the client id it is
    /// known by.
    fn greeting(&self, owner: ClientId, join: &Join, gap: bool, state: Value) -> Vec<Bytes> {
        let gateway = self.gateway_info(owner, join.role, gap);
        let mut frames = self
            .settings
            .dialect
            .rules()
            .greeting(&self.hello, gateway, state);
        if let Some(id) = &join.hello {
            frames.extend(self.hello_answer(owner, join.role, id.as_ref(), gap));
        }
        frames
    }

    /// The answer to a client's hello (`id` is its id), in its dialect.
    pub(super) fn hello_answer(
        &self,
        client: ClientId,
        role: Role,
        id: Option<&Value>,
        gap: bool,
    ) -> Vec<Bytes> {
        let gateway = self.gateway_info(client, role, gap);
        self.settings
            .dialect
            .rules()
            .hello_answer(id, &self.hello, gateway, gap)
    }

    /// What the gateway says of itself to a client.
    pub(super) fn gateway_info(&self, client: ClientId, role: Role, gap: bool) -> Value {
        json!({
            "version": env!("CARGO_PKG_VERSION"),
            "project": self.project,
            "client_id": client.to_string(),
            "role": role.as_str(),
            "last_seq": self.feed.last_seq(),
            "epoch": self.settings.epoch,
            "gap": gap,
        })
    }
}
