//! The gateway's resident memory while one client reads a long stream of
//! 1 KiB deltas and another attached client never reads: VmRSS sampled
//! every 50 ms, against the replay ring's configured bound; then what
//! became of the stalled client (disconnected with 4000, or all buffered).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::json;
use tokio::sync::oneshot;

use super::client::{Client, Incoming};
use super::procs::{rss_kib, start_mock, BenchGateway, Bins, GatewayArgs};
use super::stats;
use crate::mock_llm::Turn;

/// Size of each delta.
pub const DELTA_BYTES: usize = 1024;
/// The ring bounds, passed explicitly (they are the defaults).
pub const REPLAY_BYTES: &str = "8MiB";
pub const REPLAY_EVENTS: &str = "10000";
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Pause before the "before" reading and after the run, before "after".
const SETTLE: Duration = Duration::from_millis(500);

pub struct MemoryReport {
    events: usize,
    before_kib: u64,
    /// Highest sample up to the reading client's last delta.
    streaming_peak_kib: u64,
    /// Highest sample of the whole run, end-of-run frames included.
    run_peak_kib: u64,
    after_kib: u64,
    stalled: Stalled,
}

/// What became of the client that never read, once it read at last.
enum Stalled {
    /// Every delta and the `done` had been buffered for it.
    Buffered,
    /// The gateway closed it (4000: it fell out of the replay ring).
    Closed {
        close: Option<(u16, String)>,
        deltas: usize,
    },
}

/// Streams `events` deltas of [`DELTA_BYTES`] past a stalled client.
pub async fn measure(bins: &Bins, events: usize) -> anyhow::Result<MemoryReport> {
    let mock = start_mock().await?;
    let ring = [
        "--replay-bytes",
        REPLAY_BYTES,
        "--replay-events",
        REPLAY_EVENTS,
    ];
    let args = GatewayArgs::mock(&mock, ring.map(String::from).to_vec());
    let gateway = BenchGateway::start(bins, args).await?;
    let mut reader = Client::connect(&gateway.url()).await?;
    let stalled = Client::connect(&gateway.url()).await?;
    reader.ping(0).await?; // the child is up and idle
    tokio::time::sleep(SETTLE).await;
    let before_kib = rss_kib(gateway.pid)?;

    mock.push(Turn::Slow {
        chunks: (0..events).map(delta).collect(),
        delay: Duration::ZERO,
    });
    let (stop, stopped) = oneshot::channel();
    let sampler = tokio::spawn(sample_rss(gateway.pid, stopped));
    reader
        .send(&json!({"id": "big", "type": "prompt", "message": "stream"}))
        .await?;
    let count = reader.count_deltas().await.context("the reading client")?;
    tokio::time::sleep(SETTLE).await;
    let _ = stop.send(());
    let samples = sampler.await.context("the RSS sampler failed")??;
    let after_kib = rss_kib(gateway.pid)?;
    if count.deltas != events {
        bail!("the reading client got {} of {events} deltas", count.deltas);
    }
    let last_delta = count.last().context("no deltas")?;
    let peak_until = |until: Instant| {
        let sampled = samples.iter().filter(|(at, _)| *at <= until);
        sampled.map(|(_, kib)| *kib).fold(before_kib, u64::max)
    };
    let stalled = drain(stalled).await?;
    drop(reader);
    gateway.stop().await?;
    Ok(MemoryReport {
        events,
        before_kib,
        streaming_peak_kib: peak_until(last_delta),
        run_peak_kib: peak_until(Instant::now()).max(after_kib),
        after_kib,
        stalled,
    })
}

/// Delta `i`: exactly [`DELTA_BYTES`] bytes.
fn delta(i: usize) -> String {
    let mut delta = format!("{i:07} ");
    let pad = DELTA_BYTES.saturating_sub(delta.len());
    delta.extend(std::iter::repeat_n('x', pad));
    delta
}

/// VmRSS of `pid` with its time, every [`SAMPLE_EVERY`] until `stop`.
async fn sample_rss(
    pid: u32,
    mut stop: oneshot::Receiver<()>,
) -> anyhow::Result<Vec<(Instant, u64)>> {
    let mut tick = tokio::time::interval(SAMPLE_EVERY);
    let mut samples = Vec::new();
    loop {
        tokio::select! {
            _ = &mut stop => return Ok(samples),
            _ = tick.tick() => samples.push((Instant::now(), rss_kib(pid)?)),
        }
    }
}

/// Reads the stalled client until its `done` or its close.
async fn drain(mut client: Client) -> anyhow::Result<Stalled> {
    let mut deltas = 0;
    loop {
        match client.next().await.context("draining the stalled client")? {
            Incoming::Frame(frame) if frame["type"] == "text_delta" => deltas += 1,
            Incoming::Frame(frame) if frame["type"] == "done" => return Ok(Stalled::Buffered),
            Incoming::Frame(_) => {}
            Incoming::Closed(close) => return Ok(Stalled::Closed { close, deltas }),
        }
    }
}

impl MemoryReport {
    /// The section as markdown.
    pub fn table(&self) -> String {
        let n = self.events;
        let streamed = stats::mib((n * DELTA_BYTES) as u64 / 1024);
        let mut s = format!(
            "## Gateway memory with a stalled client ({n} deltas × {DELTA_BYTES} B = {streamed})\n\n"
        );
        let _ = writeln!(
            s,
            "One client reads the stream, another attached client never reads; gateway VmRSS \
             sampled every {} ms. Ring: `--replay-bytes {REPLAY_BYTES} --replay-events \
             {REPLAY_EVENTS}`.\n",
            SAMPLE_EVERY.as_millis()
        );
        s.push_str(
            "| RSS before | peak while deltas stream | peak, whole run | after |\n\
             |---|---|---|---|\n",
        );
        let grown = |kib: u64| stats::mib(kib.saturating_sub(self.before_kib));
        let _ = writeln!(
            s,
            "| {} | {} (+{}) | {} (+{}) | {} |",
            stats::mib(self.before_kib),
            stats::mib(self.streaming_peak_kib),
            grown(self.streaming_peak_kib),
            stats::mib(self.run_peak_kib),
            grown(self.run_peak_kib),
            stats::mib(self.after_kib),
        );
        s.push_str(
            "\nThe whole run includes the end-of-run frames: `assistant_message` repeats the \
             whole reply in one line.\n",
        );
        let _ = writeln!(s, "\nstalled client: {}", self.stalled.describe(n));
        s
    }
}

impl Stalled {
    fn describe(&self, events: usize) -> String {
        match self {
            Stalled::Buffered => {
                format!("not disconnected; all {events} deltas had been buffered for it")
            }
            Stalled::Closed {
                close: Some((code, reason)),
                deltas,
            } => format!(
                "disconnected with close code {code} after reading {deltas} of {events} deltas \
                 ({reason:?})"
            ),
            Stalled::Closed {
                close: None,
                deltas,
            } => format!("socket dropped without a close frame after {deltas} of {events} deltas"),
        }
    }
}
