//! `bench-startup [--runs N] [--agent PATH]`: the child's cold start and idle
//! memory, unconfined and with `--sandbox`. Each run spawns `corral-agent rpc
//! --provider echo`, sends `ping` and times spawn → `pong` read; then reads
//! the idle process tree's memory and closes stdin. A third mode starts a
//! spare agent (`corral-agent spare`), waits until it says it is ready, and
//! times its assignment (the sandboxed run's arguments) and a ping → `pong`.
//! The modes alternate run by run, so all see the same machine. Prints a
//! table of median and tail values and the ratio of the medians.
//!
//! Build in release first: `cargo build --release --workspace`, then
//! `target/release/bench-startup` (it finds `corral-agent` beside itself).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

struct Args {
    runs: usize,
    agent: Option<PathBuf>,
}

const HELP: &str = "usage: bench-startup [--runs N] [--agent PATH]

The child's cold start (spawn to the first ping's answer) and idle memory,
unconfined and with --sandbox, and a spare agent's start (assignment to
the first ping's answer), alternating run by run.

options:
  --runs N        cold starts per mode (default 50)
  --agent PATH    the corral-agent to run (default: beside this program)
  -h, --help      this text
";

fn parse_args(given: Vec<String>) -> anyhow::Result<Args> {
    let mut args = Args {
        runs: 50,
        agent: None,
    };
    let mut it = given.into_iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => {
                args.runs = it
                    .next()
                    .context("--runs needs a value")?
                    .parse()
                    .context("--runs")?
            }
            "--agent" => args.agent = Some(it.next().context("--agent needs a path")?.into()),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    Ok(args)
}

/// One mode's samples.
#[derive(Default)]
struct Samples {
    starts: Vec<Duration>,
    /// Resident set of the whole process tree, KiB.
    rss: Vec<u64>,
    /// Proportional set size of the whole tree (shared pages split), KiB.
    pss: Vec<u64>,
}

/// One cold start: time to the ping's answer, then the idle tree's memory.
fn one_run(agent: &Path, cwd: &Path, sandbox: bool, samples: &mut Samples) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut command = Command::new(agent);
    command
        .args(["rpc", "--provider", "echo", "--cwd"])
        .arg(cwd)
        .env("ZUT_HOME", cwd);
    if sandbox {
        command.arg("--sandbox");
    }
    let mut agent = Piped::spawn(&mut command, agent)?;
    let elapsed = agent.pong_after(PING, start)?;
    let tree = process_tree(agent.child.id());
    samples.starts.push(elapsed);
    samples
        .rss
        .push(tree.iter().map(|&p| status_kib(p, "VmRSS:")).sum());
    samples.pss.push(tree.iter().map(|&p| pss_kib(p)).sum());
    agent.end()
}

/// One start of a spare agent (`corral-agent spare`) made ahead of time:
/// once it said it is ready, the time from writing its assignment (the
/// same arguments as a sandboxed run) and a ping to the ping's answer.
fn one_spare(agent: &Path, cwd: &Path, samples: &mut Samples) -> anyhow::Result<()> {
    let mut spare = Piped::spawn(Command::new(agent).arg("spare"), agent)?;
    let mut ready = [0u8; 4];
    spare
        .stdout
        .read_exact(&mut ready)
        .context("the spare agent did not say it was ready")?;
    if &ready != corral_protocol::template::SPARE_READY {
        bail!("unexpected bytes from the spare agent: {ready:?}");
    }
    let argv: Vec<Vec<u8>> = [agent.as_os_str(), "rpc".as_ref(), "--provider".as_ref()]
        .into_iter()
        .chain(["echo".as_ref(), "--sandbox".as_ref(), "--cwd".as_ref()])
        .chain([cwd.as_os_str()])
        .map(|arg| arg.as_bytes().to_vec())
        .collect();
    let mut env: Vec<Vec<u8>> = std::env::vars_os()
        .filter(|(name, _)| name != "ZUT_HOME")
        .map(|(name, value)| [name.as_bytes(), b"=", value.as_bytes()].concat())
        .collect();
    env.push([b"ZUT_HOME=".as_slice(), cwd.as_os_str().as_bytes()].concat());
    let mut message = corral_protocol::template::encode_assignment(argv, env);
    message.extend_from_slice(PING);
    let elapsed = spare.pong_after(&message, Instant::now())?;
    samples.starts.push(elapsed);
    spare.end()
}

/// The ping every start is timed to the answer of.
const PING: &[u8] = b"{\"id\":1,\"type\":\"ping\"}\n";

/// An agent with piped stdin and stdout.
struct Piped {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Piped {
    fn spawn(command: &mut Command, agent: &Path) -> anyhow::Result<Piped> {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .with_context(|| format!("spawn {}", agent.display()))?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("stdout")?);
        Ok(Piped {
            child,
            stdin,
            stdout,
        })
    }

