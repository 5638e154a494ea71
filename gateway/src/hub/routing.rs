//! How frames move through a hub: client requests to the child (with id
//! rewriting and role checks), child lines back out (answers to their
//! one client, events with a `seq` to everyone), and the frames the hub
//! makes up itself. What a frame means is the project's [`Dialect`]'s
//! business; the routing is the same for every dialect.

use std::time::{Instant as StdInstant, SystemTime};

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::actor::Hub;
use super::child::SendError;
use super::feed::Unicast;
use super::ids::Pending;
use super::ring::Frame;
use super::runs::{Audience, Run};
use super::trace::RequestSpan;
use super::ChildState;
use crate::auth::Role;
use crate::dialect::hub::ClientRequests;
use crate::dialect::{to_bytes, Claim, EventKind, Inbound, Outbound, OwnRuns};
use crate::metrics::Direction;
use crate::ws::close::CloseCode;

impl Hub {
    pub(super) fn request(&mut self, client: u64, frame: Map<String, Value>) {
        let Some(role) = self.clients.get(&client).map(|c| c.role) else {
            return;
        };
        let dialect = self.settings.dialect;
        if self.leaving.iter().any(|(c, _)| *c == client) {
            let reply = dialect.after_bye(frame.get("id"));
            self.unicast(client, reply);
            return;
        }
        match dialect.inbound(&frame, role == Role::Observer) {
            Inbound::Reject(reply) => self.unicast(client, reply),
            Inbound::Hello {
                id,
                refusal,
                own_runs,
            } => self.hello(client, role, id, refusal, own_runs),
            Inbound::Bye { id } => {
                self.unicast(client, dialect.bye_ack(id.as_ref()));
                self.leaving.push((client, id));
                self.dismiss_leaving();
            }
            Inbound::Session { id, load, session } => {
                let answer = dialect.session_answer(&id, &self.hello, load, session.as_deref());
                let known = dialect.kept_session(&self.hello);
                // Once per connection (a load cannot be repeated to make the
                // gateway send its ring over and over).
                let replay = load
                    && session.is_some()
                    && session == known
                    && self
                        .clients
                        .get_mut(&client)
                        .is_some_and(|c| !std::mem::replace(&mut c.replayed, true));
                if replay {
                    // The history the gateway holds, before the answer.
                    let after_seq = self.feed.last_seq();
                    self.unicast_item(client, Unicast::Rewind { after_seq });
                }
                self.unicast(client, answer);
            }
            Inbound::Notify { command } => self.notify(client, frame, &command),
            Inbound::Answer { id } => self.client_answer(client, &frame, &id),
            Inbound::Ignore => {}
            Inbound::SetEvents { id, all } => {
                let after_seq = self.feed.last_seq();
                self.unicast_item(client, Unicast::Events { after_seq, all });
                self.unicast(client, dialect.events_set(&id, all));
            }
            Inbound::Forward { id, command } => {
                let requests = ClientIds {
                    ids: &self.ids,
                    client,
                };
                if let Err(refusal) = dialect.admit(id.as_ref(), &command, &requests) {
                    self.unicast(client, refusal);
                    return;
                }
                self.forward(client, frame, id, command);
            }
        }
    }

    /// A hello after attach, answered by the gateway; it may switch
    /// own runs on or off and name the client id runs count for.
    fn hello(
        &mut self,
        client: u64,
        role: Role,
        id: Option<Value>,
        refusal: Option<Bytes>,
        own_runs: OwnRuns,
    ) {
        if let Some(refusal) = refusal {
            self.unicast(client, refusal);
            self.close_client(client, CloseCode::Protocol, "protocol version mismatch");
            return;
        }
        let Some(entry) = self.clients.get_mut(&client) else {
            return;
        };
        if let Some(owner) = own_runs.client_id {
            entry.owner = owner;
        }
        let owner = entry.owner;
        if let Some(on) = own_runs.on {
            let after_seq = self.feed.last_seq();
            let owner = on.then_some(owner);
            self.unicast_item(client, Unicast::OwnRuns { after_seq, owner });
        }
        for reply in self.hello_answer(owner, role, id.as_ref(), false) {
            self.unicast(client, reply);
        }
    }

