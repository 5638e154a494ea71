//! One child process: spawned in its own session with a scrubbed
//! environment and confined before `exec` (`sys`: project directory,
//! cgroups or rlimits, user, no-new-privileges, parent-death signal), its
//! limits watched (`limits::watch`), its stdin and stdout one socket
//! pumped by tasks (`stdio`), its stderr a file it writes itself
//! (`stderr_log`), reaped by one task that also follows that file and
//! kills whatever is left of its session, group and cgroups
//! (`leftovers`), and stopped gracefully (stdin EOF → SIGTERM → SIGKILL).
//!
//! While a child runs the gateway holds one descriptor for it: its end of
//! the socket. The exit is learnt from SIGCHLD and `waitpid` (no pidfd),
//! and the stderr file is opened only to be read.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::launched::{self, Launched};
use super::leftovers;
use super::limits::{self, ChildLimits, LimitHit};
use super::spares;
use super::spawner;
pub use super::spec::{
    ChildGone, ChildOutput, Confine, ExitInfo, LineRefused, SpawnError, SpawnSpec,
};
use super::start::{kill_group, start, Forked};
use super::stderr_log::{self, ChildTag, Follower, StderrLog, StderrTail};
use super::stdio;

/// Capacity of the stdout queue towards the hub, in lines.
pub const OUTPUT_QUEUE: usize = 1024;
/// Capacity of the stdin queue towards the child, in lines.
pub const INPUT_QUEUE: usize = 256;
/// How long a child may take to exit after SIGTERM (an agent aborts its
/// run and kills its tools at once) before it is killed: a stop ends
/// within the stop grace plus this.
pub const TERM_GRACE: Duration = Duration::from_millis(900);
/// How long stdout is still read after the child exited.
const STDOUT_DRAIN: Duration = Duration::from_millis(500);

/// A running (or exited) child. Dropping it SIGKILLs the child's process
/// group if the child has not exited yet.
pub struct ChildProcess {
    /// The child's pid, which is also its process-group id.
    pid: u32,
    /// Project name, for log fields.
    project: String,
    /// Queue to the task that owns stdin; `None` once stdin was closed.
    stdin: Mutex<Option<mpsc::Sender<Bytes>>>,
    /// `Some` once the child was reaped and its group killed.
    exit: watch::Receiver<Option<ExitInfo>>,
    /// The file the child writes its stderr to, if it has one.
    stderr_log: Option<Arc<StderrLog>>,
    /// Its cgroups or rlimits, and the limit it hit.
    limits: Option<Arc<ChildLimits>>,
    /// A spare agent assigned this project (see `spares`).
    spare: bool,
}

/// A child's start, prepared: a spare agent already sent its assignment
/// ([`Start::prepare`], off the event loop), or a spawn for the spawner
/// thread. Dropping a prepared start that is not started ends its spare.
pub struct Start(Option<Prepared>);

enum Prepared {
    /// The spawner thread takes a ready spare, else forks.
    Claim(SpawnSpec),
    /// The spawner thread forks (no spare was ready for it).
    Fork(SpawnSpec),
    /// A spare agent, assigned its project.
    Assigned(Forked),
}

impl Start {
    /// Takes a ready spare agent for `spec` and sends it its assignment
    /// now, on the calling thread, when one fits; else the spawner thread
    /// forks the child. Blocking (it opens the child's stderr file): call
    /// it off the event loop, inside the runtime (a blocking task), where
    /// the spawn's other file-system steps run: a cold start served by a
    /// spare then needs no trip to the spawner thread.
    pub fn prepare(spec: SpawnSpec) -> Start {
        let prepared = match spares::claim(&spec) {
            Some(spare) => assigned(spares::assign(spare, &spec), spec),
            None => Prepared::Fork(spec),
        };
        Start(Some(prepared))
    }
}

impl From<SpawnSpec> for Start {
    fn from(spec: SpawnSpec) -> Start {
        Start(Some(Prepared::Claim(spec)))
    }
}

impl Drop for Start {
    fn drop(&mut self) {
        if let Some(Prepared::Assigned(forked)) = self.0.take() {
            // Its reaping needs the runtime (blocking tasks have it too);
            // dropped on a thread outside it, the spare is killed and
            // left to the gateway's exit.
            match tokio::runtime::Handle::try_current() {
                Ok(_) => forked.abandon(),
                Err(_) => {
                    kill_group(forked.pid, Signal::SIGKILL, &forked.spec.project);
                    if let Some(limits) = &forked.limits {
                        limits.kill_all();
                    }
                }
            }
        }
    }
}

