//! `corral-agent template`: a process the gateway starts once, loaded and
//! relocated but holding nothing of any project, that forks each child
//! instead of the gateway executing the agent anew. A child forked from it
//! skips `exec`, the dynamic loader's relocations (its relocated
//! read-only data stays shared with the template and every other child)
//! and the loading of a 19 MB binary, then runs the agent's ordinary
//! `main` with the argv and environment of its request.
//!
//! Descriptor 0 is a `SOCK_SEQPACKET` socket only the gateway holds. Each
//! datagram is one [`SpawnRequest`] with the child's descriptors beside it
//! (`SCM_RIGHTS`); the answer is the child's pid and an errno. The
//! template never decodes a request: it forks first, and the child
//! decodes and applies it. The receive buffer, which holds the child's
//! token and secrets, is zeroed at once in the template, so no later
//! child inherits an earlier one's.
//!
//! The child is made with `clone(CLONE_PARENT)`: its parent is the
//! gateway, which waits for it and reaps it as it would a child it
//! executed, and whose thread that started the template is the one whose
//! end sends the parent-death signal. In the child, in order: its signal
//! mask cleared, its stdio in place, a session of its own, the project
//! directory entered, its cgroups joined, its rlimits set, the account
//! switched (the dumpable flag put back after each change), no new
//! privileges, the parent-death signal, a check that the gateway is still
//! its parent, every other descriptor closed and the environment replaced.
//! Only then does it report success (a zero on a pipe the template waits
//! on; a child that dies first reads as `EIO`) and run the agent.
//!
//! Nothing random exists in the template: it never creates a hash map,
//! a TLS context or a runtime, so each child seeds its own on first use.
//!
//! What a raw clone leaves as it was, and why that is acceptable:
//! - The C library's thread block of the child's main thread still holds
//!   the template's thread id (its `fork` would have refreshed it). The C
//!   library compares it only with itself (the owner of a recursive lock
//!   such as the loader's); no other thread of the child can have that id
//!   while the template, its holder, lives, and `raise` asks the kernel.
//!   Rust's own locks are futexes that record no owner.
//! - The kernel gives the child no robust-futex list; nothing here uses
//!   robust or process-shared mutexes.
//! - `RLIMIT_NPROC` (the fallback for a pids limit without a cgroup) is
//!   checked by `fork` and, after an account switch, by `execve`. Without
//!   the `execve`, the agent itself is admitted even when its account is
//!   at the limit; every process it starts (its tools) is still refused
//!   there.
//! - The child never executes the binary, so the execute permission on it
//!   is checked once, when the gateway starts the template.

#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::IoSliceMut;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStringExt;
use std::time::Duration;

use corral_protocol::template::{encode_reply, SpawnRequest, MAX_FDS, MAX_REQUEST, READY};
use nix::errno::Errno;
use nix::libc;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{sigprocmask, SigSet, SigmaskHow, Signal};
use nix::sys::socket::{
    getsockopt, recvmsg, send, sockopt, ControlMessageOwned, MsgFlags, SockType,
};
use nix::unistd::{dup2, getppid, pipe2, read, setsid, write, Pid};

/// The subcommand, `corral-agent template`.
pub const ARG: &str = "template";

/// The most descriptors one `SCM_RIGHTS` message carries (Linux).
const SCM_MAX_FD: usize = 253;

/// How long a forked child may take to set itself up before the template
/// answers with `ETIMEDOUT` (the gateway then kills and reaps it).
const SETUP_WITHIN: Duration = Duration::from_secs(5);

/// What a child runs once set up: the agent's `main` with this argv.
pub type Main = fn(Vec<OsString>) -> !;

