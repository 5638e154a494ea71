//! A project's cold start through the gateway's own spawn path: a client's
//! first connect to a project nothing runs for (the gateway starts its
//! agent) until its ping is answered, minus the same for a second client
//! of the now running project; and beside it the standalone figure of
//! `bench-startup`, `corral-agent rpc --sandbox` spawned and pinged.

use std::time::{Duration, Instant};

use anyhow::Context;

use super::client::Client;
use super::procs::{Bins, StdioAgent};
use super::scale;
use super::stats::Latency;

/// Pause before each connect, so each finds the machine quiet (a spare
/// agent is replaced within it: `REFILL_AFTER` plus its start).
const PAUSE: Duration = Duration::from_millis(60);

/// One gateway's cold and warm connects, and their differences.
pub struct ColdStarts {
    pub cold: Option<Latency>,
    pub warm: Option<Latency>,
    /// Cold minus warm, project by project.
    pub start: Option<Latency>,
}

/// `runs` projects, each connected cold then warm, on a gateway started
/// with `extra` serve arguments (`--child-template off`, say).
pub async fn through_gateway(
    bins: &Bins,
    runs: usize,
    extra: &[&str],
) -> anyhow::Result<ColdStarts> {
    let gw = scale::gateway_with(bins, runs + 10, extra).await?;
    let names = scale::projects(&gw, 0, runs + 1)?;
    // The first project pays for what the gateway sets up once (its
    // spawner thread, the template): not counted.
    let (_, _) = connect_and_ping(&gw.project_url(&names[0])).await?;
    let (mut cold, mut warm, mut start) = (Vec::new(), Vec::new(), Vec::new());
    for name in &names[1..] {
        tokio::time::sleep(PAUSE).await;
        let url = gw.project_url(name);
        let (first, took_cold) = connect_and_ping(&url).await?;
        // What the start leaves to do (a spare agent started to replace
        // the one it took) is done before the warm connect is timed.
        tokio::time::sleep(PAUSE).await;
        let (second, took_warm) = connect_and_ping(&url).await?;
        drop((first, second));
        cold.push(took_cold);
        warm.push(took_warm);
        start.push(took_cold.saturating_sub(took_warm));
    }
    gw.stop().await?;
    Ok(ColdStarts {
        cold: Latency::of(cold),
        warm: Latency::of(warm),
        start: Latency::of(start),
    })
}

/// Connects to `url` (hello answered) and pings: the time both took.
async fn connect_and_ping(url: &str) -> anyhow::Result<(Client, Duration)> {
    let began = Instant::now();
    let mut client = Client::connect(url).await?;
    client.ping(1).await.context("the first ping")?;
    Ok((client, began.elapsed()))
}

/// `runs` standalone sandboxed agents, each spawned, pinged and killed:
/// spawn → pong.
pub async fn standalone(bins: &Bins, runs: usize) -> anyhow::Result<Option<Latency>> {
    let mut samples = Vec::with_capacity(runs);
    for id in 0..runs {
        tokio::time::sleep(PAUSE).await;
        let began = Instant::now();
        let mut agent = StdioAgent::spawn_with(bins, &["--sandbox"]).await?;
        agent.ping(id as u64).await?;
        samples.push(began.elapsed());
    }
    Ok(Latency::of(samples))
}
