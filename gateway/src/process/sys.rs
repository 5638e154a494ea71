//! The process layer's only `unsafe`: the `pre_exec` hook that runs in the
//! forked child before `exec`. In order it starts a session of its own
//! (so everything it starts can be found and killed: `leftovers`), enters
//! the project directory (a descriptor opened without following symlinks),
//! joins the child's cgroups, sets its rlimits, switches to the child
//! user, sets `PR_SET_NO_NEW_PRIVS`, and ties the child's life to the
//! gateway's with the parent-death signal (last: a credential change
//! clears it).
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::resource::setrlimit;
use nix::sys::signal::Signal;
use nix::unistd::{fchdir, getpid, getppid, setgid, setgroups, setsid, setuid, write, Gid, Uid};

use super::limits::ChildLimits;

/// An account to switch to, resolved before the fork.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
}

/// What the hook applies, all prepared before the fork so that the hook
/// itself does not allocate.
#[derive(Debug, Default)]
pub(super) struct PreExec {
    /// The working directory (instead of a path, which could be swapped
    /// for a symlink between the check and the `chdir`).
    pub cwd: Option<Arc<OwnedFd>>,
    /// The child's `cgroup.procs` files, opened before the fork; the child
    /// writes "0" to each. Closed with the command once it is spawned.
    pub join: Vec<OwnedFd>,
    pub limits: Option<Arc<ChildLimits>>,
    pub credentials: Option<Credentials>,
    /// Sent to the child when the gateway dies: SIGKILL for a sandboxed
    /// agent (its pid namespace takes its tools along), SIGTERM for one
    /// without, so it kills its tools before it exits.
    pub parent_death: Option<Signal>,
}

/// Installs the hook on `command`.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that created the child exits,
/// not the whole process. Children are forked on the spawner thread
/// (`spawner`), which never exits, so in practice this means "when the
/// gateway dies". (Spawning from a `spawn_blocking` thread would be wrong:
/// those threads exit when idle.)
pub(super) fn install(command: &mut std::process::Command, setup: PreExec) {
    // Read before forking: inside the hook, `getpid()` is the child's pid.
    let parent = getpid();
    let groups: Vec<Gid> = setup
        .credentials
        .as_ref()
        .map(|c| c.groups.iter().copied().map(Gid::from_raw).collect())
        .unwrap_or_default();
    let parent_death = setup.parent_death.unwrap_or(Signal::SIGKILL);
    let hook = move || -> std::io::Result<()> {
        setsid()?;
        if let Some(dir) = &setup.cwd {
            fchdir(dir.as_raw_fd())?;
        }
        for fd in &setup.join {
            write(fd, b"0")?;
        }
        if let Some(limits) = &setup.limits {
            for &(resource, value) in limits.rlimits() {
                setrlimit(resource, value, value)?;
            }
        }
        if let Some(user) = &setup.credentials {
            setgroups(&groups)?;
            setgid(Gid::from_raw(user.gid))?;
            setuid(Uid::from_raw(user.uid))?;
        }
        prctl::set_no_new_privs()?;
        prctl::set_pdeathsig(parent_death)?;
        // If the gateway died before the signal was armed, the child has
        // already been reparented: give up now.
        if getppid() != parent {
            return Err(Errno::ESRCH.into());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe operations are allowed. Everything it uses was
    // prepared before the fork and is only read here (descriptors, ids, the
    // group list, limit values); it makes plain syscalls (setsid, fchdir, write,
    // setrlimit, setgroups, setgid, setuid, prctl, getppid) and converts an
    // errno into an `io::Error` (a tagged integer, no allocation). It takes
    // no locks, touches no shared mutable state and does not allocate, so
    // it cannot deadlock on a lock held by another thread at fork time.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, hook);
    }
}
