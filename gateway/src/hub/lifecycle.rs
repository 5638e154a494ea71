//! The child's lifecycle inside a hub, as transitions between the states
//! of [`Supervision`]: start and greeting, health pings, crash handling
//! with restart backoff and the crash-loop cutoff, admin restarts, and
//! stops (idle, admin, eviction, shutdown).

use std::mem;
use std::time::SystemTime;

use nix::sys::signal::Signal;
use serde_json::json;
use tokio::time::Instant;

use super::actor::Hub;
use super::child::{Launched, Running, StartError, StartFailure};
use super::supervision::{AfterStop, Stopping, Supervision, Wake};
use super::{AttachError, LastExit, StopReason};
use crate::dialect::Inbound;
use crate::process::backoff::{self, Decision};
use crate::process::{ChildOutput, ExitInfo};
use crate::ws::close::CloseCode;

impl Hub {
    /// Begins a start: the launch is polled by the hub's loop.
    pub(super) fn start_child(&mut self) {
        self.supervision = Supervision::Starting(self.launcher.launch());
        self.publish();
    }

    /// Handles what the supervision state waited for.
    pub(super) fn supervise(&mut self, wake: Wake) {
        match wake {
            Wake::Started(Ok(launched)) => self.started(launched),
            Wake::Started(Err(error)) => self.start_failed(error),
            Wake::Output(output) => self.child_output(output),
            Wake::PingLate => self.hung(),
            Wake::Stopped(exit) => self.stopped(exit),
            Wake::Retry => {
                self.settings.metrics.child_restarts.inc();
                self.start_child();
            }
            Wake::CooledDown => {
                self.crashes.reset();
                self.start_child();
            }
        }
    }

    fn started(&mut self, launched: Launched) {
        let pid = launched.control.pid();
        tracing::info!(project = %self.project, pid, restarts = self.restarts, "agent ready");
        self.model = self.settings.dialect.rules().model_of(&launched.hello);
        self.hello = launched.hello.clone();
        self.supervision = Supervision::Ready(Running::new(launched));
        self.mcp_child_started();
        self.status
            .send_modify(|status| status.ready_since = Some(SystemTime::now()));
        self.publish();
        self.emit(
            "child_started",
            json!({"pid": pid, "restarts": self.restarts}),
        );
        self.start_idle_clock();
        self.flush_waiting();
    }

    fn start_failed(&mut self, error: StartError) {
        let StartError {
            message: error,
            kind,
        } = error;
        tracing::error!(project = %self.project, "agent failed to start: {error}");
        let refusal = match kind {
            StartFailure::Elsewhere => AttachError::Elsewhere(error.clone()),
            StartFailure::Unavailable => AttachError::Unavailable(error.clone()),
            _ => AttachError::StartFailed(error.clone()),
        };
        for waiting in self.waiting.take_attaches() {
            let _ = waiting.reply.send(Err(refusal.clone()));
        }
        self.refuse_waiting_requests(&format!("the agent failed to start: {error}"));
        match kind {
            StartFailure::Elsewhere => {
                // Another agent process (another gateway) runs this
                // session: not a crash, nothing to restart here.
                self.supervision = Supervision::Exited;
                self.close_clients(
                    CloseCode::TryAgain,
                    "the session is in use by another agent process",
                );
            }
            StartFailure::Unavailable => {
                self.supervision = Supervision::Exited;
                self.close_clients(CloseCode::TryAgain, &error);
            }
            StartFailure::Refused => {
                self.supervision = Supervision::Exited;
                self.close_clients(CloseCode::Internal, &error);
            }
            StartFailure::Crash => {
                self.after_crash(&format!("failed to start: {error}"));
            }
        }
    }

    /// Answers the requests that waited for a child that will not come.
    fn refuse_waiting_requests(&mut self, error: &str) {
        let dialect = self.settings.dialect.rules();
        for (client, frame) in self.waiting.take_requests() {
            // Only requests for the child wait for it.
            let command = match dialect.inbound(&frame, false) {
                Inbound::Forward { command, .. } => command,
                _ => String::new(),
            };
            let reply = dialect.request_failed(frame.get("id"), &command, false, error);
            self.unicast(client, reply);
        }
    }

    /// Routes the child's output; its end is its exit.
    pub(super) fn child_output(&mut self, output: Option<ChildOutput>) {
        let exit = match output {
            Some(ChildOutput::Line(line)) => return self.child_line(&line),
            Some(ChildOutput::Invalid(what)) => return self.invalid_line(&what),
            Some(ChildOutput::Exited(exit)) => exit,
            // The output channel closed without an exit report.
            None => ExitInfo {
                code: None,
                signal: None,
            },
        };
        match &mut self.supervision {
            // A child being stopped: its stop reports the exit.
            Supervision::Stopping(stopping) => stopping.drained = true,
            Supervision::Ready(_) => self.child_exited(exit),
            _ => {}
        }
    }

