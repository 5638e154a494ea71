//! The start-up check of the agent sandbox: `CHILD_BIN sandbox-probe` with
//! the children's hidden paths, run before the gateway serves anyone. The
//! agent sets up its full sandbox in a throwaway process tree and prints
//! `{"sandbox":"ok",…}`; anything else means children could not be
//! confined on this host, and the gateway refuses to start.

use std::ffi::OsString;
use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::sys::{self, Credentials, PreExec};

/// The variable that makes the agent report a sandbox feature as missing
/// (a test hook that can only make things fail); passed to the probe.
pub const SIMULATE_MISSING_VAR: &str = "CORRAL_SANDBOX_SIMULATE_MISSING";

/// What the probe needs.
#[derive(Debug)]
pub struct Probe<'a> {
    pub child_bin: &'a Path,
    /// `--sandbox-hide P`… and `--tool-network off`, as children get them.
    pub args: Vec<OsString>,
    /// The projects root (the probe's cwd, like a project's).
    pub cwd: &'a Path,
    /// The children's account, if not the gateway's.
    pub credentials: Option<Credentials>,
    pub timeout: Duration,
}

/// Why the sandbox is unavailable: the probe's own reason when it gave one.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ProbeFailed(pub String);

impl Probe<'_> {
    /// Runs the probe; `Ok` with its report line when the sandbox works.
    pub fn run(&self) -> Result<String, ProbeFailed> {
        let mut command = Command::new(self.child_bin);
        command
            .arg("sandbox-probe")
            .args(&self.args)
            .current_dir(self.cwd)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for var in ["PATH", SIMULATE_MISSING_VAR] {
            if let Some(value) = std::env::var_os(var) {
                command.env(var, value);
            }
        }
        sys::install(
            &mut command,
            PreExec {
                credentials: self.credentials.clone(),
                ..PreExec::default()
            },
        );
        let mut child = command.spawn().map_err(|e| {
            ProbeFailed(format!(
                "cannot run {} sandbox-probe: {e}",
                self.child_bin.display()
            ))
        })?;
        let deadline = Instant::now() + self.timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Ok(None) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Err(ProbeFailed(format!(
                        "the sandbox probe did not finish within {:?}",
                        self.timeout
                    )));
                }
                Err(e) => return Err(ProbeFailed(format!("waiting for the sandbox probe: {e}"))),
            }
        };
        let read = |pipe: Option<&mut dyn Read>| {
            let mut text = String::new();
            if let Some(pipe) = pipe {
                let _ = pipe.read_to_string(&mut text);
            }
            text
        };
        let stdout = read(child.stdout.as_mut().map(|p| p as &mut dyn Read));
        let stderr = read(child.stderr.as_mut().map(|p| p as &mut dyn Read));
        verdict(status.success(), &stdout, &stderr, &status.to_string())
    }
}

/// The probe's verdict from its exit and output.
fn verdict(success: bool, stdout: &str, stderr: &str, status: &str) -> Result<String, ProbeFailed> {
    let ok_line = stdout
        .lines()
        .find(|line| line.replace(' ', "").contains(r#""sandbox":"ok""#));
    match ok_line {
        Some(line) if success => Ok(line.trim().to_string()),
        _ => {
            let reason = stderr
                .lines()
                .map(str::trim)
                .find(|line| !line.is_empty())
                .map(str::to_string)
                .unwrap_or_else(|| format!("the sandbox probe failed ({status}) without a reason"));
            Err(ProbeFailed(reason))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_needs_success_and_the_ok_line() {
        let ok = r#"{"sandbox":"ok","landlock_abi":7,"scoped":true}"#;
        assert_eq!(
            verdict(true, &format!("{ok}\n"), "", "exit status: 0").unwrap(),
            ok
        );
        let err = verdict(false, ok, "landlock is not supported\n", "exit status: 78")
            .unwrap_err()
            .to_string();
        assert_eq!(err, "landlock is not supported");
        let err = verdict(true, "", "", "exit status: 0")
            .unwrap_err()
            .to_string();
        assert!(err.contains("without a reason"), "{err}");
    }

    #[test]
    fn reason_is_the_first_nonblank_stderr_line() {
        let err = verdict(
            false,
            "",
            "\n  user namespaces are disabled  \nmore\n",
            "78",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(err, "user namespaces are disabled");
    }

    #[test]
    fn runs_a_program_and_reads_its_verdict() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent");
        std::fs::write(
            &script,
            "#!/bin/sh\n[ \"$1\" = sandbox-probe ] || exit 2\n[ -n \"$CORRAL_TOKENS\" ] && exit 3\necho '{\"sandbox\":\"ok\"}'\n",
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let probe = Probe {
            child_bin: &script,
            args: vec!["--sandbox-hide".into(), "/x".into()],
            cwd: dir.path(),
            credentials: None,
            timeout: Duration::from_secs(10),
        };
        assert_eq!(probe.run().unwrap(), r#"{"sandbox":"ok"}"#);
        let missing = Probe {
            child_bin: &dir.path().join("missing"),
            ..probe
        };
        assert!(missing
            .run()
            .unwrap_err()
            .to_string()
            .contains("cannot run"));
    }
}
