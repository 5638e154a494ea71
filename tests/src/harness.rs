//! Spawns the real `corral-agent` binary with a fresh temp cwd and talks
//! NDJSON to it, with a timeout around every read. The agent's stderr goes
//! to a file, printed only when the test fails.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::captured::CapturedLog;

/// How long any single read may take before the test fails.
pub const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// A binary of this workspace, built next to the test executable
/// (`cargo test --workspace` builds every binary before running tests).
pub fn workspace_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let mut dir = exe
        .parent()
        .expect("test executable directory")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let bin = dir.join(name);
    assert!(
        bin.exists(),
        "{} not found; build it first (cargo build --workspace)",
        bin.display()
    );
    bin
}

/// Options for spawning the agent.
pub struct AgentSpawn {
    args: Vec<String>,
    env: Vec<(String, String)>,
    cwd: Option<PathBuf>,
    /// Started as `corral-agent spare`, then assigned these arguments.
    spare: bool,
}

impl AgentSpawn {
    /// `corral-agent rpc` with the given provider flags.
    pub fn rpc(args: &[&str]) -> AgentSpawn {
        let mut all = vec!["rpc".to_string()];
        all.extend(args.iter().map(|a| a.to_string()));
        AgentSpawn {
            args: all,
            env: Vec::new(),
            cwd: None,
            spare: false,
        }
    }

    /// `corral-agent rpc` on the mock LLM's Anthropic endpoint (`extra`
    /// flags appended).
    pub fn anthropic_mock(base_url: &str, extra: &[&str]) -> AgentSpawn {
        let mut args = vec!["--provider", "anthropic", "--base-url", base_url];
        args.extend_from_slice(extra);
        AgentSpawn::rpc(&args).env("ANTHROPIC_API_KEY", "k")
    }

