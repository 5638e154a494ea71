//! Ping round trips, one at a time: over stdio straight to
//! `corral-agent rpc --provider echo`, and over WebSocket through a
//! `corral serve` whose child is the same agent.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::Context;

use super::client::Client;
use super::procs::{BenchGateway, Bins, GatewayArgs, StdioAgent};
use super::stats::{self, Latency};

/// Pings sent and not timed before each measured series.
pub const WARMUP: u64 = 100;

pub struct PingReport {
    pings: u64,
    direct: Latency,
    gateway: Latency,
    /// A `hello` answered by the gateway itself: its share without the child.
    hello: Latency,
}

/// Times `pings` pings on each path, after [`WARMUP`] untimed ones.
pub async fn measure(bins: &Bins, pings: u64) -> anyhow::Result<PingReport> {
    let mut agent = StdioAgent::spawn(bins).await?;
    let direct = time_pings(pings, async |id| agent.ping(id).await)
        .await
        .context("over stdio")?;
    agent.close().await?;

    let gateway = BenchGateway::start(bins, GatewayArgs::echo()).await?;
    let mut client = Client::connect(&gateway.url()).await?;
    let through = time_pings(pings, async |id| client.ping(id).await)
        .await
        .context("through the gateway")?;
    let hello = time_pings(pings, async |id| client.hello(id).await)
        .await
        .context("hello through the gateway")?;
    drop(client);
    gateway.stop().await?;
    Ok(PingReport {
        pings,
        direct,
        gateway: through,
        hello,
    })
}

async fn time_pings(
    n: u64,
    mut ping: impl AsyncFnMut(u64) -> anyhow::Result<Duration>,
) -> anyhow::Result<Latency> {
    for id in 0..WARMUP {
        ping(id).await?;
    }
    let mut samples = Vec::new();
    for id in WARMUP..WARMUP + n {
        samples.push(ping(id).await?);
    }
    Latency::of(samples).context("no pings were timed")
}

impl PingReport {
    /// The section as markdown.
    pub fn table(&self) -> String {
        let n = self.pings;
        let mut s = format!("## Ping round trip ({n} sequential pings after {WARMUP} warm-up)\n\n");
        s.push_str("| path | median | p90 | p99 | max |\n|---|---|---|---|---|\n");
        for (path, l) in [
            ("stdio → corral-agent", &self.direct),
            ("WebSocket → corral → corral-agent", &self.gateway),
            ("WebSocket → corral (hello, no child)", &self.hello),
        ] {
            let _ = writeln!(
                s,
                "| {path} | {} | {} | {} | {} |",
                stats::micros(l.median),
                stats::micros(l.p90),
                stats::micros(l.p99),
                stats::micros(l.max)
            );
        }
        let added = stats::micros_diff(self.gateway.median, self.direct.median);
        let _ = writeln!(s, "\ngateway adds (difference of medians): {added}");
        s
    }
}
