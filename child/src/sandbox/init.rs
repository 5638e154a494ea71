//! The agent's duties as pid 1 of its pid namespace (the sandbox's tree is
//! outer → agent, see `tree`):
//!
//! - **Ending on a signal.** The kernel delivers to a namespace's init
//!   only the signals it has a handler for, and never kills it by a
//!   default action. Until the agent handles SIGTERM/SIGINT itself (its
//!   RPC loop does), and for SIGHUP/SIGQUIT always, a handler ends the
//!   agent as the signal would have: it tells outer which signal through
//!   the report pipe and exits, and outer then dies by that signal.
//! - **Reaping orphans.** Whatever a tool leaves behind is reparented to
//!   the agent. A task on the agent's runtime (not a thread of its own:
//!   an idle agent is one kernel task) waits for SIGCHLD (a self-pipe)
//!   and reaps every
//!   exited child of the agent that the agent did not start itself, so
//!   that whoever waits for those in the agent keeps their exit status. A
//!   child the agent started is told by one of two marks: it is still in
//!   the agent's process group (it failed before it could leave it, and
//!   `std` is about to wait for it), or it registered its pid from its
//!   pre-exec hook (every command comes from [`super::ToolConfinement`]),
//!   after it left the group and before it can exit. A tool's leftovers
//!   are in the tool's group or one of their own, never the agent's,
//!   unless they join it on purpose, and then only stay unreaped zombies
//!   until the agent ends.
//!
//! When the agent exits, the kernel kills everything left in the pid
//! namespace: no tool outlives it.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::{AsRawFd, OwnedFd};

use std::sync::Mutex;

use nix::fcntl::OFlag;
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::{pipe2, Pid};
use tokio::net::unix::pipe;

use super::sys;
use super::SandboxError;

/// The reaper's two pipes, from [`become_init`] until [`start_reaping`]
/// moves them onto the runtime.
static PENDING: Mutex<Option<(OwnedFd, OwnedFd)>> = Mutex::new(None);

/// Takes up the duties of init in the agent (pid 1): signal handlers
/// that report to outer through `report`, and the pid registry of the
/// processes the agent starts. Reaping starts with [`start_reaping`],
/// once the runtime runs. Must run before any other thread exists.
pub fn become_init(report: OwnedFd) -> Result<(), SandboxError> {
    let failed = |what: &'static str| move |source| SandboxError::Process { what, source };
    // Registering blocks (a full pipe, 16,384 pids, waits for the
    // reaper); reading does not.
    let (registered_read, registered_write) = pipe2(OFlag::O_CLOEXEC).map_err(failed("pipe"))?;
    nix::fcntl::fcntl(
        registered_read.as_raw_fd(),
        nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK),
    )
    .map_err(failed("fcntl"))?;
    let (wake_read, wake_write) =
        pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(failed("pipe"))?;
    sys::end_like_signals(report)?;
    sys::set_registry(registered_write);
    sys::wake_on_sigchld(wake_write)?;
    *PENDING.lock().unwrap_or_else(|e| e.into_inner()) = Some((wake_read, registered_read));
    Ok(())
}

/// Starts reaping on the current runtime, if `become_init` ran (the
/// agent is a pid namespace's init); otherwise does nothing. Orphans that
/// exited before are reaped as soon as the runtime runs the reaper.
pub fn start_reaping() -> std::io::Result<()> {
    let Some((wake, registered)) = PENDING.lock().unwrap_or_else(|e| e.into_inner()).take() else {
        return Ok(());
    };
    let wake = pipe::Receiver::from_owned_fd(wake)?;
    let registered = pipe::Receiver::from_owned_fd(registered)?;
    tokio::spawn(reap_forever(wake, registered));
    Ok(())
}

/// The reaper: after every SIGCHLD, reaps the exited orphans. Nothing
/// is looked at before the first wake: every SIGCHLD since
/// [`become_init`] is in the wake pipe, so an orphan that exited before
/// the runtime ran wakes the reaper at once.
async fn reap_forever(wake: pipe::Receiver, registered: pipe::Receiver) {
    let mut started = Registry::default();
    loop {
        // A registration alone needs no scan, but it is read promptly: a
        // full pipe would stall a spawn.
        let woken = tokio::select! {
            woken = wake.readable() => woken,
            woken = registered.readable() => woken,
        };
        if woken.is_err() || drain(&wake, |_| {}) {
            return;
        }
        // Before looking at zombies: every child the agent started has
        // registered by the time it can be one.
        if drain(&registered, |bytes| started.add_pids(bytes)) {
            return;
        }
        let processes = processes();
        started.keep_only(&processes);
        for process in processes.iter().filter(|p| started.is_orphan(p)) {
            let _ = waitpid(
                Pid::from_raw(process.pid as i32),
                Some(WaitPidFlag::WNOHANG),
            );
        }
    }
}

/// Reads everything in `pipe` now, without waiting. The descriptor itself
/// is read first: tokio's `try_read` reads only once the reactor has seen
/// the pipe become readable, and a registration written a moment ago (by
/// a tool that may exit before the next turn) must be taken before the
/// zombies are looked at. Then `try_read` until it would block, which
/// also clears the readiness tokio keeps for the pipe.
/// Returns whether the pipe's writers are gone (they never are: the
/// agent keeps both write ends for its life).
fn drain(pipe: &pipe::Receiver, mut take: impl FnMut(&[u8])) -> bool {
    let mut buf = [0u8; 4096];
    loop {
        match nix::unistd::read(pipe.as_raw_fd(), &mut buf) {
            Ok(0) => return true,
            Ok(n) => take(&buf[..n]),
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break,
        }
    }
    loop {
        match pipe.try_read(&mut buf) {
            Ok(0) => return true,
            Ok(n) => take(&buf[..n]),
            Err(_) => return false,
        }
    }
}

