//! The task that polls one child's limit counters and kills the child
//! when it hit a limit, and the removal of its cgroups once it is gone.

use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::sync::watch;

use super::{ChildLimits, POLL_INTERVAL};
use crate::process::ExitInfo;

/// Polls `limits` every [`POLL_INTERVAL`] until the exit is published; a
/// hit limit SIGKILLs the process group `pgid` and every process in the
/// child's cgroups (the exit then carries the reason).
pub async fn watch(
    limits: Arc<ChildLimits>,
    pgid: u32,
    mut exited: watch::Receiver<Option<ExitInfo>>,
    project: String,
) {
    let mut tick = tokio::time::interval(POLL_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = exited.wait_for(Option::is_some) => return,
            _ = tick.tick() => {}
        }
        if let Some(hit) = limits.check() {
            tracing::warn!(%project, pid = pgid, reason = hit.reason(), "the agent hit a resource limit: killing it");
            if let Some(raw) = i32::try_from(pgid).ok().filter(|&p| p > 0) {
                let _ = killpg(Pid::from_raw(raw), Signal::SIGKILL);
            }
            limits.kill_all();
            return;
        }
    }
}

/// Kills what is left in the child's cgroups, waits (bounded) until they
/// are empty, and removes them.
pub async fn remove_when_empty(limits: Arc<ChildLimits>) {
    for _ in 0..40 {
        limits.kill_all();
        if limits.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    limits.remove();
}
