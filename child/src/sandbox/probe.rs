//! `corral-agent sandbox-probe`: enters the sandbox in a throwaway process
//! tree rooted at the current directory, checks from inside that it holds,
//! and prints `{"sandbox":"ok","landlock_abi":N,"scoped":BOOL}`.

use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};

use super::{enter, sys, tree, Confined, SandboxConfig, SandboxError};

/// Runs the probe; returns the process exit code (0, or 78 with the reason
/// on stderr).
pub fn probe(hide: &[PathBuf], tool_network: bool) -> u8 {
    let result = std::env::current_dir()
        .map_err(|source| SandboxError::Project {
            path: PathBuf::from("."),
            source,
        })
        .and_then(|cwd| SandboxConfig::new(&cwd, hide, tool_network))
        .and_then(|config| {
            let confined = enter(&config)?;
            check(&config, tool_network)?;
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
fn check(config: &SandboxConfig, tool_network: bool) -> Result<(), SandboxError> {
    if nix::unistd::getpid().as_raw() != 2 {
        return Err(SandboxError::NotConfined(
            "the agent is not pid 2 of a new pid namespace".into(),
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
    if !tool_network {
        sys::isolate_network().map_err(|e| {
            SandboxError::NotConfined(format!("tools cannot get a network namespace: {e}"))
        })?;
    }
    sys::drop_capabilities()
        .map_err(|e| SandboxError::NotConfined(format!("cannot drop capabilities: {e}")))
}
