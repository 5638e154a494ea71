//! The sandbox's process tree: outer (in the caller's pid namespace) →
//! the agent as pid 1 of the new one ([`Shape::AgentIsInit`]: two
//! processes, the agent doing init's duties itself, see `init`), or
//! outer → init (pid 1) → the confined program (pid 2) for a program that
//! cannot be an init ([`Shape::UnderInit`], `sandbox-exec`). [`start`]
//! returns only in the agent or program; outer (and init) forward
//! SIGTERM/SIGINT/SIGHUP/SIGQUIT down the tree, reap, and exit exactly like
//! the agent did. When pid 1 exits the kernel kills whatever is left in its
//! pid namespace, tools included. Pid 1 leads a session of its own,
//! without a controlling terminal.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{pipe2, Pid};

use super::sys::{self, Forked};
use super::{SandboxError, EXIT_SANDBOX_UNAVAILABLE};

/// Signals passed from outer to init and from init to the agent.
const FORWARDED: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// How the agent ended, as init reports it to outer through a pipe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentEnd {
    Exited(u8),
    Signaled(Signal),
}

impl AgentEnd {
    pub fn encode(self) -> [u8; 2] {
        match self {
            AgentEnd::Exited(code) => [b'x', code],
            AgentEnd::Signaled(signal) => [b's', signal as u8],
        }
    }

    pub fn decode(bytes: &[u8]) -> Option<AgentEnd> {
        match bytes {
            [b'x', code] => Some(AgentEnd::Exited(*code)),
            [b's', signal] => Signal::try_from(i32::from(*signal))
                .ok()
                .map(AgentEnd::Signaled),
            _ => None,
        }
    }

    /// The end a wait status describes, if it is one.
    fn from_status(status: WaitStatus) -> Option<AgentEnd> {
        match status {
            WaitStatus::Exited(_, code) => Some(AgentEnd::Exited(code as u8)),
            WaitStatus::Signaled(_, signal, _) => Some(AgentEnd::Signaled(signal)),
            _ => None,
        }
    }

    /// An exit code saying the same, for a process that cannot re-raise.
    fn exit_code(self) -> u8 {
        match self {
            AgentEnd::Exited(code) => code,
            AgentEnd::Signaled(signal) => 128u8.wrapping_add(signal as u8),
        }
    }
}

/// Who is pid 1 of the new pid namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// The agent itself, reaping orphans and ending on signals as init
    /// must (our own code, which knows how).
    AgentIsInit,
    /// As [`Shape::AgentIsInit`], for a spare agent: named
    /// `corral-spare-in` until it has a project (`spare`).
    SpareAgent,
    /// A small init, with the program as its child (pid 2): for a program
    /// of someone else's, which cannot be expected to reap.
    UnderInit,
}

/// Forks pid 1 of the new pid namespace, which runs `setup` (its mounts
/// and Landlock); with [`Shape::UnderInit`] it then forks the program.
/// Returns only in the agent or program, with what `setup` produced; a
/// failure in pid 1 is printed there and ends the tree with exit code 78.
pub fn start<T>(
    shape: Shape,
    setup: impl FnOnce() -> Result<T, SandboxError>,
) -> Result<T, SandboxError> {
    let (report_read, report_write) = pipe()?;
    let (lifeline_read, lifeline_write) = pipe()?;
    let forwarded: SigSet = FORWARDED.iter().copied().collect();
    // Blocked across the fork so a signal that comes early waits until a
    // handler knows where to forward it.
    let _ = forwarded.thread_block();
    match sys::fork() {
        Err(e) => {
            let _ = forwarded.thread_unblock();
            Err(e)
        }
        Ok(Forked::Parent(init)) => {
            drop((report_write, lifeline_read));
            outer(init, report_read, lifeline_write, &forwarded)
        }
        Ok(Forked::Child) => {
            drop((report_read, lifeline_write));
            match shape {
                Shape::AgentIsInit => agent(
                    setup,
                    lifeline_read,
                    report_write,
                    &forwarded,
                    c"corral-agent-in",
                ),
                Shape::SpareAgent => agent(
                    setup,
                    lifeline_read,
                    report_write,
                    &forwarded,
                    crate::spare::SPARE_NAME,
                ),
                Shape::UnderInit => init(setup, lifeline_read, report_write, &forwarded),
            }
        }
    }
}

/// The agent as pid 1: sets the sandbox up, takes up init's duties
/// (`init`) and returns. Its end reaches outer as its exit status, or
/// through `report` when a signal ended it.
fn agent<T>(
    setup: impl FnOnce() -> Result<T, SandboxError>,
    lifeline: OwnedFd,
    report: OwnedFd,
    forwarded: &SigSet,
    name: &std::ffi::CStr,
) -> Result<T, SandboxError> {
    let value = pid_one(setup, &lifeline, name);
    drop(lifeline);
    super::init::become_init(report).unwrap_or_else(|e| fail(&e));
    let _ = forwarded.thread_unblock();
    Ok(value)
}

/// The first steps of pid 1: dies with outer, names itself, leads a
/// session of its own and runs `setup` (exiting 78 on failure).
fn pid_one<T>(
    setup: impl FnOnce() -> Result<T, SandboxError>,
    lifeline: &OwnedFd,
    name: &std::ffi::CStr,
) -> T {
    let _ = prctl::set_pdeathsig(Signal::SIGKILL);
    if parent_gone(lifeline) {
        std::process::exit(1);
    }
    let _ = prctl::set_name(name);
    // A session of its own: nothing inside has the host's terminal as its
    // controlling terminal, so `/dev/tty` can only name a private one.
    let own_session = nix::unistd::setsid().map_err(|source| SandboxError::Process {
        what: "setsid",
        source,
    });
    own_session
        .and_then(|_| setup())
        .unwrap_or_else(|e| fail(&e))
}

