//! Starting one child, blocking (on the spawner thread): its limits
//! prepared, its stdio socket and stderr file opened, then forked from the
//! template or executed, and registered as live before any sweep can
//! run. What it gives back ([`Forked`]) becomes a `ChildProcess`, or a
//! spare agent (`spares`).

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::Arc;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::launched::{self, Launched};
use super::leftovers;
use super::limits::ChildLimits;
use super::spec::{SpawnError, SpawnSpec};
use super::stdio;
use super::sys::{self, PreExec};
use super::template::{self, NotForked};

/// A child just started, with the gateway's end of its stdio.
pub(super) struct Forked {
    pub spec: SpawnSpec,
    pub child: Launched,
    pub pid: u32,
    pub stdio: StdUnixStream,
    /// The length of its stderr file before it could write to it.
    pub stderr_from: u64,
    pub limits: Option<Arc<ChildLimits>>,
    /// A spare agent assigned the spawn's project.
    pub spare: bool,
}

impl Forked {
    /// Ends a child nobody waits for any more (its start was cancelled).
    /// Called inside the runtime (on the spawner thread, in a blocking
    /// task or on the event loop).
    pub(super) fn abandon(self) {
        kill_group(self.pid, Signal::SIGKILL, &self.spec.project);
        if let Some(limits) = self.limits {
            limits.kill_all();
            tokio::spawn(super::limits::watch::remove_when_empty(limits));
        }
        // Nobody else will reap it (it then leaves the live set).
        launched::reap_later(self.child);
    }
}

/// Prepares the child's limits and starts it, registered as live before
/// any sweep can run. Blocking: runs on the spawner thread.
pub(super) fn start(spec: SpawnSpec) -> Result<Forked, SpawnError> {
    if spec.confine.cwd_dir.is_none() && !spec.cwd.is_dir() {
        return Err(SpawnError::CwdMissing {
            program: spec.program.clone(),
            cwd: spec.cwd.clone(),
        });
    }
    let (limits, join) = match &spec.confine.limits {
        Some(limits) => {
            let mut prepared =
                limits
                    .prepare(&spec.project)
                    .map_err(|source| SpawnError::Limits {
                        program: spec.program.clone(),
                        source,
                    })?;
            let join = prepared.take_join_fds();
            (Some(Arc::new(prepared)), join)
        }
        None => (None, Vec::new()),
    };
    let io_failed = |source: std::io::Error| match crate::fdlimit::exhausted(&source) {
        true => SpawnError::NoDescriptors {
            program: spec.program.clone(),
        },
        false => SpawnError::Io {
            program: spec.program.clone(),
            source,
        },
    };
    let stdio = stdio::pair().map_err(io_failed)?;
    // Where the gateway's log picks the file up: what the child writes.
    let mut stderr_from = 0;
    let stderr: OwnedFd = match &spec.stderr_log {
        Some(log) => {
            let file = log.open_for_child().map_err(|e| SpawnError::Io {
                program: spec.program.clone(),
                source: std::io::Error::other(format!("its stderr file: {e}")),
            })?;
            stderr_from = file.metadata().map_or(0, |m| m.len());
            file.into()
        }
        None => File::options()
            .read(true)
            .write(true)
            .open("/dev/null")
            .map_err(io_failed)?
            .into(),
    };
    let chdir = spec.confine.cwd_dir.is_none().then_some(spec.cwd.as_path());
    let exec = launched::exec_of(&spec, chdir, [stdio.stdin, stdio.stdout, stderr])
        .map_err(|e| SpawnError::classify(&spec, e))?;
    let setup = PreExec {
        cwd: spec.confine.cwd_dir.clone(),
        join,
        limits: limits.clone(),
        credentials: spec.confine.credentials.clone(),
        parent_death: Some(match spec.confine.sandboxed {
            true => Signal::SIGKILL,
            false => Signal::SIGTERM,
        }),
    };
    // From the clone until the pid is known, no sweep may run.
    let mut live = leftovers::Registry::lock();
    let spawned = match spec.template {
        true => match template::launch(&exec, &setup, &mut live) {
            Ok(pid) => Ok(pid),
            Err(NotForked::Failed(e)) => Err(e),
            Err(NotForked::Unavailable(e)) => {
                tracing::warn!(project = %spec.project, error = %e, "the agent template is unavailable: executing the agent instead");
                sys::launch(&exec, setup)
            }
        },
        false => sys::launch(&exec, setup),
    };
    // The cgroup.procs descriptors (in `setup`, dropped by `launch`) and
    // the child's ends of its stdio are no longer needed.
    drop(exec);
    let child = match spawned {
        Ok(pid) => Launched::new(pid),
        Err(e) => {
            if let Some(limits) = &limits {
                limits.remove();
            }
            return Err(SpawnError::classify(&spec, e));
        }
    };
    let pid = child.id();
    live.add(pid);
    drop(live);
    Ok(Forked {
        spec,
        child,
        pid,
        stdio: stdio.gateway,
        stderr_from,
        limits,
        spare: false,
    })
}

/// `killpg(pgid, sig)`, where an empty group (ESRCH) is not an error.
pub(super) fn kill_group(pgid: u32, sig: Signal, project: &str) {
    // Never 0 or negative: those would address the gateway's own group.
    let Some(raw) = i32::try_from(pgid).ok().filter(|&raw| raw > 0) else {
        return;
    };
    match killpg(Pid::from_raw(raw), sig) {
        Ok(()) | Err(Errno::ESRCH) => {}
        Err(e) => {
            tracing::warn!(project, pid = pgid, signal = %sig, error = %e, "signalling the child's group failed")
        }
    }
}