    /// Sends a request to the child under a gateway id (or holds it until
    /// the child is ready).
    fn forward(
        &mut self,
        client: u64,
        mut frame: Map<String, Value>,
        id: Option<Value>,
        command: String,
    ) {
        let dialect = self.settings.dialect;
        if self.supervision.ready().is_none() {
            if self.supervision.state() == ChildState::Failed {
                let error = "the agent is in a crash loop and was not restarted";
                let reply = dialect.request_failed(id.as_ref(), &command, false, error);
                self.unicast(client, reply);
            } else {
                self.waiting_requests.push_back((client, frame));
            }
            return;
        }
        let limit = self.settings.max_client_requests;
        if self.ids.count_client(client, "") >= limit {
            self.settings.metrics.requests_refused("in_flight");
            let error = format!(
                "too many requests in flight for this client (at most {limit}); wait for answers before sending more"
            );
            let reply = dialect.request_failed(id.as_ref(), &command, false, &error);
            self.unicast(client, reply);
            return;
        }
        let claim = dialect.run_claim(&command, &frame);
        let span = if claim != Claim::None || dialect.request_is_run(&command) {
            RequestSpan::forward(&self.project, dialect, &command, &mut frame)
        } else {
            RequestSpan::default()
        };
        let owner = self.clients.get(&client).map_or(client, |c| c.owner);
        let gateway_id = self.ids.insert(Pending {
            client,
            original: id,
            command: command.clone(),
            sent: StdInstant::now(),
            acked: false,
            span,
        });
        frame.insert("id".into(), Value::String(gateway_id.clone()));
        let mut line = to_bytes(&Value::Object(frame)).to_vec();
        line.push(b'\n');
        match self.send_bytes(Bytes::from(line)) {
            Ok(()) => {
                self.runbook.forwarded(&gateway_id, &command, owner, claim);
                if dialect.request_is_run(&command) {
                    self.run_started(RequestSpan::default());
                }
                self.touch();
            }
            // A child that exited fails the request when its exit is seen.
            Err(SendError::Gone) => self.runbook.forwarded(&gateway_id, &command, owner, claim),
            Err(SendError::Full) => {
                let pending = self.ids.take(&gateway_id);
                self.settings.metrics.requests_refused("child_busy");
                let error = "the agent is not reading its input; try again later";
                let original = pending.and_then(|p| p.original);
                let reply = dialect.request_failed(original.as_ref(), &command, false, error);
                self.unicast(client, reply);
            }
        }
    }

    /// Passes a client's notification (no id, no answer) to the child, if
    /// it is ready.
    fn notify(&mut self, client: u64, frame: Map<String, Value>, command: &str) {
        let mut line = to_bytes(&Value::Object(frame)).to_vec();
        line.push(b'\n');
        if let Err(refused) = self.send_bytes(Bytes::from(line)) {
            tracing::debug!(project = %self.project, client, command, ?refused, "dropped a notification for the agent");
        }
    }

    /// Queues a line the gateway made (ending in LF) for the child,
    /// without waiting.
    pub(super) fn send_line(&self, line: String) -> Result<(), SendError> {
        self.send_bytes(Bytes::from(line))
    }

    fn send_bytes(&self, line: Bytes) -> Result<(), SendError> {
        let Some(child) = self.supervision.ready() else {
            return Err(SendError::Gone);
        };
        self.settings
            .metrics
            .frame(Direction::GatewayToChild, line.len());
        child.control.try_send(line)
    }

    /// Forwards requests that waited for the child.
    pub(super) fn flush_waiting(&mut self) {
        for waiting in std::mem::take(&mut self.waiting_attach) {
            self.attach(waiting);
        }
        for (client, frame) in std::mem::take(&mut self.waiting_requests) {
            self.request(client, frame);
        }
    }

    /// A line of the child that could not be read.
    pub(super) fn invalid_line(&mut self, what: &str) {
        self.settings.metrics.invalid_frame("child", "malformed");
        tracing::warn!(project = %self.project, "dropped a line from the agent: {what}");
        // Clients learn that something is missing: most likely a line of
        // the run in progress, so part of it.
        let message = format!("a line from the agent was not delivered: {what}");
        let run = self.runbook.active().cloned();
        self.emit_for(run.as_ref(), "error", json!({ "message": message }));
    }

    /// Routes one line of the child: an answer to its client, an event to
    /// everyone.
    pub(super) fn child_line(&mut self, line: &[u8]) {
        let metrics = self.settings.metrics.clone();
        metrics.frame(Direction::ChildToGateway, line.len());
        self.heard_from_child();
        let dialect = self.settings.dialect;
        match dialect.outbound(line) {
            None => {
                metrics.invalid_frame("child", "malformed");
                tracing::warn!(project = %self.project, "dropped an agent line that is not an object with a `type`");
            }
            Some(Outbound::Drop(why)) => {
                tracing::debug!(project = %self.project, "dropped an agent line: {why}");
            }
            Some(Outbound::Reply { id, last }) => self.child_reply(line, id, last),
            Some(Outbound::Ask { id }) => self.child_ask(line, id),
            Some(Outbound::Event(kind)) => {
                let seq = self.next_seq();
                let run = match kind {
                    EventKind::RunStart => Some(self.runbook.start().clone()),
                    EventKind::RunTail => self.runbook.last().cloned(),
                    _ => self.runbook.active().cloned(),
                };
                let run_id = run.as_ref().map(|r| &*r.id);
                if let Some(bytes) = dialect.event_bytes(line, seq, run_id) {
                    let audience = run.as_ref().map_or(Audience::Everyone, Run::audience);
                    self.feed.push(Frame {
                        seq,
                        bytes,
                        audience,
                    });
                }
                // After the push: what a run's end releases (a leaving
                // letscode client's `done`) comes after its last event.
                match kind {
                    EventKind::RunStart => self.run_started(RequestSpan::default()),
                    EventKind::RunEnd => {
                        self.runbook.end();
                        self.run_done();
                    }
                    EventKind::Usage => {
                        if let Ok(usage) = serde_json::from_slice::<Value>(line) {
                            metrics.usage(&usage);
                            self.usage = usage.get("cumulative").cloned();
                            self.publish();
                        }
                    }
                    EventKind::RunTail | EventKind::Other => {
                        dialect.hello_after(&mut self.hello, line)
                    }
                }
            }
        }
    }