fn pipe() -> Result<(OwnedFd, OwnedFd), SandboxError> {
    pipe2(OFlag::O_CLOEXEC).map_err(|source| SandboxError::Process {
        what: "pipe",
        source,
    })
}

/// outer: forwards signals to init, waits for it, and ends like the agent.
fn outer(init: Pid, report: OwnedFd, lifeline: OwnedFd, forwarded: &SigSet) -> ! {
    if let Err(e) = sys::forward_signals(&FORWARDED, init) {
        let _ = nix::sys::signal::kill(init, Signal::SIGKILL);
        fail(&e);
    }
    let _ = forwarded.thread_unblock();
    detach_stdio();
    let status = loop {
        match waitpid(init, None) {
            Ok(status) => {
                if let Some(end) = AgentEnd::from_status(status) {
                    break end;
                }
            }
            Err(Errno::EINTR) => {}
            Err(_) => std::process::exit(1),
        }
    };
    let mut bytes = Vec::new();
    let _ = File::from(report).read_to_end(&mut bytes);
    drop(lifeline);
    finish(AgentEnd::decode(&bytes).unwrap_or(status))
}

/// init (under which a program of someone else's runs): sets the sandbox
/// up, forks the program, then reaps until it ends and reports how.
fn init<T>(
    setup: impl FnOnce() -> Result<T, SandboxError>,
    lifeline: OwnedFd,
    report: OwnedFd,
    forwarded: &SigSet,
) -> Result<T, SandboxError> {
    let value = pid_one(setup, &lifeline, c"corral-init");
    match sys::fork() {
        Err(e) => fail(&e),
        Ok(Forked::Parent(agent)) => reap(agent, report, forwarded),
        Ok(Forked::Child) => {
            let _ = prctl::set_pdeathsig(Signal::SIGKILL);
            let _ = prctl::set_name(c"corral-agent-in");
            sys::default_signals(&FORWARDED)?;
            let _ = forwarded.thread_unblock();
            drop((lifeline, report));
            Ok(value)
        }
    }
}

/// init after the fork: forwards signals to the agent, reaps every child,
/// and exits once the agent has ended (which ends the pid namespace).
fn reap(agent: Pid, report: OwnedFd, forwarded: &SigSet) -> ! {
    if let Err(e) = sys::forward_signals(&FORWARDED, agent) {
        let _ = nix::sys::signal::kill(agent, Signal::SIGKILL);
        fail(&e);
    }
    let _ = forwarded.thread_unblock();
    detach_stdio();
    loop {
        match waitpid(None::<Pid>, None) {
            Ok(status) if status.pid() == Some(agent) => {
                if let Some(end) = AgentEnd::from_status(status) {
                    let _ = nix::unistd::write(report.as_fd(), &end.encode());
                    std::process::exit(i32::from(end.exit_code()));
                }
            }
            // An orphan reaped, or a signal handled.
            Ok(_) | Err(Errno::EINTR) => {}
            Err(_) => std::process::exit(1),
        }
    }
}

/// Whether the writer of `lifeline` (the parent) has exited.
fn parent_gone(lifeline: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(lifeline.as_fd(), PollFlags::empty())];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
}

/// Points stdin and stdout at /dev/null: only the agent holds the
/// protocol pipes, so their ends close when it does. stderr stays.
fn detach_stdio() {
    if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
        for fd in [libc::STDIN_FILENO, libc::STDOUT_FILENO] {
            let _ = nix::unistd::dup2(null.as_raw_fd(), fd);
        }
    }
}

/// Ends the process as the agent ended.
fn finish(end: AgentEnd) -> ! {
    match end {
        AgentEnd::Exited(code) => std::process::exit(i32::from(code)),
        AgentEnd::Signaled(signal) => sys::die_by_signal(signal),
    }
}

/// Reports a sandbox failure on stderr and exits 78.
pub fn fail(error: &SandboxError) -> ! {
    eprintln!("corral-agent: {error}");
    std::process::exit(i32::from(EXIT_SANDBOX_UNAVAILABLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_round_trip_through_the_report() {
        for end in [
            AgentEnd::Exited(0),
            AgentEnd::Exited(75),
            AgentEnd::Exited(255),
            AgentEnd::Signaled(Signal::SIGKILL),
            AgentEnd::Signaled(Signal::SIGTERM),
        ] {
            assert_eq!(AgentEnd::decode(&end.encode()), Some(end));
        }
    }

    #[test]
    fn a_missing_or_torn_report_decodes_to_nothing() {
        assert_eq!(AgentEnd::decode(b""), None);
        assert_eq!(AgentEnd::decode(b"x"), None);
        assert_eq!(AgentEnd::decode(b"q1"), None);
        assert_eq!(AgentEnd::decode(&[b's', 200]), None);
    }

    #[test]
    fn signals_become_128_plus_n_where_they_cannot_be_raised() {
        assert_eq!(AgentEnd::Signaled(Signal::SIGKILL).exit_code(), 137);
        assert_eq!(AgentEnd::Exited(3).exit_code(), 3);
    }
}
