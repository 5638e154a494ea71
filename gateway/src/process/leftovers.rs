//! What is left of a child once it ended: every process it started. Each
//! child leads its own session (`setsid` in `sys`), and its tools' process
//! groups stay in that session, so "the child's processes" is "the
//! processes of session PID". When the child has been reaped its session
//! is killed until it is empty (bounded). A process that left the session
//! (`setsid` of its own) is orphaned when its parent dies; with the gateway
//! a child subreaper ([`become_subreaper`]) it is then reparented to the
//! gateway, where [`sweep`] kills and reaps it. No cgroup v2 needed.
//!
//! The live children are registered here ([`Registry`]) so a sweep never
//! takes one of them, or a grandchild of a live child, for an orphan; a
//! spawn holds the start lock from fork to registration, and a sweep holds
//! it while it runs.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;

/// How long an ended child's session is killed before giving up on it.
pub const KILL_WITHIN: Duration = Duration::from_millis(1500);
/// Pause between two rounds of killing.
const ROUND: Duration = Duration::from_millis(20);

/// Whether the gateway is a child subreaper (then orphans are its own).
static SUBREAPER: AtomicBool = AtomicBool::new(false);
/// Pids of the children spawned and not yet reaped (each also a session).
static LIVE: Mutex<BTreeSet<u32>> = Mutex::new(BTreeSet::new());

/// Makes the gateway the reaper of its descendants' orphans. Only the
/// gateway process calls this (not unit tests, which share a process with
/// other tests' children).
pub fn become_subreaper() -> Result<(), Errno> {
    nix::sys::prctl::set_child_subreaper(true)?;
    SUBREAPER.store(true, Ordering::SeqCst);
    Ok(())
}

/// Held by a start from before its fork until its pid is registered, and
/// by a sweep while it runs: no sweep ever sees a child it does not know
/// yet. Never taken on the gateway's async thread (a start may hold it
/// while the agent template answers).
static STARTING: Mutex<()> = Mutex::new(());

/// The start lock, held: no sweep runs while a start holds it.
pub struct Registry {
    _held: MutexGuard<'static, ()>,
}

impl Registry {
    /// Takes the start lock: hold it from before a fork until the child's
    /// pid is [`add`](Registry::add)ed.
    pub fn lock() -> Registry {
        Registry {
            _held: STARTING.lock().unwrap_or_else(PoisonError::into_inner),
        }
    }

    pub fn add(&mut self, pid: u32) {
        live().insert(pid);
    }

    pub fn remove(&mut self, pid: u32) {
        live().remove(&pid);
    }
}

/// The set of live children, locked briefly.
fn live() -> MutexGuard<'static, BTreeSet<u32>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Forgets a child that was reaped (without waiting for a start).
pub fn forget(pid: u32) {
    live().remove(&pid);
}

/// One process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: u32,
    pub zombie: bool,
    pub ppid: u32,
    pub session: u32,
}

impl Stat {
    /// Parses a `stat` line: `PID (COMM) STATE PPID PGRP SESSION …`; the
    /// command name may hold spaces and parentheses.
    pub fn parse(line: &str) -> Option<Stat> {
        let (head, rest) = line.rsplit_once(')')?;
        let pid = head.split_once('(')?.0.trim().parse().ok()?;
        let mut fields = rest.split_whitespace();
        let state = fields.next()?;
        let ppid = fields.next()?.parse().ok()?;
        let _pgrp = fields.next()?;
        let session = fields.next()?.parse().ok()?;
        Some(Stat {
            pid,
            zombie: state == "Z" || state == "X",
            ppid,
            session,
        })
    }
}

/// Every process now.
fn processes() -> Vec<Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let name = entry.ok()?.file_name();
            let pid: u32 = name.to_str()?.parse().ok()?;
            let line = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Stat::parse(&line)
        })
        .collect()
}

/// What one round of a sweep does to a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Keep,
    Kill,
    /// An orphan of ours that has exited: wait for it.
    Reap,
}

