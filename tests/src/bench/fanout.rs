//! Event fan-out throughput: a mock-LLM child streams small `text_delta`s
//! as fast as it can to 1 client, then to N clients of the same project;
//! each client's rate is its deltas over the time from its first to its
//! last one. Every client must receive every delta.

use std::fmt::Write as _;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::json;

use super::client::Client;
use super::procs::{start_mock, BenchGateway, Bins, GatewayArgs};
use super::stats;
use crate::mock_llm::{MockLlm, Turn};

/// Runs per case; the median one is reported.
pub const RUNS: usize = 3;

pub struct FanoutReport {
    events: usize,
    clients: usize,
    /// The median run's rate with one client.
    single: f64,
    /// The median run's per-client rates with `clients` clients, sorted.
    multi: Vec<f64>,
}

/// [`RUNS`] runs of `events` deltas with one client, then with `clients`.
pub async fn measure(bins: &Bins, events: usize, clients: usize) -> anyhow::Result<FanoutReport> {
    let mock = start_mock().await?;
    let gateway = BenchGateway::start(bins, GatewayArgs::mock(&mock, Vec::new())).await?;
    let mut attached = vec![Client::connect(&gateway.url()).await?];
    let mut single = Vec::new();
    for run in 0..RUNS {
        let rates;
        (attached, rates) = run_once(&mock, attached, events, &format!("one-{run}")).await?;
        single.extend(rates);
    }
    for _ in 1..clients {
        attached.push(Client::connect(&gateway.url()).await?);
    }
    let mut multi = Vec::new();
    for run in 0..RUNS {
        let rates;
        (attached, rates) = run_once(&mock, attached, events, &format!("many-{run}")).await?;
        multi.push(rates);
    }
    drop(attached);
    gateway.stop().await?;
    Ok(FanoutReport {
        events,
        clients,
        single: stats::median_by(single, |r| *r).context("no single-client runs")?,
        multi: stats::median_by(multi, |r| r[0]).context("no multi-client runs")?,
    })
}

/// One prompt streaming `events` small deltas, sent by the first client
/// and counted by all; gives the clients back with their rates, sorted.
async fn run_once(
    mock: &MockLlm,
    mut clients: Vec<Client>,
    events: usize,
    id: &str,
) -> anyhow::Result<(Vec<Client>, Vec<f64>)> {
    mock.push(Turn::Slow {
        chunks: (0..events).map(|i| format!("tok{i} ")).collect(),
        delay: Duration::ZERO,
    });
    let first = clients.first_mut().context("no clients")?;
    first
        .send(&json!({"id": id, "type": "prompt", "message": "stream"}))
        .await?;
    let readers: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            tokio::spawn(async move {
                let count = client.count_deltas().await;
                (client, count)
            })
        })
        .collect();
    let mut back = Vec::new();
    let mut rates = Vec::new();
    for (i, reader) in readers.into_iter().enumerate() {
        let (client, count) = reader.await.context("a client task failed")?;
        let count = count.with_context(|| format!("client {i} of run {id}"))?;
        if count.deltas != events {
            bail!(
                "client {i} of run {id} got {} of {events} deltas",
                count.deltas
            );
        }
        rates.push(
            count
                .rate()
                .context("all deltas arrived at the same instant")?,
        );
        back.push(client);
    }
    rates.sort_by(f64::total_cmp);
    Ok((back, rates))
}

impl FanoutReport {
    /// The section as markdown.
    pub fn table(&self) -> String {
        let (n, c) = (self.events, self.clients);
        let mut s =
            format!("## Event fan-out ({n} text_delta events per run, median of {RUNS} runs)\n\n");
        s.push_str(
            "| clients | min per-client rate | median per-client rate | min ÷ 1-client rate |\n\
             |---|---|---|---|\n",
        );
        let one = stats::rate(self.single);
        let _ = writeln!(s, "| 1 | {one} | {one} | 100 % |");
        let min = self.multi.first().copied().unwrap_or(0.0);
        let median = stats::quantile(&self.multi, 0.5).unwrap_or(0.0);
        let _ = writeln!(
            s,
            "| {c} | {} | {} | {:.0} % |",
            stats::rate(min),
            stats::rate(median),
            100.0 * min / self.single
        );
        s.push_str("\nrate = deltas ÷ (last delta − first delta), as each client received them\n");
        s
    }
}
