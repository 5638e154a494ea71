//! The measurements of `bench-scale`: many projects first-connected at
//! once, an attached client's pings during a burst of spawns, the memory
//! of idle clients and projects, and one prompt delivered to many clients
//! (the descriptor limit is [`super::nofile`]). Every wait is bounded.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures_util::future::join_all;

use super::client::Client;
use super::procs::{rss_kib, BenchGateway, Bins, GatewayArgs, StdioAgent};
use super::stats::Latency;
use super::wire::Seen;

/// How long the whole of one first-connect burst may take.
const BURST_LIMIT: Duration = Duration::from_secs(240);
/// Pause before reading memory, so the gateway settles.
const SETTLE: Duration = Duration::from_secs(1);

/// A gateway with echo children and room for `max_children`.
pub async fn gateway(bins: &Bins, max_children: usize) -> anyhow::Result<BenchGateway> {
    gateway_with(bins, max_children, &[]).await
}

/// [`gateway`] with `extra` serve arguments.
pub async fn gateway_with(
    bins: &Bins,
    max_children: usize,
    extra: &[&str],
) -> anyhow::Result<BenchGateway> {
    let mut args = GatewayArgs::echo();
    args.serve = vec![
        "--max-children".into(),
        max_children.to_string(),
        "--max-connections".into(),
        "30000".into(),
        // Every client uses the one token.
        "--max-connections-per-token".into(),
        "0".into(),
    ];
    args.serve.extend(extra.iter().map(|a| a.to_string()));
    BenchGateway::start(bins, args).await
}

/// Project names `p0`, `p1`, … created in the gateway's root.
pub fn projects(gateway: &BenchGateway, from: usize, n: usize) -> anyhow::Result<Vec<String>> {
    let names: Vec<String> = (from..from + n).map(|i| format!("p{i}")).collect();
    gateway.add_projects(names.iter().map(String::as_str))?;
    Ok(names)
}

/// What a burst of first connects did.
pub struct Burst {
    pub projects: usize,
    pub ready: usize,
    pub failed: usize,
    /// First errors, for the report.
    pub errors: Vec<String>,
    /// Time from the start of the burst to each client's answered hello.
    pub ready_after: Option<Latency>,
    pub all_ready: Duration,
    /// The clients, kept attached (their projects stay idle and running).
    pub clients: Vec<Client>,
}

/// Connects one client to each of `names` at once.
pub async fn burst(gateway: &BenchGateway, names: &[String]) -> anyhow::Result<Burst> {
    let start = Instant::now();
    let connects = names.iter().map(|name| {
        let url = gateway.project_url(name);
        async move {
            let client = tokio::time::timeout(BURST_LIMIT, Client::connect(&url)).await;
            let client = client.context("no answer within the burst limit")??;
            anyhow::Ok((client, start.elapsed()))
        }
    });
    let results = join_all(connects).await;
    let all_ready = start.elapsed();
    let mut burst = Burst {
        projects: names.len(),
        ready: 0,
        failed: 0,
        errors: Vec::new(),
        ready_after: None,
        all_ready,
        clients: Vec::new(),
    };
    let mut times = Vec::new();
    for result in results {
        match result {
            Ok((client, after)) => {
                burst.ready += 1;
                times.push(after);
                burst.clients.push(client);
            }
            Err(e) => {
                burst.failed += 1;
                if burst.errors.len() < 3 {
                    burst.errors.push(format!("{e:#}"));
                }
            }
        }
    }
    burst.ready_after = Latency::of(times);
    Ok(burst)
}

/// The floor of a burst: `n` sandboxed agents (`corral-agent rpc
/// --sandbox --provider echo`) spawned by a plain loop, one by one, each
/// pinged once and kept running until all have answered. Returns the time
/// from the first spawn to the last pong.
pub async fn plain_loop(bins: &Bins, n: usize) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut agents = Vec::with_capacity(n);
    for id in 0..n {
        let mut agent = StdioAgent::spawn_with(bins, &["--sandbox"]).await?;
        agent
            .ping(id as u64)
            .await
            .with_context(|| format!("the plain loop's agent {id}"))?;
        agents.push(agent);
    }
    let took = start.elapsed();
    // Killed on drop; a pause lets their exits settle before what follows.
    drop(agents);
    tokio::time::sleep(SETTLE * 3).await;
    Ok(took)
}

/// Open descriptors of process `pid`.
pub fn fds(pid: u32) -> anyhow::Result<usize> {
    let dir = format!("/proc/{pid}/fd");
    Ok(std::fs::read_dir(&dir)
        .with_context(|| format!("read {dir}"))?
        .count())
}

/// Resident memory of `pid` after a pause to settle.
pub async fn settled_rss(pid: u32) -> anyhow::Result<u64> {
    tokio::time::sleep(SETTLE).await;
    rss_kib(pid)
}

/// Pings of `client` every 10 ms until `done` resolves. A ping in flight
/// when it does is still awaited (and counted): a dropped one would leave
/// its answer for the next caller's first ping.
pub async fn ping_during<F: std::future::Future>(
    client: &mut Client,
    done: F,
) -> anyhow::Result<(Vec<Duration>, F::Output)> {
    let mut samples = Vec::new();
    tokio::pin!(done);
    let mut finished = None;
    let mut id = 1_000_000;
    loop {
        {
            let ping = client.ping(id);
            tokio::pin!(ping);
            loop {
                tokio::select! {
                    out = &mut done, if finished.is_none() => finished = Some(out),
                    rtt = &mut ping => {
                        samples.push(rtt?);
                        break;
                    }
                }
            }
        }
        id += 1;
        if let Some(out) = finished {
            return Ok((samples, out));
        }
        tokio::select! {
            out = &mut done => return Ok((samples, out)),
            () = tokio::time::sleep(Duration::from_millis(10)) => {}
        }
    }
}

/// Connects `n` clients to `url`, `parallel` at a time.
pub async fn connect_many(url: &str, n: usize, parallel: usize) -> anyhow::Result<Vec<Client>> {
    let mut clients = Vec::with_capacity(n);
    while clients.len() < n {
        let batch = parallel.min(n - clients.len());
        let connected = join_all((0..batch).map(|_| Client::connect(url))).await;
        for client in connected {
            clients.push(client?);
        }
    }
    Ok(clients)
}

/// Sends one prompt from `sender` and times, for every client, the arrival
/// of the run's end.
pub async fn deliver(sender: &mut Client, clients: Vec<Client>) -> anyhow::Result<Latency> {
    let start = Instant::now();
    sender.prompt("scale-1", "hello everyone").await?;
    let waits = clients.into_iter().map(|mut client| async move {
        client.count_deltas().await?;
        anyhow::Ok(start.elapsed())
    });
    let mut times = Vec::new();
    for result in join_all(waits).await {
        times.push(result?);
    }
    loop {
        let frame = sender.frame().await?;
        if sender_seen(&frame) == Seen::End {
            break;
        }
    }
    Latency::of(times).context("no clients")
}

fn sender_seen(frame: &serde_json::Value) -> Seen {
    super::wire::Wire::Zut.seen(&frame.to_string())
}

/// Fails unless every project of a burst became ready.
pub fn all_ready(burst: &Burst) -> anyhow::Result<()> {
    if burst.failed > 0 {
        bail!(
            "{} of {} projects failed: {:?}",
            burst.failed,
            burst.projects,
            burst.errors
        );
    }
    Ok(())
}
