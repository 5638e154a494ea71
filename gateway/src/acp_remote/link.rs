//! The Streamable HTTP transport as the session sees it
//! ([`crate::ws::Outlet`], [`crate::ws::Inlet`]): messages come from the
//! `POST`s through the connection's inbox, frames go to its outbox, which
//! the one connection-scoped `GET` stream sends as Server-Sent Events
//! (one JSON-RPC message per `data:` line, in pieces of [`PIECE_BYTES`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::connection::Connection;
use crate::hub::budget::{Charge, Outgoing};
use crate::metrics::Metrics;
use crate::ws::close::CloseCode;
use crate::ws::{Gone, Inlet, Next, Outlet};

/// How often an idle stream sends a comment, so that proxies and the
/// client see it alive (and a dead peer is noticed).
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// The session's way out: the connection's outbox.
pub struct HttpOutlet {
    pub tx: Option<mpsc::Sender<Outgoing>>,
    pub connection: Arc<Connection>,
}

impl Outlet for HttpOutlet {
    async fn send(&mut self, frame: Outgoing) -> Result<(), Gone> {
        let tx = self.tx.as_ref().ok_or(Gone)?;
        tokio::select! {
            sent = tx.send(frame) => sent.map_err(|_| Gone),
            () = self.connection.ended.cancelled() => Err(Gone),
        }
    }

    async fn flush(&mut self) -> Result<(), Gone> {
        Ok(())
    }

    async fn close(&mut self, code: CloseCode, reason: &str) {
        tracing::debug!(connection = %self.connection.id, code = code.code(), "closing: {reason}");
        if let Ok(mut closed) = self.connection.closed.lock() {
            closed.get_or_insert((code, reason.to_string()));
        }
        // The stream ends once it has sent what is queued.
        self.tx = None;
    }
}

/// The session's way in: what the connection's `POST`s carry, until the
/// connection ends (`DELETE`, or idle for its grace).
pub struct HttpInlet {
    pub rx: mpsc::Receiver<Map<String, Value>>,
    pub connection: Arc<Connection>,
    pub metrics: Arc<Metrics>,
}

impl Inlet for HttpInlet {
    async fn next(&mut self, _metrics: &Metrics) -> Next {
        tokio::select! {
            frame = self.rx.recv() => match frame {
                Some(frame) => Next::Frame(frame),
                None => Next::End,
            },
            () = self.connection.ended.cancelled() => Next::End,
            () = self.connection.idle() => {
                tracing::info!(connection = %self.connection.id, project = %self.connection.project,
                    "closing an idle Streamable HTTP connection");
                self.metrics.acp_http_idle_closes.inc();
                self.connection.ended.cancel();
                Next::End
            }
        }
    }
}

/// Bytes of one piece of the connection stream's body: a larger event
/// goes out in pieces of about this size. The HTTP connection takes a
/// piece only when it has room (hyper's write buffer on HTTP/1.1, the
/// stream's send buffer on HTTP/2), and the frame stays counted against
/// the client's `--client-buffer-bytes` until its last piece is taken, as
/// a WebSocket's fragments are ([`crate::ws`]): a client that does not
/// read its stream holds at most one piece outside the count.
pub const PIECE_BYTES: usize = 64 << 10;

/// The text of a frame's SSE event. JSON text has no line breaks outside
/// its strings and none raw inside them, so a `\r` or `\n` can only be
/// whitespace between tokens: replaced by a space, the message is the
/// same. Frames are UTF-8 (they are made from JSON); anything else is
/// sent with replacement characters, as SSE is UTF-8.
fn event_text(bytes: Bytes) -> Bytes {
    let clean =
        std::str::from_utf8(&bytes).is_ok() && !bytes.iter().any(|b| matches!(b, b'\r' | b'\n'));
    if clean {
        return bytes;
    }
    Bytes::from(String::from_utf8_lossy(&bytes).replace(['\r', '\n'], " "))
}

/// The event being sent: its text, how much of it went, and the charge
/// that counts its frame until the last piece is out.
struct Sending {
    text: Bytes,
    sent: usize,
    _charge: Option<Charge>,
}

impl Sending {
    /// The next piece of `data: TEXT\n\n`, and whether it is the last.
    fn piece(&mut self) -> (Bytes, bool) {
        let end = (self.sent + PIECE_BYTES).min(self.text.len());
        let first = self.sent == 0;
        let last = end == self.text.len();
        let mut piece = BytesMut::with_capacity(end - self.sent + 8);
        if first {
            piece.extend_from_slice(b"data: ");
        }
        piece.extend_from_slice(&self.text[self.sent..end]);
        if last {
            piece.extend_from_slice(b"\n\n");
        }
        self.sent = end;
        (piece.freeze(), last)
    }
}

/// The connection's stream as it is being sent.
struct ConnectionStream {
    outbox: tokio::sync::OwnedMutexGuard<super::connection::Outbox>,
    _open: super::connection::StreamGuard,
    sending: Option<Sending>,
}

