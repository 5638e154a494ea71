//! The agent's template: one `corral-agent template` process, started on
//! the spawner thread at the first spawn that asks for it, which forks
//! each child instead of the gateway executing the agent (see the
//! agent's `template` module). A forked child skips `exec` and the loader,
//! and its relocated read-only data stays shared with every other child.
//!
//! The template is a child of the gateway in a session of its own,
//! registered as live (so no sweep takes it for an orphan), with no
//! environment and SIGKILL as its parent-death signal. It holds no
//! secret: requests carry the child's environment and the template's own
//! process wipes each one unread. Its children are the gateway's own
//! (`CLONE_PARENT`), waited for and killed like an executed child.
//!
//! A program that does not say it is ready within [`READY_WITHIN`] (a
//! `--child-bin` that is not `corral-agent`) is killed, its children are
//! executed, and it is tried again after [`RETRY_AFTER`]. A template found
//! gone when a request is sent (the request not delivered) is replaced at
//! once; one that does not answer a request it got within
//! [`ANSWER_WITHIN`] is killed, and that spawn fails (its child may exist,
//! and must not meet a second one on the same socket). The pid in an
//! answer is trusted only if it is the gateway's child. A template whose
//! binary was replaced (another inode or change time) is retired, so an
//! upgrade reaches new children.

use std::ffi::CString;
use std::fs::File;
use std::io::IoSlice;
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use corral_protocol::template::{
    decode_reply, SpawnRequest, MAX_FDS, MAX_REQUEST, READY, REPLY_LEN,
};
use nix::errno::Errno;
use nix::libc;
use nix::sys::signal::{kill, Signal};
use nix::sys::socket::{
    recv, sendmsg, setsockopt, socketpair, sockopt, AddressFamily, ControlMessage, MsgFlags,
    SockFlag, SockType,
};
use nix::sys::time::TimeVal;
use nix::unistd::Pid;

use super::launched;
use super::leftovers::Registry;
use super::sys::{self, Exec, PreExec};

/// The agent's subcommand.
const SUBCOMMAND: &str = "template";
/// Bytes of argv the template is started with, where each child writes
/// its own argv for `ps` to show (cut there).
const TITLE_ROOM: usize = 4096;
/// How long the template may take to answer a request.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(10);
/// How long a new template may take to say it is ready.
pub const READY_WITHIN: Duration = Duration::from_secs(10);
/// How long the template is not tried again after it could not start.
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The template, used from the spawner thread only.
static TEMPLATE: Mutex<Slot> = Mutex::new(Slot {
    running: None,
    failed: None,
});

struct Slot {
    running: Option<Template>,
    /// When a template last failed to start, and for which program.
    failed: Option<(PathBuf, Instant)>,
}

impl Slot {
    /// Starts a template of `program` unless one failed to start within
    /// [`RETRY_AFTER`] (then, and on a failure now, children are executed).
    fn start(
        &mut self,
        program: &Path,
        identity: Option<Identity>,
        live: &mut Registry,
    ) -> Result<Template, NotForked> {
        if let Some((failed, at)) = &self.failed {
            if failed == program && at.elapsed() < RETRY_AFTER {
                return Err(NotForked::Unavailable(std::io::Error::other(
                    "the template could not start recently",
                )));
            }
        }
        let started = identity
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
            .and_then(|identity| start(program, identity, live));
        started.map_err(|e| {
            tracing::warn!(program = %program.display(), error = %e, "the agent template could not start: children are executed; tried again in {} s", RETRY_AFTER.as_secs());
            self.failed = Some((program.to_path_buf(), Instant::now()));
            NotForked::Unavailable(e)
        })
    }
}

struct Template {
    program: PathBuf,
    /// The binary it was started from.
    identity: Identity,
    pid: Pid,
    control: OwnedFd,
}

/// Why a spawn through the template did not give a running child.
#[derive(Debug)]
pub(super) enum NotForked {
    /// The request reached the template and no child runs for it: the
    /// child failed to set itself up (it is killed and reaped), or the
    /// template did not answer. Not retried by executing: a child may
    /// exist, holding the spawn's descriptors until the gateway's end of
    /// its socket closes.
    Failed(std::io::Error),
    /// The template could not be used: execute the program instead.
    Unavailable(std::io::Error),
}