/// The rule of a sweep (no I/O): a member of the ended session dies; an
/// orphan reparented to the gateway dies unless it still belongs to a live
/// child's session, and is reaped once dead.
pub fn verdict(
    process: &Stat,
    me: u32,
    ended: Option<u32>,
    live: &BTreeSet<u32>,
    subreaper: bool,
) -> Verdict {
    if process.pid == me || live.contains(&process.pid) {
        return Verdict::Keep;
    }
    let orphan = subreaper && process.ppid == me;
    match (process.zombie, orphan) {
        (true, true) => Verdict::Reap,
        (true, false) => Verdict::Keep,
        (false, _) if ended == Some(process.session) => Verdict::Kill,
        (false, true) if !live.contains(&process.session) => Verdict::Kill,
        (false, _) => Verdict::Keep,
    }
}

/// One round: kills what must die and reaps dead orphans; returns how many
/// processes it killed (0: nothing of the ended session or orphaned is
/// left alive).
pub fn sweep(ended: Option<u32>) -> usize {
    let _starting = Registry::lock();
    let live = live().clone();
    let me = std::process::id();
    let subreaper = SUBREAPER.load(Ordering::SeqCst);
    let mut killed = 0;
    for process in processes() {
        let Ok(raw) = i32::try_from(process.pid) else {
            continue;
        };
        match verdict(&process, me, ended, &live, subreaper) {
            Verdict::Keep => {}
            Verdict::Kill => {
                if kill(Pid::from_raw(raw), Signal::SIGKILL).is_ok() {
                    killed += 1;
                }
            }
            Verdict::Reap => {
                let _ = waitpid(Pid::from_raw(raw), Some(WaitPidFlag::WNOHANG));
            }
        }
    }
    killed
}

/// Kills session `sid` (an ended child's) and the orphans until nothing
/// is left, for at most [`KILL_WITHIN`]; returns whether it got all.
pub async fn kill_session(sid: u32) -> bool {
    let deadline = tokio::time::Instant::now() + KILL_WITHIN;
    loop {
        let killed = tokio::task::spawn_blocking(move || sweep(Some(sid)))
            .await
            .unwrap_or(0);
        if killed == 0 {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(ROUND).await;
    }
}

/// Reaps (and kills) orphans whenever a child of the gateway changes
/// state, until `shutdown`.
pub async fn watch_orphans(shutdown: tokio_util::sync::CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut chld) = signal(SignalKind::child()) else {
        tracing::warn!(
            "cannot watch SIGCHLD: orphaned tool processes are reaped only when a child ends"
        );
        return;
    };
    loop {
        tokio::select! {
            _ = chld.recv() => {}
            () = shutdown.cancelled() => return,
        }
        let _ = tokio::task::spawn_blocking(|| sweep(None)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stat(pid: u32, ppid: u32, session: u32, zombie: bool) -> Stat {
        Stat {
            pid,
            zombie,
            ppid,
            session,
        }
    }

    #[test]
    fn parses_stat_lines_with_odd_names() {
        let line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 0";
        assert_eq!(Stat::parse(line), Some(stat(4242, 1, 4242, false)));
        assert_eq!(Stat::parse("7 (z) Z 3 7 9 0").map(|s| s.zombie), Some(true));
        assert_eq!(Stat::parse("garbage"), None);
    }

    #[test]
    fn the_ended_session_dies_and_live_children_stay() {
        let live: BTreeSet<u32> = [100].into();
        let me = 1;
        // A tool of the ended child 50, still parented inside its tree.
        assert_eq!(
            verdict(&stat(51, 50, 50, false), me, Some(50), &live, true),
            Verdict::Kill
        );
        // A live child and its tools are never touched.
        assert_eq!(
            verdict(&stat(100, me, 100, false), me, Some(50), &live, true),
            Verdict::Keep
        );
        assert_eq!(
            verdict(&stat(101, me, 100, false), me, Some(50), &live, true),
            Verdict::Keep,
            "an orphan of a live child stays until that child ends"
        );
        // Something unrelated stays.
        assert_eq!(
            verdict(&stat(7, 3, 7, false), me, Some(50), &live, true),
            Verdict::Keep
        );
    }

    #[test]
    fn orphans_that_left_their_session_die_and_are_reaped() {
        let live = BTreeSet::new();
        assert_eq!(
            verdict(&stat(60, 1, 60, false), 1, None, &live, true),
            Verdict::Kill
        );
        assert_eq!(
            verdict(&stat(60, 1, 60, true), 1, None, &live, true),
            Verdict::Reap
        );
        assert_eq!(
            verdict(&stat(60, 1, 60, false), 1, None, &live, false),
            Verdict::Keep,
            "without the subreaper a direct child is not ours to judge"
        );
    }
}
