//! `bench-scale`'s idle-projects measurement: `N` projects each connected
//! once (the client leaves after its hello is answered, at most
//! `connected` clients at a time) and left idle (`--idle-timeout 0`); then
//! what an idle project costs: the gateway's descriptors and the
//! processes of its child (counts, not times), the proportional set size
//! (PSS) of the children and of the gateway; and whether every project
//! still answers a ping. Every wait is bounded.

use std::collections::BTreeMap;

use anyhow::Context;
use futures_util::future::join_all;

use super::client::Client;
use super::procs::{BenchGateway, Bins, GatewayArgs};
use super::scale::{fds, projects, settled_rss};

/// Projects started per round of first connects.
const ROUND: usize = 100;

/// A gateway with echo children that never reaps an idle one, with room
/// for `max_children`.
pub async fn gateway(bins: &Bins, max_children: usize) -> anyhow::Result<BenchGateway> {
    let mut args = GatewayArgs::echo();
    args.serve = vec![
        "--max-children".into(),
        max_children.to_string(),
        "--idle-timeout".into(),
        "0".into(),
        "--max-connections-per-token".into(),
        "0".into(),
    ];
    BenchGateway::start(bins, args).await
}

/// What idle projects cost.
#[derive(Debug)]
pub struct Idle {
    pub projects: usize,
    /// Projects whose first client got its hello answered.
    pub ready: usize,
    /// First errors, for the report.
    pub errors: Vec<String>,
    /// Gateway descriptors per idle project (no client attached).
    pub fds_per_project: f64,
    /// Processes per idle project (the gateway's descendants).
    pub processes_per_project: f64,
    /// PSS of the children per idle project, KiB (`None`: unreadable).
    pub children_pss_kib: Option<f64>,
    /// The gateway's PSS growth per idle project, KiB.
    pub gateway_pss_kib: Option<f64>,
    /// Projects that answered a ping afterwards, through a new client.
    pub answered: usize,
}

/// Connects `n` projects once each, `connected` at a time at most, and
/// measures them idle.
pub async fn measure(gateway: &BenchGateway, n: usize, connected: usize) -> anyhow::Result<Idle> {
    // One project first, left out of the counts: what the gateway sets up
    // once, at its first spawn (its spawner thread, signal handling), is
    // no project's cost.
    let warm = projects(gateway, n, 1)?;
    Client::connect(&gateway.project_url(&warm[0]))
        .await
        .context("the warm-up project")?;
    // Once its client's departure has reached the gateway.
    let _ = settled_rss(gateway.pid).await?;
    let base_fds = fds(gateway.pid)?;
    let base_processes = descendants(gateway.pid).len();
    let base_pss = pss_kib(gateway.pid);
    let names = projects(gateway, 0, n)?;
    let mut idle = Idle {
        projects: n,
        ready: 0,
        errors: Vec::new(),
        fds_per_project: 0.0,
        processes_per_project: 0.0,
        children_pss_kib: None,
        gateway_pss_kib: None,
        answered: 0,
    };
    let batch = connected.clamp(1, ROUND);
    for chunk in names.chunks(batch) {
        let connects = chunk.iter().map(|name| {
            let url = gateway.project_url(name);
            // The client says hello, is answered, and leaves.
            async move { Client::connect(&url).await.map(drop) }
        });
        for result in join_all(connects).await {
            match result {
                Ok(()) => idle.ready += 1,
                Err(e) if idle.errors.len() < 3 => idle.errors.push(format!("{e:#}")),
                Err(_) => {}
            }
        }
    }
    // The clients' departures reach the gateway asynchronously.
    let _ = settled_rss(gateway.pid).await?;
    let per = |total: f64| total / idle.ready.max(1) as f64;
    idle.fds_per_project = per(fds(gateway.pid)?.saturating_sub(base_fds) as f64);
    let tree = descendants(gateway.pid);
    idle.processes_per_project = per(tree.len().saturating_sub(base_processes) as f64);
    // The warm-up project's too: its children are like the others.
    let children_pss: Option<u64> = tree.iter().map(|pid| pss_kib(*pid)).sum();
    idle.children_pss_kib = children_pss.map(|kib| kib as f64 / (idle.ready + 1) as f64);
    idle.gateway_pss_kib = match (base_pss, pss_kib(gateway.pid)) {
        (Some(before), Some(after)) => Some(per(after.saturating_sub(before) as f64)),
        _ => None,
    };
    for chunk in names.chunks(batch) {
        let pings = chunk.iter().map(|name| {
            let url = gateway.project_url(name);
            async move {
                let mut client = Client::connect(&url).await?;
                client.ping(1).await
            }
        });
        idle.answered += join_all(pings).await.iter().filter(|r| r.is_ok()).count();
    }
    Ok(idle)
}

/// The proportional set size of process `pid` in KiB, from
/// `/proc/PID/smaps_rollup` (`None` when it cannot be read, e.g. an
/// undumpable process of another user).
pub fn pss_kib(pid: u32) -> Option<u64> {
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    rollup
        .lines()
        .find_map(|l| l.strip_prefix("Pss:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Every process below `pid` (by the parents `/proc` shows).
pub fn descendants(pid: u32) -> Vec<u32> {
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(child) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(parent) = parent_of(child) {
                children.entry(parent).or_default().push(child);
            }
        }
    }
    let mut all = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        if let Some(kids) = children.get(&p) {
            all.extend(kids);
            todo.extend(kids);
        }
    }
    all
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The markdown report of `idle`.
pub fn table(idle: &Idle) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    let kib = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{v:.0}"));
    let mut out = String::new();
    writeln!(
        out,
        "## {} idle projects, each connected once\n",
        idle.projects
    )
    .context("format")?;
    writeln!(out, "| projects | ready | gateway fds per project | processes per project | children PSS KiB per project | gateway PSS KiB per project | answered a ping afterwards |").context("format")?;
    writeln!(out, "|---|---|---|---|---|---|---|").context("format")?;
    writeln!(
        out,
        "| {} | {} | {:.2} | {:.2} | {} | {} | {} |",
        idle.projects,
        idle.ready,
        idle.fds_per_project,
        idle.processes_per_project,
        kib(idle.children_pss_kib),
        kib(idle.gateway_pss_kib),
        idle.answered
    )
    .context("format")?;
    if !idle.errors.is_empty() {
        writeln!(out, "\nfirst errors: {:?}", idle.errors).context("format")?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_pss_and_finds_its_children() {
        let me = std::process::id();
        assert!(pss_kib(me).is_some_and(|kib| kib > 0));
        assert_eq!(pss_kib(u32::MAX), None);
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        assert!(descendants(me).contains(&child.id()));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
