//! The process groups of the commands running now. A command's group is
//! SIGKILLed when the command ends, is aborted or its future is dropped;
//! [`kill_all`] kills every group at once for an agent that is about to
//! exit (SIGTERM, a gateway that died), so no command outlives it.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Groups started and not yet killed.
static RUNNING: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

fn running() -> std::sync::MutexGuard<'static, BTreeSet<i32>> {
    RUNNING.lock().unwrap_or_else(PoisonError::into_inner)
}

/// SIGKILLs the group of every running command.
pub fn kill_all() {
    kill_groups(std::mem::take(&mut *running()));
}

fn kill_groups(groups: BTreeSet<i32>) {
    for pgid in groups {
        // ESRCH (the group is already gone) is fine.
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
}

/// One command's process group, SIGKILLed at most once (and on drop).
pub struct ProcessGroup {
    pgid: i32,
    killed: bool,
}

impl ProcessGroup {
    /// Tracks the group `pgid` (a positive pid: never the caller's own
    /// group).
    pub fn new(pgid: i32) -> ProcessGroup {
        let killed = pgid <= 0;
        if !killed {
            running().insert(pgid);
        }
        ProcessGroup { pgid, killed }
    }

    pub fn kill(&mut self) {
        if !self.killed {
            self.killed = true;
            running().remove(&self.pgid);
            let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn running_groups_are_tracked_until_killed_and_killed_together() {
        use std::os::unix::process::CommandExt;
        // Not `kill_all`: other tests of this process run commands too.
        let mut children: Vec<std::process::Child> = (0..2)
            .map(|_| {
                std::process::Command::new("sleep")
                    .arg("30")
                    .process_group(0)
                    .spawn()
                    .unwrap()
            })
            .collect();
        let pgids: Vec<i32> = children
            .iter()
            .map(|c| i32::try_from(c.id()).unwrap())
            .collect();
        let mut groups: Vec<ProcessGroup> = pgids.iter().map(|&p| ProcessGroup::new(p)).collect();
        assert!(pgids.iter().all(|p| running().contains(p)));
        kill_groups(pgids.iter().copied().collect());
        // Before reaping: an unreaped group id cannot be reused.
        for group in &mut groups {
            group.kill();
        }
        for child in &mut children {
            let status = child.wait().unwrap();
            assert!(!status.success(), "killed: {status:?}");
        }
        assert!(pgids.iter().all(|p| !running().contains(p)));
    }
}
