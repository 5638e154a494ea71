//! The audit writer: one OS thread (not a task of the runtime, so a slow
//! disk never stalls the event loop) that drains the queue in batches,
//! appends each batch to the file with one `write` and one `fdatasync`
//! (rotating first when it would pass the size bound), counts every entry
//! as `written` or `failed`, and hands each to the OTLP export.

use std::sync::mpsc::Receiver;
use std::sync::Arc;

use corral_telemetry::AuditExport;
use prometheus::IntCounterVec;

use super::entry::Entry;
use super::file::AuditFile;
use super::Load;

/// Most entries drained into one batch (one `write`, one `fdatasync`).
pub const BATCH_ENTRIES: usize = 4096;
/// Most bytes (as the queue counts them) drained into one batch.
pub const BATCH_BYTES: usize = 1 << 20;

/// What the writer thread owns.
pub(super) struct Writer {
    pub queue: Receiver<(Entry, usize)>,
    /// What the queue holds, released as entries are taken.
    pub load: Arc<Load>,
    pub file: AuditFile,
    /// `corral_audit_entries_total{outcome}`.
    pub counter: IntCounterVec,
    pub export: Option<AuditExport>,
    /// The last append failed (logged once until one succeeds again).
    pub failing: bool,
    /// The last rotation failed (likewise).
    pub rotation_failing: bool,
}

impl Writer {
    /// Writes until the queue is closed and drained.
    pub fn run(mut self) {
        while let Ok(first) = self.queue.recv() {
            let mut batch = vec![self.take(first)];
            let mut bytes = 0;
            while batch.len() < BATCH_ENTRIES && bytes < BATCH_BYTES {
                let Ok(next) = self.queue.try_recv() else {
                    break;
                };
                bytes += next.1;
                batch.push(self.take(next));
            }
            self.write(&batch);
        }
    }

    /// Releases an entry's share of the queue's bounds.
    fn take(&self, (entry, bytes): (Entry, usize)) -> Entry {
        self.load.release(bytes);
        entry
    }

    fn write(&mut self, batch: &[Entry]) {
        let mut lines = Vec::new();
        let mut in_lines = 0;
        let mut may_rotate = true;
        let mut exported = Vec::new();
        let mut current = self.file.follow_name();
        for entry in batch {
            let fields = entry.fields();
            let Ok(mut line) = serde_json::to_vec(&fields) else {
                self.count("failed", 1);
                continue;
            };
            line.push(b'\n');
            if current.is_ok() && may_rotate && self.file.would_overflow(lines.len(), line.len()) {
                self.append(&mut lines, &mut in_lines);
                match self.file.rotate() {
                    Ok(()) => self.rotation_failing = false,
                    Err(e) => {
                        // Better a file past its bound than entries lost;
                        // tried again with the next batch.
                        if !std::mem::replace(&mut self.rotation_failing, true) {
                            tracing::warn!(error = %e, "cannot rotate the audit log: it grows past --audit-log-max-bytes until it can");
                        }
                        may_rotate = false;
                        current = self.file.follow_name();
                    }
                }
            }
            lines.extend_from_slice(&line);
            in_lines += 1;
            exported.push((entry.time(), fields));
        }
        match current {
            Ok(()) => self.append(&mut lines, &mut in_lines),
            Err(e) => {
                self.failed(in_lines, &e);
                in_lines = 0;
            }
        }
        debug_assert_eq!(in_lines, 0);
        if let Some(export) = &self.export {
            for (time, fields) in &exported {
                export.emit(*time, fields);
            }
        }
    }

    /// Appends the `count` entries in `lines` and empties it.
    fn append(&mut self, lines: &mut Vec<u8>, count: &mut u64) {
        if *count == 0 {
            return;
        }
        match self.file.append(lines) {
            Ok(()) => {
                self.count("written", *count);
                if std::mem::take(&mut self.failing) {
                    tracing::info!(file = %self.file.path().display(), "the audit log is written again");
                }
            }
            Err(e) => self.failed(*count, &e),
        }
        lines.clear();
        *count = 0;
    }

    fn failed(&mut self, count: u64, error: &dyn std::fmt::Display) {
        self.count("failed", count);
        if !std::mem::replace(&mut self.failing, true) {
            tracing::error!(file = %self.file.path().display(), %error, "cannot write the audit log: entries are lost until it works again (corral_audit_entries_total{{outcome=\"failed\"}})");
        }
    }

    fn count(&self, outcome: &str, n: u64) {
        self.counter.with_label_values(&[outcome]).inc_by(n);
    }
}
