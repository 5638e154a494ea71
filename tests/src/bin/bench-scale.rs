//! `bench-scale [--projects N] [--burst N] [--idle-clients N]
//! [--fanout N,N] [--fd-cap N] [--bin-dir DIR]`: how far one `corral`
//! gateway scales on this machine, as markdown tables: `--projects`
//! projects first-connected at once; the pings of an attached client
//! while `--burst` projects spawn; gateway memory per idle client and per
//! idle project; one prompt delivered to each of `--fanout` clients of one
//! project; and the projects running before the gateway's descriptor limit
//! (or `--fd-cap`). Children run the echo provider, sandboxed (the
//! default). Build in release first: `cargo build --release --workspace`.

// A benchmark's tables are its output.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use anyhow::{bail, Context};
use corral_e2e::bench::procs::Bins;
use corral_e2e::bench::scale;
use corral_e2e::bench::stats::{micros, Latency};

struct Args {
    projects: usize,
    burst: usize,
    idle_clients: usize,
    fanout: Vec<usize>,
    fd_cap: usize,
    bin_dir: Option<PathBuf>,
}

fn parse_args() -> anyhow::Result<Args> {
    let mut args = Args {
        projects: 2000,
        burst: 300,
        idle_clients: 2000,
        fanout: vec![1000, 10_000],
        fd_cap: 5000,
        bin_dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().with_context(|| format!("{arg} needs a value"));
        match arg.as_str() {
            "--projects" => args.projects = value()?.parse().context("--projects")?,
            "--burst" => args.burst = value()?.parse().context("--burst")?,
            "--idle-clients" => args.idle_clients = value()?.parse().context("--idle-clients")?,
            "--fanout" => {
                args.fanout = value()?
                    .split(',')
                    .map(|n| n.parse().context("--fanout"))
                    .collect::<anyhow::Result<_>>()?
            }
            "--fd-cap" => args.fd_cap = value()?.parse().context("--fd-cap")?,
            "--bin-dir" => args.bin_dir = Some(value()?.into()),
            other => bail!("unknown argument {other:?}"),
        }
    }
    Ok(args)
}

fn raise_fd_limit() -> anyhow::Result<u64> {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).context("getrlimit")?;
    setrlimit(Resource::RLIMIT_NOFILE, hard, hard).context("setrlimit")?;
    Ok(hard)
}

fn row(name: &str, latency: &Option<Latency>) -> String {
    match latency {
        Some(l) => format!(
            "| {name} | {} | {} | {} |",
            micros(l.median),
            micros(l.p99),
            micros(l.max)
        ),
        None => format!("| {name} | – | – | – |"),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = parse_args()?;
    let hard = raise_fd_limit()?;
    let dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("executable directory")?
            .to_path_buf(),
    };
    let bins = Bins::in_dir(&dir)?;
    let cap = args.projects.max(args.fd_cap) + 100;

    // 1. First connects at once, then memory and fds per idle project.
    let gw = scale::gateway(&bins, cap).await?;
    let base_rss = scale::settled_rss(gw.pid).await?;
    let base_fds = scale::fds(gw.pid)?;
    let names = scale::projects(&gw, 0, args.projects)?;
    let burst = scale::burst(&gw, &names).await?;
    let rss = scale::settled_rss(gw.pid).await?;
    let fds = scale::fds(gw.pid)?;
    let ready = burst.ready.max(1) as u64;
    println!("## {} projects first-connected at once\n", args.projects);
    println!("| projects | ready | failed | time to all ready | gateway KiB per idle project (incl. its client) | gateway fds per project (incl. its client) |");
    println!("|---|---|---|---|---|---|");
    println!(
        "| {} | {} | {} | {:.1} s | {} | {:.1} |",
        burst.projects,
        burst.ready,
        burst.failed,
        burst.all_ready.as_secs_f64(),
        rss.saturating_sub(base_rss) / ready,
        (fds.saturating_sub(base_fds)) as f64 / ready as f64
    );
    if !burst.errors.is_empty() {
        println!("\nfirst errors: {:?}", burst.errors);
    }
    println!("\n| ready after | p50 | p99 | max |\n|---|---|---|---|");
    println!("{}", row("hello answered", &burst.ready_after));
    drop(burst);
    gw.stop().await?;

    // 2. Pings of an attached client during a burst of spawns.
    let gw = scale::gateway(&bins, cap).await?;
    let mut attached = corral_e2e::bench::client::Client::connect(&gw.url()).await?;
    let idle = {
        let mut samples = Vec::new();
        for id in 0..200 {
            samples.push(attached.ping(id).await?);
        }
        Latency::of(samples)
    };
    let names = scale::projects(&gw, 0, args.burst)?;
    let (samples, burst) = scale::ping_during(&mut attached, scale::burst(&gw, &names)).await?;
    let burst = burst?;
    println!(
        "\n## Pings of an attached client while {} projects spawn\n",
        args.burst
    );
    println!("| pings | p50 | p99 | max |\n|---|---|---|---|");
    println!("{}", row("no spawns", &idle));
    println!(
        "{}",
        row(
            &format!(
                "during the burst ({} ready, {} failed, {} pings)",
                burst.ready,
                burst.failed,
                samples.len()
            ),
            &Latency::of(samples)
        )
    );
    drop(burst);
    drop(attached);
    gw.stop().await?;

    // 3. Memory per idle client; 4. delivery to many clients.
    let gw = scale::gateway(&bins, 16).await?;
    let mut sender = corral_e2e::bench::client::Client::connect(&gw.url()).await?;
    let before = scale::settled_rss(gw.pid).await?;
    let idle_clients = scale::connect_many(&gw.url(), args.idle_clients, 200).await?;
    let after = scale::settled_rss(gw.pid).await?;
    println!("\n## Gateway memory per idle WebSocket client\n");
    println!("| idle clients | RSS before | RSS after | KiB per client |\n|---|---|---|---|");
    println!(
        "| {} | {} KiB | {} KiB | {:.1} |",
        args.idle_clients,
        before,
        after,
        after.saturating_sub(before) as f64 / args.idle_clients.max(1) as f64
    );
    drop(idle_clients);
    println!("\n## One prompt delivered to every client of a project (echo provider)\n");
    println!("| clients | p50 | p99 | max |\n|---|---|---|---|");
    for &n in &args.fanout {
        let clients = scale::connect_many(&gw.url(), n, 200).await?;
        let latency = scale::deliver(&mut sender, clients).await?;
        println!("{}", row(&n.to_string(), &Some(latency)));
    }
    drop(sender);
    gw.stop().await?;

    // 5. Projects under the descriptor limit.
    let gw = scale::gateway(&bins, cap).await?;
    let (count, clients, refusal) = scale::fill(&gw, args.fd_cap, 250).await?;
    let fds = scale::fds(gw.pid)?;
    println!("\n## Projects under the gateway's descriptor limit ({hard})\n");
    println!("| projects running | gateway fds | stopped by |\n|---|---|---|");
    println!(
        "| {count} | {fds} | {} |",
        refusal.unwrap_or_else(|| format!("the cap of {}", args.fd_cap))
    );
    drop(clients);
    gw.stop().await?;
    Ok(())
}