/// Serves requests on descriptor 0 until the gateway closes it; returns
/// the exit code.
pub fn serve(main: Main) -> u8 {
    match getsockopt(&Fd(0), sockopt::SockType) {
        Ok(SockType::SeqPacket) => {}
        _ => {
            eprintln!("corral-agent template: descriptor 0 must be the gateway's SOCK_SEQPACKET control socket");
            return 2;
        }
    }
    let gateway = getppid();
    // Told apart from the agents in `ps` and `/proc/PID/comm`.
    let _ = nix::sys::prctl::set_name(c"corral-template");
    let title = Title::find();
    if let Some(title) = &title {
        title.set(&[
            std::env::args_os().next().unwrap_or_default().into_vec(),
            ARG.into(),
        ]);
    }
    if send(0, READY, MsgFlags::MSG_NOSIGNAL).is_err() {
        return 0;
    }
    let mut buffer = vec![0u8; MAX_REQUEST + 1];
    loop {
        let received = receive(&mut buffer);
        let (len, fds) = match received {
            Ok(Some(request)) => request,
            Ok(None) => return 0,
            Err(errno) => {
                if reply(0, errno).is_err() {
                    return 0;
                }
                continue;
            }
        };
        let answer = spawn(&buffer[..len], fds, gateway, title, main);
        // The request held the child's token and secrets.
        wipe(&mut buffer[..len]);
        let (pid, errno) = match answer {
            Ok(pid) => (pid.as_raw(), 0),
            Err((pid, errno)) => (pid.map_or(0, Pid::as_raw), errno as i32),
        };
        if reply(pid, Errno::from_raw(errno)).is_err() {
            return 0;
        }
    }
}

/// A raw descriptor the template does not own (0, the control socket).
struct Fd(RawFd);

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: descriptor 0 stays open for the template's whole life.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

/// One datagram and its descriptors; `None` at end of file. A request too
/// long, or with too many descriptors, is refused with `EMSGSIZE`.
pub(crate) fn receive(buffer: &mut [u8]) -> Result<Option<(usize, Vec<OwnedFd>)>, Errno> {
    // Room for as many descriptors as one message can carry
    // (`SCM_MAX_FD`), so none is ever cut off and left open unowned.
    let mut space = nix::cmsg_space!([RawFd; SCM_MAX_FD]);
    let (len, flags, fds) = {
        let mut iov = [IoSliceMut::new(buffer)];
        let message = loop {
            match recvmsg::<()>(0, &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC) {
                Err(Errno::EINTR) => continue,
                other => break other?,
            }
        };
        let mut fds = Vec::new();
        if let Ok(cmsgs) = message.cmsgs() {
            for cmsg in cmsgs {
                if let ControlMessageOwned::ScmRights(raw) = cmsg {
                    // SAFETY: the kernel just installed these descriptors
                    // in this process; nothing else owns them.
                    fds.extend(
                        raw.into_iter()
                            .map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }),
                    );
                }
            }
        }
        (message.bytes, message.flags, fds)
    };
    if len == 0 && fds.is_empty() {
        return Ok(None);
    }
    if len > MAX_REQUEST
        || fds.len() > MAX_FDS
        || flags.intersects(MsgFlags::MSG_TRUNC | MsgFlags::MSG_CTRUNC)
    {
        // Whatever arrived of it, secrets included, goes.
        wipe(buffer);
        return Err(Errno::EMSGSIZE);
    }
    Ok(Some((len, fds)))
}

fn reply(pid: i32, errno: Errno) -> Result<(), Errno> {
    let answer = encode_reply(pid, errno as i32);
    send(0, &answer, MsgFlags::MSG_NOSIGNAL).map(drop)
}

/// Zeroes `bytes` in a way the compiler keeps.
pub(crate) fn wipe(bytes: &mut [u8]) {
    for byte in bytes.iter_mut() {
        // SAFETY: a plain write through a valid, exclusive reference.
        unsafe { std::ptr::write_volatile(byte, 0) };
    }
}

