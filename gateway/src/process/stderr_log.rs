//! A child's stderr: a file the child writes itself, `STATE/logs/PROJECT.log`,
//! opened for it at spawn (appending, never through a link) so that the
//! gateway holds no descriptor for it while the child runs. The gateway
//! follows the file from the child's reap task (`Follower`): every
//! [`FOLLOW_EVERY`] and once more at the exit, new lines go to the
//! gateway's log (target `corral::child`, cut at [`STDERR_LINE_CAP`]), and
//! a file grown past [`MAX_BYTES`] is cut the way logrotate's
//! `copytruncate` does: its last [`KEPT_BYTES`] go to `PROJECT.log.1`
//! and the file is emptied (the child's appends carry on at its new end).
//! The admin API's stderr tail and the reason of a failed start are read
//! from the file ([`StderrLog::tail`]).

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::statefs::{self, StateFsError};

/// How often a running child's file is read for new lines and its size
/// checked.
pub const FOLLOW_EVERY: Duration = Duration::from_secs(5);
/// Size past which the file is cut.
pub const MAX_BYTES: u64 = 1 << 20;
/// What is kept of a cut file, in `PROJECT.log.1`.
pub const KEPT_BYTES: u64 = 64 * 1024;
/// Most bytes of new lines logged per follow; a child that wrote more
/// since the last one has the excess skipped (and said so).
pub const FOLLOW_BYTES: u64 = 64 * 1024;
/// Longest stderr line logged, in bytes; the rest of the line is dropped.
pub const STDERR_LINE_CAP: usize = 4 * 1024;
/// Lines of a child's stderr the admin API shows.
pub const STDERR_TAIL_LINES: usize = 50;
/// Bytes read from the end of the file for its tail.
const TAIL_BYTES: u64 = 16 * 1024;
/// The directory of the files, in the state directory.
const LOGS_DIR: &str = "logs";

/// Where one project's child writes its stderr.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StderrLog {
    /// The state directory (canonical, as configured).
    state: PathBuf,
    /// `PROJECT.log`.
    name: String,
}

impl StderrLog {
    /// The file of `project` (a valid project name) under `state`.
    pub fn new(state: &Path, project: &str) -> StderrLog {
        StderrLog {
            state: state.to_path_buf(),
            name: format!("{project}.log"),
        }
    }

    /// Where the file is.
    pub fn path(&self) -> PathBuf {
        self.state.join(LOGS_DIR).join(&self.name)
    }

    fn kept_name(&self) -> String {
        format!("{}.1", self.name)
    }

    fn dir(&self) -> Result<statefs::Dir, StateFsError> {
        statefs::Dir::open_root(&self.state)?.subdir(LOGS_DIR, 0o700)
    }

    /// Opens the file for a new child to append to (made 0600 if missing,
    /// from a file made ahead: see [`statefs::ahead`]; cut first if it is
    /// over [`MAX_BYTES`]).
    pub fn open_for_child(&self) -> Result<std::fs::File, StateFsError> {
        let dir = self.dir()?;
        let file = dir.append_file_made_ahead(&self.name, 0o600)?;
        if file.metadata().is_ok_and(|m| m.len() > MAX_BYTES) {
            self.cut(&dir, file.metadata().map_or(0, |m| m.len()));
        }
        Ok(file)
    }

    /// The file's size now (0 if it cannot be read).
    fn len(&self) -> u64 {
        std::fs::symlink_metadata(self.path()).map_or(0, |m| if m.is_file() { m.len() } else { 0 })
    }

    /// Reads up to `max` bytes from `offset`.
    fn read_at(&self, offset: u64, max: u64) -> Vec<u8> {
        let read = || -> std::io::Result<Vec<u8>> {
            let mut file = self
                .dir()
                .map_err(std::io::Error::other)?
                .read_file(&self.name)
                .map_err(std::io::Error::other)?;
            file.seek(SeekFrom::Start(offset))?;
            let mut bytes = Vec::new();
            file.take(max).read_to_end(&mut bytes)?;
            Ok(bytes)
        };
        read().unwrap_or_default()
    }

    /// Copies the last [`KEPT_BYTES`] of the file (of `len` bytes) to
    /// `PROJECT.log.1` and empties it. Lines the child writes between the
    /// copy and the truncation are lost.
    fn cut(&self, dir: &statefs::Dir, len: u64) {
        let from = len.saturating_sub(KEPT_BYTES);
        let kept = self.read_at(from, KEPT_BYTES);
        let kept = String::from_utf8_lossy(&kept);
        // Start the copy at a line.
        let kept = match (from > 0, kept.find('\n')) {
            (true, Some(lf)) => &kept[lf + 1..],
            _ => &kept[..],
        };
        if let Err(e) = dir.replace_file(&self.kept_name(), kept) {
            tracing::debug!(error = %e, "cannot keep the end of a child's stderr");
        }
        let truncated = dir.append_file(&self.name, 0o600).and_then(|file| {
            file.set_len(0)
                .map_err(|e| statefs::io_error(self.path(), &e))
        });
        if let Err(e) = truncated {
            tracing::warn!(error = %e, "cannot cut a child's stderr file");
        }
    }

