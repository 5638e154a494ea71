//! The process the Zi reference client spawns as `zi`: `corral-agent` with
//! the argv the two-line shim gives it, or `corral attach --dialect zi` to
//! a gateway project. Every read is under a timeout; the process is killed
//! on drop.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use corral_e2e::captured::CapturedLog;
use corral_e2e::harness::{workspace_bin, READ_TIMEOUT};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Where the client's `zi` leads.
#[derive(Clone, Debug)]
pub enum Target {
    /// `corral-agent --dialect zi` + the client's arguments, on the mock
    /// LLM's Anthropic endpoint.
    Direct { base_url: String },
    /// `corral attach --dialect zi URL` (the token in `CORRAL_TOKEN`).
    Attach { url: String, token: String },
}

/// A spawned `zi` stand-in with piped stdin and stdout.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// The process's stderr, printed if the test fails.
    _stderr: CapturedLog,
    _log_dir: tempfile::TempDir,
}

impl Peer {
    /// Spawns the target as the client does: `zi --no-session --cwd DIR
    /// --mode rpc` (`args` replaces those words when given).
    pub fn spawn(target: &Target, cwd: &Path, args: Option<&[&str]>) -> Peer {
        let cwd_arg = cwd.to_string_lossy().into_owned();
        let client_args = ["--no-session", "--cwd", cwd_arg.as_str(), "--mode", "rpc"];
        let args = args.unwrap_or(&client_args);
        let mut command = match target {
            Target::Direct { base_url } => {
                let mut command = Command::new(workspace_bin("corral-agent"));
                command
                    .args(["--dialect", "zi"])
                    .args(args)
                    .args(["--provider", "anthropic", "--base-url", base_url])
                    .env("ANTHROPIC_API_KEY", "k");
                command
            }
            Target::Attach { url, token } => {
                let mut command = Command::new(workspace_bin("corral"));
                command
                    .args(["attach", "--dialect", "zi", url])
                    .env("CORRAL_TOKEN", token);
                command
            }
        };
        let log_dir = tempfile::tempdir().unwrap();
        let (captured, log) = CapturedLog::create("peer", log_dir.path().join("stderr.log"));
        command
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        let mut child = command.spawn().unwrap();
        Peer {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            child,
            _stderr: captured,
            _log_dir: log_dir,
        }
    }

    /// Writes raw bytes (a line with its LF, or anything else).
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout line; `None` at EOF.
    pub async fn line(&mut self) -> Option<String> {
        tokio::time::timeout(READ_TIMEOUT, self.stdout.next_line())
            .await
            .expect("timed out waiting for a line")
            .unwrap()
    }

    /// The exit code, if the process ends within `limit`.
    pub async fn exit_within(&mut self, limit: Duration) -> Option<i32> {
        let status = tokio::time::timeout(limit, self.child.wait()).await.ok()?;
        status.unwrap().code()
    }
}
