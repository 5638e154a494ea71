//! The child's lifecycle inside a hub: spawn and hello, health pings,
//! crash handling with restart backoff, and graceful stop.

use std::time::SystemTime;

use bytes::Bytes;
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::actor::Hub;
use super::spawn::{StartError, StartFailure, SANDBOX_UNAVAILABLE_EXIT, SESSION_IN_USE_EXIT};
use super::{AttachError, ChildState, LastExit, StopReason};
use crate::dialect::Inbound;
use crate::supervisor::backoff::{self, Decision};
use crate::supervisor::{handshake, spawner};
use crate::supervisor::{ChildOutput, ChildProcess, ExitInfo};

/// A child that answered its hello.
pub(super) struct Running {
    pub process: ChildProcess,
    pub output: mpsc::Receiver<ChildOutput>,
    /// Id of the health ping in flight.
    pub ping_id: Option<String>,
    /// When that ping counts as unanswered.
    pub ping_deadline: Option<Instant>,
    pub pings: u64,
    /// Killed because it stopped answering pings.
    pub hung: bool,
}

impl Hub {
    /// Spawns the child and waits for its hello; on failure schedules a
    /// retry (or gives up after a crash loop).
    pub(super) async fn start_child(&mut self) {
        self.set_state(ChildState::Starting);
        match self.spawn_and_hello().await {
            Ok(running) => {
                let pid = running.process.pid();
                tracing::info!(project = %self.project, pid, restarts = self.restarts, "agent ready");
                self.child = Some(running);
                self.set_state(ChildState::Ready);
                {
                    let mut status = self
                        .status
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    status.ready_since = Some(SystemTime::now());
                }
                self.emit(
                    "child_started",
                    json!({"pid": pid, "restarts": self.restarts}),
                );
                if self.clients.is_empty() && self.busy == 0 {
                    self.idle_since = Some(Instant::now());
                }
                self.flush_waiting().await;
            }
            Err(StartError {
                message: error,
                kind,
            }) => {
                tracing::error!(project = %self.project, "agent failed to start: {error}");
                let refusal = match kind {
                    StartFailure::Elsewhere => AttachError::Elsewhere(error.clone()),
                    _ => AttachError::StartFailed(error.clone()),
                };
                for waiting in std::mem::take(&mut self.waiting_attach) {
                    let _ = waiting.reply.send(Err(refusal.clone()));
                }
                let pending: Vec<_> = self.waiting_requests.drain(..).collect();
                let dialect = self.settings.dialect;
                for (client, frame) in pending {
                    // Only requests for the child wait for it.
                    let command = match dialect.inbound(&frame, false) {
                        Inbound::Forward { command, .. } => command,
                        _ => String::new(),
                    };
                    let error = format!("the agent failed to start: {error}");
                    let reply = dialect.request_failed(frame.get("id"), &command, false, &error);
                    self.unicast(client, reply);
                }
                match kind {
                    StartFailure::Elsewhere => {
                        // Another agent process (another gateway) runs this
                        // session: not a crash, nothing to restart here.
                        self.close_clients(1013, "the session is in use by another agent process");
                        self.set_state(ChildState::Exited);
                    }
                    StartFailure::Refused => {
                        self.close_clients(1011, &error);
                        self.set_state(ChildState::Exited);
                    }
                    StartFailure::Crash => {
                        self.after_crash(&format!("failed to start: {error}"));
                    }
                }
            }
        }
    }