/// Forks the child for `request` and waits for it to be set up (or fail).
fn spawn(
    request: &[u8],
    fds: Vec<OwnedFd>,
    gateway: Pid,
    title: Option<Title>,
    main: Main,
) -> Result<Pid, (Option<Pid>, Errno)> {
    let (report_read, report_write) = pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| (None, e))?;
    // SAFETY: a fork without the C library's handlers, with the gateway
    // as the new process's parent. The template has one thread and holds
    // no lock, so the child may run anything a forked child may.
    let cloned = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_PARENT | libc::SIGCHLD) as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    match cloned {
        -1 => Err((None, Errno::last())),
        0 => {
            drop(report_read);
            in_child(request, fds, report_write, gateway, title, main)
        }
        pid => {
            let pid = Pid::from_raw(pid as i32);
            drop(report_write);
            drop(fds);
            match setup_outcome(&report_read) {
                Ok(()) => Ok(pid),
                Err(errno) => Err((Some(pid), errno)),
            }
        }
    }
}

/// What the child reported: four bytes, 0 once it is set up, else the
/// errno of the step that failed; its end closed before that (it died)
/// is `EIO`.
fn setup_outcome(report: &OwnedFd) -> Result<(), Errno> {
    let timeout = PollTimeout::try_from(SETUP_WITHIN).unwrap_or(PollTimeout::MAX);
    let mut errno = [0u8; 4];
    let mut got = 0;
    while got < errno.len() {
        let mut ready = [PollFd::new(report.as_fd(), PollFlags::POLLIN)];
        match poll(&mut ready, timeout) {
            Ok(0) => return Err(Errno::ETIMEDOUT),
            Ok(_) => {}
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e),
        }
        match read(report.as_raw_fd(), &mut errno[got..]) {
            Ok(0) => return Err(Errno::EIO),
            Ok(n) => got += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    match i32::from_le_bytes(errno) {
        0 => Ok(()),
        errno => Err(Errno::from_raw(errno)),
    }
}

/// The forked child: sets itself up as `request` says, reports, and runs
/// the agent. Never returns.
fn in_child(
    request: &[u8],
    fds: Vec<OwnedFd>,
    report: OwnedFd,
    gateway: Pid,
    title: Option<Title>,
    main: Main,
) -> ! {
    let applied = SpawnRequest::decode(request)
        .map_err(|_| Errno::EINVAL)
        .and_then(|request| apply(&request, &fds, &report, gateway).map(|()| request));
    match applied {
        Ok(request) => {
            // Already closed by `apply`, with every descriptor but the
            // report: forgotten, not closed again.
            std::mem::forget(fds);
            // The template answers the gateway with the pid.
            if write(&report, &0i32.to_le_bytes()).is_err() {
                // SAFETY: as below.
                unsafe { libc::_exit(127) }
            }
            drop(report);
            // What `ps` shows: the agent's name and argv, not the template's.
            let _ = nix::sys::prctl::set_name(c"corral-agent");
            if let Some(title) = title {
                title.set(&request.argv);
            }
            let argv = request.argv.into_iter().map(OsString::from_vec).collect();
            main(argv)
        }
        Err(errno) => {
            let _ = write(&report, &(errno as i32).to_le_bytes());
            // SAFETY: ends the process at once, running nothing of the
            // template's (no destructor, no atexit handler).
            unsafe { libc::_exit(127) }
        }
    }
}

/// Applies everything the request asks, in the order of the module's
/// documentation.
fn apply(
    request: &SpawnRequest,
    fds: &[OwnedFd],
    report: &OwnedFd,
    gateway: Pid,
) -> Result<(), Errno> {
    if fds.len() != request.fds() {
        return Err(Errno::EBADF);
    }
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    for (fd, target) in fds.iter().zip(0..3) {
        // Every received descriptor is above 2 (0–2 were open), and dup2
        // leaves the copy without close-on-exec.
        dup2(fd.as_raw_fd(), target)?;
    }
    setsid()?;
    let mut rest = fds[3..].iter();
    if request.cwd_fd {
        let dir = rest.next().ok_or(Errno::EBADF)?;
        nix::unistd::fchdir(dir.as_raw_fd())?;
    } else if let Some(dir) = &request.cwd {
        nix::unistd::chdir(std::path::Path::new(&OsString::from_vec(dir.clone())))?;
    }
    for join in rest {
        write(join, b"0")?;
    }
    for &(resource, value) in &request.rlimits {
        let limit = libc::rlimit {
            rlim_cur: value,
            rlim_max: value,
        };
        // SAFETY: setrlimit reads one struct through a valid pointer.
        check(unsafe { libc::setrlimit(resource as _, &limit) }.into())?;
    }
    if let Some((uid, gid, groups)) = &request.credentials {
        // Raw calls: the C library's would signal the threads it believes
        // the process has, which are the template's. Each change of ids
        // resets the dumpable flag to `fs.suid_dumpable`; it is put back.
        // SAFETY: integer arguments and a pointer to the group list,
        // valid for its length.
        unsafe {
            check(libc::syscall(
                libc::SYS_setgroups,
                groups.len() as libc::c_long,
                groups.as_ptr(),
            ))?;
            check(libc::syscall(libc::SYS_setgid, libc::c_long::from(*gid)))?;
            nix::sys::prctl::set_dumpable(false)?;
            check(libc::syscall(libc::SYS_setuid, libc::c_long::from(*uid)))?;
            nix::sys::prctl::set_dumpable(false)?;
        }
    }
    nix::sys::prctl::set_no_new_privs()?;
    let signal = Signal::try_from(request.parent_death).map_err(|_| Errno::EINVAL)?;
    nix::sys::prctl::set_pdeathsig(signal)?;
    // The gateway died before the signal was armed: give up now.
    if getppid() != gateway {
        return Err(Errno::ESRCH);
    }
    close_all_but(report.as_raw_fd())?;
    replace_environment(&request.env);
    Ok(())
}

/// Closes every descriptor above 2 but `keep`.
fn close_all_but(keep: RawFd) -> Result<(), Errno> {
    let close_range = |from: RawFd, to: RawFd| -> Result<(), Errno> {
        if from > to {
            return Ok(());
        }
        // SAFETY: close_range takes integers; the descriptors it closes
        // are owned by values this child never uses again (it runs `main`
        // or exits), and their destructors' close fails harmlessly.
        check(unsafe {
            libc::syscall(
                libc::SYS_close_range,
                from as libc::c_uint,
                to as libc::c_uint,
                0 as libc::c_uint,
            )
        })
    };
    match close_range(3, keep - 1).and_then(|()| close_range(keep + 1, RawFd::MAX)) {
        // Before Linux 5.9: one by one, as `/proc/self/fd` lists them.
        Err(Errno::ENOSYS) => {
            let open: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")
                .map_err(|_| Errno::EBADF)?
                .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
                .filter(|&fd| fd > 2 && fd != keep)
                .collect();
            for fd in open {
                // SAFETY: as above; a descriptor the listing itself used
                // is already closed, and EBADF is ignored.
                unsafe { libc::close(fd) };
            }
            Ok(())
        }
        other => other,
    }
}

/// Makes `env` (`NAME=VALUE` entries) the whole environment.
pub(crate) fn replace_environment(env: &[Vec<u8>]) {
    for (name, _) in std::env::vars_os() {
        std::env::remove_var(name);
    }
    for entry in env {
        let Some(at) = entry.iter().position(|&b| b == b'=').filter(|&at| at > 0) else {
            continue;
        };
        // `set_var` would panic on a NUL, printing the value (a secret).
        if entry.contains(&0) {
            continue;
        }
        let name = OsString::from_vec(entry[..at].to_vec());
        let value = OsString::from_vec(entry[at + 1..].to_vec());
        std::env::set_var(name, value);
    }
}

/// A raw call's return value as a result.
fn check(ret: libc::c_long) -> Result<(), Errno> {
    match ret {
        -1 => Err(Errno::last()),
        _ => Ok(()),
    }
}

/// The argument block `/proc/PID/cmdline` shows: the template's argv,
/// which the gateway pads (`corral-agent template ROOM`) so that a child
/// can write its own argv there, cut at the block's end.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Title {
    start: usize,
    len: usize,
}

