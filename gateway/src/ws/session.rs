//! An attached client's two halves: a reader turning its messages into
//! hub requests and a writer sending what the client's feed yields. Both
//! are written against a transport seam ([`Inlet`], [`Outlet`]); the
//! WebSocket's halves over tungstenite implement it here, and the
//! Streamable HTTP transport of the ACP endpoint implements it in
//! [`crate::acp_remote`]. A frame over `--max-frame-bytes` ends a
//! WebSocket session with 1009 (tungstenite refuses it at its header,
//! before reading it).
//!
//! The writer sends a message over [`FRAGMENT_BYTES`] as fragments of that
//! size (tungstenite copies a whole frame into its write buffer and keeps
//! the capacity afterwards), so a connection's write buffer never holds
//! more than `--ws-buffer-bytes` plus one fragment; a frame's bytes count
//! against the client's outbox until its last fragment is in that buffer.
//! A client closed for its outbox bytes is stopped at once, even in the
//! middle of a write its socket does not take; every close frame gets
//! [`CLOSE_GRACE`] to go out.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use serde_json::{Map, Value};
use tokio_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_tungstenite::WebSocketStream;

use super::close::CloseCode;
use super::handshake::Io;
use crate::hub::budget::Outgoing;
use crate::hub::{ClientId, Delivery, HubHandle};
use crate::metrics::{Direction, Metrics};
use crate::state::AppState;

pub type Socket = WebSocketStream<Io>;
pub type Sink = SplitSink<Socket, Message>;
pub type Stream = SplitStream<Socket>;

/// The client's side went away (its socket or stream failed or closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gone;

/// Where an attached client's frames go, whatever carries them.
pub trait Outlet: Send {
    /// Queues one frame; its charge is released once the transport took
    /// its bytes.
    fn send(&mut self, frame: Outgoing) -> impl Future<Output = Result<(), Gone>> + Send;
    /// Pushes out what was queued.
    fn flush(&mut self) -> impl Future<Output = Result<(), Gone>> + Send;
    /// Ends the connection, saying why.
    fn close(&mut self, code: CloseCode, reason: &str) -> impl Future<Output = ()> + Send;
}

/// Where an attached client's messages come from.
pub trait Inlet: Send {
    /// The client's next message.
    fn next(&mut self, metrics: &Metrics) -> impl Future<Output = Next> + Send;
}

/// The WebSocket's sending half.
pub struct WsOutlet<'a>(pub &'a mut Sink);

/// The WebSocket's receiving half.
pub struct WsInlet<'a>(pub &'a mut Stream);

impl Outlet for WsOutlet<'_> {
    async fn send(&mut self, frame: Outgoing) -> Result<(), Gone> {
        let (bytes, charge) = frame.into_parts();
        send_message(self.0, bytes).await.map_err(|_| Gone)?;
        drop(charge);
        Ok(())
    }

    async fn flush(&mut self) -> Result<(), Gone> {
        self.0.flush().await.map_err(|_| Gone)
    }

    async fn close(&mut self, code: CloseCode, reason: &str) {
        close(self.0, code, reason).await;
    }
}

impl Inlet for WsInlet<'_> {
    async fn next(&mut self, metrics: &Metrics) -> Next {
        next_object(self.0, metrics).await
    }
}

/// Messages larger than this go out as fragments of this size.
pub const FRAGMENT_BYTES: usize = 64 << 10;

/// How long the writer waits for its close frame to go out (a client that
/// does not read never takes it) before it drops the connection.
pub const CLOSE_GRACE: Duration = Duration::from_secs(10);

/// What the client sent next.
pub enum Next {
    Frame(Map<String, Value>),
    /// Not a JSON object (or binary): the error message for the client.
    Malformed(String),
    /// Larger than `--max-frame-bytes`.
    TooLarge,
    /// The socket closed or failed.
    End,
}

/// How the reader stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadEnd {
    Closed,
    TooLarge,
}

