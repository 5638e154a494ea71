//! `bench-scale [--projects N] [--burst N] [--idle-clients N]
//! [--fanout N,N] [--fd-cap N] [--nofile N] [--connected N]
//! [--min-pings N] [--cold N] [--cold-rows ROW,…] [--only SECTION,…] [--bin-dir DIR]`: how far one
//! `corral` gateway scales on this machine, as markdown tables:
//! `--projects` projects each connected once and left idle, with
//! descriptors, processes and PSS per project and a ping of each
//! afterwards (`idle`); `--projects` projects first-connected at once,
//! against a plain loop spawning as many sandboxed agents in the same run
//! (`burst`); the pings of an attached client during bursts of `--burst`
//! projects, pooled until `--min-pings` (`pings`); gateway memory per idle
//! client and one prompt delivered to each of `--fanout` clients of one
//! project (`clients`); and the projects running before the gateway
//! refuses one under its descriptor limit (`fds`: the hard limit, or
//! `--nofile N` as the gateway's soft and hard limit; at most
//! `--fd-cap`), with how it degrades there; and a project's cold start
//! through the gateway, cold connect minus warm, with and without the
//! agent template and without the sandbox, beside the standalone
//! sandboxed start (`cold`); and what creating a file costs on the
//! temporary directory's disk against renaming one made ahead (`disk`).
//! Children run the echo
//! provider, sandboxed (the default). Build in release first:
//! `cargo build --release --workspace`.

// A benchmark's tables are its output.
#![allow(clippy::print_stdout)]

use std::path::PathBuf;

use anyhow::{bail, Context};
use corral_e2e::bench::procs::Bins;
use corral_e2e::bench::stats::{micros, Latency};
use corral_e2e::bench::{cold, disk, idle, nofile, scale};

const HELP: &str = "usage: bench-scale [--projects N] [--burst N] [--idle-clients N] \
[--fanout N,N] [--fd-cap N] [--nofile N] [--connected N] [--min-pings N] \
[--cold N] [--cold-rows ROW,…] \
[--only idle,burst,pings,clients,fds,cold,disk] \
[--bin-dir DIR]

How far one corral gateway scales on this machine, as markdown tables.
Children run the echo provider, sandboxed. Build in release first:
cargo build --release --workspace.

