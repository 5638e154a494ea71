//! `bench-broker [--prompts N] [--deltas N] [--delta-bytes N] [--bin-dir DIR]`:
//! what the model-key broker (`corral serve --model-broker on`) adds to a
//! model call, as a markdown table: time to first token (median, p99) and
//! streaming throughput (median, slowest 1%) of a long answer from the
//! mock LLM, straight to the provider versus through the broker. See
//! `corral_e2e::bench::broker` for what is timed.
//!
//! Build in release first: `cargo build --release --workspace`, then
//! `target/release/bench-broker` (it finds `corral` and `corral-agent`
//! beside itself unless `--bin-dir` says otherwise). The agents run
//! sandboxed, as the broker needs, so run it where the sandbox works.

use std::path::PathBuf;

use anyhow::{bail, Context};
use corral_e2e::bench::broker;
use corral_e2e::bench::procs::{self, Bins};

const HELP: &str =
    "usage: bench-broker [--prompts N] [--deltas N] [--delta-bytes N] [--bin-dir DIR]

What the model-key broker adds to a model call: time to first token and
streaming throughput, straight to the provider versus through the broker.

options:
  --prompts N         prompts per path (default 20)
  --deltas N          text deltas in each answer (default 2000)
  --delta-bytes N     bytes of each delta (default 16)
  --bin-dir DIR       where corral and corral-agent are (default: beside this program)
  -h, --help          this text
";

struct Args {
    prompts: usize,
    deltas: usize,
    delta_bytes: usize,
    bin_dir: Option<PathBuf>,
}

fn parse_args(given: Vec<String>) -> anyhow::Result<Args> {
    let mut args = Args {
        prompts: 20,
        deltas: 2000,
        delta_bytes: 16,
        bin_dir: None,
    };
    let mut it = given.into_iter();
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--prompts" => args.prompts = value()?.parse().context("--prompts")?,
            "--deltas" => args.deltas = value()?.parse().context("--deltas")?,
            "--delta-bytes" => args.delta_bytes = value()?.parse().context("--delta-bytes")?,
            "--bin-dir" => args.bin_dir = Some(value()?.into()),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.prompts == 0 || args.deltas == 0 || args.delta_bytes == 0 {
        bail!("--prompts, --deltas and --delta-bytes must be at least 1");
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = corral_e2e::bench::cli::parse("bench-broker", HELP, parse_args);
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
        "# bench-broker: --prompts {} --deltas {} --delta-bytes {}; {cores} cores; binaries in {}\n",
        args.prompts,
        args.deltas,
        args.delta_bytes,
        dir.display()
    ))?;
    let report = broker::measure(&bins, args.prompts, args.deltas, args.delta_bytes).await;
    procs::print(&report.context("model calls through the broker")?.table()?)?;
    Ok(())
}
