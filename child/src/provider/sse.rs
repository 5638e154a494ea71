//! Server-Sent Events reader: turns an HTTP body (a stream of byte chunks)
//! into `event`/`data` records, tolerating chunk boundaries anywhere, any of
//! the three line endings, comments, and multi-line data, with a size limit
//! per event so a misbehaving server cannot make us buffer without bound.

use std::collections::VecDeque;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

/// Largest event (pending line plus accumulated data) we are willing to buffer.
pub const MAX_EVENT_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if the server sent one.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// Why reading the event stream failed.
#[derive(Debug, thiserror::Error)]
pub enum SseError {
    #[error("event stream record exceeds {limit} bytes")]
    TooLarge { limit: usize },
    /// The underlying body stream failed (connection reset, timeout, ...).
    #[error("{0}")]
    Body(String),
}

/// Incremental parser: feed it chunks, collect complete events.
///
/// Lines are only decoded once complete, and they are split on ASCII bytes
/// only, so a UTF-8 sequence cut by a chunk boundary is reassembled. Invalid
/// UTF-8 is replaced (U+FFFD) rather than rejected.
#[derive(Debug)]
pub struct SseDecoder {
    /// Bytes received but not yet consumed as complete lines.
    buf: Vec<u8>,
    /// The previous line ended in `\r`; a `\n` right after it belongs to it.
    skip_lf: bool,
    /// `event:` field of the event being assembled.
    event: Option<String>,
    /// `data:` lines of the event being assembled.
    data: String,
    /// Whether any `data:` line was seen (an event without data is dropped).
    has_data: bool,
    /// Limit on `buf` plus `data`.
    max_event: usize,
}

impl Default for SseDecoder {
    fn default() -> Self {
        SseDecoder::with_limit(MAX_EVENT_BYTES)
    }
}

impl SseDecoder {
    pub fn with_limit(max_event: usize) -> SseDecoder {
        SseDecoder {
            buf: Vec::new(),
            skip_lf: false,
            event: None,
            data: String::new(),
            has_data: false,
            max_event,
        }
    }

    /// Parses `chunk`, appending every event it completes to `out`.
    pub fn feed(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut scan = self.buf.len();
        self.buf.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(rel) = self.buf[scan..]
            .iter()
            .position(|&b| b == b'\n' || b == b'\r')
        {
            let end = scan + rel;
            if self.skip_lf && end == start && self.buf[end] == b'\n' {
                // Second half of a `\r\n` split across lines or chunks.
                self.skip_lf = false;
                start = end + 1;
                scan = start;
                continue;
            }
            self.skip_lf = self.buf[end] == b'\r';
            let line = String::from_utf8_lossy(&self.buf[start..end]).into_owned();
            self.line(&line, out);
            start = end + 1;
            scan = start;
            if self.data.len() > self.max_event {
                return Err(SseError::TooLarge {
                    limit: self.max_event,
                });
            }
        }
        self.buf.drain(..start);
        if self.buf.len() + self.data.len() > self.max_event {
            return Err(SseError::TooLarge {
                limit: self.max_event,
            });
        }
        Ok(())
    }

    /// Flushes at end of input. An unterminated last line is discarded (it
    /// was cut off); an event whose lines are complete but which lacks the
    /// closing blank line is still dispatched, which some servers rely on.
    pub fn finish(&mut self, out: &mut Vec<SseEvent>) {
        self.buf.clear();
        self.dispatch(out);
    }

