//! Spare agents: `corral-agent spare` children started ahead of any
//! project (`--spare-agents N`), which have entered as much of the
//! sandbox as needs no project and wait on their stdin. A cold start that
//! finds one ready sends it its project instead of starting a process:
//! its command line and environment (the assignment, see the agent's
//! `spare` module) with the project's stderr file passed alongside, on
//! the socket that then carries the protocol. The child is then greeted
//! and supervised like any other.
//!
//! A spawn can take a spare only when a spare is what it would have
//! started: `corral-agent rpc --sandbox` forked from the template, with
//! absolute `--cwd` and `--sandbox-hide` paths (see `Kind::of`). The
//! spares are of the last such spawn's kind (program and binary, account,
//! limits, network); a spawn of another kind retires them and new ones of
//! its kind follow. A spare is started under a start slot like any child,
//! off the critical path ([`REFILL_AFTER`] after the spawn that took the
//! last one), counts
//! as a child for descriptors (one, its socket) and processes (two), and
//! holds no secret until its assignment. Its cgroup, when limits are on,
//! is named `spare-N` rather than after a project.
//!
//! A spare's mount namespace is a copy of the host's when it started (it
//! keeps a file system unmounted since then mounted, and does not see one
//! mounted since), so spares are replaced after [`MAX_AGE`]; also when
//! they die, when their binary is replaced (another inode or change time)
//! and when the gateway stops. The project directory the gateway opened
//! goes with the assignment, and the agent refuses a `--cwd` that is not
//! that directory in its view. A spare that fails to start, or an assigned
//! one that refuses its assignment (it exits with
//! [`corral_protocol::template::SPARE_REFUSED_EXIT`]; the hub then starts a
//! new agent for the project), stops the pool for [`RETRY_AFTER`]: starts
//! go on without spares.

use std::ffi::OsString;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use corral_protocol::template::{encode_assignment, MAX_REQUEST, SPARE_READY};
use nix::errno::Errno;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
use tokio::io::AsyncReadExt;

use super::launched::{self, Launched};
use super::leftovers;
use super::limits::{self, ChildLimits, Limits};
use super::spawner;
use super::spec::{Confine, SpawnSpec};
use super::start::{self, kill_group, Forked};
use super::sys::Credentials;
use super::template::Identity;

/// Spare agents kept by default (`--spare-agents`).
pub const DEFAULT_SPARES: usize = 1;
/// How long a spare is kept before it is replaced: its view of the host's
/// mounts is as old as it is.
pub const MAX_AGE: Duration = Duration::from_secs(60);
/// How long a new spare may take to say it is ready.
pub const READY_WITHIN: Duration = Duration::from_secs(10);
/// How long no spare is started after one failed to start.
pub const RETRY_AFTER: Duration = Duration::from_secs(60);
/// How long after a spare is taken its replacement starts (then once a
/// start slot is free): the start that took it answers its client's first
/// requests before another sandbox is set up beside it.
pub const REFILL_AFTER: Duration = Duration::from_millis(20);
/// How often the spares are looked over (age, death).
const LOOK_EVERY: Duration = Duration::from_secs(10);
/// The name spares have in logs and in their cgroups.
const SPARE_NAME: &str = "spare";
/// The variables of the operator's child environment a spare starts with:
/// test hooks its sandbox reads before the assignment. Everything else
/// (the token, secrets) comes with the assignment.
const SPARE_VARS: &[&str] = &["CORRAL_SANDBOX_SIMULATE_MISSING"];
/// How long writing an assignment may wait for room in the socket, in
/// milliseconds.
const SEND_WITHIN_MS: u16 = 1000;

/// Spares wanted (`--spare-agents`).
static TARGET: AtomicUsize = AtomicUsize::new(DEFAULT_SPARES);
static POOL: Mutex<Pool> = Mutex::new(Pool {
    kind: None,
    ready: Vec::new(),
    starting: 0,
    failed_at: None,
    stopped: false,
});
/// Whether the task that looks the spares over runs.
static LOOKING: AtomicBool = AtomicBool::new(false);
static ASSIGNED: AtomicU64 = AtomicU64::new(0);
static MISSED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

/// Sets how many spares are kept (`--spare-agents`; 0: none). Call before
/// the first start.
pub fn set_target(spares: usize) {
    TARGET.store(spares, Ordering::Relaxed);
}

