//! How frames move through a hub: client requests to the child (with id
//! rewriting and role checks), child lines back out (responses to their
//! one client, events with a `seq` to everyone), and the frames the hub
//! makes up itself.

use std::sync::atomic::Ordering;
use std::time::{Instant as StdInstant, SystemTime};

use bytes::Bytes;
use serde_json::{json, Map, Value};
use tokio::time::Instant;

use super::actor::Hub;
use super::feed::Unicast;
use super::frames;
use super::ids::Pending;
use super::ring::Frame;
use super::ChildState;
use crate::auth::{self, Role};
use crate::metrics::Direction;
use crate::supervisor::ChildOutput;

impl Hub {
    pub(super) async fn request(&mut self, client: u64, mut frame: Map<String, Value>) {
        let Some(role) = self.clients.get(&client).map(|c| c.role) else {
            return;
        };
        let id = frame.get("id").cloned();
        let command = match frame.get("type") {
            Some(Value::String(command)) => command.clone(),
            _ => {
                let reply = frames::response(id.as_ref(), None, Err("missing field `type`".into()));
                self.unicast(client, reply);
                return;
            }
        };
        if role == Role::Observer && !auth::observer_allows(&command) {
            let reply = frames::response(
                id.as_ref(),
                Some(&command),
                Err(format!(
                    "the observer role may not send `{command}`; observers may send get_state, get_messages, get_models and ping"
                )),
            );
            self.unicast(client, reply);
            return;
        }
        if command == "hello" {
            let data = self.hello_data(client, role, false);
            self.unicast(
                client,
                frames::response(id.as_ref(), Some("hello"), Ok(Some(data))),
            );
            return;
        }
        let Some(child) = self
            .child
            .as_ref()
            .filter(|_| self.state == ChildState::Ready)
        else {
            if self.state == ChildState::Failed {
                let reply = frames::response(
                    id.as_ref(),
                    Some(&command),
                    Err("the agent is in a crash loop and was not restarted".into()),
                );
                self.unicast(client, reply);
            } else {
                self.waiting_requests.push_back((client, frame));
            }
            return;
        };
        let gateway_id = self.ids.insert(Pending {
            client,
            original: id,
            command,
            sent: StdInstant::now(),
        });
        frame.insert("id".into(), Value::String(gateway_id));
        let mut line = frames::to_bytes(&Value::Object(frame)).to_vec();
        line.push(b'\n');
        self.settings
            .metrics
            .frame(Direction::GatewayToChild, line.len());
        // A send to a dead child fails; its exit then fails the request.
        let _ = child.process.send(Bytes::from(line)).await;
        self.touch();
    }

    /// Forwards requests that waited for the child.
    pub(super) async fn flush_waiting(&mut self) {
        for waiting in std::mem::take(&mut self.waiting_attach) {
            self.attach(waiting);
        }
        while let Some((client, frame)) = self.waiting_requests.pop_front() {
            self.request(client, frame).await;
        }
    }

    pub(super) async fn child_output(&mut self, output: Option<ChildOutput>) {
        match output {
            Some(ChildOutput::Line(line)) => self.child_line(&line),
            Some(ChildOutput::Invalid(what)) => {
                self.settings
                    .metrics
                    .invalid_frames
                    .with_label_values(&["child"])
                    .inc();
                tracing::warn!(project = %self.project, "dropped a line from the agent: {what}");
            }
            Some(ChildOutput::Exited(exit)) => self.child_exited(exit).await,
            None => {
                // The output channel closed without an exit report.
                let exit = crate::supervisor::ExitInfo {
                    code: None,
                    signal: None,
                };
                self.child_exited(exit).await;
            }
        }
    }

    /// Routes one line of the child: a response to its client, an event to
    /// everyone.
    pub(super) fn child_line(&mut self, line: &[u8]) {
        let metrics = self.settings.metrics.clone();
        metrics.frame(Direction::ChildToGateway, line.len());
        let Some(envelope) = frames::envelope(line) else {
            metrics.invalid_frames.with_label_values(&["child"]).inc();
            tracing::warn!(project = %self.project, "dropped a non-object line from the agent");
            return;
        };
        match envelope.kind.as_deref() {
            Some("response") => self.child_response(line, envelope.id),
            Some(kind) => {
                if kind == "done" {
                    self.run_done();
                } else if kind == "usage" {
                    if let Ok(usage) = serde_json::from_slice::<Value>(line) {
                        metrics.usage(&usage);
                        self.usage = usage.get("cumulative").cloned();
                        self.publish();
                    }
                }
                let seq = self.next_seq();
                if let Some(bytes) = frames::stamp_seq(line, seq) {
                    self.feed.push(Frame { seq, bytes });
                }
            }
            None => {
                metrics.invalid_frames.with_label_values(&["child"]).inc();
                tracing::warn!(project = %self.project, "dropped an agent line without `type`");
            }
        }
    }

