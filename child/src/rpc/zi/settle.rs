//! Operations answered when something settles: `session.interrupt`,
//! `session.await_idle` and `command.invoke` (`compact` waits for its run;
//! `clear` answers at once).

use std::time::Duration;

use serde_json::{json, Value};

use super::frame::{self, FailCode};
use super::request::{Request, MAX_COMPLETION_ID, MAX_ID_BYTES};
use super::state::Connection;
use super::{Slot, ZiServer};
use crate::agent::RunKind;

/// How often an interrupt re-aborts while queued runs drain.
const ABORT_POLL: Duration = Duration::from_millis(20);

/// Resolves once the encoder has written `target` runs' `Done`.
async fn completed(connection: &Connection, target: impl Fn() -> u64) {
    let mut rx = connection.completed.subscribe();
    loop {
        if *rx.borrow_and_update() >= target() {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

impl ZiServer {
    /// Aborts the active run and every run queued before this request
    /// (each is aborted as it starts), drops queued input, and answers `{}`
    /// once they have all ended.
    pub(crate) fn interrupt(&self, request: &Request) -> Option<Value> {
        let slot = match self.admit(request, Slot::Interrupt) {
            Ok(slot) => slot,
            Err(frame) => return Some(frame),
        };
        let target = self.connection.submitted();
        self.agent.discard_input();
        // Queued runs never start; the active one is aborted below.
        self.agent.discard_queued();
        let connection = self.connection.clone();
        let remote = self.remote.clone();
        let (id, method) = (request.id.clone(), request.method);
        self.settle(request, slot, async move {
            loop {
                if connection.completed() >= target {
                    break;
                }
                remote.abort();
                let _ = tokio::time::timeout(ABORT_POLL, completed(&connection, || target)).await;
            }
            frame::ok(&id, method, json!({}))
        });
        None
    }

    /// Answers `{}` when no run is active or queued; with `completionId`,
    /// the watch's observation at the latest settlement.
    pub(crate) fn await_idle(&self, request: &Request) -> Option<Value> {
        let completion_id = match request.str_param("completionId", MAX_COMPLETION_ID) {
            Ok(id) => id.map(str::to_string),
            Err(message) => {
                let code = frame::ProtocolCode::InvalidRequest;
                return Some(frame::protocol_error(Some(&request.id), code, message));
            }
        };
        let slot = match self.admit(request, Slot::Ordinary) {
            Ok(slot) => slot,
            Err(frame) => return Some(frame),
        };
        let connection = self.connection.clone();
        let (id, method) = (request.id.clone(), request.method);
        self.settle(request, slot, async move {
            loop {
                completed(&connection, || connection.submitted()).await;
                let Some(completion_id) = completion_id.as_deref() else {
                    return frame::ok(&id, method, json!({}));
                };
                let fail =
                    |message: String| frame::fail(&id, method, FailCode::OperationFailed, message);
                let inner = connection.lock();
                let Some(watch) = inner.watch.as_ref().filter(|w| w.id == completion_id) else {
                    return fail(format!("Completion watch is not active: {completion_id}"));
                };
                if let Some(settled) = &watch.settled {
                    return frame::ok(&id, method, settled.result());
                }
                if connection.idle() {
                    return fail(format!(
                        "Completion watch has no settled observation: {completion_id}"
                    ));
                }
            }
        });
        None
    }

    /// Runs a built-in command; commands are idle-only.
    pub(crate) fn invoke(&mut self, request: &Request) -> Option<Value> {
        let name = match request.required_str("name", MAX_ID_BYTES) {
            Ok(name) => name.to_string(),
            Err(message) => {
                let code = frame::ProtocolCode::InvalidRequest;
                return Some(frame::protocol_error(Some(&request.id), code, message));
            }
        };
        let fail =
            |code, message: &str| Some(frame::fail(&request.id, request.method, code, message));
        if name != "compact" && name != "clear" {
            return fail(FailCode::NotFound, &format!("Command not found: {name}"));
        }
        if !self.idle() {
            return fail(
                FailCode::OperationFailed,
                "commands run only while the session is idle",
            );
        }
        if name == "clear" {
            return Some(match self.agent.session().clear() {
                Ok(()) => {
                    self.connection.lock().context_tokens = None;
                    frame::ok(
                        &request.id,
                        request.method,
                        json!({"message": "transcript cleared"}),
                    )
                }
                Err(e) => frame::fail(
                    &request.id,
                    request.method,
                    FailCode::OperationFailed,
                    e.to_string(),
                ),
            });
        }
        let slot = match self.admit(request, Slot::Ordinary) {
            Ok(slot) => slot,
            Err(frame) => return Some(frame),
        };
        {
            let mut inner = self.connection.lock();
            inner.last_summary = None;
            inner.compacting = true;
        }
        if !self.submit(RunKind::Compact) {
            let mut inner = self.connection.lock();
            inner.compacting = false;
            inner.in_flight.remove(&request.id);
            inner.ordinary = inner.ordinary.saturating_sub(1);
            return fail(FailCode::Capacity, "the run queue is full");
        }
        let target = self.connection.submitted();
        let connection = self.connection.clone();
        let (id, method) = (request.id.clone(), request.method);
        self.settle(request, slot, async move {
            completed(&connection, || target).await;
            match connection.lock().last_summary.take() {
                Some(summary) => frame::ok(&id, method, json!({"message": summary})),
                None => frame::fail(
                    &id,
                    method,
                    FailCode::OperationFailed,
                    "compaction did not complete",
                ),
            }
        });
        None
    }
}
