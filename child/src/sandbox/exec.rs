//! `corral-agent sandbox-exec`: the agent's sandbox around another program
//! (a third-party agent the gateway runs). The same confinement as
//! `rpc --sandbox`: user, mount, pid and ipc namespaces, a private `/proc`,
//! `/tmp` and `/dev/shm`, hidden paths, Landlock (writes only in the project,
//! an optional private home and the scratch directories), no new privileges
//! and an init that reaps; then every capability is dropped and the command
//! replaces the process, as pid 2 of the new pid namespace, in the project.
//! With a proxy route, pid 2 first takes the network away from itself and
//! everything below, and becomes the egress relay, with the command as its
//! child: the command's model calls and tools alike go through the proxy,
//! or, given the model broker's socket, its model calls through the relay
//! on `127.0.0.1:3129` to the broker.

use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use corral_protocol::egress::SECRET_ENV;

use super::{
    enter_under_init, sys, SandboxConfig, SandboxError, ToolNet, EXIT_SANDBOX_UNAVAILABLE,
};
use crate::egress;

/// Exit code when the command cannot be found (as in a shell).
pub const EXIT_NOT_FOUND: u8 = 127;
/// Exit code when the command exists but cannot be executed.
pub const EXIT_NOT_EXECUTABLE: u8 = 126;

/// Runs `command` confined to `config`'s project. `home`, created (mode
/// 0700) if missing, is writable inside and becomes the command's `HOME`.
/// `broker`, the model broker's socket (`O_PATH`), is passed to the relay
/// (a proxy route is needed for it). Returns only on failure, with the
/// exit code; the reason is on stderr.
pub fn exec(
    config: SandboxConfig,
    home: Option<&Path>,
    command: &[OsString],
    broker: Option<&OwnedFd>,
) -> u8 {
    let Some((program, args)) = command.split_first() else {
        eprintln!("corral-agent: sandbox-exec needs a command after --");
        return 2;
    };
    let broker = broker.map(AsRawFd::as_raw_fd);
    let (config, home) = match confine(config, home, broker) {
        Ok(confined) => confined,
        Err(e) => {
            eprintln!("corral-agent: {e}");
            return EXIT_SANDBOX_UNAVAILABLE;
        }
    };
    let mut command = match config.tool_network() {
        ToolNet::Proxy(route) => {
            let mut command = std::process::Command::new(egress::SELF_EXE);
            command
                .arg(egress::SUBCOMMAND)
                .arg(egress::SOCKET_FD_FLAG)
                .arg(route.socket_fd().to_string());
            if let Some(fd) = broker {
                command.arg(egress::BROKER_FD_FLAG).arg(fd.to_string());
            }
            command
                .arg("--")
                .arg(program)
                .env(SECRET_ENV, route.secret());
            command
        }
        ToolNet::Host | ToolNet::Isolated => std::process::Command::new(program),
    };
    command.args(args).current_dir(config.project());
    if let Some(home) = home {
        command.env("HOME", home);
    }
    let error = command.exec();
    eprintln!(
        "corral-agent: sandbox-exec cannot execute {}: {error}",
        Path::new(command.get_program()).display()
    );
    match error.kind() {
        std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
        _ => EXIT_NOT_EXECUTABLE,
    }
}

/// Enters the sandbox with `home` (created if missing) writable too, and
/// drops every capability. Returns in the confined process (pid 2), with
/// the canonical home.
fn confine(
    config: SandboxConfig,
    home: Option<&Path>,
    broker: Option<std::os::fd::RawFd>,
) -> Result<(SandboxConfig, Option<PathBuf>), SandboxError> {
    let (config, home) = match home {
        None => (config, None),
        Some(home) => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(home)
                .map_err(|source| SandboxError::Directory {
                    path: home.to_path_buf(),
                    source,
                })?;
            let home = home
                .canonicalize()
                .map_err(|source| SandboxError::Directory {
                    path: home.to_path_buf(),
                    source,
                })?;
            (config.writable_too(&home)?, Some(home))
        }
    };
    enter_under_init(&config)?;
    if let ToolNet::Proxy(route) = config.tool_network() {
        // While the capabilities needed to make a network namespace last.
        sys::isolate_network()
            .map_err(|e| SandboxError::NotConfined(format!("cannot take the network away: {e}")))?;
        sys::keep_across_exec(route.socket_fd()).map_err(|e| {
            SandboxError::NotConfined(format!("cannot pass the egress socket on: {e}"))
        })?;
        if let Some(fd) = broker {
            sys::keep_across_exec(fd).map_err(|e| {
                SandboxError::NotConfined(format!("cannot pass the broker's socket on: {e}"))
            })?;
        }
    }
    // A command running as uid 0 of the namespace would otherwise keep
    // its capabilities there across exec.
    sys::drop_capabilities().map_err(|e| {
        SandboxError::NotConfined(format!("cannot drop capabilities before exec: {e}"))
    })?;
    Ok((config, home))
}