/// The next text frame as a JSON object.
pub async fn next_object(stream: &mut Stream, metrics: &Metrics) -> Next {
    loop {
        let Some(message) = stream.next().await else {
            return Next::End;
        };
        match message {
            Ok(Message::Text(text)) => {
                metrics.frame(Direction::ClientToGateway, text.len());
                return match parse(text.as_str()) {
                    Ok(frame) => Next::Frame(frame),
                    Err(error) => {
                        metrics.invalid_frame("client", "malformed");
                        Next::Malformed(error)
                    }
                };
            }
            Ok(Message::Binary(_)) => {
                metrics.invalid_frame("client", "binary");
                return Next::Malformed(
                    "binary frames are not supported; send JSON text frames".into(),
                );
            }
            Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => continue,
            Ok(Message::Close(_)) => return Next::End,
            Err(WsError::Capacity(CapacityError::MessageTooLong { .. })) => {
                metrics.invalid_frame("client", "too_large");
                return Next::TooLarge;
            }
            Err(_) => return Next::End,
        }
    }
}

pub fn parse(text: &str) -> Result<Map<String, Value>, String> {
    let text = text.strip_suffix('\n').unwrap_or(text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    corral_protocol::ndjson::parse_object(text.as_bytes()).map_err(|e| e.to_string())
}

/// Client frames → hub requests; malformed ones get an error reply in order.
pub async fn read_loop<I: Inlet>(
    inlet: &mut I,
    hub: &HubHandle,
    client: ClientId,
    state: Arc<AppState>,
) -> ReadEnd {
    loop {
        let next = tokio::select! {
            next = inlet.next(&state.metrics) => next,
            () = state.shutdown.started() => {
                // The hub closes this client once its child has stopped;
                // keep reading so the close handshake completes.
                inlet.next(&state.metrics).await
            }
        };
        match next {
            Next::End => return ReadEnd::Closed,
            Next::TooLarge => return ReadEnd::TooLarge,
            Next::Frame(frame) => hub.request(client, frame).await,
            Next::Malformed(error) => {
                hub.reply(client, state.dialect.rules().malformed(&error))
                    .await
            }
        }
    }
}

/// Feed → socket, until the feed says close (returns the close code it
/// sent) or the socket fails (returns `None`).
pub async fn write_loop<O: Outlet>(
    outlet: &mut O,
    mut feed: crate::hub::ClientFeed,
    metrics: Arc<Metrics>,
) -> Option<CloseCode> {
    let budget = feed.budget();
    loop {
        match feed.next().await {
            Delivery::Frames(frames) => {
                let written = async {
                    for frame in frames {
                        metrics.frame(Direction::GatewayToClient, frame.len());
                        outlet.send(frame).await?;
                    }
                    outlet.flush().await
                };
                tokio::select! {
                    written = written => if written.is_err() {
                        return None;
                    },
                    // Over its outbox bytes: what it was sent stops here
                    // and the feed says close.
                    () = budget.closed() => {}
                }
            }
            Delivery::Close { code, reason } => {
                // What was queued for it is released before the close
                // waits for the socket.
                drop(feed);
                let _ = tokio::time::timeout(CLOSE_GRACE, outlet.close(code, &reason)).await;
                return Some(code);
            }
        }
    }
}

/// Queues one text message (as fragments when it is large).
async fn send_message(sink: &mut Sink, bytes: bytes::Bytes) -> Result<(), WsError> {
    if bytes.len() <= FRAGMENT_BYTES {
        return sink.feed(text(bytes)).await;
    }
    let mut start = 0;
    while start < bytes.len() {
        let end = (start + FRAGMENT_BYTES).min(bytes.len());
        let opcode = if start == 0 {
            OpCode::Data(Data::Text)
        } else {
            OpCode::Data(Data::Continue)
        };
        let fragment = Frame::message(bytes.slice(start..end), opcode, end == bytes.len());
        sink.feed(Message::Frame(fragment)).await?;
        start = end;
    }
    Ok(())
}

pub fn text(bytes: bytes::Bytes) -> Message {
    // Frames are built from JSON text, so they are UTF-8.
    match Utf8Bytes::try_from(bytes) {
        Ok(text) => Message::Text(text),
        Err(_) => Message::Text(Utf8Bytes::from_static("{}")),
    }
}

pub async fn close(sink: &mut Sink, code: CloseCode, reason: &str) {
    // Close reasons are limited to 123 bytes.
    let mut reason = reason.to_string();
    while reason.len() > super::frame::MAX_CLOSE_REASON {
        reason.pop();
    }
    let frame = CloseFrame {
        code: code.code().into(),
        reason: Utf8Bytes::from(reason),
    };
    let _ = sink.send(Message::Close(Some(frame))).await;
    let _ = sink.close().await;
}
