//! The process a zut example client spawns as `zut rpc`: `corral-agent rpc`
//! itself, or `corral attach` to a gateway project. Every read is under a
//! timeout; the process is killed on drop.

use std::process::Stdio;

use corral_e2e::captured::CapturedLog;
use corral_e2e::harness::{workspace_bin, READ_TIMEOUT};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Where the client's `zut rpc` leads.
#[derive(Clone, Debug)]
pub enum Target {
    /// `corral-agent rpc` on the mock LLM's Anthropic endpoint.
    Direct { base_url: String },
    /// `corral attach URL` (the token in `CORRAL_TOKEN`).
    Attach { url: String, token: String },
}

/// A spawned `zut rpc` stand-in with piped stdin and stdout.
pub struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<Lines<BufReader<ChildStdout>>>,
    /// The process's stderr, printed if the test fails (dropped before
    /// the temp dir that holds it).
    _stderr: CapturedLog,
    _temp: tempfile::TempDir,
}

impl Peer {
    /// Spawns the target; `token` is the `ZUTCORE_RPC_TOKEN` the process
    /// inherits from the client (the example clients pass their whole
    /// environment on).
    pub fn spawn(target: &Target, token: Option<&str>) -> Peer {
        let temp = tempfile::tempdir().unwrap();
        let mut command = match target {
            Target::Direct { base_url } => {
                let cwd = temp.path().join("project");
                let home = temp.path().join("home");
                std::fs::create_dir_all(&cwd).unwrap();
                std::fs::create_dir_all(&home).unwrap();
                let mut command = Command::new(workspace_bin("corral-agent"));
                command
                    .args(["rpc", "--provider", "anthropic", "--base-url", base_url])
                    .arg("--cwd")
                    .arg(&cwd)
                    .env("ANTHROPIC_API_KEY", "k")
                    .env("ZUT_HOME", &home);
                command
            }
            Target::Attach { url, token } => {
                let mut command = Command::new(workspace_bin("corral"));
                command.arg("attach").arg(url).env("CORRAL_TOKEN", token);
                command
            }
        };
        let (captured, log) = CapturedLog::create("peer", temp.path().join("stderr.log"));
        command
            .env_remove("ZUTCORE_RPC_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log)
            .kill_on_drop(true);
        if let Some(token) = token {
            command.env("ZUTCORE_RPC_TOKEN", token);
        }
        let mut child = command.spawn().unwrap();
        Peer {
            stdin: child.stdin.take(),
            stdout: child.stdout.take().map(|s| BufReader::new(s).lines()),
            child,
            _stderr: captured,
            _temp: temp,
        }
    }

    /// Writes one line (a JSON text) and a newline.
    pub async fn send(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// Stops reading stdout (the reader has gone); later writes fail.
    pub fn close_stdout(&mut self) {
        self.stdout = None;
    }

    /// The next stdout line; `None` at EOF.
    pub async fn line(&mut self) -> Option<String> {
        let stdout = self.stdout.as_mut().expect("stdout open");
        tokio::time::timeout(READ_TIMEOUT, stdout.next_line())
            .await
            .expect("timed out waiting for a line")
            .unwrap()
    }

    /// The exit code, if the process ends within `limit`.
    pub async fn exit_within(&mut self, limit: std::time::Duration) -> Option<i32> {
        let status = tokio::time::timeout(limit, self.child.wait()).await.ok()?;
        status.unwrap().code()
    }
}