    /// The last `lines` non-blank lines of the file (of the kept copy
    /// when the file was just cut), oldest first.
    pub fn tail(&self, lines: usize) -> Vec<String> {
        let mut len = self.len();
        let mut name = self.name.clone();
        if len == 0 {
            name = self.kept_name();
            len = std::fs::symlink_metadata(self.state.join(LOGS_DIR).join(&name))
                .map_or(0, |m| m.len());
        }
        let from = len.saturating_sub(TAIL_BYTES);
        let read = || -> Option<Vec<u8>> {
            let mut file = self.dir().ok()?.read_file(&name).ok()?;
            file.seek(SeekFrom::Start(from)).ok()?;
            let mut bytes = Vec::new();
            file.take(TAIL_BYTES).read_to_end(&mut bytes).ok()?;
            Some(bytes)
        };
        let bytes = read().unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let mut all: Vec<&str> = text.split('\n').collect();
        if from > 0 && !all.is_empty() {
            // The first piece is the end of a line that started earlier.
            all.remove(0);
        }
        let kept: Vec<String> = all
            .into_iter()
            .map(|l| l.trim_end_matches('\r'))
            .filter(|l| !l.trim().is_empty())
            .map(|l| cap_line(l).0)
            .collect();
        kept[kept.len().saturating_sub(lines)..].to_vec()
    }

    /// The last non-blank line, if any.
    pub fn last_line(&self) -> Option<String> {
        self.tail(1).pop()
    }
}

/// A running child's stderr as the admin API shows it: its last
/// [`STDERR_TAIL_LINES`] lines, read from the file when asked.
#[derive(Clone, Debug, Default)]
pub struct StderrTail(Option<std::sync::Arc<StderrLog>>);

impl StderrTail {
    pub(super) fn of(log: Option<std::sync::Arc<StderrLog>>) -> StderrTail {
        StderrTail(log)
    }

    /// The lines, oldest first (none when the child has no file).
    pub fn lines(&self) -> Vec<String> {
        self.0
            .as_ref()
            .map(|log| log.tail(STDERR_TAIL_LINES))
            .unwrap_or_default()
    }
}

/// `line` cut at [`STDERR_LINE_CAP`] bytes (at a character boundary); the
/// flag says it was cut.
fn cap_line(line: &str) -> (String, bool) {
    if line.len() <= STDERR_LINE_CAP {
        return (line.to_string(), false);
    }
    let mut end = STDERR_LINE_CAP;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    (line[..end].to_string(), true)
}

/// Log fields of one child.
#[derive(Clone, Debug)]
pub(super) struct ChildTag {
    pub project: String,
    pub pid: u32,
}

/// Follows one child's file: what has been logged so far.
pub(super) struct Follower {
    log: StderrLog,
    /// Bytes of the file already logged (or skipped).
    offset: u64,
    tag: ChildTag,
}

impl Follower {
    /// Follows `log` from byte `offset`: its length when the child got it
    /// (what earlier children wrote was logged by their followers).
    pub fn new(log: StderrLog, offset: u64, tag: ChildTag) -> Follower {
        Follower { log, offset, tag }
    }

    /// Logs the complete lines written since the last call (all of them,
    /// the last one too, when `last`), and cuts the file if it is too big.
    pub fn follow(&mut self, last: bool) {
        let len = self.log.len();
        if len < self.offset {
            // Cut (by us, or emptied by someone else): start again.
            self.offset = 0;
        }
        if len > self.offset {
            if len - self.offset > FOLLOW_BYTES {
                let skipped = len - self.offset - FOLLOW_BYTES;
                tracing::info!(target: "corral::child", project = %self.tag.project, pid = self.tag.pid, skipped_bytes = skipped, "the child wrote more to stderr than is logged; see {}", self.log.path().display());
                self.offset = len - FOLLOW_BYTES;
            }
            let bytes = self.log.read_at(self.offset, len - self.offset);
            let complete = match (last, bytes.iter().rposition(|&b| b == b'\n')) {
                (true, _) => bytes.len(),
                (false, Some(lf)) => lf + 1,
                // One line longer than all that is logged at once.
                (false, None) if bytes.len() as u64 >= FOLLOW_BYTES => bytes.len(),
                (false, None) => 0,
            };
            self.log_lines(&bytes[..complete]);
            self.offset += complete as u64;
        }
        if len > MAX_BYTES {
            if let Ok(dir) = self.log.dir() {
                self.log.cut(&dir, len);
            }
            self.offset = 0;
        }
    }

