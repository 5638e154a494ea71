//! `bench-scale`'s descriptor-limit measurement: a gateway under a hard
//! `RLIMIT_NOFILE`, filled with projects until it refuses one, then checked
//! for graceful degradation there: its CPU while it refuses, a ping of a
//! client attached before, and new projects starting again once a few were
//! stopped. Every wait is bounded.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

use super::client::Client;
use super::procs::{BenchGateway, Bins, GatewayArgs};
use super::scale::{burst, fds, projects};

/// The admin token of the filled gateway (to stop projects).
const ADMIN_TOKEN: &str = "bench-admin-token-0123456789";
/// How long connects keep hitting the full gateway while its CPU is read.
const REFUSING: Duration = Duration::from_secs(3);
/// How long a stopped project may take to go.
const STOP_WAIT: Duration = Duration::from_secs(20);

/// A gateway with echo children, room for `max_children` and no
/// connection cap below the descriptor limit, under `nofile` descriptors
/// (the benchmark's own limit when `None`).
pub async fn gateway(
    bins: &Bins,
    max_children: usize,
    nofile: Option<u64>,
) -> anyhow::Result<BenchGateway> {
    let mut args = GatewayArgs::echo();
    args.nofile = nofile;
    args.serve = vec![
        "--max-children".into(),
        max_children.to_string(),
        "--max-connections".into(),
        "1000000".into(),
        // Every client uses the one token.
        "--max-connections-per-token".into(),
        "0".into(),
        "--admin-token".into(),
        ADMIN_TOKEN.into(),
    ];
    BenchGateway::start(bins, args).await
}

/// What the gateway did at its descriptor limit.
pub struct AtLimit {
    /// Projects running (each with one attached client) when it refused.
    pub projects: usize,
    /// Its open descriptors then.
    pub fds: usize,
    /// What the first refused client saw; `None` when `cap` was reached.
    pub refusal: Option<String>,
    /// Its CPU use while connects kept being refused, in percent of a core.
    pub cpu_percent: f64,
    /// What those connects saw (the last one).
    pub refused_again: Option<String>,
    /// The round trip of a ping by a client attached before the limit.
    pub ping: Result<Duration, String>,
    /// Projects stopped to make room.
    pub stopped: usize,
    /// New projects that became ready after that.
    pub started_again: usize,
    /// What the first of those that did not saw.
    pub again_refusal: Option<String>,
}

/// Opens projects `batch` at a time until the gateway refuses one or
/// `cap` are running, then checks how it degrades there.
pub async fn at_limit(gateway: &BenchGateway, cap: usize, batch: usize) -> anyhow::Result<AtLimit> {
    let (mut clients, refusal) = fill(gateway, cap, batch).await?;
    let running = clients.len();
    let open = fds(gateway.pid)?;
    let (cpu_percent, refused_again) = refusing(gateway).await?;
    let ping = match clients.first_mut() {
        Some(client) => client.ping(7).await.map_err(|e| format!("{e:#}")),
        None => Err("no client attached".into()),
    };
    let free = 10.min(running);
    drop(clients.drain(..free));
    let stopped = stop_unattached(gateway.addr, free).await?;
    let names = projects(gateway, 200_000, free)?;
    let again = burst(gateway, &names).await?;
    Ok(AtLimit {
        projects: running,
        fds: open,
        refusal,
        cpu_percent,
        refused_again,
        ping,
        stopped,
        started_again: again.ready,
        again_refusal: again.errors.into_iter().next(),
    })
}

/// Bursts of `batch` first connects until one fails or `cap` run.
async fn fill(
    gateway: &BenchGateway,
    cap: usize,
    batch: usize,
) -> anyhow::Result<(Vec<Client>, Option<String>)> {
    let mut clients = Vec::new();
    let mut from = 0;
    while clients.len() < cap {
        let n = batch.min(cap - clients.len());
        let names = projects(gateway, 100_000 + from, n)?;
        from += n;
        let result = burst(gateway, &names).await?;
        clients.extend(result.clients);
        if result.failed > 0 {
            return Ok((clients, result.errors.into_iter().next()));
        }
    }
    Ok((clients, None))
}

/// Connects to new projects one after another for [`REFUSING`]; returns
/// the gateway's CPU use meanwhile and what the last connect saw.
async fn refusing(gateway: &BenchGateway) -> anyhow::Result<(f64, Option<String>)> {
    let before = cpu_seconds(gateway.pid)?;
    let start = Instant::now();
    let mut seen = None;
    let mut n = 0;
    while start.elapsed() < REFUSING {
        let names = projects(gateway, 300_000 + n, 1)?;
        n += 1;
        let url = gateway.project_url(&names[0]);
        let left = REFUSING.saturating_sub(start.elapsed());
        seen = Some(
            match tokio::time::timeout(left, Client::connect(&url)).await {
                Ok(Ok(_)) => "connected".to_string(),
                Ok(Err(e)) => format!("{e:#}"),
                Err(_) => format!("no answer within {} s", REFUSING.as_secs()),
            },
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cpu = cpu_seconds(gateway.pid)? - before;
    Ok((100.0 * cpu / start.elapsed().as_secs_f64(), seen))
}

/// User plus system CPU seconds of process `pid`.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    // Fields after the command name, which ends with the last ')'.
    let rest = stat.rsplit_once(')').context("malformed stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<f64> {
        fields
            .get(i)
            .context("short stat")?
            .parse::<f64>()
            .context("stat field")
    };
    // utime and stime are fields 14 and 15 (11 and 12 after the name).
    let tck = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .unwrap_or(100) as f64;
    Ok((ticks(11)? + ticks(12)?) / tck)
}

/// Stops (admin API) up to `n` running projects that have no client,
/// and waits until they are gone; returns how many went.
async fn stop_unattached(addr: SocketAddr, n: usize) -> anyhow::Result<usize> {
    let deadline = Instant::now() + STOP_WAIT;
    // The dropped clients' detaches reach their hubs asynchronously.
    let idle = loop {
        let list: Value = serde_json::from_str(&admin(addr, "GET", "/v1/projects").await?.1)
            .context("the project list")?;
        let idle: Vec<String> = list["projects"]
            .as_array()
            .context("no projects in the list")?
            .iter()
            .filter(|p| p["clients"] == 0 && p["state"] == "ready")
            .filter_map(|p| p["project"].as_str().map(String::from))
            .take(n)
            .collect();
        if idle.len() == n || Instant::now() > deadline {
            break idle;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for project in &idle {
        let (status, body) = admin(addr, "POST", &format!("/v1/projects/{project}/stop")).await?;
        if status != 202 {
            bail!("stop {project}: {status} {body}");
        }
    }
    let mut gone = 0;
    for project in &idle {
        while Instant::now() < deadline {
            let (status, _) = admin(addr, "GET", &format!("/v1/projects/{project}")).await?;
            if status == 404 {
                gone += 1;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    Ok(gone)
}

/// One admin request over HTTP/1.1: (status, body).
async fn admin(addr: SocketAddr, method: &str, path: &str) -> anyhow::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {ADMIN_TOKEN}\r\n\
             Content-Length: 0\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(request.as_bytes()).await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        anyhow::Ok(response)
    };
    let response = tokio::time::timeout(super::READ_TIMEOUT, exchange)
        .await
        .with_context(|| format!("{method} {path}: no answer in time"))??;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("{method} {path}: no status in {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Ok((status, body))
}
