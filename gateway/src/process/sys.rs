//! The process layer's only `unsafe`: starting a child ([`launch`]: a
//! clone sharing the gateway's memory until `exec`, or a `fork` with a
//! `pre_exec` hook for the start-up probe), and what the child does to
//! itself before `exec`. In order it starts a session of its own
//! (so everything it starts can be found and killed: `leftovers`), enters
//! the project directory (a descriptor opened without following symlinks),
//! joins the child's cgroups, sets its rlimits, switches to the child
//! user, sets `PR_SET_NO_NEW_PRIVS`, and ties the child's life to the
//! gateway's with the parent-death signal (last: a credential change
//! clears it).
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg};
use nix::libc;
use nix::sched::CloneFlags;
use nix::sys::prctl;
use nix::sys::resource::setrlimit;
use nix::sys::signal::{pthread_sigmask, sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::wait::waitpid;
use nix::unistd::{chdir, dup2, fchdir, getpid, getppid, setsid, write, Pid};

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

/// What the child does to itself before `exec`, prepared before the fork
/// or clone: the child only reads it.
struct Hook {
    /// The gateway's pid: inside the child `getpid()` is the child's.
    parent: Pid,
    setup: PreExec,
    groups: Vec<libc::gid_t>,
    parent_death: Signal,
}

impl Hook {
    fn new(setup: PreExec) -> Hook {
        Hook {
            parent: getpid(),
            groups: setup
                .credentials
                .as_ref()
                .map(|c| c.groups.clone())
                .unwrap_or_default(),
            parent_death: setup.parent_death.unwrap_or(Signal::SIGKILL),
            setup,
        }
    }

    /// Runs in the child before `exec`. Async-signal-safe: plain syscalls
    /// on what was prepared before, no allocation, no lock. The credential
    /// changes are raw syscalls: glibc's `setuid` family would signal every
    /// thread it believes the process has, and a child cloned with the
    /// gateway's memory ([`launch`]) shares glibc's view of the gateway's
    /// threads.
    fn apply(&self) -> Result<(), Errno> {
        setsid()?;
        if let Some(dir) = &self.setup.cwd {
            fchdir(dir.as_raw_fd())?;
        }
        for fd in &self.setup.join {
            write(fd, b"0")?;
        }
        if let Some(limits) = &self.setup.limits {
            for &(resource, value) in limits.rlimits() {
                setrlimit(resource, value, value)?;
            }
        }
        if let Some(user) = &self.setup.credentials {
            // A change of effective ids makes the kernel reset the
            // memory's dumpable flag to `fs.suid_dumpable`; a launched
            // child's memory is the gateway's until `exec`, so the flag is
            // put back at once after each change (`launch` refuses to
            // switch accounts where that sysctl is 1, which would let the
            // account trace the child meanwhile).
            // SAFETY: the syscalls take integers and a pointer to the
            // prepared group list, valid for its length.
            unsafe {
                check(libc::syscall(
                    libc::SYS_setgroups,
                    self.groups.len() as libc::c_long,
                    self.groups.as_ptr(),
                ))?;
                check(libc::syscall(
                    libc::SYS_setgid,
                    libc::c_long::from(user.gid),
                ))?;
                prctl::set_dumpable(false)?;
                check(libc::syscall(
                    libc::SYS_setuid,
                    libc::c_long::from(user.uid),
                ))?;
                prctl::set_dumpable(false)?;
            }
        }
        prctl::set_no_new_privs()?;
        prctl::set_pdeathsig(self.parent_death)?;
        // If the gateway died before the signal was armed, the child has
        // already been reparented: give up now.
        if getppid() != self.parent {
            return Err(Errno::ESRCH);
        }
        Ok(())
    }
}

/// A raw syscall's return value as a result.
fn check(ret: libc::c_long) -> Result<(), Errno> {
    match ret {
        -1 => Err(Errno::last()),
        _ => Ok(()),
    }
}

/// Installs the hook on `command` (forked: the start-up probe).
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that created the child exits,
/// not the whole process. Children are forked on the spawner thread
/// (`spawner`), which never exits, so in practice this means "when the
/// gateway dies". (Spawning from a `spawn_blocking` thread would be wrong:
/// those threads exit when idle.)
pub(super) fn install(command: &mut std::process::Command, setup: PreExec) {
    let hook = Hook::new(setup);
    // SAFETY: the hook runs in the forked child before exec, where only
    // async-signal-safe operations are allowed: see `Hook::apply`.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(command, move || Ok(hook.apply()?));
    }
}

/// What a launched child executes, every string and descriptor prepared.
pub(super) struct Exec {
    /// The program's path (resolved: `exec` does not search `PATH`).
    pub program: CString,
    /// Its argv, `argv[0]` first.
    pub argv: Vec<CString>,
    /// Its whole environment, `NAME=VALUE`.
    pub envp: Vec<CString>,
    /// A directory to change to first (the hook's descriptor, if any,
    /// comes after).
    pub cwd: Option<CString>,
    /// Dup'ed onto descriptors 0, 1 and 2.
    pub stdio: [OwnedFd; 3],
}

/// Stack of a launched child until its `exec`.
const CHILD_STACK: usize = 64 * 1024;

