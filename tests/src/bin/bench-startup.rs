//! `bench-startup [--runs N] [--agent PATH]`: the child's cold start and idle
//! memory. Each run spawns `corral-agent rpc --provider echo`, sends `ping`
//! and times spawn → `pong` read; then reads the idle process's resident
//! set (VmRSS) and closes stdin. Prints a table of median and tail values.
//!
//! Build in release first: `cargo build --release --workspace`, then
//! `target/release/bench-startup` (it finds `corral-agent` beside itself).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

struct Args {
    runs: usize,
    agent: Option<PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        runs: 50,
        agent: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--runs" => args.runs = it.next().context("--runs needs a value")?.parse()?,
            "--agent" => args.agent = Some(it.next().context("--agent needs a path")?.into()),
            other => {
                bail!("unknown argument {other:?}; usage: bench-startup [--runs N] [--agent PATH]")
            }
        }
    }
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    Ok(args)
}

/// One cold start: time to the ping's answer, and RSS once idle, in KiB.
fn one_run(agent: &PathBuf, cwd: &std::path::Path) -> anyhow::Result<(Duration, u64)> {
    let start = Instant::now();
    let mut child = Command::new(agent)
        .args(["rpc", "--provider", "echo", "--cwd"])
        .arg(cwd)
        .env("ZUT_HOME", cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("spawn {}", agent.display()))?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut stdout = BufReader::new(child.stdout.take().context("stdout")?);
    stdin.write_all(b"{\"id\":1,\"type\":\"ping\"}\n")?;
    stdin.flush()?;
    let mut line = String::new();
    stdout.read_line(&mut line)?;
    let elapsed = start.elapsed();
    if !line.contains("\"pong\":true") {
        bail!("unexpected reply: {line}");
    }
    let rss = rss_kib(child.id())?;
    drop(stdin);
    let status = child.wait()?;
    if !status.success() {
        bail!("agent exited with {status}");
    }
    Ok((elapsed, rss))
}

fn rss_kib(pid: u32) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .context("no VmRSS in /proc/PID/status")?;
    let kib = line
        .split_whitespace()
        .nth(1)
        .context("malformed VmRSS line")?
        .parse()?;
    Ok(kib)
}

/// The value at quantile `q` of sorted `values` (nearest rank).
fn quantile<T: Copy>(sorted: &[T], q: f64) -> T {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
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
    // One warm-up run so the binary is in the page cache.
    one_run(&agent, cwd.path())?;
    let mut starts = Vec::with_capacity(args.runs);
    let mut rss = Vec::with_capacity(args.runs);
    for _ in 0..args.runs {
        let (elapsed, kib) = one_run(&agent, cwd.path())?;
        starts.push(elapsed);
        rss.push(kib);
    }
    starts.sort();
    rss.sort();
    let ms = |d: Duration| format!("{:.2} ms", d.as_secs_f64() * 1000.0);
    let mib = |k: u64| format!("{:.2} MiB", k as f64 / 1024.0);
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "corral-agent cold start ({} runs, {})",
        args.runs,
        agent.display()
    )?;
    writeln!(out, "| metric | median | p90 | p99 | max |")?;
    writeln!(out, "|---|---|---|---|---|")?;
    writeln!(
        out,
        "| spawn → ping answered | {} | {} | {} | {} |",
        ms(quantile(&starts, 0.5)),
        ms(quantile(&starts, 0.9)),
        ms(quantile(&starts, 0.99)),
        ms(quantile(&starts, 1.0)),
    )?;
    writeln!(
        out,
        "| idle RSS | {} | {} | {} | {} |",
        mib(quantile(&rss, 0.5)),
        mib(quantile(&rss, 0.9)),
        mib(quantile(&rss, 0.99)),
        mib(quantile(&rss, 1.0)),
    )?;
    Ok(())
}
