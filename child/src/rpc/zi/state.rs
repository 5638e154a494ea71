//! Connection state shared by the Zi frontend, its settlement tasks and
//! the encoder (which runs in the writer task and is the only place that
//! sees agent events in output order).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::{json, Value};
use tokio::sync::watch;

use super::message::Latest;

/// Shared between the frontend, its tasks and the encoder.
#[derive(Clone)]
pub struct Connection {
    /// Runs whose `Done` the encoder has written; with `submitted` this
    /// tells idle from running.
    pub completed: Arc<watch::Sender<u64>>,
    /// Runs handed to the agent.
    pub submitted: Arc<AtomicU64>,
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
    /// The active completion watch, if any.
    pub watch: Option<CompletionWatch>,
    /// The latest `plan` tool checklist and how often it changed.
    pub plan: (u64, Vec<Value>),
    /// The summary of the latest compaction (command feedback).
    pub last_summary: Option<String>,
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
    /// Prompts admitted into this cycle with this id.
    pub revision: u64,
    /// The latest assistant `message_end` since the watch was created or
    /// last advanced.
    pub latest: Option<Latest>,
    /// What the watch held when the session last settled; cleared when a
    /// prompt advances the revision.
    pub settled: Option<Settled>,
}

/// A watch as `agent_settled` found it.
#[derive(Debug, Clone, PartialEq)]
pub struct Settled {
    pub revision: u64,
    pub latest: Option<Latest>,
    /// Messages in the session at settlement.
    pub message_count: usize,
}

impl CompletionWatch {
    pub fn new(id: &str) -> CompletionWatch {
        CompletionWatch {
            id: id.to_string(),
            revision: 0,
            latest: None,
            settled: None,
        }
    }
}

impl Settled {
    /// The `session.await_idle` result for this observation.
    pub fn result(&self) -> Value {
        json!({
            "completionRevision": self.revision,
            "messageCount": self.message_count,
            "completion": self.latest.as_ref().map(Latest::completion),
        })
    }
}

impl Connection {
    pub fn new() -> Connection {
        Connection {
            completed: Arc::new(watch::channel(0).0),
            submitted: Arc::default(),
            inner: Arc::default(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn completed(&self) -> u64 {
        *self.completed.borrow()
    }

    pub fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::SeqCst)
    }

    /// Whether every submitted run has finished.
    pub fn idle(&self) -> bool {
        self.completed() >= self.submitted()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_watch_without_an_answer_has_no_completion() {
        let settled = Settled {
            revision: 2,
            latest: None,
            message_count: 3,
        };
        assert_eq!(
            settled.result(),
            json!({"completionRevision": 2, "messageCount": 3, "completion": null})
        );
    }
}