impl ChildProcess {
    /// Starts the child (a spare agent assigned its project, else forked or
    /// executed on the spawner thread, see `spawner`) and its pump tasks.
    /// Must be called from a task on the tokio runtime.
    pub async fn spawn(
        start: impl Into<Start>,
    ) -> Result<(ChildProcess, mpsc::Receiver<ChildOutput>), SpawnError> {
        let forked = match start.into().0.take() {
            Some(Prepared::Assigned(forked)) => forked,
            Some(Prepared::Claim(spec)) => on_spawner(spec, fork).await?,
            Some(Prepared::Fork(spec)) => on_spawner(spec, super::start::start).await?,
            None => unreachable!("a start is taken once"),
        };
        Self::started(forked)
    }

    /// The child `forked` with its pump tasks.
    fn started(forked: Forked) -> Result<(ChildProcess, mpsc::Receiver<ChildOutput>), SpawnError> {
        let program = forked.spec.program.clone();
        let gone = |source: std::io::Error| SpawnError::Io {
            program: program.clone(),
            source,
        };
        let Forked {
            spec,
            child,
            pid,
            stdio,
            stderr_from,
            limits,
            spare,
        } = forked;
        let stdio = stdio
            .set_nonblocking(true)
            .and_then(|()| tokio::net::UnixStream::from_std(stdio))
            .map_err(&gone);
        let (stdout, stdin) = match stdio {
            Ok(stream) => stream.into_split(),
            Err(e) => {
                kill_group(pid, Signal::SIGKILL, &spec.project);
                launched::reap_later(child);
                if let Some(limits) = limits {
                    tokio::spawn(limits::watch::remove_when_empty(limits));
                }
                return Err(e);
            }
        };
        let tag = ChildTag {
            project: spec.project.clone(),
            pid,
        };
        tracing::info!(project = %spec.project, pid, program = %spec.program.display(), "child started");

        let (out_tx, out_rx) = mpsc::channel(OUTPUT_QUEUE);
        let (in_tx, in_rx) = mpsc::channel(INPUT_QUEUE);
        let (exit_tx, exit_rx) = watch::channel(None);

        let mut exited = exit_rx.clone();
        let writer = stdio::write_stdin(stdin, in_rx, tag.clone());
        tokio::spawn(async move {
            // After exit, stop writing even if a grandchild holds the socket.
            tokio::select! {
                () = writer => {}
                _ = exited.wait_for(Option::is_some) => {}
            }
        });
        let stdout_task = tokio::spawn(stdio::read_stdout(
            stdout,
            spec.max_line,
            out_tx.clone(),
            tag.clone(),
        ));
        if let Some(limits) = limits.as_ref().filter(|l| l.is_watched()) {
            tokio::spawn(limits::watch::watch(
                limits.clone(),
                pid,
                exit_rx.clone(),
                spec.project.clone(),
            ));
        }
        let follower = spec
            .stderr_log
            .clone()
            .map(|log| Follower::new(log, stderr_from, tag.clone()));
        tokio::spawn(reap(
            child,
            stdout_task,
            exit_tx,
            out_tx,
            tag,
            limits.clone(),
            follower,
        ));

        let process = ChildProcess {
            pid,
            project: spec.project,
            stdin: Mutex::new(Some(in_tx)),
            exit: exit_rx,
            stderr_log: spec.stderr_log.map(Arc::new),
            limits,
            spare,
        };
        Ok((process, out_rx))
    }

    /// The child's stderr, for its last lines (read from its file when
    /// asked).
    pub fn stderr_tail(&self) -> StderrTail {
        StderrTail::of(self.stderr_log.clone())
    }

    /// The last line of the child's stderr (its own account of why it
    /// failed, when it did), read from its file now.
    pub fn last_stderr_line(&self) -> Option<String> {
        self.stderr_log.as_deref().and_then(StderrLog::last_line)
    }

    /// Whether the child is a spare agent that was assigned its project,
    /// rather than started for it.
    pub fn was_spare(&self) -> bool {
        self.spare
    }

    /// The child's pid (also its process-group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The resource limit the child hit, if one did (known once it is
    /// killed for it, before its exit is published).
    pub fn limit_hit(&self) -> Option<LimitHit> {
        self.limits.as_ref().and_then(|l| l.hit())
    }