/// One process as this namespace's `/proc/PID/stat` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    pub zombie: bool,
    pub ppid: u32,
    /// Its process group.
    pub pgrp: u32,
    /// When it started, in clock ticks since boot: with the pid, who it is.
    pub started: u64,
}

impl Stat {
    /// Parses `PID (COMM) STATE PPID … STARTTIME …` (field 22); the
    /// command name may hold spaces and parentheses.
    pub fn parse(line: &str) -> Option<Stat> {
        let (head, rest) = line.rsplit_once(')')?;
        let pid = head.split_once('(')?.0.trim().parse().ok()?;
        let fields: Vec<&str> = rest.split_whitespace().collect();
        Some(Stat {
            pid,
            zombie: matches!(*fields.first()?, "Z" | "X"),
            ppid: fields.get(1)?.parse().ok()?,
            pgrp: fields.get(2)?.parse().ok()?,
            // Field 22 is the 20th after the command name.
            started: fields.get(19)?.parse().ok()?,
        })
    }

    fn of(pid: u32) -> Option<Stat> {
        let mut line = String::new();
        File::open(format!("/proc/{pid}/stat"))
            .ok()?
            .read_to_string(&mut line)
            .ok()?;
        Stat::parse(&line)
    }
}

/// Every process in sight.
fn processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter_map(Stat::of)
        .collect()
}

/// The processes the agent started itself (pid → start time): their
/// exit statuses belong to whoever waits for them in the agent.
#[derive(Debug, Default)]
pub struct Registry {
    started: BTreeMap<u32, u64>,
    /// Bytes of a pid split across two reads.
    partial: Vec<u8>,
}

impl Registry {
    /// Takes registrations: native-endian `u32` pids, back to back.
    pub fn add_pids(&mut self, bytes: &[u8]) {
        self.partial.extend_from_slice(bytes);
        let whole = self.partial.len() / 4 * 4;
        let pids: Vec<u32> = self.partial[..whole]
            .chunks_exact(4)
            .map(|c| u32::from_ne_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        self.partial.drain(..whole);
        for pid in pids {
            // Gone already: its waiter reaped it, nothing to protect.
            if let Some(stat) = Stat::of(pid) {
                self.started.insert(pid, stat.started);
            }
        }
    }

    /// Forgets the processes that are gone (their pid may be reused).
    pub fn keep_only(&mut self, processes: &[Stat]) {
        let now: BTreeMap<u32, u64> = processes.iter().map(|p| (p.pid, p.started)).collect();
        self.started
            .retain(|pid, started| now.get(pid) == Some(started));
    }

    /// Whether `process` is an exited child of the agent (pid 1, leading
    /// process group 1) that the agent did not start: an orphan to reap.
    pub fn is_orphan(&self, process: &Stat) -> bool {
        let registered = self.started.get(&process.pid) == Some(&process.started);
        let own = registered || process.pgrp == 1;
        process.zombie && process.ppid == 1 && !own
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: u32, ppid: u32, zombie: bool, started: u64) -> Stat {
        Stat {
            pid,
            zombie,
            ppid,
            pgrp: pid,
            started,
        }
    }

    #[test]
    fn stat_lines_give_state_parent_and_start_time() {
        let line = "42 (a) b (c)) Z 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 98765 0 0";
        assert_eq!(Stat::parse(line), Some(stat(42, 1, true, 98765)));
        let grouped = "43 (sh) Z 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0";
        assert_eq!(Stat::parse(grouped).map(|s| s.pgrp), Some(1));
        assert_eq!(Stat::parse("7 (z) S 3 7 9"), None, "too short");
        assert_eq!(Stat::parse("garbage"), None);
        let own = Stat::of(std::process::id()).unwrap();
        assert_eq!(own.pid, std::process::id());
        assert!(!own.zombie);
    }

    #[test]
    fn only_exited_children_the_agent_did_not_start_are_orphans() {
        let mut registry = Registry::default();
        let me = Stat::of(std::process::id()).unwrap();
        // Registered in two pieces, as a pipe may deliver it.
        let bytes = me.pid.to_ne_bytes();
        registry.add_pids(&bytes[..3]);
        registry.add_pids(&bytes[3..]);
        let own = stat(me.pid, 1, true, me.started);
        assert!(!registry.is_orphan(&own), "started by the agent");
        assert!(
            registry.is_orphan(&stat(me.pid, 1, true, me.started + 1)),
            "the same pid, reused by an orphan"
        );
        assert!(registry.is_orphan(&stat(9, 1, true, 5)));
        assert!(!registry.is_orphan(&stat(9, 1, false, 5)), "still running");
        assert!(!registry.is_orphan(&stat(9, 4, true, 5)), "another's child");
        let in_agents_group = Stat {
            pgrp: 1,
            ..stat(9, 1, true, 5)
        };
        assert!(
            !registry.is_orphan(&in_agents_group),
            "failed before it left the agent's group"
        );
        registry.keep_only(&[]);
        assert!(registry.is_orphan(&own), "forgotten once gone");
    }
}