impl Title {
    /// The block's bounds, from `/proc/self/stat` (fields 48 and 49).
    pub(crate) fn find() -> Option<Title> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // Field n of stat is fields[n - 3] here (pid and comm come first).
        let start: usize = fields.get(45)?.parse().ok()?;
        let end: usize = fields.get(46)?.parse().ok()?;
        (end > start).then(|| Title {
            start,
            len: end - start,
        })
    }

    /// Makes the block's pages this process's own now, writing to each
    /// the byte already there: a process cloned from another shares them
    /// until it writes, and [`Title::set`] then faults none in.
    pub(crate) fn own(&self) {
        const PAGE: usize = 4096;
        let Some(last) = (self.start + self.len)
            .checked_sub(1)
            .filter(|_| self.len > 0)
        else {
            return;
        };
        let first = self.start;
        let pages = (first / PAGE..=last / PAGE).map(|page| (page * PAGE).max(first));
        for at in pages {
            // SAFETY: `at` lies in the argument block (see `set`); the
            // write puts back the byte just read, so nothing that reads
            // the block sees a change.
            unsafe {
                let byte = at as *mut u8;
                std::ptr::write_volatile(byte, std::ptr::read_volatile(byte));
            }
        }
    }

    /// Writes `argv` joined by spaces as one string, as `setproctitle`
    /// does, then zeroes, and makes the block's last byte a space: the
    /// kernel then shows `/proc/PID/cmdline` up to the string's end, not
    /// the whole padded block.
    pub(crate) fn set(&self, argv: &[Vec<u8>]) {
        // SAFETY: the argument block is this process's own memory,
        // mapped writable on the initial stack, `len` bytes from `start`
        // as the kernel reports. Nothing holds a Rust reference into it:
        // std keeps raw pointers there for `std::env::args`, which, after
        // this, read the new text (in bounds: a NUL always comes before
        // the last byte); the agent takes its argv from the request,
        // never from there.
        let block = unsafe { std::slice::from_raw_parts_mut(self.start as *mut u8, self.len) };
        write_title(block, argv);
    }
}