/// Forks the child `exec` describes from the template of its program,
/// set up as `setup` says. `live` is the held start lock (a template
/// started here is registered as live).
pub(super) fn launch(exec: &Exec, setup: &PreExec, live: &mut Registry) -> Result<Pid, NotForked> {
    sys::check_account_switch(setup).map_err(NotForked::Failed)?;
    let (request, fds) = request_of(exec, setup);
    let encoded = request.encode();
    if encoded.len() > MAX_REQUEST || fds.len() > MAX_FDS {
        return Err(NotForked::Unavailable(std::io::Error::other(format!(
            "the spawn request is {} bytes with {} descriptors, over the template's {MAX_REQUEST} and {MAX_FDS}",
            encoded.len(),
            fds.len()
        ))));
    }
    let program = Path::new(std::ffi::OsStr::from_bytes(exec.program.as_bytes()));
    let mut slot = TEMPLATE.lock().unwrap_or_else(PoisonError::into_inner);
    // A template of another program, or of a binary replaced since (an
    // upgrade): new children run the program as it is now.
    let identity = Identity::of(program);
    if slot
        .running
        .as_ref()
        .is_some_and(|t| t.program != program || Some(t.identity) != identity)
    {
        retire(slot.running.take());
    }
    // A template found gone (its socket refuses the request, which was
    // then not delivered) is replaced once at once.
    let mut attempts = 0;
    let template = loop {
        attempts += 1;
        let template = match slot.running.take() {
            Some(template) => template,
            None => slot.start(program, identity, live)?,
        };
        match send(&template, &encoded, &fds) {
            Ok(()) => break template,
            Err(e) => {
                tracing::warn!(pid = template.pid.as_raw(), error = %e, "the agent template is gone; starting another");
                retire(Some(template));
                if attempts == 2 {
                    return Err(NotForked::Unavailable(e.into()));
                }
            }
        }
    };
    let answer = match answer(&template) {
        Ok(answer) => answer,
        Err(e) => {
            tracing::warn!(pid = template.pid.as_raw(), error = %e, "the agent template did not answer; it is restarted at the next spawn");
            retire(Some(template));
            return Err(NotForked::Failed(std::io::Error::other(format!(
                "the agent template did not answer: {e}"
            ))));
        }
    };
    slot.running = Some(template);
    let (pid, errno) = answer;
    // Only a child of the gateway is trusted with a kill or a wait.
    let child = (pid > 0)
        .then(|| Pid::from_raw(pid))
        .filter(|&pid| is_own_child(pid));
    match (child, errno) {
        (Some(pid), 0) => Ok(pid),
        (child, errno) => {
            if let Some(pid) = child {
                // Failed or too slow to set itself up.
                let _ = kill(pid, Signal::SIGKILL);
                launched::reap_later(launched::Launched::new(pid));
            }
            let error = match errno {
                0 => std::io::Error::other(format!(
                    "the agent template named pid {pid}, not a child of the gateway"
                )),
                errno => std::io::Error::from_raw_os_error(errno),
            };
            Err(NotForked::Failed(error))
        }
    }
}

/// Whether `pid` is a child of this process (`waitid` with `WNOWAIT`
/// reaps nothing).
fn is_own_child(pid: Pid) -> bool {
    use nix::sys::wait::{waitid, Id, WaitPidFlag};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::Pid(pid), flags) {
            Err(Errno::EINTR) => continue,
            Err(Errno::ECHILD) => return false,
            _ => return true,
        }
    }
}

/// What tells a binary from its replacement: device, inode and change time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Identity {
    dev: u64,
    ino: u64,
    ctime: (i64, i64),
}

impl Identity {
    pub(super) fn of(program: &Path) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        let meta = std::fs::metadata(program).ok()?;
        Some(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        })
    }
}

/// The request for `exec` and `setup`, and the descriptors that go with it.
fn request_of<'a>(exec: &'a Exec, setup: &'a PreExec) -> (SpawnRequest, Vec<RawFd>) {
    let bytes = |s: &CString| s.as_bytes().to_vec();
    let mut fds: Vec<RawFd> = exec.stdio.iter().map(AsRawFd::as_raw_fd).collect();
    fds.extend(setup.cwd.as_ref().map(|dir| dir.as_raw_fd()));
    fds.extend(setup.join.iter().map(AsRawFd::as_raw_fd));
    let request = SpawnRequest {
        argv: exec.argv.iter().map(bytes).collect(),
        env: exec.envp.iter().map(bytes).collect(),
        cwd: exec.cwd.as_ref().map(bytes),
        cwd_fd: setup.cwd.is_some(),
        join: u32::try_from(setup.join.len()).unwrap_or(u32::MAX),
        rlimits: setup
            .limits
            .as_ref()
            .map(|limits| {
                limits
                    .rlimits()
                    .iter()
                    .map(|&(resource, value)| (resource as u32, value))
                    .collect()
            })
            .unwrap_or_default(),
        credentials: setup
            .credentials
            .as_ref()
            .map(|c| (c.uid, c.gid, c.groups.clone())),
        parent_death: setup.parent_death.unwrap_or(Signal::SIGKILL) as i32,
    };
    (request, fds)
}