impl ConnectionStream {
    /// The next piece of the body; `None` once the session ended and
    /// everything was sent.
    async fn next_piece(&mut self) -> Option<Bytes> {
        if self.sending.is_none() {
            let frame = match self.outbox.held.pop_front() {
                Some(frame) => frame,
                None => tokio::select! {
                    frame = self.outbox.rx.recv() => frame?,
                    () = tokio::time::sleep(KEEP_ALIVE) => {
                        return Some(Bytes::from_static(b":\n\n"));
                    }
                },
            };
            let (bytes, charge) = frame.into_parts();
            self.sending = Some(Sending {
                text: event_text(bytes),
                sent: 0,
                _charge: charge,
            });
        }
        let sending = self.sending.as_mut()?;
        let (piece, last) = sending.piece();
        if last {
            // The last piece is handed over: the frame no longer waits.
            self.sending = None;
        }
        Some(piece)
    }
}

/// The connection's stream: what was held, then the session's frames,
/// one SSE event each (sent in pieces of [`PIECE_BYTES`]), with a comment
/// every [`KEEP_ALIVE`] of silence, until the session ends. (Frames were
/// counted in the metrics as the session handed them over.)
pub fn connection_stream(
    connection: Arc<Connection>,
    outbox: tokio::sync::OwnedMutexGuard<super::connection::Outbox>,
) -> Response {
    let stream = ConnectionStream {
        outbox,
        _open: connection.stream_opened(),
        sending: None,
    };
    let body = futures_util::stream::unfold(stream, |mut stream| async move {
        let piece = stream.next_piece().await?;
        Some((Ok::<_, Infallible>(piece), stream))
    });
    (
        [
            (header::CONTENT_TYPE, "text/event-stream"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Body::from_stream(body),
    )
        .into_response()
}

/// A session-scoped stream: the transport lets a client open one per
/// session, but this gateway sends every message on the connection's
/// stream (one order for everything), so it only keeps alive until the
/// connection ends. `None` when the connection holds
/// [`MAX_SESSION_STREAMS`](super::connection::MAX_SESSION_STREAMS)
/// already (counted and checked in one step).
pub fn session_stream(
    connection: Arc<Connection>,
) -> Option<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    connection
        .session_streams
        .fetch_update(
            std::sync::atomic::Ordering::AcqRel,
            std::sync::atomic::Ordering::Acquire,
            |open| (open < super::connection::MAX_SESSION_STREAMS).then_some(open + 1),
        )
        .ok()?;
    let held = SessionStreamHold {
        _open: connection.stream_opened(),
        connection: connection.clone(),
    };
    let stream = futures_util::stream::unfold(held, |held| async move {
        held.connection.ended.cancelled().await;
        drop(held);
        None::<(Result<Event, Infallible>, SessionStreamHold)>
    });
    Some(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE).text("")))
}

/// A session-scoped stream's place, given back when it closes.
struct SessionStreamHold {
    _open: super::connection::StreamGuard,
    connection: Arc<Connection>,
}

impl Drop for SessionStreamHold {
    fn drop(&mut self) {
        self.connection
            .session_streams
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::budget::Budgets;
    use futures_util::StreamExt;

    /// A frame as large as `--max-frame-bytes` allows must not be handed
    /// to the HTTP connection whole and uncounted: a client that never
    /// reads its stream would have the gateway hold it outside
    /// `--client-buffer-bytes` (one per stream, 64 streams per HTTP/2
    /// connection). It goes out in small pieces, still counted until its
    /// last piece is out, as a WebSocket's fragments are.
    #[tokio::test]
    async fn a_large_frame_goes_out_in_pieces_counted_until_the_last() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let budgets = Budgets::new(64 << 20, 1 << 30, metrics.clone());
        let budget = budgets.client();
        let (connection, _inbox, outbox_tx) =
            Connection::new("p", "k".into(), crate::auth::Role::Client).unwrap();
        let frame = format!("{{\"x\":\"{}\"}}", "a".repeat(1 << 20));
        let charge = budget.charge(frame.len()).unwrap();
        let sent = Outgoing::new(bytes::Bytes::from(frame.clone()), charge);
        outbox_tx.send(sent).await.unwrap();
        drop(outbox_tx);
        let outbox = connection.outbox.clone().lock_owned().await;
        let response = connection_stream(connection.clone(), outbox);
        let mut body = response.into_body().into_data_stream();
        let expected = format!("data: {frame}\n\n");
        let mut text = Vec::new();
        while let Some(piece) = body.next().await {
            let piece = piece.unwrap();
            assert!(piece.len() <= 80 << 10, "a piece of {} bytes", piece.len());
            text.extend_from_slice(&piece);
            if text.len() < expected.len() {
                assert_eq!(budget.used(), frame.len(), "counted until its last piece");
            }
        }
        assert_eq!(budget.used(), 0);
        assert_eq!(String::from_utf8(text).unwrap(), expected);
    }

    #[tokio::test]
    async fn session_streams_are_counted_and_capped_in_one_step() {
        let (connection, _inbox, _outbox_tx) =
            Connection::new("p", "k".into(), crate::auth::Role::Client).unwrap();
        let cap = crate::acp_remote::connection::MAX_SESSION_STREAMS;
        let open: Vec<_> = (0..cap)
            .map(|_| session_stream(connection.clone()).unwrap().into_response())
            .collect();
        assert!(session_stream(connection.clone()).is_none(), "over the cap");
        // A stream's place comes back when it ends.
        connection.ended.cancel();
        for response in open {
            let mut body = response.into_body().into_data_stream();
            while body.next().await.is_some() {}
        }
        assert_eq!(
            connection
                .session_streams
                .load(std::sync::atomic::Ordering::Acquire),
            0
        );
    }
}
