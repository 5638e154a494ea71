//! `corral-agent spare [--without-host-network] [--sandbox-hide PATH]...`:
//! an agent started ahead of time, before anyone knows its project. It
//! enters as much of the sandbox as needs no project
//! ([`sandbox::enter_spare`]: its namespaces, itself as pid 1, a private
//! root with its own `/proc` and terminals, the empty tmpfs its scratch
//! directories and the `--sandbox-hide` directories will get, made but
//! not attached, the
//! Landlock rules every sandbox has), says so on stdout
//! ([`corral_protocol::template::SPARE_READY`], four bytes before any
//! line of the protocol), then waits for its assignment on
//! stdin: a little-endian `u32` length and a request of which it takes
//! argv and the environment
//! ([`corral_protocol::template::encode_assignment`]); over a socket, up to
//! two descriptors may come with its first bytes: the agent's stderr (the
//! project's log file) and the project directory as the sender opened it,
//! which `--cwd` must name in the spare's view. It then runs the
//! agent's ordinary `main` with them, which finishes the sandbox for the
//! project the arguments name (the scratch directories, the hides, the
//! project bound back, Landlock in force), so a project's start is left
//! with only its own part. While it waits, a spare also makes ready what
//! a start needs whatever the project ([`HeadStart`]): the async runtime
//! (reaping already), the logs' span registry, the command-line parser
//! (made, not yet used), and where its command line is shown.
//!
//! The assignment must ask for `rpc` or `run` with `--sandbox`, an
//! absolute `--cwd` and `--sandbox-hide` paths, and the same network
//! choice the spare made (with
//! `--model-socket` it has no host network; start it
//! `--without-host-network`), and carry nothing but argv and the
//! environment, else the agent refuses it and exits. End of file before an
//! assignment ends the spare quietly. Until its assignment a spare holds
//! no secret: the token and secrets come with it (the received bytes are
//! zeroed once copied into the environment; the environment itself, as in
//! any agent, keeps them until the agent reads and removes them).
//!
//! A spare's view of the host is taken when it starts: its mount
//! namespace is a private copy, so a file system mounted on the host
//! afterwards is not in it, and the entries of `/` it grants are those of
//! that moment. Whoever keeps spares should replace them now and then.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;

use corral_protocol::template::{SpawnRequest, MAX_REQUEST, SPARE_READY, SPARE_REFUSED_EXIT};
use nix::errno::Errno;

use crate::sandbox::{self, Spare, EXIT_SANDBOX_UNAVAILABLE};
use crate::template::{replace_environment, wipe, Title};

/// The subcommand, `corral-agent spare`.
pub const ARG: &str = "spare";

/// Its option for a network namespace of its own.
pub const WITHOUT_HOST_NETWORK: &str = "--without-host-network";

/// Its option naming a path its projects' sandboxes will hide (absolute),
/// as `rpc --sandbox-hide` does: it makes the covers' tmpfs ahead.
pub const SANDBOX_HIDE: &str = "--sandbox-hide";

/// The name (`comm`) of a spare's agent, pid 1 of its pid namespace,
/// until its assignment; then it has an agent's.
pub const SPARE_NAME: &std::ffi::CStr = c"corral-spare-in";
const AGENT_NAME: &std::ffi::CStr = c"corral-agent-in";

/// What a spare runs once assigned: the agent's `main` with this argv.
pub type Main = fn(Vec<OsString>, Option<HeadStart>) -> !;

/// What a spare made ready while it waited, for the agent's `main` to
/// go on from once the spare has its assignment: whatever of the start
/// depends neither on the project nor on the arguments.
#[derive(Debug)]
pub struct HeadStart {
    /// The sandbox as far as it goes without a project.
    pub sandbox: Spare,
    /// The async runtime, built ([`crate::runtime::build`]) and reaping
    /// ([`sandbox::start_reaping`]): one thread still, as
    /// [`Spare::finish`] needs.
    pub runtime: tokio::runtime::Runtime,
    /// The logs' span registry, allocated (its slab is most of what
    /// setting up the logs costs); the filter comes with the assignment.
    pub registry: tracing_subscriber::Registry,
    /// The command-line parser, made and built ([`crate::cli::made_ahead`])
    /// and never used: [`crate::cli::parse`] parses the assignment with it
    /// as with a new one.
    pub command: clap::Command,
}