    /// The child exited without being asked to.
    fn child_exited(&mut self, exit: ExitInfo) {
        let Supervision::Ready(child) = mem::replace(&mut self.supervision, Supervision::Exited)
        else {
            return;
        };
        let limit = child.control.limit_hit();
        let (reason, metric) = match (limit, child.hung, exit.code) {
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
        self.requeue_awaiting_state();
        self.mcp_child_gone();
    }

    /// Records a crash and schedules the restart (`Backoff`), or marks a
    /// crash loop (`Failed`); returns whether a restart is scheduled.
    fn after_crash(&mut self, reason: &str) -> bool {
        let now = Instant::now();
        let restarting = match self.crashes.on_crash(
            now.into_std(),
            &self.settings.restart,
            backoff::jitter(),
        ) {
            Decision::Restart { after, restarts } => {
                self.restarts = restarts;
                self.supervision = Supervision::Backoff { until: now + after };
                tracing::info!(project = %self.project, delay_ms = after.as_millis() as u64, reason, "restart scheduled");
                true
            }
            Decision::Failed { until } => {
                self.settings.metrics.crash_loops.inc();
                self.supervision = Supervision::Failed {
                    until: Instant::from_std(until),
                };
                tracing::error!(project = %self.project, reason, "agent is crash-looping; not restarting until the cool-down ends");
                false
            }
        };
        self.publish();
        restarting
    }

    /// Admin restart: a graceful stop and a fresh start (or, after a crash
    /// or a crash loop, a start now with a clean crash history). Clients
    /// stay attached. A child starting or stopping is left to it.
    pub(super) fn restart(&mut self) {
        self.crashes.reset();
        match mem::replace(&mut self.supervision, Supervision::Exited) {
            Supervision::Ready(running) => self.stop_child(running, AfterStop::Restart),
            Supervision::Backoff { .. } | Supervision::Failed { .. } => {
                self.restarts += 1;
                self.settings.metrics.child_restarts.inc();
                self.start_child();
            }
            other => self.supervision = other,
        }
    }

    /// Stops the child on purpose; the hub ends once it has exited.
    pub(super) fn begin_stop(&mut self, reason: StopReason) {
        match mem::replace(&mut self.supervision, Supervision::Exited) {
            Supervision::Ready(running) => self.stop_child(running, AfterStop::End(reason)),
            Supervision::Stopping(mut stopping) => {
                if stopping.then == AfterStop::Restart {
                    stopping.then = AfterStop::End(reason);
                }
                self.supervision = Supervision::Stopping(stopping);
            }
            // No child to stop; a start in progress is dropped, which
            // kills what it started.
            _ => self.finish_stop(None, reason),
        }
    }

    /// Moves to `Stopping`: the stop runs while the hub keeps serving.
    fn stop_child(&mut self, running: Running, then: AfterStop) {
        let exit = running.control.clone().stop(self.settings.stop_grace);
        self.supervision = Supervision::Stopping(Stopping {
            running,
            exit,
            drained: false,
            then,
        });
        self.publish();
    }

    /// The child stopped on purpose.
    fn stopped(&mut self, exit: ExitInfo) {
        let Supervision::Stopping(mut stopping) =
            mem::replace(&mut self.supervision, Supervision::Exited)
        else {
            return;
        };
        // Lines written before the exit still count (a final `done`).
        while let Ok(output) = stopping.running.output.try_recv() {
            if let ChildOutput::Line(line) = output {
                self.child_line(&line);
            }
        }
        match stopping.then {
            AfterStop::End(reason) => self.finish_stop(Some(exit), reason),
            AfterStop::Restart => {
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
                self.requeue_awaiting_state();
                self.restarts += 1;
                self.settings.metrics.child_restarts.inc();
                self.start_child();
            }
        }
    }

    /// The end of a stop on purpose (`exit` is the child's, if one ran):
    /// runs end, requests fail, clients are told, and the hub ends.
    fn finish_stop(&mut self, exit: Option<ExitInfo>, reason: StopReason) {
        if let Some(exit) = exit {
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
        let error = format!("the agent was stopped ({})", reason.as_str());
        self.end_runs(&error);
        self.fail_pending(&error);
        self.refuse_waiting_requests(&error);
        self.requeue_awaiting_state();
        let message = match reason {
            StopReason::Shutdown => "the gateway is shutting down",
            StopReason::Admin => "the agent was stopped by an administrator",
            StopReason::Idle | StopReason::Evicted => "the agent was stopped",
        };
        self.supervision = Supervision::Exited;
        self.ending = true;
        self.close_clients(CloseCode::GoingAway, message);
    }

    /// Sends a health ping when none is outstanding.
    pub(super) fn send_ping(&mut self) {
        let timeout = self.settings.ping_timeout;
        let Some(child) = self.supervision.ready_mut() else {
            return;
        };
        if child.ping_id.is_some() {
            return;
        }
        let id = self.mint.ping();
        child.ping_id = Some(id);
        // A child that does not read its input does not answer either:
        // the deadline holds whether or not the ping got through.
        child.ping_deadline = Some(Instant::now() + timeout);
        let line = self.settings.dialect.rules().ping_line(&id.to_string());
        let _ = self.send_line(line);
    }

    /// The child said something: with a ping outstanding, its deadline
    /// moves to a full `--ping-timeout` from now. A child answers in order,
    /// so its pong may queue behind replies it is still writing (sixty
    /// requests for a large conversation take seconds to stream); a child
    /// that is busy talking is alive. Only silence for the whole timeout
    /// with a ping outstanding counts as hung.
    pub(super) fn heard_from_child(&mut self) {
        let timeout = self.settings.ping_timeout;
        if let Some(child) = self.supervision.ready_mut() {
            if child.ping_deadline.is_some() {
                child.ping_deadline = Some(Instant::now() + timeout);
            }
        }
    }

    /// A ping went unanswered: kill the child; its exit restarts it.
    fn hung(&mut self) {
        if let Some(child) = self.supervision.ready_mut() {
            tracing::warn!(project = %self.project, pid = child.control.pid(), "agent did not answer a health ping; killing it");
            child.hung = true;
            child.ping_deadline = None;
            child.control.kill();
        }
    }
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
