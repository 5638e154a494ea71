//! The sandbox's only unsafe code: fork, signal handlers (forwarding, the
//! agent-as-init's ending and its SIGCHLD wake-up), the capability
//! bounding set, bringing `lo` up, handing a descriptor on across exec, and
//! the pre-exec hook of tool commands (which registers their pid with the
//! agent-as-init).
//! Each block says why it is sound; everything else uses safe `nix` calls.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{IntoRawFd, OwnedFd, RawFd};
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

/// The agent-as-init's report pipe to outer (-1: none).
static REPORT_FD: AtomicI32 = AtomicI32::new(-1);
/// Where the agent's children register their pid (-1: nowhere).
static REGISTRY_FD: AtomicI32 = AtomicI32::new(-1);
/// The reaper's wake-up pipe, written at every SIGCHLD (-1: none).
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

/// Signal handler of the agent as pid 1: ends the process as `signal`
/// would have, unless another handler was installed over this one (the
/// agent handles the signal itself, and calls this one after its own).
extern "C" fn end_like(signal: libc::c_int) {
    // SAFETY: sigaction (to read the disposition), write and _exit are
    // async-signal-safe; `current` is a valid, zeroed sigaction, and the
    // report is two bytes on the stack.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        let ours = end_like as extern "C" fn(libc::c_int) as libc::sighandler_t;
        if libc::sigaction(signal, std::ptr::null(), &mut current) == 0
            && current.sa_sigaction != ours
        {
            return;
        }
        let fd = REPORT_FD.load(Ordering::Relaxed);
        if fd >= 0 {
            let report = [b's', signal as u8];
            libc::write(fd, report.as_ptr().cast(), report.len());
        }
        libc::_exit(128 + signal);
    }
}

/// Makes SIGTERM, SIGINT, SIGHUP and SIGQUIT end the agent (pid 1, which
/// the kernel never kills by a default action), reporting each through
/// `report`, which stays open (close-on-exec) for the agent's life.
pub fn end_like_signals(report: OwnedFd) -> Result<(), SandboxError> {
    REPORT_FD.store(report.into_raw_fd(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(end_like),
        SaFlags::SA_RESTART,
        SigSet::empty(),
    );
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
    ] {
        // SAFETY: `end_like` only calls async-signal-safe functions.
        unsafe { sigaction(signal, &action) }.map_err(|source| SandboxError::Process {
            what: "sigaction",
            source,
        })?;
    }
    Ok(())
}

/// From now on every command built by [`confine_command`] writes its pid
/// to `fd` (blocking, close-on-exec) before it executes; kept open for the
/// process's life.
pub fn set_registry(fd: OwnedFd) {
    REGISTRY_FD.store(fd.into_raw_fd(), Ordering::Relaxed);
}

/// Signal handler: one byte to [`WAKE_FD`].
extern "C" fn wake(_: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: write(2) is async-signal-safe; errno is saved and
        // restored; a full pipe (EAGAIN) already holds a wake-up.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, [1u8].as_ptr().cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// Writes a byte to `fd` (non-blocking, close-on-exec, kept open for the
/// process's life) at every SIGCHLD. Installed before the async runtime,
/// whose own SIGCHLD handler then calls this one after its own.
pub fn wake_on_sigchld(fd: OwnedFd) -> Result<(), SandboxError> {
    WAKE_FD.store(fd.into_raw_fd(), Ordering::Relaxed);
    let action = SigAction::new(
        SigHandler::Handler(wake),
        SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
        SigSet::empty(),
    );
    // SAFETY: `wake` only calls write(2), saving errno.
    unsafe { sigaction(Signal::SIGCHLD, &action) }.map_err(|source| SandboxError::Process {
        what: "sigaction",
        source,
    })?;
    Ok(())
}

/// In a forked child: registers its pid with the agent-as-init, if there
/// is one. Async-signal-safe.
fn register_pid() -> io::Result<()> {
    let fd = REGISTRY_FD.load(Ordering::Relaxed);
    if fd < 0 {
        return Ok(());
    }
    // SAFETY: getpid takes nothing.
    let pid = unsafe { libc::getpid() }.to_ne_bytes();
    loop {
        // SAFETY: write takes a pointer to the four bytes on the stack; a
        // pipe write of four bytes is atomic (all or nothing).
        let written = unsafe { libc::write(fd, pid.as_ptr().cast(), pid.len()) };
        if written == 4 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
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
    /// A Landlock domain of the command's own, nested in the agent's (see
    /// [`enter_own_domain`]).
    pub own_domain: bool,
}

/// Makes `command` apply `confinement` in the child before exec.
pub fn confine_command(command: &mut tokio::process::Command, confinement: ExecConfinement) {
    // SAFETY: the hook runs between fork and exec in a copy of a
    // multi-threaded process, so it must be async-signal-safe: it only
    // makes raw syscalls (getpid, write, unshare, socket, ioctl, close,
    // fcntl, prctl, landlock_create_ruleset, landlock_restrict_self) on
    // stack data and builds errors with `last_os_error`, which does not
    // allocate.
    unsafe {
        command.pre_exec(move || {
            // First: from here on this process may exit.
            register_pid()?;
            if confinement.no_network {
                isolate_network()?;
            }
            if let Some(fd) = confinement.inherit_fd {
                keep_across_exec(fd)?;
            }
            if confinement.no_capabilities {
                drop_capabilities()?;
            }
            if confinement.own_domain {
                enter_own_domain()?;
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

/// `struct landlock_ruleset_attr` up to `handled_access_fs`, the part
/// every Landlock ABI knows.
#[repr(C)]
struct RulesetAttrV1 {
    handled_access_fs: u64,
}

/// `LANDLOCK_ACCESS_FS_MAKE_BLOCK`: making block devices, which nothing in
/// the sandbox may do anyway (no `CAP_MKNOD`).
const ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;

/// Moves the calling process into a Landlock domain of its own, nested in
/// the one it is in, that takes away nothing it still had. What it buys:
/// Landlock lets a process ptrace (and so read `/proc/<pid>/mem`,
/// `/proc/<pid>/environ`, `/proc/<pid>/fd`) only processes in its own
/// domain or one nested below it, so two commands started this way cannot
/// reach each other, nor the agent, though they share a uid. Needs
/// `no_new_privs` (which the sandbox set). Async-signal-safe.
pub fn enter_own_domain() -> io::Result<()> {
    let attr = RulesetAttrV1 {
        handled_access_fs: ACCESS_FS_MAKE_BLOCK,
    };
    // SAFETY: landlock_create_ruleset reads `size_of::<RulesetAttrV1>()`
    // bytes from `attr`, a live, initialised repr(C) value on the stack.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            &attr as *const RulesetAttrV1,
            std::mem::size_of::<RulesetAttrV1>(),
            0u32,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = fd as libc::c_int;
    // SAFETY: landlock_restrict_self takes our ruleset descriptor and flags.
    let restricted = unsafe { libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) };
    let result = match restricted {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    };
    // SAFETY: `fd` is ours and closed exactly once.
    unsafe { libc::close(fd) };
    result
}