/// Runs the spare with `options` (the arguments after `spare`). Never
/// returns.
pub fn run(options: &[OsString], main: Main) -> ! {
    let Some((host_network, hides)) = parse_options(options) else {
        eprintln!("usage: corral-agent spare [{WITHOUT_HOST_NETWORK}] [{SANDBOX_HIDE} PATH]...");
        std::process::exit(2);
    };
    if let Err(e) = sandbox::make_undumpable() {
        eprintln!("corral-agent: cannot make the process undumpable: {e}");
    }
    let sandbox = match sandbox::enter_spare(host_network, &hides) {
        Ok(spare) => spare,
        Err(e) => {
            eprintln!("corral-agent: {e}");
            std::process::exit(i32::from(EXIT_SANDBOX_UNAVAILABLE));
        }
    };
    // Pid 1 of the new pid namespace from here on, named for `ps` as a
    // spare ([`SPARE_NAME`]) until it has a project.
    map_own_binary();
    let runtime = match crate::runtime::build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("corral-agent: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(async { sandbox::start_reaping() }) {
        eprintln!("corral-agent: cannot reap the sandbox's orphans: {e}");
        std::process::exit(1);
    }
    let mut head = HeadStart {
        sandbox,
        runtime,
        registry: tracing_subscriber::Registry::default(),
        command: crate::cli::made_ahead(),
    };
    let title = Title::find();
    if let Some(title) = &title {
        title.own();
    }
    if let Err(e) = write_all(SPARE_READY) {
        eprintln!("corral-agent spare: cannot say it is ready: {e}");
        std::process::exit(1);
    }
    let request = match read_assignment() {
        Ok(Some((request, project))) => {
            head.sandbox.expect_project(project);
            request
        }
        Ok(None) => std::process::exit(0),
        Err(reason) => {
            eprintln!("corral-agent spare: {reason}");
            std::process::exit(SPARE_REFUSED_EXIT);
        }
    };
    let _ = nix::sys::prctl::set_name(AGENT_NAME);
    if let Some(title) = title {
        title.set(&request.argv);
    }
    replace_environment(&request.env);
    let mut env = request.env;
    // The environment holds its own copies now.
    env.iter_mut().for_each(|entry| wipe(entry));
    drop(env);
    let argv = request.argv.into_iter().map(OsString::from_vec).collect();
    main(argv, Some(head))
}

/// The network choice and the hidden paths `options` name; `None` for
/// anything else (a relative path among them).
fn parse_options(options: &[OsString]) -> Option<(bool, Vec<std::path::PathBuf>)> {
    let mut host_network = true;
    let mut hides = Vec::new();
    let mut options = options.iter();
    while let Some(option) = options.next() {
        if option == WITHOUT_HOST_NETWORK {
            host_network = false;
        } else if option == SANDBOX_HIDE {
            let path = std::path::PathBuf::from(options.next()?);
            if !path.is_absolute() {
                return None;
            }
            hides.push(path);
        } else {
            return None;
        }
    }
    Some((host_network, hides))
}

/// Maps the pages of the agent's own binary into this process now, while
/// nobody waits: a forked process maps none of its parent's file pages
/// and would fault each one in again on first touch, after its
/// assignment. Only page-table entries: the pages are the page cache's,
/// shared with every other agent. Best effort.
fn map_own_binary() {
    let (Ok(exe), Ok(maps)) = (
        std::fs::read_link("/proc/self/exe"),
        std::fs::read_to_string("/proc/self/maps"),
    ) else {
        return;
    };
    let exe = exe.as_os_str().to_string_lossy();
    for line in maps.lines() {
        // The path is the rest of the line after five fields and padding,
        // spaces and a " (deleted)" included, as `readlink` shows it too.
        let mut fields = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(path)) = (fields.next(), fields.next(), fields.nth(3))
        else {
            continue;
        };
        if path.trim_start() != exe || perms.contains('w') {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (Ok(start), Ok(end)) = (
            usize::from_str_radix(start, 16),
            usize::from_str_radix(end, 16),
        ) else {
            continue;
        };
        populate(start, end.saturating_sub(start));
    }
}

/// `madvise(MADV_POPULATE_READ)` over one mapping of this process.
#[allow(unsafe_code)]
fn populate(start: usize, len: usize) {
    // Linux 5.14; older kernels refuse it with EINVAL, which is ignored.
    const MADV_POPULATE_READ: libc::c_int = 22;
    // SAFETY: advice only, over a mapping `/proc/self/maps` lists for
    // this process; it changes no memory contents.
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, MADV_POPULATE_READ);
    }
}

