//! The stderr log filter of both binaries: the operator's `CORRAL_LOG`
//! directives, minus what no level may print. The WebSocket libraries'
//! `trace` output dumps every message and the client's handshake request
//! (hello tokens, prompts, `Authorization` headers), so it is dropped
//! whatever the directives say; their `debug` and higher carry no payload.

use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::filter::{filter_fn, EnvFilter, FilterExt};
use tracing_subscriber::layer::Filter;
use tracing_subscriber::registry::LookupSpan;

/// Crates (and their modules) whose `trace` level prints message contents.
const PAYLOAD_DUMPERS: &[&str] = &["tungstenite", "tokio_tungstenite"];

/// `directives` (an [`EnvFilter`] string such as `debug` or
/// `corral=trace`) without the payload dumps of the WebSocket libraries.
pub fn log_filter<S>(directives: &str) -> Box<dyn Filter<S> + Send + Sync + 'static>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    let directives = EnvFilter::new(directives);
    Box::new(directives.and(filter_fn(|meta| !dumps_payload(meta))))
}

/// Whether an event or span may print a library's message dump.
fn dumps_payload(meta: &Metadata<'_>) -> bool {
    *meta.level() == Level::TRACE && {
        let target = meta.target();
        PAYLOAD_DUMPERS.iter().any(|krate| {
            target
                .strip_prefix(krate)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::Layer as _;

    /// Runs `emit` under `log_filter(directives)` and returns the log text.
    fn logged(directives: &str, emit: impl FnOnce()) -> String {
        let out = Arc::new(Mutex::new(Vec::new()));
        let writer = {
            let out = out.clone();
            move || Sink(out.clone())
        };
        let layer = tracing_subscriber::fmt::layer()
            .with_writer(writer)
            .with_ansi(false)
            .with_filter(log_filter(directives));
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, emit);
        let bytes = out.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn websocket_message_dumps_are_dropped_at_every_level() {
        let text = logged("trace,tungstenite=trace,tokio_tungstenite=trace", || {
            tracing::trace!(target: "tungstenite::protocol", "Received message secret-1");
            tracing::trace!(target: "tokio_tungstenite", "secret-2");
            tracing::trace!(target: "tungstenite", "secret-3");
            tracing::debug!(target: "tungstenite::protocol", "Received close frame");
            tracing::trace!(target: "tungstenite_other", "kept trace");
            tracing::trace!(target: "corral::ws", "own trace");
        });
        assert!(!text.contains("secret"), "{text}");
        assert!(text.contains("Received close frame"), "{text}");
        assert!(
            text.contains("kept trace") && text.contains("own trace"),
            "{text}"
        );
    }

    #[test]
    fn the_directives_still_decide_everything_else() {
        let text = logged("info", || {
            tracing::debug!(target: "corral", "hidden");
            tracing::info!(target: "corral", "shown");
        });
        assert!(!text.contains("hidden") && text.contains("shown"), "{text}");
    }
}