    pub fn env(mut self, key: &str, value: &str) -> AgentSpawn {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    pub fn arg(mut self, arg: impl Into<String>) -> AgentSpawn {
        self.args.push(arg.into());
        self
    }

    /// Start `corral-agent spare` and give it the arguments and the
    /// environment as its assignment on stdin, instead of running them.
    pub fn as_spare(mut self) -> AgentSpawn {
        self.spare = true;
        self
    }

    /// Use an existing directory as the cwd instead of a fresh one.
    pub fn cwd(mut self, dir: &Path) -> AgentSpawn {
        self.cwd = Some(dir.to_path_buf());
        self
    }

    pub async fn spawn(self) -> AgentProc {
        let temp = tempfile::tempdir().expect("temp dir");
        let cwd = self
            .cwd
            .clone()
            .unwrap_or_else(|| temp.path().join("project"));
        std::fs::create_dir_all(&cwd).expect("create cwd");
        let home = temp.path().join("home");
        std::fs::create_dir_all(&home).expect("create home");
        let (captured, log_file) =
            CapturedLog::create("corral-agent", temp.path().join("agent.log"));
        let removed = [
            "ZUTCORE_RPC_TOKEN",
            "ANTHROPIC_API_KEY",
            "OPENAI_API_KEY",
            "ANTHROPIC_BASE_URL",
            "OPENAI_BASE_URL",
        ];
        let mut command = Command::new(workspace_bin("corral-agent"));
        match self.spare {
            true => command.arg("spare"),
            false => command.args(&self.args).arg("--cwd").arg(&cwd),
        };
        for name in removed {
            command.env_remove(name);
        }
        command
            .env("ZUT_HOME", &home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .kill_on_drop(true);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn corral-agent");
        let mut stdin = child.stdin.take().expect("stdin");
        let mut stdout = child.stdout.take().expect("stdout");
        if self.spare {
            let mut ready = [0u8; 4];
            tokio::time::timeout(READ_TIMEOUT, stdout.read_exact(&mut ready))
                .await
                .expect("the spare agent did not say it was ready in time")
                .expect("read the spare agent's ready bytes");
            assert_eq!(&ready, corral_protocol::template::SPARE_READY);
            let mut argv = vec![workspace_bin("corral-agent").into_os_string().into_vec()];
            argv.extend(self.args.iter().map(|a| a.clone().into_bytes()));
            argv.extend([b"--cwd".to_vec(), cwd.clone().into_os_string().into_vec()]);
            let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
                .filter(|(name, _)| !removed.iter().any(|r| name == r))
                .collect();
            env.push(("ZUT_HOME".into(), home.clone().into_os_string()));
            env.extend(self.env.iter().map(|(k, v)| (k.into(), v.into())));
            let env = env
                .into_iter()
                .map(|(name, value)| {
                    let mut entry = name.into_vec();
                    entry.push(b'=');
                    entry.extend(value.into_vec());
                    entry
                })
                .collect();
            let assignment = corral_protocol::template::encode_assignment(argv, env);
            stdin
                .write_all(&assignment)
                .await
                .expect("write the assignment");
        }
        let stdout = BufReader::new(stdout).lines();
        AgentProc {
            child,
            stdin: Some(stdin),
            stdout,
            cwd,
            captured,
            _temp: temp,
        }
    }
}

/// A running agent process.
pub struct AgentProc {
    pub child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    /// The agent's working directory.
    pub cwd: PathBuf,
    /// The agent's stderr, printed if the test panics (dropped before the
    /// temp dir that holds it).
    captured: CapturedLog,
    _temp: TempDir,
}

impl AgentProc {
    /// Writes one JSON object as a line.
    pub async fn send(&mut self, value: Value) {
        let mut line = serde_json::to_vec(&value).expect("serialise");
        line.push(b'\n');
        self.send_raw(&line).await;
    }

    /// Writes raw bytes to stdin.
    pub async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(bytes).await.expect("write stdin");
        stdin.flush().await.expect("flush stdin");
    }

    /// Closes stdin (EOF for the agent).
    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next raw stdout line; `None` at EOF.
    pub async fn recv_line(&mut self) -> Option<String> {
        tokio::time::timeout(READ_TIMEOUT, self.stdout.next_line())
            .await
            .expect("timed out waiting for a line from corral-agent")
            .expect("read stdout")
    }

    /// The next stdout line as JSON; `None` at EOF.
    pub async fn try_recv(&mut self) -> Option<Value> {
        let line = self.recv_line().await?;
        Some(
            serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}")),
        )
    }

    /// The next stdout line as JSON.
    pub async fn recv(&mut self) -> Value {
        self.try_recv().await.expect("corral-agent closed stdout")
    }

    /// Frames until (and including) the first that matches `stop`.
    pub async fn recv_until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Sends a line and returns the very next frame.
    pub async fn send_recv(&mut self, value: Value) -> Value {
        self.send(value).await;
        self.recv().await
    }

    /// Sends a request and returns its response, skipping events.
    pub async fn request(&mut self, value: Value) -> Value {
        let id = value.get("id").cloned();
        self.send(value).await;
        let frames = self
            .recv_until(|f| f["type"] == "response" && f.get("id").cloned() == id)
            .await;
        frames.into_iter().last().expect("a response")
    }

    /// What the agent wrote to stderr so far.
    pub fn stderr(&self) -> String {
        self.captured.read()
    }

    /// Waits for the process to exit and returns its exit code.
    pub async fn wait(&mut self) -> Option<i32> {
        let status = tokio::time::timeout(READ_TIMEOUT, self.child.wait())
            .await
            .expect("timed out waiting for exit")
            .expect("wait");
        status.code()
    }
}

/// The frame types, in order.
pub fn types(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .map(|f| f["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The concatenated `text_delta`s.
pub fn text_of(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "text_delta")
        .filter_map(|f| f["delta"].as_str())
        .collect()
}

/// Whether a frame is zut's `done`, the end of a run.
pub fn is_done(frame: &Value) -> bool {
    frame["type"] == "done"
}
