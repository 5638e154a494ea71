//! Model calls through the model-key broker versus straight to the
//! provider: two gateways on one mock LLM, identical but for
//! `--model-broker on`, each with one client of one project. Prompts
//! alternate between them (so drift in the machine's load affects both
//! alike); each streams one long answer of many small deltas. Time to
//! first token is from the prompt sent to the first `text_delta` the
//! client reads (the WebSocket and agent hops are the same on both sides,
//! so the difference is the broker's); throughput is the answer's bytes
//! over the time from its first delta to its last.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::client::Client;
use super::procs::{start_mock, BenchGateway, Bins, GatewayArgs};
use super::stats::{self, Latency};
use crate::mock_llm::{MockLlm, Turn};

/// What one prompt measured.
#[derive(Debug, Clone, Copy)]
struct Sample {
    ttft: Duration,
    /// Answer bytes per second between the first and the last delta.
    throughput: f64,
}

/// Both paths' samples.
pub struct BrokerReport {
    prompts: usize,
    deltas: usize,
    delta_bytes: usize,
    direct: Vec<Sample>,
    broker: Vec<Sample>,
}

/// Measures `prompts` prompts per path, each answered with `deltas`
/// deltas of `delta_bytes` bytes, after one unmeasured prompt per path.
pub async fn measure(
    bins: &Bins,
    prompts: usize,
    deltas: usize,
    delta_bytes: usize,
) -> anyhow::Result<BrokerReport> {
    let mock = start_mock().await?;
    // Tools off the network: the model path is what differs.
    let tools = ["--tool-network", "off"].map(String::from).to_vec();
    let direct = BenchGateway::start(bins, GatewayArgs::mock(&mock, tools.clone())).await?;
    let mut serve = tools;
    serve.extend(["--model-broker", "on"].map(String::from));
    let brokered = GatewayArgs {
        serve,
        child: ["--provider", "anthropic"].map(String::from).to_vec(),
        env: vec![
            ("ANTHROPIC_BASE_URL".into(), mock.anthropic_base_url()),
            ("ANTHROPIC_API_KEY".into(), "bench-key".into()),
        ],
        nofile: None,
    };
    let broker = BenchGateway::start(bins, brokered).await?;
    let mut clients = [
        Client::connect(&direct.url()).await?,
        Client::connect(&broker.url()).await?,
    ];
    let answer = Answer {
        deltas,
        delta_bytes,
    };
    for (i, client) in clients.iter_mut().enumerate() {
        answer
            .prompt(&mock, client, &format!("warm-up-{i}"))
            .await?;
    }
    let mut samples = [Vec::new(), Vec::new()];
    for round in 0..prompts {
        for (i, client) in clients.iter_mut().enumerate() {
            let sample = answer
                .prompt(&mock, client, &format!("p{round}-{i}"))
                .await?;
            samples[i].push(sample);
        }
    }
    drop(clients);
    direct.stop().await?;
    broker.stop().await?;
    let [direct, broker] = samples;
    Ok(BrokerReport {
        prompts,
        deltas,
        delta_bytes,
        direct,
        broker,
    })
}

/// The answer every prompt gets.
struct Answer {
    deltas: usize,
    delta_bytes: usize,
}

impl Answer {
    /// One prompt on `client`, answered by the mock with the long answer.
    async fn prompt(
        &self,
        mock: &MockLlm,
        client: &mut Client,
        id: &str,
    ) -> anyhow::Result<Sample> {
        let chunk = "x".repeat(self.delta_bytes.saturating_sub(1)) + " ";
        mock.push(Turn::Slow {
            chunks: vec![chunk; self.deltas],
            delay: Duration::ZERO,
        });
        let sent = Instant::now();
        client.prompt(id, "stream").await?;
        let count = client
            .count_deltas()
            .await
            .with_context(|| format!("prompt {id}"))?;
        let (Some(first), Some(last)) = (count.first(), count.last()) else {
            bail!("prompt {id}: no delta arrived");
        };
        let span = last.saturating_duration_since(first).as_secs_f64();
        let bytes = (self.deltas * self.delta_bytes) as f64;
        Ok(Sample {
            ttft: first.saturating_duration_since(sent),
            throughput: if span > 0.0 {
                bytes / span
            } else {
                f64::INFINITY
            },
        })
    }
}

impl BrokerReport {
    /// The table as markdown.
    pub fn table(&self) -> anyhow::Result<String> {
        let (n, d, b) = (self.prompts, self.deltas, self.delta_bytes);
        let mut s = format!(
            "## Model calls: straight to the provider vs through the model broker \
             ({n} prompts each, {d} deltas of {b} bytes per answer)\n\n"
        );
        s.push_str(
            "| path | first token, median | first token, p99 | throughput, median \
             | throughput, slowest 1% |\n|---|---|---|---|---|\n",
        );
        let row = |samples: &[Sample]| -> anyhow::Result<(Latency, f64, f64)> {
            let ttft =
                Latency::of(samples.iter().map(|s| s.ttft).collect()).context("no samples")?;
            let mut rates: Vec<f64> = samples.iter().map(|s| s.throughput).collect();
            rates.sort_by(f64::total_cmp);
            let median = stats::quantile(&rates, 0.5).context("no samples")?;
            let slow = stats::quantile(&rates, 0.01).context("no samples")?;
            Ok((ttft, median, slow))
        };
        let direct = row(&self.direct)?;
        let broker = row(&self.broker)?;
        for (name, (ttft, median, slow)) in [("direct", direct), ("broker", broker)] {
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} |",
                stats::micros(ttft.median),
                stats::micros(ttft.p99),
                mib_per_second(median),
                mib_per_second(slow),
            );
        }
        let _ = writeln!(
            s,
            "| broker − direct | {} | {} | {:.2}× | {:.2}× |",
            stats::micros_diff(broker.0.median, direct.0.median),
            stats::micros_diff(broker.0.p99, direct.0.p99),
            broker.1 / direct.1,
            broker.2 / direct.2,
        );
        Ok(s)
    }
}

fn mib_per_second(bytes_per_second: f64) -> String {
    format!("{:.2} MiB/s", bytes_per_second / (1024.0 * 1024.0))
}