    fn line(&mut self, line: &str, out: &mut Vec<SseEvent>) {
        if line.is_empty() {
            self.dispatch(out);
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` only matter for reconnecting EventSource clients.
            _ => {}
        }
    }

    fn dispatch(&mut self, out: &mut Vec<SseEvent>) {
        let event = self.event.take();
        if !self.has_data {
            return;
        }
        self.has_data = false;
        out.push(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        });
    }
}

/// Adapts a body stream into a stream of events. After an error the stream ends.
pub fn events<S, E>(body: S) -> impl Stream<Item = Result<SseEvent, SseError>> + Send
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + 'static,
{
    struct State<S> {
        body: std::pin::Pin<Box<S>>,
        decoder: SseDecoder,
        ready: VecDeque<SseEvent>,
        done: bool,
    }
    let state = State {
        body: Box::pin(body),
        decoder: SseDecoder::default(),
        ready: VecDeque::new(),
        done: false,
    };
    futures_util::stream::unfold(state, |mut st| async move {
        let mut out = Vec::new();
        loop {
            if let Some(event) = st.ready.pop_front() {
                return Some((Ok(event), st));
            }
            if st.done {
                return None;
            }
            match st.body.next().await {
                Some(Ok(chunk)) => {
                    if let Err(err) = st.decoder.feed(&chunk, &mut out) {
                        st.done = true;
                        return Some((Err(err), st));
                    }
                }
                Some(Err(err)) => {
                    st.done = true;
                    return Some((Err(SseError::Body(error_chain(&err))), st));
                }
                None => {
                    st.done = true;
                    st.decoder.finish(&mut out);
                }
            }
            st.ready.extend(out.drain(..));
        }
    })
}

/// An error with its `source()` chain, e.g. `error decoding response body: connection reset`.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn ev(event: Option<&str>, data: &str) -> SseEvent {
        SseEvent {
            event: event.map(str::to_owned),
            data: data.to_owned(),
        }
    }

    /// Feeds `input` split into chunks of `size` bytes.
    fn parse_chunked(input: &[u8], size: usize) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        for chunk in input.chunks(size) {
            decoder.feed(chunk, &mut out).unwrap();
        }
        decoder.finish(&mut out);
        out
    }

    const SAMPLE: &str = "event: message_start\r\ndata: {\"a\":\"héllo ✓\"}\r\n\r\n: keep-alive comment\n\nevent: delta\ndata: line one\ndata:line two\n\ndata: third\r\rdata\n\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            ev(Some("message_start"), "{\"a\":\"héllo ✓\"}"),
            ev(Some("delta"), "line one\nline two"),
            ev(None, "third"),
            ev(None, ""),
        ]
    }

    #[test]
    fn every_chunk_size_gives_the_same_events() {
        for size in 1..=SAMPLE.len() {
            assert_eq!(
                parse_chunked(SAMPLE.as_bytes(), size),
                expected(),
                "chunk size {size}"
            );
        }
    }

    #[test]
    fn crlf_split_across_chunks_is_one_line_ending() {
        let mut decoder = SseDecoder::default();
        let mut out = Vec::new();
        decoder.feed(b"data: a\r", &mut out).unwrap();
        decoder.feed(b"\n\r", &mut out).unwrap();
        decoder.feed(b"\ndata: b\r\n\r\n", &mut out).unwrap();
        assert_eq!(out, vec![ev(None, "a"), ev(None, "b")]);
    }

    #[test]
    fn event_without_data_is_dropped_and_its_name_does_not_leak() {
        let out = parse_chunked(b"event: ping\n\ndata: x\n\n", 3);
        assert_eq!(out, vec![ev(None, "x")]);
    }

    #[test]
    fn unterminated_tail_is_flushed_but_partial_line_is_not() {
        assert_eq!(
            parse_chunked(b"data: [DONE]\n", 4),
            vec![ev(None, "[DONE]")]
        );
        assert_eq!(parse_chunked(b"data: {\"cut", 4), vec![]);
    }

    #[test]
    fn oversized_event_is_an_error() {
        let mut decoder = SseDecoder::with_limit(16);
        let mut out = Vec::new();
        decoder.feed(b"data: 0123456789\n", &mut out).unwrap();
        let err = decoder.feed(b"data: 0123456789\n", &mut out).unwrap_err();
        assert!(matches!(err, SseError::TooLarge { limit: 16 }));

        let mut decoder = SseDecoder::with_limit(16);
        let err = decoder
            .feed(b"data: 01234567890123456789", &mut out)
            .unwrap_err();
        assert!(matches!(err, SseError::TooLarge { .. }));
    }

    #[tokio::test]
    async fn stream_adapter_yields_events_then_body_error() {
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(Bytes::from_static(b"data: o")),
            Ok(Bytes::from_static(b"ne\n\nda")),
            Ok(Bytes::from_static(b"ta: two\n\n")),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "reset",
            )),
        ];
        let got: Vec<_> = events(futures_util::stream::iter(chunks)).collect().await;
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().unwrap(), &ev(None, "one"));
        assert_eq!(got[1].as_ref().unwrap(), &ev(None, "two"));
        assert!(matches!(&got[2], Err(SseError::Body(msg)) if msg == "reset"));
    }
}