    /// Queues one line for the child's stdin; `line` must end with `'\n'`.
    /// Waits while the queue is full.
    pub async fn send(&self, line: Bytes) -> Result<(), ChildGone> {
        debug_assert!(
            line.ends_with(b"\n"),
            "a line for the child must end with LF"
        );
        let queue = self.lock_stdin().clone().ok_or(ChildGone)?;
        queue.send(line).await.map_err(|_| ChildGone)
    }

    /// Queues one line for the child's stdin without waiting; `line` must
    /// end with `'\n'`.
    pub fn try_send(&self, line: Bytes) -> Result<(), LineRefused> {
        debug_assert!(
            line.ends_with(b"\n"),
            "a line for the child must end with LF"
        );
        let guard = self.lock_stdin();
        let queue = guard.as_ref().ok_or(LineRefused::Gone)?;
        queue.try_send(line).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => LineRefused::Full,
            mpsc::error::TrySendError::Closed(_) => LineRefused::Gone,
        })
    }

    /// Closes the child's stdin once the lines already queued are written.
    pub fn close_stdin(&self) {
        self.lock_stdin().take();
    }

    /// Sends `sig` to the child's process group; a no-op once it exited.
    pub fn signal_group(&self, sig: Signal) {
        if self.exited().is_none() {
            kill_group(self.pid, sig, &self.project);
        }
    }

    /// Stops the child: closes stdin, then after `grace` SIGTERMs the group,
    /// then after at most [`TERM_GRACE`] more SIGKILLs it, and returns how
    /// it ended (with everything it started gone).
    pub async fn stop(&self, grace: Duration) -> ExitInfo {
        self.close_stdin();
        if let Ok(exit) = tokio::time::timeout(grace, self.wait()).await {
            return exit;
        }
        tracing::info!(project = %self.project, pid = self.pid, "child still running after stdin closed: sending SIGTERM");
        self.signal_group(Signal::SIGTERM);
        if let Ok(exit) = tokio::time::timeout(grace.min(TERM_GRACE), self.wait()).await {
            return exit;
        }
        tracing::warn!(project = %self.project, pid = self.pid, "child ignored SIGTERM: sending SIGKILL");
        self.signal_group(Signal::SIGKILL);
        self.wait().await
    }

    /// How the child ended, if it has.
    pub fn exited(&self) -> Option<ExitInfo> {
        *self.exit.borrow()
    }

    /// Waits until the child was reaped and its group killed.
    pub async fn wait(&self) -> ExitInfo {
        let mut exit = self.exit.clone();
        let unknown = ExitInfo {
            code: None,
            signal: None,
        };
        let published = match exit.wait_for(Option::is_some).await {
            Ok(info) => *info,
            // The reaper is gone without publishing: the runtime is shutting down.
            Err(_) => None,
        };
        published.unwrap_or(unknown)
    }

    fn lock_stdin(&self) -> std::sync::MutexGuard<'_, Option<mpsc::Sender<Bytes>>> {
        self.stdin
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl fmt::Debug for ChildProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildProcess")
            .field("pid", &self.pid)
            .field("project", &self.project)
            .field("exited", &self.exited())
            .finish_non_exhaustive()
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if self.exited().is_none() {
            tracing::debug!(project = %self.project, pid = self.pid, "child handle dropped: killing its group");
            kill_group(self.pid, Signal::SIGKILL, &self.project);
        }
    }
}

/// Runs `start` (blocking) with `spec` on the spawner thread; a child
/// started for a caller that stopped waiting is ended there.
async fn on_spawner(
    spec: SpawnSpec,
    start: fn(SpawnSpec) -> Result<Forked, SpawnError>,
) -> Result<Forked, SpawnError> {
    let program = spec.program.clone();
    let gone = |source: std::io::Error| SpawnError::Io {
        program: program.clone(),
        source,
    };
    let (tx, rx) = oneshot::channel();
    spawner::submit(move || {
        if let Err(Ok(unclaimed)) = tx.send(start(spec)) {
            unclaimed.abandon();
        }
    })
    .map_err(|e| gone(std::io::Error::other(e)))?;
    rx.await
        .map_err(|_| gone(std::io::Error::other(spawner::SpawnerGone)))?
}

