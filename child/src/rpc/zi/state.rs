//! Connection state shared by the Zi frontend, its settlement tasks and
//! the encoder (which runs in the writer task and is the only place that
//! sees agent events in output order).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{json, Value};
use tokio::sync::watch;

/// Completion text projection bound.
pub const MAX_COMPLETION_TEXT: usize = 50 * 1024;
/// Provider error projection bound.
pub const MAX_COMPLETION_ERROR: usize = 8 * 1024;

/// Shared between the frontend, its tasks and the encoder.
#[derive(Clone)]
pub struct Connection {
    /// Runs whose `Done` the encoder has written; with the frontend's count
    /// of submitted runs this tells idle from running.
    pub completed: Arc<watch::Sender<u64>>,
    /// Everything else that changes as frames flow.
    inner: Arc<Mutex<Inner>>,
}

/// Mutable connection state.
#[derive(Default)]
pub struct Inner {
    /// Ids of admitted operations whose response is not yet written.
    pub in_flight: HashSet<String>,
    /// Ordinary operations among `in_flight` (the 32 bound).
    pub ordinary: usize,
    /// Whether the reserved interruption slot is taken.
    pub interrupt_reserved: bool,
    /// Admission revision: advanced by every prompt that starts or joins
    /// work.
    pub revision: u64,
    /// The active completion watch, if any.
    pub watch: Option<CompletionWatch>,
    /// The latest `plan` tool checklist and how often it changed.
    pub plan: (u64, Vec<Value>),
    /// The summary of the latest compaction (command feedback).
    pub last_summary: Option<String>,
    /// Steering input admitted while idle, waiting for the next direct
    /// prompt.
    pub steering: Vec<String>,
    /// Follow-up input admitted while idle, likewise.
    pub follow_up: Vec<String>,
    /// A scheduled retry of a failed model call (the snapshot's `retry`).
    pub retry: Option<Value>,
    /// A `compact` command's run is under way.
    pub compacting: bool,
    /// Tokens of the context at the latest model call (its input, cache
    /// and output), for the snapshot's `contextUsage`; `None` before the
    /// first call and after the transcript was compacted or cleared.
    pub context_tokens: Option<u64>,
}

/// Terminal evidence collected for one `completionId`.
#[derive(Debug, Clone, PartialEq)]
pub struct CompletionWatch {
    pub id: String,
    pub revision: u64,
    /// Text of the latest assistant `message_end` in this cycle.
    pub text: Option<String>,
    /// Error of the latest failed model call in this cycle.
    pub error: Option<String>,
}

impl Connection {
    pub fn new() -> Connection {
        Connection {
            completed: Arc::new(watch::channel(0).0),
            inner: Arc::default(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn completed(&self) -> u64 {
        *self.completed.borrow()
    }
}

impl Inner {
    /// The completion projection for `id` (`None`: no such watch, or it was
    /// invalidated by a later prompt without that id).
    pub fn completion(&self, id: &str, message_count: usize) -> Option<Value> {
        let watch = self.watch.as_ref().filter(|w| w.id == id)?;
        let message = watch.text.as_deref().map(|text| {
            let (text, truncated) = clip(text, MAX_COMPLETION_TEXT);
            json!({"role": "assistant", "text": text, "truncated": truncated})
        });
        let error = watch.error.as_deref().map(|error| {
            let (message, truncated) = clip(error, MAX_COMPLETION_ERROR);
            json!({"message": message, "truncated": truncated})
        });
        Some(json!({
            "completionId": watch.id,
            "revision": watch.revision,
            "messageCount": message_count,
            "message": message,
            "error": error,
        }))
    }
}

/// `text` cut to at most `max` bytes on a character boundary.
pub fn clip(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_respects_char_boundaries() {
        assert_eq!(clip("héllo", 2), ("h", true));
        assert_eq!(clip("abc", 3), ("abc", false));
    }

    #[test]
    fn completion_only_for_the_watched_id() {
        let inner = Inner {
            watch: Some(CompletionWatch {
                id: "c1".into(),
                revision: 2,
                text: Some("x".repeat(MAX_COMPLETION_TEXT + 10)),
                error: None,
            }),
            ..Inner::default()
        };
        assert!(inner.completion("other", 3).is_none());
        let c = inner.completion("c1", 3).unwrap_or_default();
        assert_eq!(c["revision"], 2);
        assert_eq!(c["messageCount"], 3);
        assert_eq!(c["message"]["truncated"], true);
        assert_eq!(
            c["message"]["text"].as_str().map(str::len),
            Some(MAX_COMPLETION_TEXT)
        );
    }
}