sections (all by default, in this order):
  idle      --projects projects each connected once (the client leaves after
            its hello is answered, at most --connected at a time) and left
            idle: gateway descriptors, processes and PSS per project, and
            how many answer a ping afterwards
  burst     --projects projects first-connected at once: time to all ready,
            gateway memory and descriptors per project (with its client),
            against a plain loop spawning as many sandboxed agents one by
            one in the same run
  pings     an attached client's pings during bursts of --burst projects,
            until --min-pings pings were pooled
  clients   gateway memory per idle client (--idle-clients), and one prompt
            delivered to each of --fanout clients of one project
  fds       projects running before the gateway refuses one under its
            descriptor limit (at most --fd-cap), and how it degrades there
  cold      --cold projects' cold start through the gateway: first connect
            and ping of a project with no agent, minus the same for a second
            client once it runs; with the agent template, with
            --child-template off and with --sandbox off, beside a
            standalone corral-agent rpc --sandbox spawned and pinged
            (bench-startup's figure)
  disk      creating a file in a new directory on the temporary
            directory's disk, against renaming one made earlier into place
            (the gateway's files made ahead)

options:
  --projects N        projects of idle and burst (default 2000)
  --connected N       most clients connected at once in idle (default 200)
  --burst N           projects spawned at once during the pings (default 300)
  --min-pings N       pings pooled over bursts, at least (default 1000)
  --cold N            cold starts per row of the cold section (default 100)
  --cold-rows A,B     rows of the cold section to run: spare, forked,
                      executed, unconfined, standalone (default all)
  --idle-clients N    idle clients of the clients section (default 2000)
  --fanout N,N        client counts of the delivery table (default 1000,10000)
  --fd-cap N          most projects the fds section opens (default 5000)
  --nofile N          the gateway's soft and hard descriptor limit in the fds
                      section (default: this program's hard limit)
  --only A,B          run only these sections
  --bin-dir DIR       where corral and corral-agent are (default: beside this program)
  -h, --help          this text
";

struct Args {
    projects: usize,
    burst: usize,
    idle_clients: usize,
    fanout: Vec<usize>,
    fd_cap: usize,
    /// The gateway's hard and soft RLIMIT_NOFILE in the descriptor section.
    nofile: Option<u64>,
    /// Most clients connected at once in the idle section.
    connected: usize,
    /// Pings pooled over the bursts of the pings section, at least.
    min_pings: usize,
    /// Cold starts per row of the cold section.
    cold: usize,
    /// Rows of the cold section to run (all when empty).
    cold_rows: Vec<String>,
    /// Sections to run (all when empty).
    only: Vec<String>,
    bin_dir: Option<PathBuf>,
}

fn parse_args(given: Vec<String>) -> anyhow::Result<Args> {
    let mut args = Args {
        connected: 200,
        min_pings: 1000,
        cold: 100,
        cold_rows: Vec::new(),
        projects: 2000,
        burst: 300,
        idle_clients: 2000,
        fanout: vec![1000, 10_000],
        fd_cap: 5000,
        nofile: None,
        only: Vec::new(),
        bin_dir: None,
    };
    let mut it = given.into_iter();
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
            "--nofile" => args.nofile = Some(value()?.parse().context("--nofile")?),
            "--connected" => args.connected = value()?.parse().context("--connected")?,
            "--min-pings" => args.min_pings = value()?.parse().context("--min-pings")?,
            "--cold" => args.cold = value()?.parse().context("--cold")?,
            "--cold-rows" => {
                args.cold_rows = value()?.split(',').map(String::from).collect();
                if let Some(bad) = args
                    .cold_rows
                    .iter()
                    .find(|r| !COLD_ROWS.contains(&r.as_str()))
                {
                    bail!("--cold-rows: unknown row {bad:?} (one of {COLD_ROWS:?})");
                }
            }
            "--only" => {
                args.only = value()?.split(',').map(String::from).collect();
                if let Some(bad) = args.only.iter().find(|s| !SECTIONS.contains(&s.as_str())) {
                    bail!("--only: unknown section {bad:?} (one of {SECTIONS:?})");
                }
            }
            "--bin-dir" => args.bin_dir = Some(value()?.into()),
            other => bail!("unknown argument {other:?}"),
        }
    }
    if args.projects == 0 || args.connected == 0 || args.cold == 0 {
        bail!("--projects, --connected and --cold must be at least 1");
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

/// The rows of the cold section `--cold-rows` can name, in the order
/// they run.
const COLD_ROWS: [&str; 5] = ["spare", "forked", "executed", "unconfined", "standalone"];

/// The sections `--only` can name, in the order they run.
const SECTIONS: [&str; 7] = ["idle", "burst", "pings", "clients", "fds", "cold", "disk"];

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = corral_e2e::bench::cli::parse("bench-scale", HELP, parse_args);
    let hard = raise_fd_limit()?;
    let dir = match &args.bin_dir {
        Some(dir) => dir.clone(),
        None => std::env::current_exe()?
            .parent()
            .context("executable directory")?
            .to_path_buf(),
    };
    let bins = Bins::in_dir(&dir)?;
    let run = |section: &str| args.only.is_empty() || args.only.iter().any(|s| s == section);
    if run("idle") {
        idle_projects(&bins, &args).await?;
    }
    if run("burst") {
        first_connects(&bins, &args).await?;
    }
    if run("pings") {
        pings_during_spawns(&bins, &args).await?;
    }
    if run("clients") {
        many_clients(&bins, &args).await?;
    }
    if run("fds") {
        descriptor_limit(&bins, &args, hard).await?;
    }
    if run("cold") {
        cold_starts(&bins, &args).await?;
    }
    if run("disk") {
        disk()?;
    }
    Ok(())
}

/// 6. A project's cold start through the gateway: served by a spare agent
///    (the default), forked from the template, executed and (the floor)
///    without the sandbox; and the standalone start beside them.
async fn cold_starts(bins: &Bins, args: &Args) -> anyhow::Result<()> {
    let wanted = |row: &str| args.cold_rows.is_empty() || args.cold_rows.iter().any(|r| r == row);
    // The gateway rows: the name `--cold-rows` knows, the table's, and
    // the gateway's extra arguments. Unconfined is what the gateway and
    // the agent cost without any confinement: the floor under the rest.
    let gateways: [(&str, &str, &[&str]); 4] = [
        ("spare", "a spare agent assigned (the default)", &[]),
        (
            "forked",
            "forked from the template (`--spare-agents 0`)",
            &["--spare-agents", "0"],
        ),
        (
            "executed",
            "executed (`--child-template off`)",
            &["--child-template", "off"],
        ),
        (
            "unconfined",
            "unconfined (`--sandbox off`), forked",
            &["--sandbox", "off"],
        ),
    ];
    let mut measured = Vec::new();
    for (row, name, extra) in gateways {
        if wanted(row) {
            measured.push((name, cold::through_gateway(bins, args.cold, extra).await?));
        }
    }
    let standalone = match wanted("standalone") {
        true => Some(cold::standalone(bins, args.cold).await?),
        false => None,
    };
    println!(
        "\n## A project's cold start through the gateway ({} projects per row)\n",
        args.cold
    );
    println!("| echo provider | p50 | p99 | max |\n|---|---|---|---|");
    for (name, run) in &measured {
        println!(
            "{}",
            row(&format!("{name}: cold start (cold − warm)"), &run.start)
        );
        println!(
            "{}",
            row(&format!("{name}: first connect + ping, cold"), &run.cold)
        );
        println!("{}", row(&format!("{name}: the same, warm"), &run.warm));
    }
    if let Some(standalone) = standalone {
        println!(
            "{}",
            row(
                "standalone `corral-agent rpc --sandbox`: spawn → pong",
                &standalone
            )
        );
    }
    Ok(())
}

/// 7. Creating a file against renaming one made ahead.
fn disk() -> anyhow::Result<()> {
    let temp = tempfile::tempdir().context("create a temp dir")?;
    let files = disk::measure(temp.path())?;
    println!(
        "\n## A file of a cold start on this disk ({} each, open included)\n",
        disk::SAMPLES
    );
    println!("| file, in a new directory | p50 | p99 | max |\n|---|---|---|---|");
    println!("{}", row("created", &files.created));
    println!("{}", row("made ahead, renamed into place", &files.renamed));
    Ok(())
}

fn cap(args: &Args) -> usize {
    args.projects.max(args.fd_cap) + 100
}

/// 0. Projects connected once each and left idle: what each costs.
async fn idle_projects(bins: &Bins, args: &Args) -> anyhow::Result<()> {
    let gw = idle::gateway(bins, cap(args)).await?;
    let measured = idle::measure(&gw, args.projects, args.connected).await?;
    println!("{}", idle::table(&measured)?);
    gw.stop().await?;
    Ok(())
}

/// 1. First connects at once, then memory and fds per idle project; and
///    the floor: the same number of sandboxed agents spawned by a plain
///    loop, in the same run.
async fn first_connects(bins: &Bins, args: &Args) -> anyhow::Result<()> {
    let floor = scale::plain_loop(bins, args.projects).await?;
    let gw = scale::gateway(bins, cap(args)).await?;
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
    println!(
        "\n| {n} sandboxed agents | time to the last answer |\n|---|---|",
        n = args.projects
    );
    println!(
        "| plain loop: `corral-agent rpc --sandbox` spawned one by one, each pinged | {:.1} s |",
        floor.as_secs_f64()
    );
    println!(
        "| through the gateway, all first-connected at once | {:.1} s ({:.2}× the loop) |",
        burst.all_ready.as_secs_f64(),
        burst.all_ready.as_secs_f64() / floor.as_secs_f64().max(1e-9)
    );
    drop(burst);
    gw.stop().await?;
    Ok(())
}

/// Bursts of the pings section at most, however few pings they give.
const MAX_BURSTS: usize = 40;

/// 2. Pings of an attached client during bursts of spawns: bursts of
///    `--burst` new projects, one after another, until `--min-pings` pings
///    were sent during them (pooled).
async fn pings_during_spawns(bins: &Bins, args: &Args) -> anyhow::Result<()> {
    let gw = scale::gateway(bins, args.burst * MAX_BURSTS + 10).await?;
    let mut attached = corral_e2e::bench::client::Client::connect(&gw.url()).await?;
    let idle = {
        let mut samples = Vec::new();
        for id in 0..200 {
            samples.push(attached.ping(id).await?);
        }
        Latency::of(samples)
    };
    let mut pooled = Vec::new();
    let (mut bursts, mut ready, mut failed) = (0, 0, 0);
    while pooled.len() < args.min_pings && bursts < MAX_BURSTS {
        let names = scale::projects(&gw, bursts * args.burst, args.burst)?;
        let (samples, burst) = scale::ping_during(&mut attached, scale::burst(&gw, &names)).await?;
        let burst = burst?;
        pooled.extend(samples);
        ready += burst.ready;
        failed += burst.failed;
        bursts += 1;
        // The burst's clients leave; their projects stay, idle.
        drop(burst);
    }
    println!(
        "\n## Pings of an attached client while {} projects spawn at once\n",
        args.burst
    );
    println!("| pings | p50 | p99 | max |\n|---|---|---|---|");
    println!("{}", row("no spawns", &idle));
    println!(
        "{}",
        row(
            &format!(
                "during {bursts} bursts, pooled ({ready} ready, {failed} failed, {} pings)",
                pooled.len()
            ),
            &Latency::of(pooled)
        )
    );
    drop(attached);
    gw.stop().await?;
    Ok(())
}

/// 3. Memory per idle client; 4. delivery to many clients.
async fn many_clients(bins: &Bins, args: &Args) -> anyhow::Result<()> {
    let gw = scale::gateway(bins, 16).await?;
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
    Ok(())
}

/// 5. Projects under the descriptor limit, and how the gateway
///    degrades there.
async fn descriptor_limit(bins: &Bins, args: &Args, hard: u64) -> anyhow::Result<()> {
    let limit = args.nofile.unwrap_or(hard);
    let max_children = match args.nofile {
        // The limit, not --max-children, must be what stops the filling.
        Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
        None => cap(args),
    };
    let gw = nofile::gateway(bins, max_children, args.nofile).await?;
    let at = nofile::at_limit(&gw, args.fd_cap, 100).await?;
    println!("\n## Projects under the gateway's descriptor limit ({limit})\n");
    println!("| projects running | gateway fds | stopped by |\n|---|---|---|");
    println!(
        "| {} | {} | {} |",
        at.projects,
        at.fds,
        at.refusal
            .as_deref()
            .map_or_else(|| format!("the cap of {}", args.fd_cap), cell)
    );
    println!("\n| at the limit | |\n|---|---|");
    println!(
        "| gateway CPU while connects keep coming ({} s) | {:.1} % |",
        3, at.cpu_percent
    );
    println!(
        "| what those connects saw | {} |",
        at.refused_again.as_deref().map_or("–".into(), cell)
    );
    let ping = match &at.ping {
        Ok(rtt) => micros(*rtt),
        Err(e) => format!("failed: {}", cell(e)),
    };
    println!("| ping of a client attached before the limit | {ping} |");
    println!(
        "| projects stopped (admin API), then new ones ready | {} stopped, {} of {} ready |",
        at.stopped, at.started_again, at.stopped
    );
    if let Some(refusal) = &at.again_refusal {
        println!(
            "| what a new one that did not start saw | {} |",
            cell(refusal)
        );
    }
    gw.stop().await?;
    Ok(())
}

/// `text` fit for a markdown table cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|").replace('\n', " ")
}
