//! `bench-gateway [--pings N] [--events N] [--clients N] [--dialects a,b]
//! [--bin-dir DIR]`:
//! what the `corral` gateway costs on top of a `corral-agent` child, as
//! markdown tables. Measures (1) ping round trips over stdio straight to
//! `corral-agent rpc --provider echo` versus over WebSocket through
//! `corral serve`; (2) text-delta fan-out throughput from a mock-LLM
//! child to 1 and to `--clients` clients of one project (median of 3 runs),
//! for each of `--dialects` (default `zut,letscode,zi`);
//! (3) the gateway's resident memory while a client that never reads stays
//! attached during a stream of `--events` deltas of 1 KiB.
//!
//! Build in release first: `cargo build --release --workspace`, then
//! `target/release/bench-gateway` (it finds `corral` and `corral-agent`
//! beside itself unless `--bin-dir` says otherwise). Everything runs on
//! 127.0.0.1 and every read is bounded, so a stuck gateway is an error.

use std::path::PathBuf;

use anyhow::{bail, Context};
use corral_e2e::bench::procs::{self, Bins};
use corral_e2e::bench::wire::Wire;
use corral_e2e::bench::{fanout, memory, pings};

const HELP: &str = "usage: bench-gateway [--pings N] [--events N] [--clients N] \
[--dialects zut,letscode,zi] [--bin-dir DIR]

What the corral gateway costs on top of a corral-agent child: ping round
trips over stdio versus through the gateway, event fan-out per dialect, and
the gateway's memory with a client that never reads.

options:
  --pings N           pings per path (default 2000)
  --events N          1 KiB deltas sent past a client that never reads (default 20000)
  --clients N         clients of one project in the fan-out (default 10)
  --dialects A,B      dialects whose fan-out is measured (default zut,letscode,zi)
  --bin-dir DIR       where corral and corral-agent are (default: beside this program)
  -h, --help          this text
";

struct Args {
    pings: u64,
    events: usize,
    clients: usize,
    dialects: Vec<Wire>,
    bin_dir: Option<PathBuf>,
}

fn parse_args(given: Vec<String>) -> anyhow::Result<Args> {
    let mut args = Args {
        pings: 2000,
        events: 20000,
        clients: 10,
        dialects: Wire::ALL.to_vec(),
        bin_dir: None,
    };
    let mut it = given.into_iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--pings" => args.pings = value()?.parse().context("--pings")?,
            "--events" => args.events = value()?.parse().context("--events")?,
            "--clients" => args.clients = value()?.parse().context("--clients")?,
            "--dialects" => {
                args.dialects = value()?
                    .split(',')
                    .map(|name| Wire::parse(name).with_context(|| format!("no dialect {name:?}")))
                    .collect::<anyhow::Result<_>>()?;
            }
            "--bin-dir" => args.bin_dir = Some(value()?.into()),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.pings == 0 || args.events == 0 || args.clients == 0 || args.dialects.is_empty() {
        bail!("--pings, --events, --clients and --dialects must be at least 1");
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = corral_e2e::bench::cli::parse("bench-gateway", HELP, parse_args);
    // On Ctrl-C the measurement is dropped, which kills its gateways.
    tokio::select! {
        result = run(&args) => result,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    }
}

async fn run(args: &Args) -> anyhow::Result<()> {
    let dir = procs::bin_dir(args.bin_dir.as_deref())?;
    let bins = Bins::in_dir(&dir)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    procs::print(&format!(
        "# bench-gateway: --pings {} --events {} --clients {}; {cores} cores{}; binaries in {}\n",
        args.pings,
        args.events,
        args.clients,
        load_average().map_or(String::new(), |l| format!(", load average {l}")),
        dir.display()
    ))?;
    let report = pings::measure(&bins, args.pings).await;
    procs::print(&report.context("ping round trip")?.table())?;
    for &wire in &args.dialects {
        let report = fanout::measure(&bins, wire, args.events, args.clients).await;
        procs::print(
            &report
                .with_context(|| format!("event fan-out, {}", wire.name()))?
                .table(),
        )?;
    }
    let report = memory::measure(&bins, args.events).await;
    procs::print(&report.context("memory with a stalled client")?.table())?;
    Ok(())
}

/// The 1-minute load average at the start, so a busy machine shows.
fn load_average() -> Option<String> {
    let loadavg = std::fs::read_to_string("/proc/loadavg").ok()?;
    loadavg.split_whitespace().next().map(str::to_string)
}
