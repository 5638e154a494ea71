//! The audit log (`--audit-log FILE`): who did what, from where, on which
//! project, one JSON object per line ([`Entry`]), appended and made durable
//! per batch by a thread of its own, rotated by size, and also sent as
//! OpenTelemetry log records when `--otlp-endpoint` is set.
//!
//! [`Audit::record`] never blocks and never fails its caller: it queues the
//! entry, or drops it and counts it (`corral_audit_entries_total{outcome=
//! "dropped"}`) when the queue holds [`MAX_QUEUED_ENTRIES`] entries or
//! [`MAX_QUEUED_BYTES`]. A full disk or a slow one therefore loses entries
//! rather than stalling the gateway: the audit must not become a way to
//! stop it. Entries are durable once their batch's `fdatasync` returned;
//! a crash loses at most the batch being written and the queue.

mod entry;
mod file;
mod identity;
mod writer;

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use corral_telemetry::AuditExport;
use prometheus::IntCounterVec;

pub use entry::{
    cut, rfc3339_millis, Action, ActorKind, Entry, Outcome, CUT_MARKER, GATEWAY_ACTOR,
    MAX_DETAIL_BYTES, MAX_NAME_BYTES, MAX_PROMPT_BYTES,
};
pub use file::{numbered, AuditFile, AuditFileError};
pub use identity::denied_reason;
pub use writer::{BATCH_BYTES, BATCH_ENTRIES};

/// Most entries waiting for the writer.
pub const MAX_QUEUED_ENTRIES: usize = 65_536;
/// Most bytes the waiting entries may hold (prompts included): the
/// audit's share of the gateway's worst-case memory.
pub const MAX_QUEUED_BYTES: usize = 64 << 20;

/// The audit log's settings, as `config` resolved them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditSettings {
    /// `--audit-log`: the file (its directory exists and is writable).
    pub path: PathBuf,
    /// `--audit-log-max-bytes`: rotate before the file would pass this.
    pub max_bytes: u64,
    /// `--audit-log-keep`: old files kept, `FILE.1` … `FILE.N`.
    pub keep: usize,
    /// `--audit-prompts`: entries keep the prompt's text.
    pub prompts: bool,
}

/// The audit log could not be started.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot open the audit log {0}")]
    Open(#[from] AuditFileError),
    #[error("cannot start the audit log's writer thread: {0}")]
    Thread(std::io::Error),
}

/// The handle every part of the gateway records through: cheap to clone;
/// a disabled one (no `--audit-log`) records nothing.
#[derive(Debug, Clone, Default)]
pub struct Audit {
    inner: Option<Arc<Shared>>,
}

#[derive(Debug)]
struct Shared {
    /// The writer's queue; taken by [`Audit::close`].
    queue: Mutex<Option<Sender<(Entry, usize)>>>,
    load: Arc<Load>,
    prompts: bool,
    /// `corral_audit_entries_total{outcome}`.
    counter: IntCounterVec,
    /// Hears from the writer thread when it has written everything.
    finished: Mutex<Option<mpsc::Receiver<()>>>,
}

/// What the queue holds, against its bounds.
#[derive(Debug)]
struct Load {
    entries: AtomicUsize,
    bytes: AtomicUsize,
    max_entries: usize,
    max_bytes: usize,
}

impl Load {
    /// Takes room for one entry of `bytes`, if there is some.
    fn reserve(&self, bytes: usize) -> bool {
        let entries = self.entries.fetch_add(1, Ordering::Relaxed);
        let held = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if entries < self.max_entries && held.saturating_add(bytes) <= self.max_bytes {
            return true;
        }
        self.release(bytes);
        false
    }

    fn release(&self, bytes: usize) {
        self.entries.fetch_sub(1, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
}

impl Audit {
    /// An audit that records nothing.
    pub fn disabled() -> Audit {
        Audit::default()
    }

    /// Opens the file (refusing a symbolic link or anything but a regular
    /// file) and starts the writer thread. Entries are counted in
    /// `counter` by outcome and, with `export`, also sent over OTLP.
    pub fn start(
        settings: &AuditSettings,
        counter: IntCounterVec,
        export: Option<AuditExport>,
    ) -> Result<Audit, AuditError> {
        let file = AuditFile::open(&settings.path, settings.max_bytes, settings.keep)?;
        let bounds = (MAX_QUEUED_ENTRIES, MAX_QUEUED_BYTES);
        let (audit, queue, load) = Audit::queue(settings.prompts, counter.clone(), bounds);
        let (finished, finished_rx) = mpsc::channel();
        let writer = writer::Writer {
            queue,
            load,
            file,
            counter,
            export,
            failing: false,
            rotation_failing: false,
        };
        std::thread::Builder::new()
            .name("corral-audit".into())
            .spawn(move || {
                writer.run();
                let _ = finished.send(());
            })
            .map_err(AuditError::Thread)?;
        if let Some(shared) = &audit.inner {
            *shared
                .finished
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = Some(finished_rx);
        }
        Ok(audit)
    }

    /// A handle, the queue it feeds (bounded by `(entries, bytes)`) and
    /// the queue's load, which the reader releases.
    fn queue(
        prompts: bool,
        counter: IntCounterVec,
        (max_entries, max_bytes): (usize, usize),
    ) -> (Audit, mpsc::Receiver<(Entry, usize)>, Arc<Load>) {
        let (sender, receiver) = mpsc::channel();
        let load = Arc::new(Load {
            entries: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            max_entries,
            max_bytes,
        });
        let shared = Shared {
            queue: Mutex::new(Some(sender)),
            load: load.clone(),
            prompts,
            counter,
            finished: Mutex::new(None),
        };
        let audit = Audit {
            inner: Some(Arc::new(shared)),
        };
        (audit, receiver, load)
    }

    /// Whether the log is on.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    /// Whether entries keep prompt text (`--audit-prompts`): a call site
    /// extracts the text only then.
    pub fn wants_prompts(&self) -> bool {
        self.inner.as_ref().is_some_and(|shared| shared.prompts)
    }

    /// Queues `entry` for the writer; never blocks, never fails. Over the
    /// queue's bounds, or once closed, the entry is dropped and counted.
    pub fn record(&self, entry: Entry) {
        let Some(shared) = &self.inner else { return };
        let (entry, bytes) = entry.seal(shared.prompts);
        let queue = shared.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let sent = match queue.as_ref() {
            Some(sender) if shared.load.reserve(bytes) => {
                let sent = sender.send((entry, bytes)).is_ok();
                if !sent {
                    shared.load.release(bytes);
                }
                sent
            }
            _ => false,
        };
        drop(queue);
        if !sent {
            shared.counter.with_label_values(&["dropped"]).inc();
        }
    }

    /// Stops taking entries and waits, at most `wait`, for the writer to
    /// write those queued. Blocks: call it off the event loop. Returns
    /// whether everything was written in time.
    pub fn close(&self, wait: Duration) -> bool {
        let Some(shared) = &self.inner else {
            return true;
        };
        drop(
            shared
                .queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let finished = shared
            .finished
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let Some(finished) = finished else {
            return true;
        };
        let done = finished.recv_timeout(wait).is_ok();
        if !done {
            tracing::warn!(
                queued = shared.load.entries.load(Ordering::Relaxed),
                "the audit log's last entries were not written within {wait:?}"
            );
        }
        done
    }
}

#[cfg(test)]
mod tests;