/// Starts `exec` as a child without copying the gateway:
/// `clone(CLONE_VM | CLONE_VFORK)` (what `posix_spawn` does), so its cost
/// does not grow with the gateway's memory as a `fork` does (which
/// copies the page tables of every client's buffers, and holds the
/// gateway's memory map locked meanwhile). The calling thread waits until
/// the child has exec'ed or failed; a failure's errno comes back through
/// memory they share. Every signal is blocked across the clone, and the
/// child resets the handled ones to their defaults before unblocking, so
/// no gateway handler ever runs in it.
pub(super) fn launch(exec: &Exec, setup: PreExec) -> std::io::Result<Pid> {
    check_account_switch(&setup)?;
    let hook = Hook::new(setup);
    let pointers = |strings: &[CString]| -> Vec<*const libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let argv = pointers(&exec.argv);
    let envp = pointers(&exec.envp);
    let failed = AtomicI32::new(0);
    let mut stack = vec![0u8; CHILD_STACK];
    let mut blocked = SigSet::empty();
    pthread_sigmask(
        SigmaskHow::SIG_SETMASK,
        Some(&SigSet::all()),
        Some(&mut blocked),
    )?;
    let child = Box::new(|| -> isize {
        let Err(errno) = in_child(exec, &hook, &argv, &envp);
        failed.store(errno as i32, Ordering::Relaxed);
        127
    });
    // SAFETY: the child shares the gateway's memory but runs on its own
    // stack, while the calling thread is suspended (CLONE_VFORK) until it
    // has exec'ed or exited; it only runs `in_child`, which is
    // async-signal-safe and only reads what was prepared above (writing
    // only `failed`, an atomic). Signals are blocked, so no handler runs
    // in it before its own are reset.
    let cloned = unsafe {
        nix::sched::clone(
            child,
            &mut stack,
            CloneFlags::CLONE_VM | CloneFlags::CLONE_VFORK,
            Some(libc::SIGCHLD),
        )
    };
    let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&blocked), None);
    let pid = cloned?;
    match failed.load(Ordering::Relaxed) {
        0 => Ok(pid),
        errno => {
            while let Err(Errno::EINTR) = waitpid(pid, None) {}
            Err(std::io::Error::from_raw_os_error(errno))
        }
    }
}

/// `waitpid(pid, flags)`: the raw wait status once `pid` is reaped,
/// `None` while it runs (with `WNOHANG`). The raw call, not nix's: nix
/// decodes the status into its `Signal` enum after reaping, and a child
/// killed by a real-time signal would be reaped with its status lost.
pub(super) fn wait_status(pid: Pid, flags: libc::c_int) -> Result<Option<libc::c_int>, Errno> {
    let mut raw: libc::c_int = 0;
    loop {
        // SAFETY: waitpid writes one int through the pointer.
        match unsafe { libc::waitpid(pid.as_raw(), &mut raw, flags) } {
            0 => return Ok(None),
            -1 if Errno::last() == Errno::EINTR => continue,
            -1 => return Err(Errno::last()),
            _ => return Ok(Some(raw)),
        }
    }
}

/// Refuses a start that switches accounts where `fs.suid_dumpable` is 1:
/// the account could trace the child meanwhile, while it still shares the
/// gateway's memory (a launched child) or has not yet made itself
/// undumpable again (a child forked from the template).
pub(super) fn check_account_switch(setup: &PreExec) -> std::io::Result<()> {
    if setup.credentials.is_some() && suid_dumpable_is_one() {
        return Err(std::io::Error::other(
            "fs.suid_dumpable is 1, under which a child switching accounts could be traced \
             by that account before it starts; set it to 0 or 2",
        ));
    }
    Ok(())
}

/// Whether `fs.suid_dumpable` is 1 ("debug": a process that changed its
/// ids stays traceable by its new account).
fn suid_dumpable_is_one() -> bool {
    std::fs::read_to_string("/proc/sys/fs/suid_dumpable").is_ok_and(|v| v.trim() == "1")
}

/// The launched child until `exec`: returns only on failure.
fn in_child(
    exec: &Exec,
    hook: &Hook,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> Result<std::convert::Infallible, Errno> {
    default_signals();
    // A source among 0–2 (the gateway started with one of them closed)
    // is moved above them first, so no dup2 overwrites another's source.
    let mut sources = [0; 3];
    for (source, fd) in sources.iter_mut().zip(&exec.stdio) {
        *source = match fd.as_raw_fd() {
            low @ 0..=2 => fcntl(low, FcntlArg::F_DUPFD_CLOEXEC(3))?,
            fd => fd,
        };
    }
    for (source, target) in sources.into_iter().zip(0..) {
        dup2(source, target)?;
    }
    if let Some(dir) = &exec.cwd {
        chdir(dir.as_c_str())?;
    }
    hook.apply()?;
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    // SAFETY: the program path and both arrays are valid, NUL-terminated
    // C strings in null-terminated arrays, alive until the caller returns.
    unsafe { libc::execve(exec.program.as_ptr(), argv.as_ptr(), envp.as_ptr()) };
    Err(Errno::last())
}

/// Resets every signal the gateway handles, and SIGPIPE (which it
/// ignores), to its default action, as `exec` would for the handled ones.
fn default_signals() {
    for signal in 1..=libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: sigaction with a zeroed (then queried) struct is
        // async-signal-safe; signals glibc reserves answer EINVAL, ignored.
        unsafe {
            let mut current: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
                continue;
            }
            let handled = current.sa_sigaction != libc::SIG_DFL
                && (current.sa_sigaction != libc::SIG_IGN || signal == libc::SIGPIPE);
            if handled {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
}