/// What the spares did so far, for the metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Spares ready now.
    pub ready: usize,
    /// Starts served by a spare.
    pub assigned: u64,
    /// Starts that could have been served by a spare and found none ready.
    pub missed: u64,
    /// Spares that failed to start, or died or could not be assigned.
    pub failed: u64,
}

pub fn stats() -> Stats {
    Stats {
        ready: pool().ready.len(),
        assigned: ASSIGNED.load(Ordering::Relaxed),
        missed: MISSED.load(Ordering::Relaxed),
        failed: FAILED.load(Ordering::Relaxed),
    }
}

struct Pool {
    /// What the spares are: what the last spawn that could take one
    /// would have started.
    kind: Option<Arc<Kind>>,
    /// Ready spares, oldest first.
    ready: Vec<Spare>,
    /// Spares being started.
    starting: usize,
    /// When a spare last failed to start.
    failed_at: Option<Instant>,
    /// The gateway is stopping: no more spares.
    stopped: bool,
}

fn pool() -> MutexGuard<'static, Pool> {
    POOL.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Pool {
    /// Starts spares of the pool's kind until enough are ready or
    /// starting. Needs the tokio runtime (the spawner thread enters it;
    /// blocking tasks run in it).
    fn refill(&mut self) {
        let Some(kind) = self.kind.clone() else {
            return;
        };
        if self.stopped || self.resting() || tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        while self.ready.len() + self.starting < TARGET.load(Ordering::Relaxed) {
            self.starting += 1;
            tokio::spawn(start_one(kind.clone()));
        }
        if !LOOKING.swap(true, Ordering::Relaxed) {
            tokio::spawn(look_over());
        }
    }

    /// Whether a spare failed within [`RETRY_AFTER`].
    fn resting(&self) -> bool {
        self.failed_at.is_some_and(|at| at.elapsed() < RETRY_AFTER)
    }

    /// Notes a spare that failed; says why when the pool was not already
    /// resting.
    fn failed(&mut self, why: &str) {
        FAILED.fetch_add(1, Ordering::Relaxed);
        if !self.resting() {
            tracing::warn!(error = why, "a spare agent failed: cold starts start new agents; spares are tried again in {} s", RETRY_AFTER.as_secs());
        }
        self.failed_at = Some(Instant::now());
    }

    /// Whether a spare of `kind` just started is still wanted.
    fn wants(&self, kind: &Arc<Kind>) -> bool {
        !self.stopped && self.kind.as_ref().is_some_and(|k| Arc::ptr_eq(k, kind))
    }

    /// Retires the spares that are not usable any more (dead, too old).
    fn retire_unusable(&mut self) {
        let ready = std::mem::take(&mut self.ready);
        for mut spare in ready {
            match spare.usable() {
                true => self.ready.push(spare),
                false => spare.retire(),
            }
        }
    }
}

/// What a spare is: everything of a spawn that does not depend on the
/// project. Two spawns of one kind can take the same spare.
#[derive(Debug)]
pub(super) struct Kind {
    program: PathBuf,
    /// The binary, so that an upgrade reaches new spares.
    identity: Option<Identity>,
    host_network: bool,
    /// The `--sandbox-hide` paths, for the spare to make their covers
    /// ahead.
    hides: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    credentials: Option<Credentials>,
    limits: Option<Arc<Limits>>,
    max_line: usize,
}

impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        let same_limits = match (&self.limits, &other.limits) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        same_limits
            && self.program == other.program
            && self.identity == other.identity
            && self.host_network == other.host_network
            && self.hides == other.hides
            && self.env == other.env
            && self.credentials == other.credentials
            && self.max_line == other.max_line
    }
}