    async fn spawn_and_hello(&mut self) -> Result<Running, StartError> {
        let token = handshake::random_token();
        // Held until the hello is answered: a burst of starts queues here
        // instead of crowding the CPU, and each child's ready timeout
        // starts once it is its turn.
        let _slot = spawner::start_slot().await;
        let spec = self.spawn_spec(&token)?;
        let started = std::time::Instant::now();
        let (process, mut output) = ChildProcess::spawn(spec)
            .await
            .map_err(|e| StartError::crash(e.to_string()))?;
        self.settings.metrics.child_spawns.inc();
        let timeout = self.settings.ready_timeout;
        let dialect = self.settings.dialect;
        let greeted = if dialect.child_token() {
            handshake::hello(&process, &mut output, &token, timeout).await
        } else {
            handshake::ready(&process, &mut output, dialect, timeout).await
        };
        match greeted {
            Ok(data) => {
                self.settings
                    .metrics
                    .child_spawn_seconds
                    .observe(started.elapsed().as_secs_f64());
                self.model = data
                    .get("model")
                    .and_then(Value::as_str)
                    .or_else(|| {
                        let state = data.get("state")?;
                        state.pointer("/model/model/id")?.as_str()
                    })
                    .map(str::to_string);
                self.hello = data;
                Ok(Running {
                    process,
                    output,
                    ping_id: None,
                    ping_deadline: None,
                    pings: 0,
                    hung: false,
                })
            }
            Err(error) => {
                process.signal_group(Signal::SIGKILL);
                let exit = process.wait().await;
                let line = last_stderr_line(&process).await;
                let message = match (exit.code, line) {
                    (Some(SANDBOX_UNAVAILABLE_EXIT), Some(line)) => {
                        format!("the agent sandbox is unavailable: {line}")
                    }
                    (_, Some(line)) => format!("{error}: {line}"),
                    (_, None) => error.to_string(),
                };
                let kind = match exit.code {
                    Some(SESSION_IN_USE_EXIT) => StartFailure::Elsewhere,
                    _ => StartFailure::Crash,
                };
                Err(StartError { message, kind })
            }
        }
    }

    /// The child exited without being asked to.
    pub(super) async fn child_exited(&mut self, exit: ExitInfo) {
        let child = self.child.take();
        let hung = child.as_ref().is_some_and(|c| c.hung);
        let limit = child.as_ref().and_then(|c| c.process.limit_hit());
        let (reason, metric) = match (limit, hung, exit.code) {
            (Some(hit), _, _) => (hit.reason(), hit.reason()),
            (None, true, _) => ("hung", "health"),
            (None, false, Some(0)) => ("crashed", "normal"),
            (None, false, _) => ("crashed", "crash"),
        };
        self.settings.metrics.child_exit(metric);
        self.last_exit = Some(LastExit {
            code: exit.code,
            signal: exit.signal,
            reason: reason.to_string(),
        });
        tracing::warn!(project = %self.project, code = ?exit.code, signal = ?exit.signal, reason, "agent exited");
        let restarting = self.after_crash(reason);
        self.emit(
            "child_exited",
            json!({"code": exit.code, "signal": exit.signal, "reason": reason, "restarting": restarting}),
        );
        if !restarting {
            self.emit(
                "error",
                json!({"message": "the agent keeps crashing; automatic restarts are paused"}),
            );
        }
        let what = describe(exit);
        self.end_runs(&format!("the agent process exited unexpectedly ({what})"));
        self.fail_pending(&format!(
            "the agent process exited before answering ({what})"
        ));
        self.requeue_snapshots();
    }

    /// Records a crash and schedules the restart; returns whether one is
    /// scheduled.
    fn after_crash(&mut self, reason: &str) -> bool {
        let now = Instant::now();
        match self
            .crashes
            .on_crash(now.into_std(), &self.settings.restart, backoff::jitter())
        {
            Decision::Restart { after, restarts } => {
                self.restarts = restarts;
                self.restart_at = Some(now + after);
                self.set_state(ChildState::Backoff);
                tracing::info!(project = %self.project, delay_ms = after.as_millis() as u64, reason, "restart scheduled");
                true
            }
            Decision::Failed { until } => {
                self.settings.metrics.crash_loops.inc();
                self.failed_until = Some(Instant::from_std(until));
                self.set_state(ChildState::Failed);
                tracing::error!(project = %self.project, reason, "agent is crash-looping; not restarting until the cool-down ends");
                false
            }
        }
    }