    /// A run began; `span` (of the request that started it) ends with it.
    fn run_started(&mut self, span: RequestSpan) {
        if self.busy == 0 {
            self.busy_since = Some(SystemTime::now());
        }
        self.busy += 1;
        self.runs.push_back((StdInstant::now(), span));
        self.idle_since = None;
        self.publish();
    }

    /// A run ended.
    pub(super) fn run_done(&mut self) {
        self.busy = self.busy.saturating_sub(1);
        if let Some((started, _span)) = self.runs.pop_front() {
            self.settings
                .metrics
                .prompt_duration
                .observe(started.elapsed().as_secs_f64());
        }
        if self.busy == 0 {
            self.busy_since = None;
            if self.clients.is_empty() {
                self.idle_since = Some(Instant::now());
            }
            self.dismiss_leaving();
        }
        self.publish();
    }

    /// Clients that said they leave (letscode `bye`) get the dialect's
    /// farewell and a close once no run is active and their own commands
    /// are answered (a prompt's `done` comes just after its run's
    /// `agent_end`).
    pub(super) fn dismiss_leaving(&mut self) {
        if self.leaving.is_empty() || self.busy > 0 {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.leaving)
            .into_iter()
            .partition(|(client, _)| !self.ids.has_client(*client));
        self.leaving = waiting;
        for (client, id) in ready {
            for frame in self.settings.dialect.farewell(id.as_ref()) {
                self.unicast(client, frame);
            }
            self.close_client(client, CloseCode::Normal, "bye");
        }
    }

    /// An answer of the child to the request with gateway id `id`.
    fn child_reply(&mut self, line: &[u8], id: String, last: bool) {
        if let Some(child) = self.supervision.ready_mut() {
            if child.ping_id.as_deref() == Some(id.as_str()) {
                child.ping_id = None;
                child.ping_deadline = None;
                return;
            }
        }
        if let Some(waiting) = self.snapshots.remove(&id) {
            let state = serde_json::from_slice::<Value>(line)
                .ok()
                .and_then(|mut frame| frame.get_mut("result").map(Value::take))
                .unwrap_or(Value::Null);
            self.finish_attach(waiting, state);
            return;
        }
        let dialect = self.settings.dialect;
        let pending = if last {
            self.ids.take(&id)
        } else {
            self.ids.ack(&id).cloned()
        };
        let Some(mut pending) = pending else {
            // What it says of runs still counts (an admin abort, a prompt
            // of a client that left).
            if let Some(command) = self.runbook.command(&id).map(str::to_string) {
                let answer = dialect.run_answer(&command, line);
                self.runbook.answered(&id, answer, last);
            }
            tracing::debug!(project = %self.project, %id, "dropped an answer nobody waits for");
            return;
        };
        let answer = dialect.run_answer(&pending.command, line);
        let run = self.runbook.answered(&id, answer, last);
        if last {
            let label = dialect.command_label(&pending.command);
            self.settings
                .metrics
                .request_done(label, pending.sent.elapsed().as_secs_f64());
        }
        let news = dialect.response_news(&pending.command, line);
        if news.run_started {
            self.run_started(std::mem::take(&mut pending.span));
        }
        if let Some(model) = news.model {
            self.model = Some(model);
            self.publish();
        }
        // A client that could not take the answer is let go before the
        // answer is made (parsed and written again) for it.
        if self.has_room(pending.client, line.len()) {
            if let Some(bytes) = dialect.restore_id(line, pending.original, run.as_deref()) {
                self.unicast(pending.client, bytes);
            }
        }
        if last && dialect.request_is_run(&pending.command) {
            self.run_done();
        }
        if last {
            self.dismiss_leaving();
        }
    }
}

/// One client's requests in flight, as a dialect's admission rules see
/// them.
struct ClientIds<'a> {
    ids: &'a super::ids::IdMap,
    client: u64,
}

impl ClientRequests for ClientIds<'_> {
    fn has_id(&self, id: &Value) -> bool {
        self.ids.in_flight(self.client, id)
    }

    fn count_except(&self, command: &str) -> usize {
        self.ids.count_client(self.client, command)
    }
}