impl Kind {
    /// The spare a spawn of `spec` could take, if one could: a sandboxed
    /// `corral-agent rpc` from the template whose paths a spare accepts.
    pub(super) fn of(spec: &SpawnSpec) -> Option<Kind> {
        if !spec.template || !spec.confine.sandboxed || spec.args.first()? != "rpc" {
            return None;
        }
        let mut sandbox = false;
        let mut host_network = true;
        let mut hides = Vec::new();
        let mut args = spec.args.iter();
        while let Some(arg) = args.next() {
            let bytes = arg.as_bytes();
            if arg == "--cwd" || arg == "--sandbox-hide" {
                let path = args.next()?;
                // A spare takes absolute paths only.
                if !Path::new(path).is_absolute() {
                    return None;
                }
                if arg == "--sandbox-hide" {
                    hides.push(path.clone());
                }
            } else if bytes.starts_with(b"--cwd=") || bytes.starts_with(b"--sandbox-hide=") {
                return None;
            } else if arg == "--sandbox" {
                sandbox = true;
            } else if arg == "--model-socket" || bytes.starts_with(b"--model-socket=") {
                host_network = false;
            }
        }
        if !sandbox {
            return None;
        }
        let env = spec
            .env
            .iter()
            .filter(|(name, _)| SPARE_VARS.iter().any(|var| name == var))
            .cloned()
            .collect();
        let identity = launched::resolve(&spec.program, &spec.env)
            .ok()
            .and_then(|path| Identity::of(&path));
        Some(Kind {
            program: spec.program.clone(),
            identity,
            host_network,
            hides,
            env,
            credentials: spec.confine.credentials.clone(),
            limits: spec.confine.limits.clone(),
            max_line: spec.max_line,
        })
    }

    /// The spawn of a spare of this kind.
    fn spec(&self) -> SpawnSpec {
        let mut args: Vec<OsString> = vec!["spare".into()];
        if !self.host_network {
            args.push("--without-host-network".into());
        }
        for hide in &self.hides {
            args.extend(["--sandbox-hide".into(), hide.clone()]);
        }
        SpawnSpec {
            program: self.program.clone(),
            args,
            cwd: "/".into(),
            env: self.env.clone(),
            project: SPARE_NAME.into(),
            max_line: self.max_line,
            confine: Confine {
                cwd_dir: None,
                credentials: self.credentials.clone(),
                limits: self.limits.clone(),
                sandboxed: true,
            },
            stderr_log: None,
            template: true,
        }
    }
}

/// A spare agent, ready: it said so and waits for its assignment.
pub(super) struct Spare {
    child: Launched,
    pid: u32,
    /// The gateway's end of its stdio (non-blocking).
    stdio: StdUnixStream,
    limits: Option<Arc<ChildLimits>>,
    born: Instant,
}

impl Spare {
    /// Whether it is still there and young enough to be assigned.
    fn usable(&mut self) -> bool {
        self.born.elapsed() < MAX_AGE && matches!(self.child.try_wait(), Ok(None))
    }

    /// Ends it (reaped in the background, its cgroups removed once empty).
    fn retire(self) {
        end(self.child, self.pid, self.limits);
    }
}

/// Ends a spare that is not (or no longer) in the pool.
fn end(mut child: Launched, pid: u32, limits: Option<Arc<ChildLimits>>) {
    if matches!(child.try_wait(), Ok(None)) {
        kill_group(pid, Signal::SIGKILL, SPARE_NAME);
    }
    if let Some(limits) = limits {
        limits.kill_all();
        tokio::spawn(limits::watch::remove_when_empty(limits));
    }
    launched::reap_later(child);
}

/// A spare assigned its project: the child as [`child`] starts it.
pub(super) struct Assigned {
    pub child: Launched,
    pub pid: u32,
    pub stdio: StdUnixStream,
    pub stderr_from: u64,
    pub limits: Option<Arc<ChildLimits>>,
}

/// Takes a ready spare for `spec` if it could take one, and sees to it
/// that spares of its kind follow: at once when none was ready, else once
/// the one taken has its assignment ([`assign`]; starting a spare is work
/// the assigned one need not wait behind). Runs off the event loop,
/// inside the runtime: in the start's blocking task, or on the spawner
/// thread.
pub(super) fn claim(spec: &SpawnSpec) -> Option<Spare> {
    if TARGET.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let kind = Kind::of(spec)?;
    let mut pool = pool();
    if pool.stopped || pool.resting() {
        return None;
    }
    if pool.kind.as_deref() != Some(&kind) {
        if pool.kind.is_some() {
            tracing::info!(
                "the spare agents' program, account, limits or network changed: replacing them"
            );
        }
        pool.kind = Some(Arc::new(kind));
        pool.failed_at = None;
        for spare in std::mem::take(&mut pool.ready) {
            spare.retire();
        }
    }
    let mut claimed = None;
    while !pool.ready.is_empty() {
        let mut spare = pool.ready.remove(0);
        if spare.usable() {
            claimed = Some(spare);
            break;
        }
        FAILED.fetch_add(u64::from(spare.born.elapsed() < MAX_AGE), Ordering::Relaxed);
        spare.retire();
    }
    if claimed.is_none() {
        MISSED.fetch_add(1, Ordering::Relaxed);
        pool.refill();
    }
    claimed
}