    /// Writes `bytes` (ending with a ping) and reads the answer: the time
    /// since `start`.
    fn pong_after(&mut self, bytes: &[u8], start: Instant) -> anyhow::Result<Duration> {
        self.stdin.write_all(bytes)?;
        self.stdin.flush()?;
        let mut line = String::new();
        self.stdout.read_line(&mut line)?;
        let elapsed = start.elapsed();
        if !line.contains("\"pong\":true") {
            bail!("unexpected reply: {line}");
        }
        Ok(elapsed)
    }

    /// Closes stdin and waits for a clean exit.
    fn end(self) -> anyhow::Result<()> {
        let Piped {
            mut child, stdin, ..
        } = self;
        drop(stdin);
        let status = child.wait()?;
        if !status.success() {
            bail!("agent exited with {status}");
        }
        Ok(())
    }
}

/// `pid` and all its descendants.
fn process_tree(pid: u32) -> Vec<u32> {
    let mut tree = vec![pid];
    let mut next = 0;
    while next < tree.len() {
        let pid = tree[next];
        next += 1;
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        tree.extend(
            children
                .split_whitespace()
                .filter_map(|c| c.parse::<u32>().ok()),
        );
    }
    tree
}

/// A `NAME: value kB` field of a /proc file, 0 if absent.
fn kib_field(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn status_kib(pid: u32, name: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    kib_field(&status, name)
}

fn pss_kib(pid: u32) -> u64 {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).unwrap_or_default();
    kib_field(&rollup, "Pss:")
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn quantile<T: Copy>(sorted: &[T], q: f64) -> T {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn row<T: Copy + Ord>(
    out: &mut impl Write,
    label: &str,
    values: &mut [T],
    show: impl Fn(T) -> String,
) -> std::io::Result<()> {
    values.sort();
    writeln!(
        out,
        "| {label} | {} | {} | {} | {} |",
        show(quantile(values, 0.5)),
        show(quantile(values, 0.9)),
        show(quantile(values, 0.99)),
        show(quantile(values, 1.0)),
    )
}

fn main() -> anyhow::Result<()> {
    let args = corral_e2e::bench::cli::parse("bench-startup", HELP, parse_args);
    let agent = match args.agent {
        Some(path) => path,
        None => {
            let exe = std::env::current_exe()?;
            exe.parent()
                .context("executable directory")?
                .join("corral-agent")
        }
    };
    let cwd = tempfile::tempdir()?;
    let mut plain = Samples::default();
    let mut sandboxed = Samples::default();
    let mut spare = Samples::default();
    // One warm-up run each so the binary is in the page cache.
    one_run(&agent, cwd.path(), false, &mut Samples::default())?;
    one_run(&agent, cwd.path(), true, &mut Samples::default())
        .context("the sandboxed agent did not start (is the sandbox available here?)")?;
    one_spare(&agent, cwd.path(), &mut Samples::default())?;
    for _ in 0..args.runs {
        one_run(&agent, cwd.path(), false, &mut plain)?;
        one_run(&agent, cwd.path(), true, &mut sandboxed)?;
        one_spare(&agent, cwd.path(), &mut spare)?;
    }
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    let mib = |k: u64| format!("{:.2} MiB", k as f64 / 1024.0);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "corral-agent cold start ({} runs per mode, interleaved, {})",
        args.runs,
        agent.display()
    )?;
    writeln!(out, "| metric | median | p90 | p99 | max |")?;
    writeln!(out, "|---|---|---|---|---|")?;
    row(&mut out, "spawn → ping answered", &mut plain.starts, ms)?;
    row(&mut out, "… with --sandbox", &mut sandboxed.starts, ms)?;
    row(
        &mut out,
        "… a spare agent, sandboxed ahead: assignment → ping answered",
        &mut spare.starts,
        ms,
    )?;
    row(&mut out, "idle RSS", &mut plain.rss, mib)?;
    row(
        &mut out,
        "… with --sandbox (2 processes)",
        &mut sandboxed.rss,
        mib,
    )?;
    row(&mut out, "idle PSS", &mut plain.pss, mib)?;
    row(
        &mut out,
        "… with --sandbox (2 processes)",
        &mut sandboxed.pss,
        mib,
    )?;
    let ratio =
        quantile(&sandboxed.starts, 0.5).as_secs_f64() / quantile(&plain.starts, 0.5).as_secs_f64();
    writeln!(out)?;
    writeln!(
        out,
        "sandboxed ÷ unconfined cold start (medians): {ratio:.2}×"
    )?;
    Ok(())
}
