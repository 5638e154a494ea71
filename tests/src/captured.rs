//! Keeps the stderr of a process under test out of the test output: it is
//! written to a file, and printed (its last [`TAIL_BYTES`]) only when the
//! test that owns the process fails.

use std::path::{Path, PathBuf};

/// How much of a captured log a failing test prints.
pub const TAIL_BYTES: usize = 256 * 1024;

/// A process's captured stderr; prints it when dropped during a panic.
#[derive(Debug)]
pub struct CapturedLog {
    /// What the log belongs to, in the header of the dump.
    label: String,
    path: PathBuf,
}

impl CapturedLog {
    /// A file at `path` for `label`'s stderr (created empty).
    pub fn create(label: &str, path: PathBuf) -> (CapturedLog, std::fs::File) {
        let file = std::fs::File::create(&path).expect("create the log file");
        let log = CapturedLog {
            label: label.to_string(),
            path,
        };
        (log, file)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Everything captured so far.
    pub fn read(&self) -> String {
        std::fs::read_to_string(&self.path).unwrap_or_default()
    }

    /// Prints the tail of the log to stderr, where the test harness shows
    /// it with the failing test's output.
    pub fn dump(&self) {
        let bytes = std::fs::read(&self.path).unwrap_or_default();
        let start = bytes.len().saturating_sub(TAIL_BYTES);
        let text = String::from_utf8_lossy(&bytes[start..]);
        let skipped = if start > 0 {
            format!(" (last {TAIL_BYTES} bytes)")
        } else {
            String::new()
        };
        let label = &self.label;
        eprintln!("---- {label} stderr{skipped} ----\n{text}---- end of {label} stderr ----");
    }
}

impl Drop for CapturedLog {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.dump();
        }
    }
}