/// Sends `spare` its assignment for `spec`: the command line and the
/// environment, with the project's stderr file (opened here, the way a new
/// child's is) and the project directory the gateway opened. A spare that
/// cannot be sent it is retired; one whose stderr file could not be
/// opened (the gateway out of descriptors, say) goes back to the pool.
/// Blocking, like [`claim`].
pub(super) fn assign(spare: Spare, spec: &SpawnSpec) -> std::io::Result<Assigned> {
    let (stderr, stderr_from) = match stderr_of(spec) {
        Ok(opened) => opened,
        Err(e) => {
            give_back(spare);
            return Err(e);
        }
    };
    let mut fds = vec![stderr.as_raw_fd()];
    fds.extend(spec.confine.cwd_dir.as_ref().map(|dir| dir.as_raw_fd()));
    let sent = send_assignment(&spare, spec, &fds);
    // The claim left the pool one short.
    pool().refill();
    match sent {
        Ok(()) => {
            ASSIGNED.fetch_add(1, Ordering::Relaxed);
            Ok(Assigned {
                child: spare.child,
                pid: spare.pid,
                stdio: spare.stdio,
                stderr_from,
                limits: spare.limits,
            })
        }
        Err(e) => {
            FAILED.fetch_add(1, Ordering::Relaxed);
            spare.retire();
            Err(e)
        }
    }
}

/// The child's stderr (its file, else `/dev/null`) and the length of the
/// file before the child could write to it.
fn stderr_of(spec: &SpawnSpec) -> std::io::Result<(std::fs::File, u64)> {
    match &spec.stderr_log {
        Some(log) => {
            let file = log
                .open_for_child()
                .map_err(|e| std::io::Error::other(format!("its stderr file: {e}")))?;
            let len = file.metadata().map_or(0, |m| m.len());
            Ok((file, len))
        }
        None => Ok((
            std::fs::File::options()
                .read(true)
                .write(true)
                .open("/dev/null")?,
            0,
        )),
    }
}

/// Puts a spare that was not assigned back at the front of the pool.
fn give_back(spare: Spare) {
    let mut pool = pool();
    // Its replacement may already be on its way.
    match pool.stopped || pool.ready.len() + pool.starting >= TARGET.load(Ordering::Relaxed) {
        true => spare.retire(),
        false => pool.ready.insert(0, spare),
    }
}

/// Writes the assignment, `fds` with its first bytes.
fn send_assignment(spare: &Spare, spec: &SpawnSpec, fds: &[RawFd]) -> std::io::Result<()> {
    let argv = std::iter::once(spec.program.as_os_str())
        .chain(spec.args.iter().map(OsString::as_os_str))
        .map(|arg| arg.as_bytes().to_vec())
        .collect();
    let env = spec
        .env
        .iter()
        .map(|(name, value)| {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            pair
        })
        .collect();
    let mut message = encode_assignment(argv, env);
    let sent = match message.len() - 4 > MAX_REQUEST {
        true => Err(std::io::Error::other(format!(
            "the assignment is {} bytes, over the spare's {MAX_REQUEST}",
            message.len() - 4
        ))),
        false => send_all(&spare.stdio, &message, fds).map_err(std::io::Error::from),
    };
    // The encoded copy of the token and secrets (the spec keeps its own
    // until the child is gone, as for any start).
    wipe(&mut message);
    sent
}

