//! How frames move through a hub: client requests to the child (with id
//! rewriting and role checks), child lines back out (answers to their
//! one client, events with a `seq` to everyone), and the frames the hub
//! makes up itself. What a frame means is the project's [`Dialect`]'s
//! business; the routing is the same for every dialect.

use std::time::Instant as StdInstant;

use bytes::Bytes;
use serde_json::{json, Map, Value};

use super::actor::Hub;
use super::child::SendError;
use super::client_id::ClientId;
use super::feed::Unicast;
use super::gateway_id::GatewayId;
use super::ids::{Forwarded, IdMap};
use super::ring::Frame;
use super::runs::{Answer, Audience, Run, RunId};
use super::trace::RequestSpan;
use super::ChildState;
use crate::auth::Role;
use crate::dialect::hub::ClientRequests;
use crate::dialect::{to_bytes, Claim, EventKind, Inbound, Outbound, OwnRuns};
use crate::metrics::Direction;
use crate::ws::close::CloseCode;

impl Hub {
    pub(super) fn request(&mut self, client: ClientId, frame: Map<String, Value>) {
        let Some(role) = self.clients.get(client).map(|c| c.role) else {
            return;
        };
        let dialect = self.settings.dialect.rules();
        if let Some(leave) = dialect.leave() {
            if self.leaving.iter().any(|(c, _)| *c == client) {
                self.unicast(client, leave.after_leave(frame.get("id")));
                return;
            }
        }
        match dialect.inbound(&frame, role == Role::Observer) {
            Inbound::Reject(reply) => self.unicast(client, reply),
            Inbound::Hello {
                id,
                refusal,
                own_runs,
            } => self.hello(client, role, id, refusal, own_runs),
            Inbound::Leave { id } => {
                // Only a dialect that can leave asks to.
                let Some(leave) = dialect.leave() else { return };
                self.unicast(client, leave.ack(id.as_ref()));
                self.leaving.push((client, id));
                self.dismiss_leaving();
            }
            Inbound::OpenSession {
                id,
                open,
                session,
                resume_after,
                epoch,
                mcp_servers,
            } => {
                let seen = (resume_after, epoch);
                self.open_session(client, id, open, session, seen, mcp_servers)
            }
            Inbound::CloseSession { id } => self.close_session(client, id),
            Inbound::ListSessions { id, cursor } => self.list_sessions(client, id, cursor),
            Inbound::ResetSession { id } => self.reset_session(client, id),
            Inbound::Notify { command } => self.notify(client, frame, &command),
            Inbound::AnswerAsk { id } => self.client_answer(client, &frame, &id),
            Inbound::Ignore => {}
            Inbound::SetFilter { id, all } => {
                // Only a dialect with optional events filters them.
                let Some(filter) = dialect.event_filter() else {
                    return;
                };
                let after_seq = self.feed.last_seq();
                self.unicast_item(client, Unicast::Events { after_seq, all });
                self.unicast(client, filter.filter_set(&id, all));
            }
            Inbound::Forward { id, command } => {
                let requests = ClientIds {
                    ids: &self.pending,
                    client,
                };
                if let Err(refusal) = dialect.admit(id.as_ref(), &command, &requests) {
                    self.unicast(client, refusal);
                    return;
                }
                // Anything that makes the agent call its model: a new run,
                // or input for one.
                let prompt = matches!(
                    dialect.run_claim(&command, &frame),
                    Claim::May | Claim::Join | Claim::Input
                ) || dialect.request_is_run(&command);
                if prompt {
                    if let Err(refused) = self.gate_prompt(client) {
                        self.settings.metrics.requests_refused(refused.reason);
                        self.audit_refused(client, &command, &frame, refused.reason);
                        let reply =
                            dialect.request_failed(id.as_ref(), &command, false, &refused.message);
                        self.unicast(client, reply);
                        return;
                    }
                    self.prompt_admitted(client);
                }
                self.forward(client, frame, id, command);
            }
        }
    }

    /// Whether `client`'s identity may start a run now.
    fn gate_prompt(&self, client: ClientId) -> Result<(), super::gate::Refusal> {
        let Some(entry) = self.clients.get(client) else {
            return Ok(());
        };
        let decided = self.settings.gate.prompt(&self.project, &entry.who);
        if let Err(refused) = &decided {
            tracing::info!(
                project = %self.project,
                actor = %entry.who.name,
                peer = ?entry.peer,
                reason = refused.reason,
                "prompt refused: {}",
                refused.message
            );
        }
        decided
    }