/// The assignment from descriptor 0, read with exact counts (the bytes
/// after it are the protocol's, for the agent's own reader); `None` at end
/// of file before it. Descriptors sent with its first bytes (over a
/// socket): the first becomes the agent's stderr (the project's own log
/// file, which the spare could not have been given when it started); the
/// second, if any, is the project directory as the sender opened it, which
/// `--cwd` must name.
fn read_assignment() -> Result<Option<(SpawnRequest, Option<OwnedFd>)>, String> {
    let mut len = [0u8; 4];
    let (first, project) = match receive_stderr(&mut len) {
        Ok((0, _)) => return Ok(None),
        Ok(got) => got,
        Err(e) => return Err(format!("cannot read the assignment: {e}")),
    };
    match read_exact(&mut len[first..]) {
        Ok(true) => {}
        Ok(false) | Err(Errno::EPIPE) => return Err("the assignment ends early".to_string()),
        Err(e) => return Err(format!("cannot read the assignment: {e}")),
    }
    let len = u32::from_le_bytes(len) as usize;
    if len > MAX_REQUEST {
        return Err(format!(
            "an assignment of {len} bytes is over the limit of {MAX_REQUEST}"
        ));
    }
    let mut buffer = vec![0u8; len];
    let read = read_exact(&mut buffer);
    let decoded = match read {
        Ok(true) => SpawnRequest::decode(&buffer)
            .map_err(|e| e.to_string())
            .and_then(only_argv_and_environment),
        Ok(false) | Err(Errno::EPIPE) => Err("the assignment ends early".to_string()),
        Err(e) => Err(format!("cannot read the assignment: {e}")),
    };
    // It holds the token and the secrets, now copied out.
    wipe(&mut buffer);
    decoded.map(|request| Some((request, project)))
}

/// Refuses an assignment that asks for more than its arguments and
/// environment: the rest (directory, cgroups, rlimits, account) is for
/// whoever starts the spare, which has long applied it.
fn only_argv_and_environment(request: SpawnRequest) -> Result<SpawnRequest, String> {
    // Every field named: one added later must be decided on here.
    let SpawnRequest {
        argv,
        mut env,
        cwd,
        cwd_fd,
        join,
        rlimits,
        credentials,
        parent_death,
    } = request;
    let plain = cwd.is_none()
        && !cwd_fd
        && join == 0
        && rlimits.is_empty()
        && credentials.is_none()
        && parent_death == 0;
    if !plain {
        env.iter_mut().for_each(|entry| wipe(entry));
        return Err(
            "an assignment carries only argv and the environment; directory, cgroups, \
             rlimits and account are set when the spare is started"
                .to_string(),
        );
    }
    Ok(SpawnRequest {
        argv,
        env,
        ..SpawnRequest::default()
    })
}

/// Reads the first bytes of the assignment from descriptor 0 into
/// `buffer`, making the first descriptor that came with them the agent's
/// stderr, and returns how many bytes came and the second descriptor;
/// 0 at end of file. More than two descriptors are refused (all are
/// closed). Descriptor 0 may be a pipe, which carries none.
fn receive_stderr(buffer: &mut [u8]) -> Result<(usize, Option<OwnedFd>), Errno> {
    let (len, fds) = match receive_with_fds(buffer) {
        Err(Errno::ENOTSOCK) => loop {
            match nix::unistd::read(0, buffer) {
                Err(Errno::EINTR) => continue,
                other => return other.map(|len| (len, None)),
            }
        },
        other => other?,
    };
    let mut fds = fds.into_iter();
    if let Some(stderr) = fds.next() {
        nix::unistd::dup2(std::os::fd::AsRawFd::as_raw_fd(&stderr), 2)?;
    }
    Ok((len, fds.next()))
}

/// One `recvmsg` on descriptor 0 (the template's, with room for every
/// descriptor one message can carry) and the descriptors that came with
/// it, at most two.
fn receive_with_fds(buffer: &mut [u8]) -> Result<(usize, Vec<OwnedFd>), Errno> {
    let (len, fds) = crate::template::receive(buffer)?.unwrap_or_default();
    if fds.len() > 2 {
        return Err(Errno::EMSGSIZE);
    }
    Ok((len, fds))
}

/// Writes `bytes` to descriptor 1, unbuffered.
fn write_all(mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        match nix::unistd::write(std::io::stdout(), bytes) {
            Ok(0) => return Err(Errno::EPIPE),
            Ok(n) => bytes = &bytes[n..],
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Fills `buffer` from descriptor 0; false at end of file before the
/// first byte, an error at end of file after it.
fn read_exact(buffer: &mut [u8]) -> Result<bool, Errno> {
    let mut got = 0;
    while got < buffer.len() {
        match nix::unistd::read(0, &mut buffer[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(Errno::EPIPE),
            Ok(n) => got += n,
            Err(Errno::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(args: &[&str]) -> Option<(bool, Vec<std::path::PathBuf>)> {
        parse_options(&args.iter().map(OsString::from).collect::<Vec<_>>())
    }

    #[test]
    fn options_are_the_network_and_absolute_hides() {
        assert_eq!(options(&[]), Some((true, vec![])));
        assert_eq!(
            options(&[
                "--sandbox-hide",
                "/s",
                WITHOUT_HOST_NETWORK,
                "--sandbox-hide",
                "/t"
            ]),
            Some((false, vec!["/s".into(), "/t".into()]))
        );
        for refused in [
            &["--sandbox-hide", "s"][..],
            &["--sandbox-hide"],
            &["--sandbox-hide=/s"],
            &["--cwd", "/p"],
        ] {
            assert_eq!(options(refused), None, "{refused:?}");
        }
    }
}