/// Starts the child: a spare agent assigned its project when one is
/// ready for a spawn like this, else a new process. Blocking: runs on the
/// spawner thread.
fn fork(spec: SpawnSpec) -> Result<Forked, SpawnError> {
    let Some(spare) = spares::claim(&spec) else {
        return start(spec);
    };
    match assigned(spares::assign(spare, &spec), spec) {
        Prepared::Assigned(forked) => Ok(forked),
        Prepared::Fork(spec) | Prepared::Claim(spec) => start(spec),
    }
}

/// The child a spare agent's `assignment` for `spec` gave, or `spec`
/// to fork when the spare could not be assigned.
fn assigned(assignment: std::io::Result<spares::Assigned>, spec: SpawnSpec) -> Prepared {
    match assignment {
        Ok(assigned) => Prepared::Assigned(Forked {
            spec,
            child: assigned.child,
            pid: assigned.pid,
            stdio: assigned.stdio,
            stderr_from: assigned.stderr_from,
            limits: assigned.limits,
            spare: true,
        }),
        Err(e) => {
            tracing::warn!(project = %spec.project, error = %e, "a spare agent could not be assigned: starting a new one");
            Prepared::Fork(spec)
        }
    }
}

/// Waits for `child` to exit: `waitpid(WNOHANG)` at every SIGCHLD, and
/// meanwhile follows its stderr file (`follower`) every
/// [`stderr_log::FOLLOW_EVERY`].
async fn exit_of(
    child: &mut Launched,
    follower: &mut Option<Follower>,
) -> std::io::Result<std::process::ExitStatus> {
    // Listening before the first look: an exit in between still wakes us.
    let mut chld = signal(SignalKind::child());
    let mut follow = tokio::time::interval(stderr_log::FOLLOW_EVERY);
    follow.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    follow.tick().await;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(status);
        }
        let sigchld = async {
            match &mut chld {
                Ok(chld) => {
                    chld.recv().await;
                }
                // No SIGCHLD stream: look again now and then.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        tokio::select! {
            () = sigchld => {}
            _ = follow.tick() => {
                if let Some(follower) = follower {
                    follower.follow(false);
                }
            }
        }
    }
}

/// Owns the child's handle: reaps it, kills the rest of its group, drains stdout
/// (bounded), logs the rest of its stderr, publishes the exit and sends
/// `Exited` last.
async fn reap(
    mut child: Launched,
    mut stdout_task: JoinHandle<()>,
    exit_tx: watch::Sender<Option<ExitInfo>>,
    out: mpsc::Sender<ChildOutput>,
    tag: ChildTag,
    limits: Option<Arc<ChildLimits>>,
    mut follower: Option<Follower>,
) {
    let exit = match exit_of(&mut child, &mut follower).await {
        Ok(status) => ExitInfo::from(status),
        Err(e) => {
            // Not signalled now: a pid that cannot be waited for may
            // already be another process's.
            tracing::error!(project = %tag.project, pid = tag.pid, error = %e, "waiting for the child failed");
            ExitInfo {
                code: None,
                signal: None,
            }
        }
    };
    if let Some(follower) = &mut follower {
        follower.follow(true);
    }
    // Killing first lets stdout reach EOF at once when only grandchildren
    // held it open; what the child already wrote stays in the pipe.
    kill_group(tag.pid, Signal::SIGKILL, &tag.project);
    leftovers::forget(tag.pid);
    if !leftovers::kill_session(tag.pid).await {
        tracing::warn!(project = %tag.project, pid = tag.pid, "processes of the child's session survived SIGKILL");
    }
    if let Some(limits) = &limits {
        // A limit hit just before the exit still names the reason.
        if let (None, Some(hit)) = (limits.hit(), limits.check()) {
            tracing::warn!(project = %tag.project, pid = tag.pid, reason = hit.reason(), "the agent hit a resource limit");
        }
        limits.kill_all();
    }
    if tokio::time::timeout(STDOUT_DRAIN, &mut stdout_task)
        .await
        .is_err()
    {
        tracing::debug!(project = %tag.project, pid = tag.pid, "child stdout still open after exit: no longer reading it");
        stdout_task.abort();
        let _ = stdout_task.await;
    }
    tracing::info!(project = %tag.project, pid = tag.pid, exit = %exit, "child exited");
    exit_tx.send_replace(Some(exit));
    if let Some(limits) = limits {
        tokio::spawn(limits::watch::remove_when_empty(limits));
    }
    let _ = out.send(ChildOutput::Exited(exit)).await;
}

#[cfg(test)]
mod tests;