    fn log_lines(&self, bytes: &[u8]) {
        let text = String::from_utf8_lossy(bytes);
        for line in text.split('\n') {
            let line = line.trim_end_matches('\r');
            if line.trim().is_empty() {
                continue;
            }
            let (line, cut) = cap_line(line);
            let (project, pid) = (&self.tag.project, self.tag.pid);
            if cut {
                tracing::info!(target: "corral::child", %project, pid, truncated = true, "{line}…");
            } else {
                tracing::info!(target: "corral::child", %project, pid, "{line}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    fn append(log: &StderrLog, text: &str) {
        let mut file = log.open_for_child().unwrap();
        file.write_all(text.as_bytes()).unwrap();
    }

    #[test]
    fn the_tail_is_the_last_non_blank_lines() {
        let state = tempfile::tempdir().unwrap();
        let log = StderrLog::new(state.path(), "p");
        assert_eq!(log.tail(5), Vec::<String>::new());
        assert_eq!(log.last_line(), None);
        append(&log, "one\n\n  \ntwo\r\nthree");
        assert_eq!(log.tail(5), ["one", "two", "three"]);
        assert_eq!(log.tail(2), ["two", "three"]);
        assert_eq!(log.last_line().as_deref(), Some("three"));
        let meta = std::fs::metadata(log.path()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }

    #[test]
    fn a_long_file_is_read_from_its_end_only() {
        let state = tempfile::tempdir().unwrap();
        let log = StderrLog::new(state.path(), "p");
        let long = "x".repeat(100_000);
        append(&log, &format!("{long}\nend\n"));
        let tail = log.tail(10);
        assert_eq!(tail, ["end"], "the cut-off start of a line is not a line");
    }

    #[test]
    fn a_file_over_the_cap_is_cut_and_its_end_kept() {
        let state = tempfile::tempdir().unwrap();
        let log = StderrLog::new(state.path(), "p");
        let line = format!("{}\n", "y".repeat(1023));
        let mut file = log.open_for_child().unwrap();
        for _ in 0..(MAX_BYTES / 1024 + 1) {
            file.write_all(line.as_bytes()).unwrap();
        }
        file.write_all(b"last words\n").unwrap();
        let mut follower = Follower::new(
            log.clone(),
            0,
            ChildTag {
                project: "p".into(),
                pid: 1,
            },
        );
        follower.follow(false);
        assert_eq!(log.len(), 0, "cut");
        let kept = std::fs::read_to_string(state.path().join("logs/p.log.1")).unwrap();
        assert!(kept.len() as u64 <= KEPT_BYTES, "{}", kept.len());
        assert!(kept.ends_with("last words\n"));
        assert!(kept.starts_with('y'), "starts at a line");
        assert_eq!(
            log.last_line().as_deref(),
            Some("last words"),
            "read from the kept copy"
        );
        // The child's descriptor appends at the new end.
        file.write_all(b"after\n").unwrap();
        assert_eq!(log.tail(5), ["after"]);
    }

    #[test]
    fn followed_lines_are_taken_once_and_partial_lines_wait() {
        let state = tempfile::tempdir().unwrap();
        let log = StderrLog::new(state.path(), "p");
        append(&log, "before the child\n");
        let tag = ChildTag {
            project: "p".into(),
            pid: 1,
        };
        let start = log.len();
        let mut follower = Follower::new(log.clone(), start, tag);
        append(&log, "a\npart");
        follower.follow(false);
        assert_eq!(follower.offset, start + 2, "the partial line waits");
        follower.follow(true);
        assert_eq!(follower.offset, log.len(), "the last call takes it");
    }

    #[test]
    fn a_link_in_place_of_the_file_is_refused() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("logs")).unwrap();
        let target = state.path().join("elsewhere");
        std::fs::write(&target, "").unwrap();
        std::os::unix::fs::symlink(&target, state.path().join("logs/p.log")).unwrap();
        let err = StderrLog::new(state.path(), "p")
            .open_for_child()
            .unwrap_err();
        assert!(err.is_link(), "{err}");
    }

    #[test]
    fn long_lines_are_capped_at_a_character_boundary() {
        let line = "é".repeat(STDERR_LINE_CAP);
        let (cut, was_cut) = cap_line(&line);
        assert!(was_cut);
        assert!(cut.len() <= STDERR_LINE_CAP && cut.len() >= STDERR_LINE_CAP - 1);
        assert_eq!(cap_line("short"), ("short".to_string(), false));
    }
}