/// Sends one request with its descriptors.
fn send(template: &Template, request: &[u8], fds: &[RawFd]) -> Result<(), Errno> {
    let rights = [ControlMessage::ScmRights(fds)];
    let iov = [IoSlice::new(request)];
    loop {
        match sendmsg::<()>(
            template.control.as_raw_fd(),
            &iov,
            &rights,
            MsgFlags::MSG_NOSIGNAL,
            None,
        ) {
            Err(Errno::EINTR) => continue,
            other => return other.map(drop),
        }
    }
}

/// Reads the answer to a request: (pid, errno).
fn answer(template: &Template) -> Result<(i32, i32), Errno> {
    let mut answer = [0u8; REPLY_LEN + 1];
    let len = receive(&template.control, &mut answer)?;
    decode_reply(&answer[..len]).ok_or(Errno::EPIPE)
}

/// One datagram from the template; `ETIMEDOUT` once the socket's
/// receive timeout ran out.
fn receive(control: &OwnedFd, into: &mut [u8]) -> Result<usize, Errno> {
    loop {
        match recv(control.as_raw_fd(), into, MsgFlags::empty()) {
            Err(Errno::EINTR) => continue,
            Err(Errno::EAGAIN) => return Err(Errno::ETIMEDOUT),
            other => return other,
        }
    }
}

/// Starts `program template` with one end of a new control socket as its
/// stdin, and registers it as live.
fn start(program: &Path, identity: Identity, live: &mut Registry) -> std::io::Result<Template> {
    let (control, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    receive_timeout(&control, READY_WITHIN)?;
    let null: OwnedFd = File::options()
        .read(true)
        .write(true)
        .open("/dev/null")?
        .into();
    let stderr = std::io::stderr().as_fd().try_clone_to_owned()?;
    let c_string = |bytes: &[u8]| {
        CString::new(bytes).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
    };
    let path = c_string(program.as_os_str().as_bytes())?;
    let exec = Exec {
        program: path.clone(),
        argv: vec![
            path,
            c_string(SUBCOMMAND.as_bytes())?,
            c_string(&[b' '; TITLE_ROOM])?,
        ],
        envp: Vec::new(),
        cwd: Some(c_string(b"/")?),
        stdio: [theirs, null, stderr],
    };
    let setup = PreExec {
        parent_death: Some(Signal::SIGKILL),
        ..PreExec::default()
    };
    let pid = sys::launch(&exec, setup)?;
    drop(exec);
    live.add(pid.as_raw().unsigned_abs());
    let template = Template {
        program: program.to_path_buf(),
        identity,
        pid,
        control,
    };
    let mut ready = [0u8; READY.len() + 1];
    match receive(&template.control, &mut ready) {
        Ok(len) if ready[..len] == READY[..] => {}
        said => {
            retire(Some(template));
            return Err(std::io::Error::other(match said {
                Err(Errno::ETIMEDOUT) => format!(
                    "{} did not say it serves `template` within {} s",
                    program.display(),
                    READY_WITHIN.as_secs()
                ),
                Err(e) => format!("{} template: {e}", program.display()),
                Ok(_) => format!("{} does not serve `template`", program.display()),
            }));
        }
    }
    receive_timeout(&template.control, ANSWER_WITHIN)?;
    tracing::info!(pid = pid.as_raw(), program = %program.display(), "agent template started");
    Ok(template)
}

fn receive_timeout(socket: &OwnedFd, within: Duration) -> nix::Result<()> {
    let seconds = libc::time_t::try_from(within.as_secs()).unwrap_or(libc::time_t::MAX);
    setsockopt(socket, sockopt::ReceiveTimeout, &TimeVal::new(seconds, 0))
}

/// Kills and reaps a template that is no longer used.
fn retire(template: Option<Template>) {
    let Some(template) = template else { return };
    drop(template.control);
    let _ = kill(template.pid, Signal::SIGKILL);
    // Reaped in the background, then forgotten as live: a template stuck
    // in the kernel cannot hold a start up.
    launched::reap_later(launched::Launched::new(template.pid));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_child_of_this_process_is_its_own() {
        assert!(!is_own_child(Pid::from_raw(1)));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        assert!(is_own_child(pid));
        child.kill().unwrap();
        // Killed, exited or not, until reaped: still ours (and the check
        // itself, with WNOWAIT, reaped nothing).
        assert!(is_own_child(pid));
        assert!(is_own_child(pid));
        child.wait().unwrap();
        assert!(!is_own_child(pid));
    }

    #[test]
    fn a_replaced_binary_has_another_identity() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("corral-agent");
        std::fs::write(&path, "one").unwrap();
        let first = Identity::of(&path).unwrap();
        assert_eq!(Identity::of(&path), Some(first));
        // An upgrade: the new file renamed over the old.
        let staged = dir.path().join("corral-agent.new");
        std::fs::write(&staged, "two").unwrap();
        std::fs::rename(&staged, &path).unwrap();
        assert_ne!(Identity::of(&path), Some(first));
        assert_eq!(Identity::of(&dir.path().join("gone")), None);
    }
}
