//! The processes under measurement: `corral serve` in a temp projects root
//! ([`BenchGateway`]) and `corral-agent rpc` on stdio ([`StdioAgent`]),
//! both killed on drop, plus reading a process's resident set.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use super::{PROJECT, READ_TIMEOUT};
use crate::mock_llm::MockLlm;

/// The client token of every benchmark gateway (at least 16 characters).
pub const TOKEN: &str = "bench-client-token-0123456789";

/// How long a gateway has to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// Where the two binaries under test are.
#[derive(Debug, Clone)]
pub struct Bins {
    pub corral: PathBuf,
    pub agent: PathBuf,
}

impl Bins {
    /// `corral` and `corral-agent` in `dir`, which must hold both.
    pub fn in_dir(dir: &Path) -> anyhow::Result<Bins> {
        let bins = Bins {
            corral: dir.join("corral"),
            agent: dir.join("corral-agent"),
        };
        for bin in [&bins.corral, &bins.agent] {
            if !bin.is_file() {
                bail!(
                    "{} not found; build first (cargo build --release --workspace) or pass --bin-dir",
                    bin.display()
                );
            }
        }
        Ok(bins)
    }
}

/// What a benchmark gateway runs with beyond the fixed flags.
#[derive(Debug, Default)]
pub struct GatewayArgs {
    /// Extra `corral serve` flags.
    pub serve: Vec<String>,
    /// The child's argv after `--`.
    pub child: Vec<String>,
    /// Extra environment of the gateway (children inherit allowlisted names).
    pub env: Vec<(String, String)>,
    /// The gateway's soft and hard `RLIMIT_NOFILE` (set by `sh -c ulimit`
    /// before it execs), instead of the benchmark's own.
    pub nofile: Option<u64>,
}

impl GatewayArgs {
    /// Children on the offline echo provider.
    pub fn echo() -> GatewayArgs {
        GatewayArgs {
            child: vec!["--provider".into(), "echo".into()],
            ..GatewayArgs::default()
        }
    }

    /// Children on the mock LLM's Anthropic endpoint, plus `serve` flags.
    pub fn mock(mock: &MockLlm, serve: Vec<String>) -> GatewayArgs {
        let child = ["--provider", "anthropic", "--base-url"];
        let mut child: Vec<String> = child.map(String::from).to_vec();
        child.push(mock.anthropic_base_url());
        GatewayArgs {
            serve,
            child,
            env: vec![("ANTHROPIC_API_KEY".into(), "x".into())],
            nofile: None,
        }
    }
}

/// A mock LLM on `127.0.0.1:0`.
pub async fn start_mock() -> anyhow::Result<MockLlm> {
    MockLlm::bind(([127, 0, 0, 1], 0).into())
        .await
        .context("start the mock LLM")
}

/// A running `corral serve` on `127.0.0.1:0` serving the one project
/// [`PROJECT`].
pub struct BenchGateway {
    child: Child,
    pub addr: SocketAddr,
    pub pid: u32,
    /// Projects root, state dir and home; removed on drop.
    _temp: TempDir,
}

impl BenchGateway {
    /// Starts the gateway and waits for its `listening on http://ADDR` line.
    pub async fn start(bins: &Bins, args: GatewayArgs) -> anyhow::Result<BenchGateway> {
        let temp = tempfile::tempdir().context("create a temp dir")?;
        let root = temp.path().join("projects");
        let home = temp.path().join("home");
        for dir in [root.join(PROJECT), home.clone()] {
            std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let mut command = match args.nofile {
            Some(limit) => {
                let mut sh = Command::new("sh");
                let script = format!("ulimit -n {limit} && exec \"$0\" \"$@\"");
                sh.arg("-c").arg(script).arg(&bins.corral);
                sh
            }
            None => Command::new(&bins.corral),
        };
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--projects-root"])
            .arg(&root)
            .arg("--state-dir")
            .arg(temp.path().join("state"))
            // Every client uses the one token: no per-identity prompt rate.
            .args(["--max-prompts-per-minute", "0"])
            .args(["--token", TOKEN, "--child-bin"])
            .arg(&bins.agent)
            .args(&args.serve)
            .arg("--")
            .args(&args.child)
            .env_remove("CORRAL_TOKENS")
            .env_remove("ANTHROPIC_API_KEY")
            .env("ZUT_HOME", &home)
            .env("CORRAL_LOG", "error")
            .envs(args.env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = command
            .spawn()
            .with_context(|| format!("spawn {}", bins.corral.display()))?;
        let pid = child.id().context("the gateway has no pid")?;
        let stdout = child.stdout.take().context("the gateway's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let addr = tokio::time::timeout(READ_TIMEOUT, listen_addr(&mut lines))
            .await
            .context("the gateway did not report its address in time")??;
        // Keep draining stdout so the gateway never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(BenchGateway {
            child,
            addr,
            pid,
            _temp: temp,
        })
    }

    /// The WebSocket URL of the project.
    pub fn url(&self) -> String {
        self.project_url(PROJECT)
    }

    /// The WebSocket URL of project `name`.
    pub fn project_url(&self, name: &str) -> String {
        format!("ws://{}/v1/projects/{name}/rpc", self.addr)
    }

    /// Creates the directories of `names` in the projects root.
    pub fn add_projects<'a>(&self, names: impl IntoIterator<Item = &'a str>) -> anyhow::Result<()> {
        let root = self._temp.path().join("projects");
        for name in names {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
        }
        Ok(())
    }

