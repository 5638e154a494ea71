//! The supervisor's only `unsafe`: a `pre_exec` hook that ties the child's
//! life to the gateway's through the parent-death signal.
#![allow(unsafe_code)]

use nix::errno::Errno;
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{getpid, getppid};

/// Makes the kernel SIGKILL the child when the thread that forked it dies.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that created the child exits,
/// not the whole process. [`ChildProcess::spawn`](super::ChildProcess::spawn)
/// runs on a tokio worker thread, and those live as long as the runtime, so
/// in practice this means "when the gateway dies". (Spawning from a
/// `spawn_blocking` thread would be wrong: those threads exit when idle.)
pub(super) fn kill_with_parent(command: &mut tokio::process::Command) {
    // Read before forking: inside the hook, `getpid()` is the child's pid.
    let parent = getpid();
    let hook = move || -> std::io::Result<()> {
        prctl::set_pdeathsig(Signal::SIGKILL)?;
        // If the gateway died between fork and prctl, the signal was never
        // armed and the child has already been reparented: give up now.
        if getppid() != parent {
            return Err(Errno::ESRCH.into());
        }
        Ok(())
    };
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe operations are allowed. It makes two plain syscalls
    // (prctl, getppid), compares two integers, and converts an errno into an
    // `io::Error` (a tagged integer, no allocation). It takes no locks,
    // touches no shared state and does not allocate, so it cannot deadlock
    // on a lock held by another thread of the parent at fork time.
    unsafe {
        command.pre_exec(hook);
    }
}
