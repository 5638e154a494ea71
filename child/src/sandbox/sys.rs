//! The sandbox's only unsafe code: fork, signal handlers, the capability
//! bounding set, bringing `lo` up, handing a descriptor on across exec, and
//! the pre-exec hook of tool commands.
//! Each block says why it is sound; everything else uses safe `nix` calls.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicI32, Ordering};

use nix::errno::Errno;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::unistd::{ForkResult, Pid};

use super::SandboxError;

/// The two sides of a fork.
pub enum Forked {
    Parent(Pid),
    Child,
}

/// Forks, refusing when the process has more than one thread.
pub fn fork() -> Result<Forked, SandboxError> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map_err(|e| SandboxError::Process {
            what: "listing /proc/self/task",
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })?
        .count();
    if threads != 1 {
        return Err(SandboxError::Threads(threads));
    }
    // SAFETY: the process has exactly one thread (checked just above, and
    // nothing between the check and the fork starts one), so the child
    // inherits no lock held by another thread and may run any code.
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Parent { child }) => Ok(Forked::Parent(child)),
        Ok(ForkResult::Child) => Ok(Forked::Child),
        Err(source) => Err(SandboxError::Process {
            what: "fork",
            source,
        }),
    }
}

/// Where [`forward`] sends the signals it catches (0: nowhere yet).
static FORWARD_TO: AtomicI32 = AtomicI32::new(0);

/// Signal handler: passes the signal on to [`FORWARD_TO`].
extern "C" fn forward(signal: libc::c_int) {
    let pid = FORWARD_TO.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; errno is saved and restored
        // so the interrupted code never sees it change.
        unsafe {
            let errno = *libc::__errno_location();
            libc::kill(pid, signal);
            *libc::__errno_location() = errno;
        }
    }
}

/// Forwards each of `signals` to `target` from now on.
pub fn forward_signals(signals: &[Signal], target: Pid) -> Result<(), SandboxError> {
    FORWARD_TO.store(target.as_raw(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(forward),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for &signal in signals {
        // SAFETY: `forward` only reads an atomic and calls kill(2), both
        // async-signal-safe.
        unsafe { sigaction(signal, &action) }.map_err(|source| SandboxError::Process {
            what: "sigaction",
            source,
        })?;
    }
    Ok(())
}

/// Restores the default disposition of `signals` (in a forked child that
/// must not forward).
pub fn default_signals(signals: &[Signal]) -> Result<(), SandboxError> {
    let action = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    for &signal in signals {
        // SAFETY: SIG_DFL installs no code of ours.
        unsafe { sigaction(signal, &action) }.map_err(|source| SandboxError::Process {
            what: "sigaction",
            source,
        })?;
    }
    Ok(())
}

/// Ends the process the way `signal` would, so a parent sees "killed by
/// signal N"; exits 128+N if the signal does not kill.
pub fn die_by_signal(signal: Signal) -> ! {
    let _ = default_signals(&[signal]);
    let mut set = SigSet::empty();
    set.add(signal);
    let _ = set.thread_unblock();
    let _ = nix::sys::signal::raise(signal);
    std::process::exit(128 + signal as i32)
}

/// What a tool command gives up between fork and exec.
#[derive(Clone, Copy, Debug)]
pub struct ExecConfinement {
    /// A new network namespace with only `lo` (up).
    pub no_network: bool,
    /// A descriptor of the agent's (the egress socket) the command keeps
    /// across exec, under the same number.
    pub inherit_fd: Option<RawFd>,
    /// An empty capability bounding set and ambient set.
    pub no_capabilities: bool,
}

/// Makes `command` apply `confinement` in the child before exec.
pub fn confine_command(command: &mut tokio::process::Command, confinement: ExecConfinement) {
    // SAFETY: the hook runs between fork and exec in a copy of a
    // multi-threaded process, so it must be async-signal-safe: it only
    // makes raw syscalls (unshare, socket, ioctl, close, fcntl, prctl) on
    // stack data and builds errors with `last_os_error`, which does not
    // allocate.
    unsafe {
        command.pre_exec(move || {
            if confinement.no_network {
                isolate_network()?;
            }
            if let Some(fd) = confinement.inherit_fd {
                keep_across_exec(fd)?;
            }
            if confinement.no_capabilities {
                drop_capabilities()?;
            }
            Ok(())
        });
    }
}

/// Moves the calling process into a new network namespace and brings its
/// loopback interface up. Needs CAP_SYS_ADMIN and CAP_NET_ADMIN in the
/// process's user namespace. Async-signal-safe.
pub fn isolate_network() -> io::Result<()> {
    // SAFETY: unshare takes a flag word only.
    if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: socket takes integers only.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: ifreq is plain old data, for which all zero bytes are valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (to, from) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *to = *from as libc::c_char;
    }
    // SAFETY: `fd` is our open socket and `request` a valid ifreq that
    // outlives both calls; SIOCGIFFLAGS fills `ifru_flags`, the union
    // member read and written in between.
    let result = unsafe {
        if libc::ioctl(fd, libc::SIOCGIFFLAGS, &mut request) < 0 {
            Err(io::Error::last_os_error())
        } else {
            request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
            if libc::ioctl(fd, libc::SIOCSIFFLAGS, &request) < 0 {
                Err(io::Error::last_os_error())
            } else {
                Ok(())
            }
        }
    };
    // SAFETY: `fd` is ours and closed exactly once.
    unsafe { libc::close(fd) };
    result
}

/// Clears `FD_CLOEXEC` on `fd`, so a program executed next has it under
/// the same number. In a forked child this changes only the child's table.
/// Async-signal-safe.
pub fn keep_across_exec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl(F_SETFD) takes integers only; an invalid `fd` is an
    // error, not undefined behaviour.
    if unsafe { libc::fcntl(fd, libc::F_SETFD, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Empties the capability bounding set and the ambient set, so a program
/// executed next holds no capability even as uid 0. Needs CAP_SETPCAP in
/// the process's user namespace. Async-signal-safe.
pub fn drop_capabilities() -> io::Result<()> {
    for cap in 0..64 {
        // SAFETY: PR_CAPBSET_DROP takes integer arguments only.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let error = io::Error::last_os_error();
            if error.raw_os_error() == Some(libc::EINVAL) {
                // Past the last capability this kernel knows.
                break;
            }
            return Err(error);
        }
    }
    // SAFETY: PR_CAP_AMBIENT takes integer arguments only.
    let cleared = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if cleared != 0 && Errno::last() != Errno::EINVAL {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