    /// Admin restart: a graceful stop and a fresh start (or, after a crash
    /// loop, a start with a clean crash history). Clients stay attached.
    pub(super) async fn restart(&mut self) {
        self.failed_until = None;
        self.restart_at = None;
        self.crashes.reset();
        if let Some(running) = self.child.take() {
            self.set_state(ChildState::Stopping);
            let exit = running.process.stop(self.settings.stop_grace).await;
            let mut output = running.output;
            while let Ok(item) = output.try_recv() {
                if let ChildOutput::Line(line) = item {
                    self.child_line(&line);
                }
            }
            self.settings.metrics.child_exit("admin");
            self.last_exit = Some(LastExit {
                code: exit.code,
                signal: exit.signal,
                reason: "restart".into(),
            });
            self.emit(
                "child_exited",
                json!({"code": exit.code, "signal": exit.signal, "reason": "restart", "restarting": true}),
            );
            self.end_runs("the agent was restarted by an administrator");
            self.fail_pending("the agent was restarted by an administrator");
            self.requeue_snapshots();
        }
        self.restarts += 1;
        self.settings.metrics.child_restarts.inc();
        self.start_child().await;
    }

    /// Sends a health ping when none is outstanding.
    pub(super) async fn send_ping(&mut self) {
        if self.state != ChildState::Ready {
            return;
        }
        let timeout = self.settings.ping_timeout;
        let Some(child) = self.child.as_mut() else {
            return;
        };
        if child.ping_id.is_some() {
            return;
        }
        child.pings += 1;
        let id = format!("corral-ping-{}", child.pings);
        let line = self.settings.dialect.ping_line(&id);
        self.settings
            .metrics
            .frame(crate::metrics::Direction::GatewayToChild, line.len());
        child.ping_id = Some(id);
        child.ping_deadline = Some(Instant::now() + timeout);
        let _ = child.process.send(Bytes::from(line)).await;
    }

    /// A ping went unanswered: kill the child; its exit restarts it.
    pub(super) fn hung(&mut self) {
        if let Some(child) = self.child.as_mut() {
            tracing::warn!(project = %self.project, pid = child.process.pid(), "agent did not answer a health ping; killing it");
            child.hung = true;
            child.ping_deadline = None;
            child.process.signal_group(Signal::SIGKILL);
        }
    }

    /// Stops the child on purpose and tells clients.
    pub(super) async fn stop(&mut self, reason: StopReason) {
        self.set_state(ChildState::Stopping);
        self.restart_at = None;
        if let Some(mut running) = self.child.take() {
            let exit = running.process.stop(self.settings.stop_grace).await;
            // Lines written before the exit still count (a final `done`).
            while let Ok(output) = running.output.try_recv() {
                if let ChildOutput::Line(line) = output {
                    self.child_line(&line);
                }
            }
            tracing::info!(project = %self.project, reason = reason.as_str(), code = ?exit.code, signal = ?exit.signal, "agent stopped");
            let metric = match reason {
                _ if exit.signal == Some(Signal::SIGKILL as i32) => "killed",
                StopReason::Idle | StopReason::Evicted => "idle",
                StopReason::Admin => "admin",
                StopReason::Shutdown => "shutdown",
            };
            self.settings.metrics.child_exit(metric);
            self.last_exit = Some(LastExit {
                code: exit.code,
                signal: exit.signal,
                reason: reason.as_str().to_string(),
            });
            self.emit(
                "child_exited",
                json!({"code": exit.code, "signal": exit.signal, "reason": reason.as_str(), "restarting": false}),
            );
        }
        self.end_runs(&format!("the agent was stopped ({})", reason.as_str()));
        self.fail_pending(&format!("the agent was stopped ({})", reason.as_str()));
        self.requeue_snapshots();
        let (code, message) = match reason {
            StopReason::Shutdown => (1001, "the gateway is shutting down"),
            StopReason::Admin => (1001, "the agent was stopped by an administrator"),
            StopReason::Idle | StopReason::Evicted => (1001, "the agent was stopped"),
        };
        self.set_state(ChildState::Exited);
        self.close_clients(code, message);
    }
}

/// The child's last stderr line (its own account of why it failed). The
/// stderr reader may trail the exit by a moment, so wait briefly for it.
async fn last_stderr_line(process: &ChildProcess) -> Option<String> {
    let tail = process.stderr_tail();
    for _ in 0..20 {
        let last = tail
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .back()
            .cloned();
        if last.is_some() {
            return last;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    None
}

fn describe(exit: ExitInfo) -> String {
    match (exit.code, exit.signal) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("killed by {}", signal.as_str()),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => "unknown status".to_string(),
    }
}