/// [`Title::set`] on `block`: `argv` joined by spaces (cut to fit), a NUL,
/// zeroes, and a last byte that is not NUL (too short a block is left
/// alone).
fn write_title(block: &mut [u8], argv: &[Vec<u8>]) {
    let Some(room) = block.len().checked_sub(2) else {
        return;
    };
    let mut at = 0;
    for (i, arg) in argv.iter().enumerate() {
        if i > 0 {
            if at >= room {
                break;
            }
            block[at] = b' ';
            at += 1;
        }
        let take = arg.len().min(room - at);
        block[at..at + take].copy_from_slice(&arg[..take]);
        at += take;
    }
    block[at..].fill(0);
    if let Some(last) = block.last_mut() {
        *last = b' ';
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn titled(len: usize, argv: &[&str]) -> Vec<u8> {
        let mut block = vec![b'x'; len];
        let argv: Vec<Vec<u8>> = argv.iter().map(|a| a.as_bytes().to_vec()).collect();
        write_title(&mut block, &argv);
        block
    }

    #[test]
    fn the_title_is_the_argv_joined_then_zeroes_and_a_last_space() {
        let block = titled(16, &["agent", "rpc"]);
        assert_eq!(&block, b"agent rpc\0\0\0\0\0\0 ");
    }

    #[test]
    fn a_long_argv_is_cut_and_a_nul_still_comes_before_the_last_byte() {
        for len in 2..24 {
            let block = titled(len, &["corral-agent", "rpc", "--cwd", "/srv/p"]);
            assert_eq!(block[len - 1], b' ', "{len}");
            assert_eq!(block[len - 2], 0, "{len}: {block:?}");
            assert!(!block.contains(&b'x'), "{len}: every byte written");
        }
        assert_eq!(&titled(8, &["abcdefgh"]), b"abcdef\0 ");
    }

    #[test]
    fn a_block_too_short_is_left_alone() {
        assert_eq!(titled(1, &["a"]), b"x");
        assert_eq!(titled(0, &["a"]), b"");
    }
}
