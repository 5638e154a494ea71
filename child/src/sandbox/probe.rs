//! `corral-agent sandbox-probe`: enters the sandbox in a throwaway process
//! tree rooted at the current directory, checks from inside that it holds
//! (with a model socket: also without the host's network, the socket
//! reachable), and prints `{"sandbox":"ok","landlock_abi":N,"scoped":BOOL}`.

use std::io::{ErrorKind, Write as _};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};

use super::{enter, sys, tree, Confined, SandboxConfig, SandboxError, ToolNet};
use crate::egress::open_socket;

/// What the probe checks of tool commands' network.
#[derive(Clone, Copy, Debug)]
pub enum ProbedNetwork<'a> {
    /// Nothing: they keep the agent's network.
    Host,
    /// They can get a network namespace of their own.
    Isolated,
    /// That too, and the egress socket at this path opens as a socket, also
    /// from inside the sandbox (through its descriptor).
    Proxy(&'a Path),
}

/// Runs the probe; returns the process exit code (0, or 78 with the reason
/// on stderr). `model_socket`: the gateway's model broker, which the agent
/// then reaches without the host's network.
pub fn probe(hide: &[PathBuf], network: ProbedNetwork<'_>, model_socket: Option<&Path>) -> u8 {
    let socket = match network {
        ProbedNetwork::Proxy(path) => match open_socket(path) {
            Ok(socket) => Some(socket),
            Err(e) => tree::fail(&SandboxError::NotConfined(format!(
                "tools cannot reach the egress proxy: {e}"
            ))),
        },
        ProbedNetwork::Host | ProbedNetwork::Isolated => None,
    };
    let model_socket = match model_socket.map(open_socket).transpose() {
        Ok(socket) => socket,
        Err(e) => tree::fail(&SandboxError::NotConfined(format!(
            "the agent cannot reach the model broker: {e}"
        ))),
    };
    let tool_net = match network {
        ProbedNetwork::Host => ToolNet::Host,
        ProbedNetwork::Isolated | ProbedNetwork::Proxy(_) => ToolNet::Isolated,
    };
    let result = std::env::current_dir()
        .map_err(|source| SandboxError::Project {
            path: PathBuf::from("."),
            source,
        })
        .and_then(|cwd| SandboxConfig::new(&cwd, hide, tool_net.clone()))
        .map(|config| match model_socket {
            Some(_) => config.without_host_network(),
            None => config,
        })
        .and_then(|config| {
            let confined = enter(&config)?;
            check(&config, &tool_net, socket.as_ref())?;
            if let Some(socket) = &model_socket {
                reachable(socket, "the model broker's socket")?;
                only_loopback()?;
            }
            Ok(confined)
        });
    match result {
        Ok(confined) => {
            let line = report(&confined);
            let mut stdout = std::io::stdout();
            let _ = writeln!(stdout, "{line}").and_then(|()| stdout.flush());
            0
        }
        Err(e) => tree::fail(&e),
    }
}

/// The line printed on success.
fn report(confined: &Confined) -> serde_json::Value {
    serde_json::json!({
        "sandbox": "ok",
        "landlock_abi": confined.landlock_abi,
        "scoped": confined.scoped,
    })
}

/// Checks, from the agent's seat, that the sandbox holds.
fn check(
    config: &SandboxConfig,
    network: &ToolNet,
    socket: Option<&OwnedFd>,
) -> Result<(), SandboxError> {
    if nix::unistd::getpid().as_raw() != 1 {
        return Err(SandboxError::NotConfined(
            "the agent is not pid 1 of a new pid namespace".into(),
        ));
    }
    let outside = [Some(Path::new("/")), config.project().parent()];
    for dir in outside.into_iter().flatten() {
        if dir.starts_with("/tmp") || dir.starts_with("/dev/shm") {
            continue;
        }
        let probe = dir.join(format!(".corral-sandbox-probe-{}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&probe)
        {
            Ok(_) => {
                let _ = std::fs::remove_file(&probe);
                return Err(SandboxError::NotConfined(format!(
                    "a file could be created in {}",
                    dir.display()
                )));
            }
            Err(e) if e.kind() == ErrorKind::PermissionDenied => break,
            // Read-only or otherwise inconclusive: try the next place.
            Err(_) => {}
        }
    }
    if *network != ToolNet::Host {
        sys::isolate_network().map_err(|e| {
            SandboxError::NotConfined(format!("tools cannot get a network namespace: {e}"))
        })?;
    }
    if let Some(socket) = socket {
        reachable(socket, "the egress socket")?;
    }
    sys::drop_capabilities()
        .map_err(|e| SandboxError::NotConfined(format!("cannot drop capabilities: {e}")))
}

/// Checks that `socket` (an `O_PATH` descriptor) is reached through its
/// `/proc/self/fd` link, as a relay or the agent's HTTP client connects.
fn reachable(socket: &OwnedFd, what: &str) -> Result<(), SandboxError> {
    let link = format!("/proc/self/fd/{}", socket.as_raw_fd());
    let is_socket = std::fs::metadata(&link).map(|m| m.file_type().is_socket());
    if !matches!(is_socket, Ok(true)) {
        return Err(SandboxError::NotConfined(format!(
            "{what} cannot be reached through {link}"
        )));
    }
    Ok(())
}

/// Checks that the only network interface in sight is `lo` (this
/// process's network namespace, as `/proc/self/net/dev` lists it).
fn only_loopback() -> Result<(), SandboxError> {
    let dev = std::fs::read_to_string("/proc/self/net/dev")
        .map_err(|e| SandboxError::NotConfined(format!("cannot list network interfaces: {e}")))?;
    let others: Vec<&str> = dev
        .lines()
        .filter_map(|line| line.split_once(':').map(|(name, _)| name.trim()))
        .filter(|name| *name != "lo")
        .collect();
    if !others.is_empty() {
        return Err(SandboxError::NotConfined(format!(
            "the agent still sees the host's network ({})",
            others.join(", ")
        )));
    }
    Ok(())
}
