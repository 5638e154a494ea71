//! A WebSocket client of one gateway project: hello, pings, and counting a
//! run's `text_delta` events, with every read bounded by [`READ_TIMEOUT`].

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use super::procs::check_pong;
use super::wire::{Seen, Wire};
use super::READ_TIMEOUT;

/// What one read saw.
#[derive(Debug)]
pub enum Incoming {
    Frame(Value),
    /// The socket ended; the close frame's code and reason when there was one.
    Closed(Option<(u16, String)>),
}

/// A connected, authenticated client.
pub struct Client {
    stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
    wire: Wire,
}

/// The `text_delta` events one client saw during a run.
#[derive(Debug, Clone, Copy)]
pub struct DeltaCount {
    pub deltas: usize,
    /// Bytes of every frame received during the run.
    pub bytes: usize,
    first: Option<Instant>,
    last: Option<Instant>,
}

impl DeltaCount {
    /// Deltas per second between the first and the last one received.
    pub fn rate(&self) -> Option<f64> {
        let span = self.last?.checked_duration_since(self.first?)?;
        (span > Duration::ZERO).then(|| self.deltas as f64 / span.as_secs_f64())
    }

    /// When the last delta arrived.
    pub fn last(&self) -> Option<Instant> {
        self.last
    }

    /// When the first delta arrived.
    pub fn first(&self) -> Option<Instant> {
        self.first
    }
}

impl Client {
    /// Connects to a zut gateway's `url` and says hello with the benchmark
    /// token.
    pub async fn connect(url: &str) -> anyhow::Result<Client> {
        Client::connect_in(url, Wire::Zut).await
    }

    /// Connects to `url` and says `wire`'s hello with the benchmark token.
    pub async fn connect_in(url: &str, wire: Wire) -> anyhow::Result<Client> {
        let (stream, _) = tokio::time::timeout(
            READ_TIMEOUT,
            tokio_tungstenite::connect_async_with_config(url, None, true),
        )
        .await
        .with_context(|| format!("connecting to {url} timed out"))?
        .with_context(|| format!("connect to {url}"))?;
        let mut client = Client { stream, wire };
        client.send(&wire.hello()).await?;
        loop {
            let reply = client
                .frame()
                .await
                .context("waiting for the hello's answer")?;
            match wire.hello_answered(&reply) {
                Ok(true) => return Ok(client),
                Ok(false) => {}
                Err(refused) => bail!("{refused}"),
            }
        }
    }

    /// Sends a prompt with id `id` in the client's dialect.
    pub async fn prompt(&mut self, id: &str, text: &str) -> anyhow::Result<()> {
        let frame = self.wire.prompt(id, text);
        self.send(&frame).await
    }

    pub async fn send(&mut self, frame: &Value) -> anyhow::Result<()> {
        self.stream
            .send(Message::text(frame.to_string()))
            .await
            .context("send a frame")
    }

    /// The next frame or the close, waiting at most [`READ_TIMEOUT`].
    pub async fn next(&mut self) -> anyhow::Result<Incoming> {
        loop {
            let next = tokio::time::timeout(READ_TIMEOUT, self.stream.next())
                .await
                .with_context(|| format!("no frame within {} s", READ_TIMEOUT.as_secs()))?;
            return Ok(match next {
                Some(Ok(Message::Text(text))) => Incoming::Frame(
                    serde_json::from_str(text.as_str())
                        .with_context(|| format!("frame is not JSON: {text}"))?,
                ),
                Some(Ok(Message::Close(frame))) => {
                    Incoming::Closed(frame.map(|f| (u16::from(f.code), f.reason.to_string())))
                }
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => Incoming::Closed(None),
            });
        }
    }

    /// The next text frame as sent; `None` when the socket closed.
    async fn next_text(&mut self) -> anyhow::Result<Option<String>> {
        loop {
            let next = tokio::time::timeout(READ_TIMEOUT, self.stream.next())
                .await
                .with_context(|| format!("no frame within {} s", READ_TIMEOUT.as_secs()))?;
            return Ok(match next {
                Some(Ok(Message::Text(text))) => Some(text.as_str().to_string()),
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => None,
                Some(Ok(_)) => continue,
            });
        }
    }

    /// The next frame; a close is an error.
    pub async fn frame(&mut self) -> anyhow::Result<Value> {
        match self.next().await? {
            Incoming::Frame(frame) => Ok(frame),
            Incoming::Closed(close) => bail!("the gateway closed the socket: {close:?}"),
        }
    }

    /// One `hello` (answered by the gateway itself, no child involved),
    /// timed from send to its response.
    pub async fn hello(&mut self, id: u64) -> anyhow::Result<Duration> {
        let start = Instant::now();
        self.send(&json!({"id": id, "type": "hello"})).await?;
        let frame = self.frame().await?;
        let elapsed = start.elapsed();
        if frame["type"] != "response" || frame["id"] != id || frame["success"] != true {
            bail!("unexpected hello reply: {frame}");
        }
        Ok(elapsed)
    }

    /// One `ping` with id `id`, timed from send to its response.
    pub async fn ping(&mut self, id: u64) -> anyhow::Result<Duration> {
        let start = Instant::now();
        self.send(&json!({"id": id, "type": "ping"})).await?;
        loop {
            let frame = self.frame().await?;
            if frame["type"] == "response" {
                let elapsed = start.elapsed();
                check_pong(&frame, id)?;
                return Ok(elapsed);
            }
        }
    }

    /// Reads until the run's end (zut `done`, letscode and Zi `agent_end`),
    /// counting its text deltas; a close or a failed request first is an
    /// error.
    pub async fn count_deltas(&mut self) -> anyhow::Result<DeltaCount> {
        let mut count = DeltaCount {
            deltas: 0,
            bytes: 0,
            first: None,
            last: None,
        };
        loop {
            let text = match self
                .next_text()
                .await
                .with_context(|| format!("after {} deltas", count.deltas))?
            {
                Some(text) => text,
                None => bail!(
                    "the gateway closed the socket after {} deltas",
                    count.deltas
                ),
            };
            count.bytes += text.len();
            match self.wire.seen(&text) {
                Seen::Delta => {
                    let now = Instant::now();
                    count.first.get_or_insert(now);
                    count.last = Some(now);
                    count.deltas += 1;
                }
                Seen::End => return Ok(count),
                Seen::Failed => bail!("request failed: {text}"),
                Seen::Other => {}
            }
        }
    }
}