    /// SIGTERM, then SIGKILL if it has not exited within the grace.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        use nix::sys::signal::{kill, Signal};
        use nix::unistd::Pid;
        let pid = i32::try_from(self.pid).context("gateway pid out of range")?;
        kill(Pid::from_raw(pid), Signal::SIGTERM).context("signal the gateway")?;
        match tokio::time::timeout(STOP_GRACE, self.child.wait()).await {
            Ok(status) => {
                status.context("wait for the gateway")?;
            }
            Err(_) => self.child.kill().await.context("kill the gateway")?,
        }
        Ok(())
    }
}

async fn listen_addr(lines: &mut Lines<BufReader<ChildStdout>>) -> anyhow::Result<SocketAddr> {
    loop {
        let line = lines
            .next_line()
            .await
            .context("read the gateway's stdout")?
            .context("the gateway exited before listening")?;
        if let Some(rest) = line.strip_prefix("listening on http://") {
            return rest
                .trim()
                .parse()
                .with_context(|| format!("listen address in {line:?}"));
        }
    }
}

/// `corral-agent rpc --provider echo` spoken to directly over its pipes.
pub struct StdioAgent {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    /// The agent's cwd and home; removed on drop.
    _temp: TempDir,
}

impl StdioAgent {
    pub async fn spawn(bins: &Bins) -> anyhow::Result<StdioAgent> {
        StdioAgent::spawn_with(bins, &[]).await
    }

    /// Spawns with `extra` flags after `rpc` (`--sandbox`, say).
    pub async fn spawn_with(bins: &Bins, extra: &[&str]) -> anyhow::Result<StdioAgent> {
        let temp = tempfile::tempdir().context("create a temp dir")?;
        let mut child = Command::new(&bins.agent)
            .arg("rpc")
            .args(extra)
            .args(["--provider", "echo", "--cwd"])
            .arg(temp.path())
            .env("ZUT_HOME", temp.path())
            .env_remove("ZUTCORE_RPC_TOKEN")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawn {}", bins.agent.display()))?;
        let stdin = child.stdin.take().context("the agent's stdin")?;
        let stdout = child.stdout.take().context("the agent's stdout")?;
        Ok(StdioAgent {
            child,
            stdin,
            stdout: BufReader::new(stdout).lines(),
            _temp: temp,
        })
    }

    /// One `ping` with id `id`, timed from write to its response line.
    pub async fn ping(&mut self, id: u64) -> anyhow::Result<Duration> {
        let line = format!("{{\"id\":{id},\"type\":\"ping\"}}\n");
        let start = Instant::now();
        self.stdin
            .write_all(line.as_bytes())
            .await
            .context("write to the agent")?;
        self.stdin
            .flush()
            .await
            .context("flush the agent's stdin")?;
        let reply = tokio::time::timeout(READ_TIMEOUT, self.stdout.next_line())
            .await
            .context("no ping response from the agent in time")?
            .context("read the agent's stdout")?
            .context("the agent closed its stdout")?;
        let elapsed = start.elapsed();
        let reply: Value =
            serde_json::from_str(&reply).with_context(|| format!("agent reply {reply:?}"))?;
        check_pong(&reply, id)?;
        Ok(elapsed)
    }

    /// Closes stdin and waits for the exit.
    pub async fn close(self) -> anyhow::Result<()> {
        let StdioAgent {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let status = tokio::time::timeout(READ_TIMEOUT, child.wait())
            .await
            .context("the agent did not exit after stdin closed")?
            .context("wait for the agent")?;
        if !status.success() {
            bail!("the agent exited with {status}");
        }
        Ok(())
    }
}

/// Fails unless `reply` is the successful response to ping `id`.
pub fn check_pong(reply: &Value, id: u64) -> anyhow::Result<()> {
    let ok = reply["type"] == "response" && reply["id"] == id && reply["data"]["pong"] == true;
    if !ok {
        bail!("expected the pong of ping {id}, got {reply}");
    }
    Ok(())
}

/// The resident set of process `pid` (VmRSS), in KiB.
pub fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .with_context(|| format!("no VmRSS in {path}"))?;
    line.split_whitespace()
        .nth(1)
        .with_context(|| format!("malformed {line:?}"))?
        .parse()
        .with_context(|| format!("malformed {line:?}"))
}

/// Where a benchmark finds `corral` and `corral-agent`: `--bin-dir` when
/// given, else the directory of the benchmark's own executable.
pub fn bin_dir(given: Option<&Path>) -> anyhow::Result<PathBuf> {
    if let Some(dir) = given {
        return Ok(dir.to_path_buf());
    }
    let exe = std::env::current_exe().context("the benchmark's own path")?;
    Ok(exe.parent().context("executable directory")?.to_path_buf())
}

/// Writes one finished section of a benchmark's report to stdout; a
/// closed stdout is not an error.
pub fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match writeln!(out, "{text}").and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("write to stdout"),
    }
}