    /// A run ended (`done`).
    pub(super) fn run_done(&mut self) {
        self.busy = self.busy.saturating_sub(1);
        if let Some(started) = self.runs.pop_front() {
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
        }
        self.publish();
    }

    pub(super) fn child_response(&mut self, line: &[u8], id: Option<Value>) {
        let Some(Value::String(id)) = id else {
            tracing::debug!(project = %self.project, "dropped a response without a gateway id");
            return;
        };
        if let Some(child) = self.child.as_mut() {
            if child.ping_id.as_deref() == Some(id.as_str()) {
                child.ping_id = None;
                child.ping_deadline = None;
                return;
            }
        }
        let Some(pending) = self.ids.take(&id) else {
            tracing::debug!(project = %self.project, %id, "dropped a response nobody waits for");
            return;
        };
        let Ok(Value::Object(response)) = serde_json::from_slice::<Value>(line) else {
            return;
        };
        self.settings
            .metrics
            .request_done(&pending.command, pending.sent.elapsed().as_secs_f64());
        let success = response.get("success") == Some(&Value::Bool(true));
        let data = response.get("data");
        let started = success && data.and_then(|d| d.get("started")) == Some(&Value::Bool(true));
        if started && matches!(pending.command.as_str(), "prompt" | "compact") {
            if self.busy == 0 {
                self.busy_since = Some(SystemTime::now());
            }
            self.busy += 1;
            self.runs.push_back(StdInstant::now());
            self.idle_since = None;
            self.publish();
        }
        if success && pending.command == "set_model" {
            if let Some(model) = data.and_then(|d| d.get("model")).and_then(Value::as_str) {
                self.model = Some(model.to_string());
                self.publish();
            }
        }
        let bytes = frames::restore_id(response, pending.original);
        self.unicast(pending.client, bytes);
    }

    pub(super) fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Appends a gateway-made event to the feed.
    pub(super) fn emit(&self, kind: &str, fields: Value) {
        let seq = self.next_seq();
        self.feed.push(Frame {
            seq,
            bytes: frames::event(kind, fields, seq),
        });
    }

    /// Sends a frame to one client. A client whose response queue is full
    /// (it sends requests but does not read) is disconnected.
    pub(super) fn unicast(&mut self, client: u64, bytes: Bytes) {
        let Some(entry) = self.clients.get(&client) else {
            return;
        };
        let after_seq = self.feed.last_seq();
        if entry.unicast.capacity() > 1 {
            if entry
                .unicast
                .try_send(Unicast::Frame { after_seq, bytes })
                .is_ok()
            {
                return;
            }
        } else {
            // The last slot carries the reason.
            let _ = entry.unicast.try_send(Unicast::Close {
                after_seq,
                code: 1008,
                reason: "too many unread responses; the client must read its socket".into(),
            });
        }
        tracing::warn!(project = %self.project, client, "disconnecting a client whose outbox is full");
        self.clients.remove(&client);
        self.ids.forget_client(client);
        self.publish();
    }

    /// Fails every request still waiting for the child.
    pub(super) fn fail_pending(&mut self, error: &str) {
        for pending in self.ids.drain() {
            let reply = frames::response(
                pending.original.as_ref(),
                Some(&pending.command),
                Err(error.to_string()),
            );
            self.unicast(pending.client, reply);
        }
    }

    /// Ends the run in flight for clients: the child cannot any more.
    pub(super) fn end_runs(&mut self, error: &str) {
        if self.busy > 0 {
            self.emit("turn_end", json!({"stop": "error", "error": error}));
            self.emit("done", json!({}));
            self.busy = 0;
        }
        self.runs.clear();
        self.busy_since = None;
    }

    /// Tells every client to close, and forgets them.
    pub(super) fn close_clients(&mut self, code: u16, reason: &str) {
        let after_seq = self.feed.last_seq();
        for (_, client) in self.clients.drain() {
            let _ = client.unicast.try_send(Unicast::Close {
                after_seq,
                code,
                reason: reason.to_string(),
            });
        }
        self.publish();
    }
}
