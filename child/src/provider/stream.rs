//! Drives a backend-specific [`StreamDecoder`] over an SSE body, producing
//! the [`EventStream`] a provider returns. The stream ends right after the
//! first error or after [`ProviderEvent::Completed`].

use std::collections::VecDeque;

use bytes::Bytes;
use futures_util::{Stream, StreamExt};

use super::sse::{self, SseError, SseEvent};
use super::{EventStream, ProviderError, ProviderEvent};

/// Turns SSE events of one backend into provider events.
pub(crate) trait StreamDecoder: Send + 'static {
    /// Handles one event; returning [`ProviderEvent::Completed`] ends the stream.
    fn event(&mut self, event: &SseEvent) -> Result<Vec<ProviderEvent>, ProviderError>;
    /// Called when the body ended before `Completed`: either completes or
    /// reports the truncation.
    fn end(&mut self) -> Result<Vec<ProviderEvent>, ProviderError>;
}

impl From<SseError> for ProviderError {
    fn from(err: SseError) -> ProviderError {
        match err {
            SseError::TooLarge { .. } => ProviderError::Protocol(err.to_string()),
            SseError::Body(text) => ProviderError::Transport(text),
        }
    }
}

/// Decodes `body` (an HTTP body or any byte-chunk stream) with `decoder`.
pub(crate) fn decode<S, E, D>(body: S, decoder: D) -> EventStream
where
    S: Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::error::Error + Send + 'static,
    D: StreamDecoder,
{
    struct State<T, D> {
        events: std::pin::Pin<Box<T>>,
        decoder: D,
        ready: VecDeque<ProviderEvent>,
        done: bool,
    }
    let state = State {
        events: Box::pin(sse::events(body)),
        decoder,
        ready: VecDeque::new(),
        done: false,
    };
    let stream = futures_util::stream::unfold(state, |mut st| async move {
        loop {
            if let Some(event) = st.ready.pop_front() {
                return Some((Ok(event), st));
            }
            if st.done {
                return None;
            }
            let produced = match st.events.next().await {
                Some(Ok(event)) => st.decoder.event(&event),
                Some(Err(err)) => Err(err.into()),
                None => {
                    st.done = true;
                    st.decoder.end()
                }
            };
            match produced {
                Ok(events) => {
                    st.done |= events
                        .iter()
                        .any(|e| matches!(e, ProviderEvent::Completed(_)));
                    st.ready.extend(events);
                }
                Err(err) => {
                    st.done = true;
                    st.ready.clear();
                    return Some((Err(err), st));
                }
            }
        }
    });
    Box::pin(stream)
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Helpers for decoder tests: feed canned SSE text in awkward chunks.

    use super::*;

    /// Runs `decoder` over `text` cut into `chunk`-byte pieces and collects
    /// everything the stream yields.
    pub(crate) async fn run<D: StreamDecoder>(
        text: &str,
        chunk: usize,
        decoder: D,
    ) -> Vec<Result<ProviderEvent, ProviderError>> {
        let chunks: Vec<Result<Bytes, std::io::Error>> = text
            .as_bytes()
            .chunks(chunk)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        decode(futures_util::stream::iter(chunks), decoder)
            .collect()
            .await
    }
}
