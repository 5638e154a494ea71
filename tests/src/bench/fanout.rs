//! Event fan-out throughput: a mock-LLM child streams small `text_delta`s
//! as fast as it can to 1 client, then to N clients of the same project;
//! each client's rate is its deltas over the time from the prompt being
//! sent to the last delta it received (so a client that lags and catches
//! up in a burst is not flattered). Every client must receive every delta.
//! The gateway and its clients speak one dialect per measurement.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::client::Client;
use super::procs::{start_mock, BenchGateway, Bins, GatewayArgs};
use super::stats;
use super::wire::Wire;
use crate::mock_llm::{MockLlm, Turn};

/// Runs per case; the median one is reported.
pub const RUNS: usize = 3;

pub struct FanoutReport {
    wire: Wire,
    events: usize,
    clients: usize,
    /// The median run's rate with one client.
    single: f64,
    /// The median run's per-client rates with `clients` clients, sorted.
    multi: Vec<f64>,
    /// Bytes one client received in a run (the first client, last run).
    bytes: usize,
}

/// One unmeasured warm-up run, then [`RUNS`] rounds, each a run with one
/// client followed by a run with `clients` (interleaved, so drift in the
/// machine's load or the growing transcript affects both cases alike).
/// The extra clients attach before their run and leave after it.
pub async fn measure(
    bins: &Bins,
    wire: Wire,
    events: usize,
    clients: usize,
) -> anyhow::Result<FanoutReport> {
    let mock = start_mock().await?;
    let serve = vec!["--dialect".to_string(), wire.name().to_string()];
    let gateway = BenchGateway::start(bins, GatewayArgs::mock(&mock, serve)).await?;
    let mut attached = vec![Client::connect_in(&gateway.url(), wire).await?];
    (attached, _, _) = run_once(&mock, attached, events, "warm-up").await?;
    let mut single = Vec::new();
    let mut multi = Vec::new();
    let mut bytes = 0;
    for run in 0..RUNS {
        let rates;
        (attached, rates, bytes) = run_once(&mock, attached, events, &format!("one-{run}")).await?;
        single.extend(rates);
        for _ in 1..clients {
            attached.push(Client::connect_in(&gateway.url(), wire).await?);
        }
        let rates;
        (attached, rates, _) = run_once(&mock, attached, events, &format!("many-{run}")).await?;
        multi.push(rates);
        attached.truncate(1);
    }
    drop(attached);
    gateway.stop().await?;
    Ok(FanoutReport {
        wire,
        events,
        clients,
        single: stats::median_by(single, |r| *r).context("no single-client runs")?,
        multi: stats::median_by(multi, |r| r[0]).context("no multi-client runs")?,
        bytes,
    })
}

/// One prompt streaming `events` small deltas, sent by the first client
/// and counted by all; gives the clients back with their rates, sorted,
/// and the bytes the first client received.
async fn run_once(
    mock: &MockLlm,
    mut clients: Vec<Client>,
    events: usize,
    id: &str,
) -> anyhow::Result<(Vec<Client>, Vec<f64>, usize)> {
    mock.push(Turn::Slow {
        chunks: (0..events).map(|i| format!("tok{i} ")).collect(),
        delay: Duration::ZERO,
    });
    let first = clients.first_mut().context("no clients")?;
    let sent = Instant::now();
    first.prompt(id, "stream").await?;
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
    let mut bytes = 0;
    for (i, reader) in readers.into_iter().enumerate() {
        let (client, count) = reader.await.context("a client task failed")?;
        let count = count.with_context(|| format!("client {i} of run {id}"))?;
        if count.deltas != events {
            bail!(
                "client {i} of run {id} got {} of {events} deltas",
                count.deltas
            );
        }
        let last = count.last().context("no delta arrived")?;
        let span = last.saturating_duration_since(sent).as_secs_f64();
        if span <= 0.0 {
            bail!("client {i} of run {id}: no time passed");
        }
        rates.push(count.deltas as f64 / span);
        if i == 0 {
            bytes = count.bytes;
        }
        back.push(client);
    }
    rates.sort_by(f64::total_cmp);
    Ok((back, rates, bytes))
}

impl FanoutReport {
    /// The section as markdown.
    pub fn table(&self) -> String {
        let (n, c, w) = (self.events, self.clients, self.wire.name());
        let mut s =
            format!("## Event fan-out, {w} ({n} text deltas per run, median of {RUNS} runs)\n\n");
        s.push_str(
            "| clients | min per-client rate | median per-client rate | min ÷ 1-client rate \
             | gateway output |\n|---|---|---|---|---|\n",
        );
        // Bytes per second to all clients, at the slowest client's rate.
        let output = |clients: usize, rate: f64| {
            let per_second = clients as f64 * self.bytes as f64 * rate / n as f64;
            format!("{:.1} MiB/s", per_second / f64::from(1 << 20))
        };
        let one = stats::rate(self.single);
        let _ = writeln!(
            s,
            "| 1 | {one} | {one} | 100 % | {} |",
            output(1, self.single)
        );
        let min = self.multi.first().copied().unwrap_or(0.0);
        let median = stats::quantile(&self.multi, 0.5).unwrap_or(0.0);
        let _ = writeln!(
            s,
            "| {c} | {} | {} | {:.0} % | {} |",
            stats::rate(min),
            stats::rate(median),
            100.0 * min / self.single,
            output(c, min)
        );
        let per_client = self.bytes as f64 / f64::from(1 << 20);
        let _ = write!(
            s,
            "\nrate = deltas ÷ (time from the prompt being sent to this client's last delta); \
             each client receives {per_client:.1} MiB per run\n"
        );
        s
    }
}