    /// A hello after attach, answered by the gateway; it may switch
    /// own runs on or off and name the client id runs count for.
    fn hello(
        &mut self,
        client: ClientId,
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
        let Some(entry) = self.clients.get_mut(client) else {
            return;
        };
        if let Some(owner) = own_runs.client_id {
            entry.owner = ClientId::named(owner);
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
    pub(super) fn forward(
        &mut self,
        client: ClientId,
        mut frame: Map<String, Value>,
        id: Option<Value>,
        command: String,
    ) {
        let dialect = self.settings.dialect.rules();
        let ready = self.supervision.ready().is_some();
        if !ready && self.supervision.state() == ChildState::Failed {
            let error = "the agent is in a crash loop and was not restarted";
            let reply = dialect.request_failed(id.as_ref(), &command, false, error);
            self.unicast(client, reply);
            return;
        }
        // Requests waiting for a starting child count against the same
        // bound as those the child has (a client cannot pile them up
        // while it starts).
        let limit = self.settings.max_client_requests;
        let held = match ready {
            true => self.pending.count_client(client, ""),
            false => self.waiting.count_client(client),
        };
        if held >= limit {
            self.settings.metrics.requests_refused("in_flight");
            let error = format!(
                "too many requests in flight for this client (at most {limit}); wait for answers before sending more"
            );
            let reply = dialect.request_failed(id.as_ref(), &command, false, &error);
            self.unicast(client, reply);
            return;
        }
        if !ready {
            self.waiting.push_request(client, frame);
            return;
        }
        let claim = dialect.run_claim(&command, &frame);
        let span = if claim != Claim::None || dialect.request_is_run(&command) {
            RequestSpan::forward(&self.project, dialect, &command, &mut frame)
        } else {
            RequestSpan::default()
        };
        let owner = self.clients.get(client).map_or(client, |c| c.owner);
        let audit = self.audit_request(client, &command, &frame, claim);
        let gateway_id = self.mint.request();
        self.pending.insert(
            gateway_id,
            Forwarded {
                client,
                original: id,
                command: command.clone(),
                sent: StdInstant::now(),
                acked: false,
                span,
            },
        );
        frame.insert("id".into(), Value::String(gateway_id.to_string()));
        let mut line = to_bytes(&Value::Object(frame)).to_vec();
        line.push(b'\n');
        match self.send_bytes(Bytes::from(line)) {
            Ok(()) => {
                self.runs.forwarded(gateway_id, &command, owner, claim);
                if dialect.request_is_run(&command) {
                    self.run_started(RequestSpan::default());
                }
                self.touch();
                self.audit_sent(gateway_id, audit);
            }
            // A child that exited fails the request when its exit is seen.
            Err(SendError::Gone) => {
                self.runs.forwarded(gateway_id, &command, owner, claim);
                self.audit_sent(gateway_id, audit);
            }
            Err(SendError::Full) => {
                let pending = self.pending.take(gateway_id);
                self.settings.metrics.requests_refused("child_busy");
                let error = "the agent is not reading its input; try again later";
                self.audit_not_sent(audit, error);
                let original = pending.and_then(|p| p.original);
                let reply = dialect.request_failed(original.as_ref(), &command, false, error);
                self.unicast(client, reply);
            }
        }
    }

    /// Passes a client's notification (no id, no answer) to the child, if
    /// it is ready.
    fn notify(&mut self, client: ClientId, frame: Map<String, Value>, command: &str) {
        let audit = self.audit_request(client, command, &frame, Claim::None);
        let mut line = to_bytes(&Value::Object(frame)).to_vec();
        line.push(b'\n');
        match self.send_bytes(Bytes::from(line)) {
            Ok(()) => self.audit_passed(audit),
            Err(refused) => {
                tracing::debug!(project = %self.project, client = client.get(), command, ?refused, "dropped a notification for the agent");
                self.audit_not_sent(audit, "the agent is not ready");
            }
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
        for waiting in self.waiting.take_attaches() {
            self.attach(waiting);
        }
        for (client, frame) in self.waiting.take_requests() {
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
        let run = self.runs.active().cloned();
        self.emit_for(run.as_ref(), "error", json!({ "message": message }));
    }

    /// Routes one line of the child: an answer to its client, an event to
    /// everyone.
    pub(super) fn child_line(&mut self, line: &[u8]) {
        let metrics = self.settings.metrics.clone();
        metrics.frame(Direction::ChildToGateway, line.len());
        self.heard_from_child();
        let dialect = self.settings.dialect.rules();
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
                    EventKind::RunStart => Some(self.runs.start().clone()),
                    EventKind::RunTail => self.runs.last().cloned(),
                    _ => self.runs.active().cloned(),
                };
                let run_id = run.as_ref().map(|r| r.id.as_str());
                if let Some(bytes) = dialect.event_bytes(line, seq, run_id) {
                    let audience = run.as_ref().map_or(Audience::Everyone, Run::audience);
                    self.feed.push(Frame {
                        seq,
                        bytes,
                        audience,
                    });
                }
                // After the push: what a run's end releases (a leaving
                // client's farewell) comes after its last event.
                match kind {
                    EventKind::RunStart => self.run_started(RequestSpan::default()),
                    EventKind::RunEnd => {
                        self.runs.end();
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
                self.agent_reported(line);
                self.mcp_reported(line);
            }
        }
    }

    /// A run began; `span` (of the request that started it) ends with it.
    fn run_started(&mut self, span: RequestSpan) {
        self.runs.started(span);
        self.idle_since = None;
        self.publish();
        self.spending_run_started();
    }

    /// A run ended.
    pub(super) fn run_done(&mut self) {
        if let Some(ran) = self.runs.done() {
            self.settings
                .metrics
                .prompt_duration
                .observe(ran.as_secs_f64());
        }
        if !self.runs.busy() {
            self.start_idle_clock();
            self.dismiss_leaving();
            self.spending_idle();
        }
        self.publish();
    }

    /// Clients that said they leave ([`Inbound::Leave`]) get the dialect's
    /// farewell and a close once no run is active and their own commands
    /// are answered (a prompt's `done` comes just after its run's
    /// `agent_end`).
    pub(super) fn dismiss_leaving(&mut self) {
        let Some(leave) = self.settings.dialect.rules().leave() else {
            return;
        };
        if self.leaving.is_empty() || self.runs.busy() {
            return;
        }
        let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.leaving)
            .into_iter()
            .partition(|(client, _)| !self.pending.has_client(*client));
        self.leaving = waiting;
        for (client, id) in ready {
            for frame in leave.farewell(id.as_ref()) {
                self.unicast(client, frame);
            }
            self.close_client(client, CloseCode::Normal, "bye");
        }
    }

    /// An answer of the child to the request it got as `id`: what the id
    /// is decides where the answer goes.
    fn child_reply(&mut self, line: &[u8], id: String, last: bool) {
        match GatewayId::parse(&id) {
            Some(gid @ GatewayId::Ping(_)) => self.pong(gid),
            Some(gid @ GatewayId::State(_)) => self.state_snapshot(line, gid),
            Some(gid @ (GatewayId::Request(_) | GatewayId::Abort(_))) => {
                self.request_answered(line, gid, last)
            }
            Some(gid @ GatewayId::History(_)) => self.history_answered(line, gid),
            Some(GatewayId::Mcp(_)) => self.mcp_select_answered(line),
            // Clients answer asks, not the child; anything else is not
            // an id the gateway gave it.
            Some(GatewayId::Ask(_)) | None => {
                tracing::debug!(project = %self.project, %id, "dropped an answer to an id the gateway did not send");
            }
        }
    }

    /// A health ping's answer (a late one, to a ping already given up,
    /// changes nothing).
    fn pong(&mut self, id: GatewayId) {
        if let Some(child) = self.supervision.ready_mut() {
            if child.ping_id == Some(id) {
                child.ping_id = None;
                child.ping_deadline = None;
            }
        }
    }

    /// The state snapshot a waiting attach asked for.
    fn state_snapshot(&mut self, line: &[u8], id: GatewayId) {
        let Some(waiting) = self.awaiting_state.remove(&id) else {
            tracing::debug!(project = %self.project, %id, "dropped a state nobody waits for");
            return;
        };
        let state = serde_json::from_slice::<Value>(line)
            .ok()
            .and_then(|mut frame| frame.get_mut("result").map(Value::take))
            .unwrap_or(Value::Null);
        self.finish_attach(waiting, state);
    }

    /// An answer to a client's request or an admin abort.
    fn request_answered(&mut self, line: &[u8], id: GatewayId, last: bool) {
        let dialect = self.settings.dialect.rules();
        let pending = if last {
            self.pending.take(id)
        } else {
            self.pending.ack(id).cloned()
        };
        let Some(mut pending) = pending else {
            // What it says of runs still counts (an admin abort, a prompt
            // of a client that left).
            let (answer, run) = match self.runs.command(id).map(str::to_string) {
                Some(command) => {
                    let answer = dialect.run_answer(&command, line);
                    (answer, self.runs.answered(id, answer, last))
                }
                None => (Answer::Nothing, None),
            };
            self.audit_answered(id, answer, run.as_ref());
            tracing::debug!(project = %self.project, %id, "dropped an answer nobody waits for");
            return;
        };
        let answer = dialect.run_answer(&pending.command, line);
        let run = self.runs.answered(id, answer, last);
        self.audit_answered(id, answer, run.as_ref());
        if last {
            let label = dialect.command_label(&pending.command);
            self.settings
                .metrics
                .request_done(label, pending.sent.elapsed().as_secs_f64());
        }
        if last && pending.command == super::sessions::RESET_COMMAND {
            self.reset_answered(line);
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
            if let Some(bytes) =
                dialect.restore_id(line, pending.original, run.as_ref().map(RunId::as_str))
            {
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
    ids: &'a IdMap,
    client: ClientId,
}

impl ClientRequests for ClientIds<'_> {
    fn has_id(&self, id: &Value) -> bool {
        self.ids.in_flight(self.client, id)
    }

    fn count_except(&self, command: &str) -> usize {
        self.ids.count_client(self.client, command)
    }
}