/// Writes all of `bytes` to the non-blocking `socket`, `fds` with the
/// first of them, waiting at most [`SEND_WITHIN_MS`] for room each time.
fn send_all(socket: &StdUnixStream, mut bytes: &[u8], mut fds: &[RawFd]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        let rights = [ControlMessage::ScmRights(fds)];
        let control: &[ControlMessage] = match fds.is_empty() {
            true => &[],
            false => &rights,
        };
        let iov = [IoSlice::new(bytes)];
        match sendmsg::<()>(
            socket.as_raw_fd(),
            &iov,
            control,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Ok(n) => {
                bytes = &bytes[n..];
                fds = &[];
            }
            Err(Errno::EINTR) => {}
            Err(Errno::EAGAIN) => {
                let mut writable = [PollFd::new(
                    std::os::fd::AsFd::as_fd(socket),
                    PollFlags::POLLOUT,
                )];
                if poll(&mut writable, PollTimeout::from(SEND_WITHIN_MS))? == 0 {
                    return Err(Errno::ETIMEDOUT);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Zeroes `bytes` in a way the compiler keeps.
fn wipe(bytes: &mut [u8]) {
    for byte in bytes.iter_mut() {
        // SAFETY: a plain write through a valid, exclusive reference.
        #[allow(unsafe_code)]
        unsafe {
            std::ptr::write_volatile(byte, 0)
        };
    }
}

/// Starts one spare of `kind` under a start slot and adds it to the pool
/// once it said it is ready (or retires it, if no longer wanted).
async fn start_one(kind: Arc<Kind>) {
    let mut began = Instant::now();
    let started = async {
        tokio::time::sleep(REFILL_AFTER).await;
        let _slot = spawner::start_slot().await;
        if !pool().wants(&kind) {
            return Ok(None);
        }
        let spec = kind.spec();
        began = Instant::now();
        let (tx, rx) = tokio::sync::oneshot::channel();
        spawner::submit(move || {
            if let Err(Ok(unclaimed)) = tx.send(start::start(spec)) {
                unclaimed.abandon();
            }
        })
        .map_err(|e| e.to_string())?;
        let forked = rx
            .await
            .map_err(|_| spawner::SpawnerGone.to_string())?
            .map_err(|e| e.to_string())?;
        ready(forked).await.map(Some)
    };
    let outcome = started.await;
    let mut pool = pool();
    pool.starting -= 1;
    match outcome {
        Ok(Some(spare)) if pool.wants(&kind) => {
            pool.ready.push(spare);
            // A spare started since the last failure ends the rest; one
            // queued before it does not.
            if pool.failed_at.is_some_and(|at| began > at) {
                pool.failed_at = None;
            }
        }
        Ok(Some(spare)) => {
            spare.retire();
            // Spares of the pool's kind now, if it changed meanwhile.
            pool.refill();
        }
        Ok(None) => pool.refill(),
        Err(e) => pool.failed(&format!("it could not start: {e}")),
    }
}

/// Notes that a spare refused its assignment (`why`): the pool rests, so
/// the hub's new start for the project is a fresh one (a spare queued
/// before now does not end the rest).
pub fn assignment_failed(why: &str) {
    pool().failed(&format!("it refused its assignment: {why}"));
}

/// Waits until the spare `forked` says it is ready; it is retired if it
/// does not within [`READY_WITHIN`].
async fn ready(forked: Forked) -> Result<Spare, String> {
    let Forked {
        mut child,
        pid,
        stdio,
        limits,
        ..
    } = forked;
    let said = async {
        stdio.set_nonblocking(true)?;
        let mut stream = tokio::net::UnixStream::from_std(stdio)?;
        let mut said = [0u8; SPARE_READY.len()];
        let read = tokio::time::timeout(READY_WITHIN, stream.read_exact(&mut said)).await;
        match read {
            Ok(Ok(_)) if said == *SPARE_READY => {}
            Ok(Ok(_)) => return Err(std::io::Error::other("it is not a spare agent")),
            Ok(Err(e)) => return Err(e),
            Err(_) => {
                return Err(std::io::Error::other(format!(
                    "not ready within {} s",
                    READY_WITHIN.as_secs()
                )))
            }
        }
        // Taken off the runtime until assigned (non-blocking still).
        stream.into_std()
    };
    match said.await {
        Ok(stdio) => Ok(Spare {
            child,
            pid,
            stdio,
            limits,
            born: Instant::now(),
        }),
        Err(e) => {
            let exit = child.try_wait().ok().flatten();
            end(child, pid, limits);
            Err(match exit {
                Some(status) => format!("{e} (it ended: {status})"),
                None => e.to_string(),
            })
        }
    }
}

/// Looks the spares over every [`LOOK_EVERY`]: a dead or old one is
/// replaced.
async fn look_over() {
    let mut every = tokio::time::interval(LOOK_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        let mut pool = pool();
        if pool.stopped {
            return;
        }
        pool.retire_unusable();
        pool.refill();
    }
}

/// Ends every spare (the gateway is stopping) and waits, bounded, until
/// they are reaped and their cgroups removed.
pub async fn stop() {
    let spares = {
        let mut pool = pool();
        pool.stopped = true;
        std::mem::take(&mut pool.ready)
    };
    for mut spare in spares {
        if matches!(spare.child.try_wait(), Ok(None)) {
            kill_group(spare.pid, Signal::SIGKILL, SPARE_NAME);
        }
        for _ in 0..100 {
            if !matches!(spare.child.try_wait(), Ok(None)) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        leftovers::forget(spare.pid);
        if let Some(limits) = spare.limits {
            limits::watch::remove_when_empty(limits).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(args: &[&str]) -> SpawnSpec {
        SpawnSpec {
            program: "/usr/bin/corral-agent".into(),
            args: args.iter().map(OsString::from).collect(),
            cwd: "/srv/p".into(),
            env: vec![
                ("ZUTCORE_RPC_TOKEN".into(), "secret".into()),
                ("CORRAL_SANDBOX_SIMULATE_MISSING".into(), "landlock".into()),
            ],
            project: "p".into(),
            max_line: 1024,
            confine: Confine {
                sandboxed: true,
                ..Confine::default()
            },
            stderr_log: None,
            template: true,
        }
    }

    #[test]
    fn only_a_sandboxed_agent_with_absolute_paths_takes_a_spare() {
        let good = [
            "rpc",
            "--sandbox",
            "--sandbox-hide",
            "/s",
            "--cwd",
            "/srv/p",
        ];
        let kind = Kind::of(&spec(&good)).expect("a spare fits");
        assert!(kind.host_network);
        assert_eq!(
            kind.env,
            [("CORRAL_SANDBOX_SIMULATE_MISSING".into(), "landlock".into())],
            "no secret goes to a spare"
        );
        let spare = kind.spec();
        assert_eq!(
            spare.args,
            ["spare", "--sandbox-hide", "/s"],
            "the spare makes the hides' covers ahead"
        );
        assert!(spare.stderr_log.is_none() && spare.confine.cwd_dir.is_none());
        let other_hides = Kind::of(&spec(&["rpc", "--sandbox", "--cwd", "/srv/p"]));
        assert_ne!(
            Some(&kind),
            other_hides.as_ref(),
            "other hides are another kind"
        );

        for refused in [
            &["rpc", "--cwd", "/srv/p"][..],
            &["run", "--sandbox", "--cwd", "/srv/p"],
            &["rpc", "--sandbox", "--cwd", "srv/p"],
            &["rpc", "--sandbox", "--cwd=/srv/p"],
            &["rpc", "--sandbox", "--sandbox-hide", "state", "--cwd", "/p"],
            &["rpc", "--sandbox", "--cwd"],
        ] {
            assert!(Kind::of(&spec(refused)).is_none(), "{refused:?}");
        }
        let mut executed = spec(&good);
        executed.template = false;
        assert!(Kind::of(&executed).is_none());
    }

    #[test]
    fn a_model_socket_makes_a_spare_without_the_host_network() {
        let args = [
            "rpc",
            "--sandbox",
            "--model-socket",
            "/s.sock",
            "--cwd",
            "/p",
        ];
        let kind = Kind::of(&spec(&args)).unwrap();
        assert!(!kind.host_network);
        assert_eq!(kind.spec().args, ["spare", "--without-host-network"]);
        let other = Kind::of(&spec(&["rpc", "--sandbox", "--cwd", "/q"])).unwrap();
        assert_ne!(kind, other, "another network is another kind");
        let same = Kind::of(&spec(&[
            "rpc",
            "--sandbox",
            "--model-socket",
            "/t",
            "--cwd",
            "/q",
        ]));
        assert_eq!(Some(kind), same, "the project is not part of the kind");
    }
}
