//! Supervision of a project's child as an explicit state machine. Each
//! state holds what it needs: the start in progress, the running child,
//! when a backoff or a crash-loop cool-down ends, the stop in progress and
//! what follows it. [`Supervision::next`] waits for whatever the current
//! state waits for; the hub's loop polls it beside its commands, so a
//! project keeps serving attach, detach, abort and status while its child
//! starts or stops.

use std::future::pending;

use tokio::time::{sleep_until, Instant};

use super::child::StartError;
use super::child::{BoxFuture, Launched, Running};
use super::{ChildState, StopReason};
use crate::process::{ChildOutput, ExitInfo};

/// Where a project's child is.
pub(super) enum Supervision {
    /// Spawned (or about to be) and not greeted yet.
    Starting(BoxFuture<Result<Launched, StartError>>),
    /// Greeted and serving.
    Ready(Running),
    /// Crashed; started again at `until`.
    Backoff { until: Instant },
    /// Crash-looping: no automatic start before `until`.
    Failed { until: Instant },
    /// Being stopped on purpose.
    Stopping(Stopping),
    /// No child, and none coming: the hub ends once nobody needs it.
    Exited,
}

/// A stop in progress.
pub(super) struct Stopping {
    /// The child, still read: lines written before its exit count.
    pub running: Running,
    /// Resolves with its exit once it (and all it started) is gone.
    pub exit: BoxFuture<ExitInfo>,
    /// Its output has ended.
    pub drained: bool,
    pub then: AfterStop,
}

/// What follows a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum AfterStop {
    /// An admin restart: a fresh start.
    Restart,
    /// The hub ends.
    End(StopReason),
}

/// What the current state waited for.
pub(super) enum Wake {
    Started(Result<Launched, StartError>),
    /// A line (or the end) of the child's output.
    Output(Option<ChildOutput>),
    /// The health ping in flight went unanswered.
    PingLate,
    /// The child stopped.
    Stopped(ExitInfo),
    /// The backoff ended.
    Retry,
    /// The crash-loop cool-down ended.
    CooledDown,
}

impl Supervision {
    /// The state the admin API shows.
    pub fn state(&self) -> ChildState {
        match self {
            Supervision::Starting(_) => ChildState::Starting,
            Supervision::Ready(_) => ChildState::Ready,
            Supervision::Backoff { .. } => ChildState::Backoff,
            Supervision::Failed { .. } => ChildState::Failed,
            Supervision::Stopping(_) => ChildState::Stopping,
            Supervision::Exited => ChildState::Exited,
        }
    }

    /// The child, when it is ready to serve.
    pub fn ready(&self) -> Option<&Running> {
        match self {
            Supervision::Ready(running) => Some(running),
            _ => None,
        }
    }

    pub fn ready_mut(&mut self) -> Option<&mut Running> {
        match self {
            Supervision::Ready(running) => Some(running),
            _ => None,
        }
    }

    /// The child process, ready or stopping.
    pub fn child(&self) -> Option<&Running> {
        match self {
            Supervision::Ready(running) => Some(running),
            Supervision::Stopping(stopping) => Some(&stopping.running),
            _ => None,
        }
    }

    /// Waits for what the state waits for. Cancel-safe: the futures it
    /// polls live in the state.
    pub async fn next(&mut self) -> Wake {
        match self {
            Supervision::Starting(start) => Wake::Started(start.as_mut().await),
            Supervision::Ready(running) => {
                let deadline = running.ping_deadline;
                tokio::select! {
                    output = running.output.recv() => Wake::Output(output),
                    () = sleep_until(deadline.unwrap_or_else(far_future)), if deadline.is_some() => Wake::PingLate,
                }
            }
            Supervision::Stopping(stopping) => {
                tokio::select! {
                    exit = stopping.exit.as_mut() => Wake::Stopped(exit),
                    output = stopping.running.output.recv(), if !stopping.drained => Wake::Output(output),
                }
            }
            Supervision::Backoff { until } => {
                sleep_until(*until).await;
                Wake::Retry
            }
            Supervision::Failed { until } => {
                sleep_until(*until).await;
                Wake::CooledDown
            }
            Supervision::Exited => pending().await,
        }
    }
}

pub(super) fn far_future() -> Instant {
    Instant::now() + std::time::Duration::from_secs(86_400 * 365)
}
