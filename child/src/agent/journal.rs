//! The session journal: an append-only JSONL file of transcript changes.
//!
//! Each line is one [`Entry`]. Lines are written whole and synced to disk at
//! every message boundary, so a process killed at any moment leaves every
//! completed message on disk and at worst a torn last line, which loading
//! ignores. Replaying the entries in order rebuilds the transcript.
//!
//! An open journal holds an exclusive `flock` on its file for as long as it
//! lives (the kernel drops it when the process dies), so two agents never
//! append to one journal: the second open fails with
//! [`JournalError::InUse`]. This is what keeps two gateways sharing a state
//! directory from running two children for one project.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use crate::transcript::Message;

/// One transcript change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A message was appended.
    Message { message: Message },
    /// The transcript was emptied.
    Clear,
    /// The transcript was replaced by a compaction summary message.
    Compact { summary: String, message: Message },
}

/// Errors opening or writing the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("session journal {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("session journal {path}: line {line} is not a journal entry: {message}")]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// Another process holds the journal's lock.
    #[error("session journal {path} is in use by another agent process{}", holder_suffix(*.holder))]
    InUse {
        path: PathBuf,
        /// The holder's pid, when this host can tell (`/proc/locks`).
        holder: Option<u32>,
    },
    /// The file system refused the lock itself (not a conflict).
    #[error("session journal {path}: cannot lock it: {source}")]
    Lock { path: PathBuf, source: io::Error },
}

fn holder_suffix(holder: Option<u32>) -> String {
    holder
        .map(|pid| format!(" (pid {pid})"))
        .unwrap_or_default()
}

/// An open journal, positioned for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    /// The file, locked exclusively until the journal is dropped.
    file: Flock<File>,
}

impl Journal {
    /// Opens (creating if needed) the journal at `path` and returns it with
    /// the transcript it describes. A torn final line is dropped (and cut
    /// off the file so the next append starts on a fresh line); a bad line
    /// anywhere else is an error, so a foreign file is never overwritten.
    /// The lock is taken before anything is read, so the replay never sees
    /// another writer's half-written line.
    pub fn open(path: &Path) -> Result<(Journal, Vec<Message>), JournalError> {
        let io_err = |source| JournalError::Io {
            path: path.to_path_buf(),
            source,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent).map_err(io_err)?;
        }
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(path)
            .map_err(io_err)?;
        let file = lock(path, file)?;
        let (messages, good_len, total_len) = replay(path, &file)?;
        if good_len < total_len {
            tracing::warn!(path = %path.display(), dropped = total_len - good_len, "ignoring torn last journal line");
            file.set_len(good_len).map_err(io_err)?;
        }
        Ok((
            Journal {
                path: path.to_path_buf(),
                file,
            },
            messages,
        ))
    }

    /// Appends one entry and syncs it to disk.
    pub fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let mut line = serde_json::to_vec(entry).map_err(|e| JournalError::Io {
            path: self.path.clone(),
            source: io::Error::other(e),
        })?;
        line.push(b'\n');
        self.file
            .write_all(&line)
            .and_then(|()| self.file.sync_data())
            .map_err(|source| JournalError::Io {
                path: self.path.clone(),
                source,
            })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Takes the exclusive lock without waiting.
fn lock(path: &Path, file: File) -> Result<Flock<File>, JournalError> {
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => Ok(locked),
        Err((file, Errno::EWOULDBLOCK)) => Err(JournalError::InUse {
            path: path.to_path_buf(),
            holder: lock_holder(&file),
        }),
        Err((_, errno)) => Err(JournalError::Lock {
            path: path.to_path_buf(),
            source: io::Error::from(errno),
        }),
    }
}

/// The pid holding an exclusive `flock` on `file`, from `/proc/locks`
/// (Linux; absent when the holder is on another host or in another pid
/// namespace).
fn lock_holder(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    let id = FileId {
        major: nix::sys::stat::major(dev),
        minor: nix::sys::stat::minor(dev),
        inode: meta.ino(),
    };
    holder_in(&locks, id)
}

/// Identifies a file the way `/proc/locks` prints it (`MAJ:MIN:INODE`,
/// device numbers in hex).
#[derive(Clone, Copy, Debug, PartialEq)]
struct FileId {
    major: u64,
    minor: u64,
    inode: u64,
}

/// Finds the holder of a granted exclusive `FLOCK` on `id` in the text of
/// `/proc/locks`. Lines of waiters (`->`) and pid 0 (not visible from this
/// pid namespace) are skipped.
fn holder_in(proc_locks: &str, id: FileId) -> Option<u32> {
    proc_locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END"
        let [_, "FLOCK", _, "WRITE", pid, file, ..] = fields.as_slice() else {
            return None;
        };
        let mut parts = file.split(':');
        let major = u64::from_str_radix(parts.next()?, 16).ok()?;
        let minor = u64::from_str_radix(parts.next()?, 16).ok()?;
        let inode = parts.next()?.parse().ok()?;
        let pid = pid.parse().ok().filter(|pid| *pid != 0)?;
        (FileId {
            major,
            minor,
            inode,
        } == id)
            .then_some(pid)
    })
}

/// Rebuilds the transcript. Returns it with the byte length of the valid
/// prefix and the file's length.
fn replay(path: &Path, file: &File) -> Result<(Vec<Message>, u64, u64), JournalError> {
    let mut reader = BufReader::new(file);
    let mut messages = Vec::new();
    let mut offset = 0u64;
    let mut line_no = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|source| JournalError::Io {
                path: path.to_path_buf(),
                source,
            })?;
        if read == 0 {
            return Ok((messages, offset, offset));
        }
        line_no += 1;
        if line.last() != Some(&b'\n') {
            // A torn tail: the process died mid-write.
            return Ok((messages, offset, offset + read as u64));
        }
        match serde_json::from_slice::<Entry>(&line) {
            Ok(entry) => apply(&mut messages, entry),
            Err(e) => {
                return Err(JournalError::Corrupt {
                    path: path.to_path_buf(),
                    line: line_no,
                    message: e.to_string(),
                })
            }
        }
        offset += read as u64;
    }
}

/// Applies one entry to a transcript.
pub fn apply(messages: &mut Vec<Message>, entry: Entry) {
    match entry {
        Entry::Message { message } => messages.push(message),
        Entry::Clear => messages.clear(),
        Entry::Compact { message, .. } => {
            messages.clear();
            messages.push(message);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::{Block, Role};

    fn msg(text: &str) -> Message {
        Message::new(Role::User, vec![Block::text(text)])
    }

    #[test]
    fn replays_messages_clear_and_compact() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s/session.jsonl");
        let (mut journal, messages) = Journal::open(&path).unwrap();
        assert!(messages.is_empty());
        journal
            .append(&Entry::Message { message: msg("a") })
            .unwrap();
        journal.append(&Entry::Clear).unwrap();
        journal
            .append(&Entry::Message { message: msg("b") })
            .unwrap();
        journal
            .append(&Entry::Message { message: msg("c") })
            .unwrap();
        drop(journal);
        let (_, messages) = Journal::open(&path).unwrap();
        assert_eq!(
            messages.iter().map(Message::text).collect::<Vec<_>>(),
            ["b", "c"]
        );

        let (mut journal, _) = Journal::open(&path).unwrap();
        journal
            .append(&Entry::Compact {
                summary: "sum".into(),
                message: msg("summary"),
            })
            .unwrap();
        drop(journal);
        let (_, messages) = Journal::open(&path).unwrap();
        assert_eq!(
            messages.iter().map(Message::text).collect::<Vec<_>>(),
            ["summary"]
        );
    }

    #[test]
    fn torn_last_line_is_ignored_and_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let (mut journal, _) = Journal::open(&path).unwrap();
        journal
            .append(&Entry::Message {
                message: msg("kept"),
            })
            .unwrap();
        drop(journal);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"kind\":\"message\",\"mess");
        std::fs::write(&path, &bytes).unwrap();
        let (mut journal, messages) = Journal::open(&path).unwrap();
        assert_eq!(messages.len(), 1);
        journal
            .append(&Entry::Message {
                message: msg("next"),
            })
            .unwrap();
        drop(journal);
        let (_, messages) = Journal::open(&path).unwrap();
        assert_eq!(
            messages.iter().map(Message::text).collect::<Vec<_>>(),
            ["kept", "next"]
        );
    }

    #[test]
    fn corrupt_middle_line_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        std::fs::write(&path, "not json\n{\"kind\":\"clear\"}\n").unwrap();
        let err = Journal::open(&path).unwrap_err();
        assert!(err.to_string().contains("line 1"), "{err}");
    }

    #[test]
    fn a_second_open_is_refused_while_the_first_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("session.jsonl");
        let (mut first, _) = Journal::open(&path).unwrap();
        first
            .append(&Entry::Message {
                message: msg("mine"),
            })
            .unwrap();

        // A second open file description conflicts even in one process.
        let err = Journal::open(&path).unwrap_err();
        let JournalError::InUse { holder, .. } = &err else {
            panic!("expected InUse, got {err:?}");
        };
        // Where /proc/locks is readable, it names this process.
        if let Some(pid) = holder {
            assert_eq!(*pid, std::process::id());
        }
        let text = err.to_string();
        assert!(
            text.contains("is in use by another agent process"),
            "{text}"
        );
        assert!(text.contains("session.jsonl"), "{text}");

        // The refused open left the journal alone; the holder still writes.
        first
            .append(&Entry::Message {
                message: msg("still mine"),
            })
            .unwrap();
        drop(first);
        let (_, messages) = Journal::open(&path).unwrap();
        assert_eq!(
            messages.iter().map(Message::text).collect::<Vec<_>>(),
            ["mine", "still mine"]
        );
    }

    #[test]
    fn holder_is_read_from_proc_locks() {
        let id = FileId {
            major: 0xfe,
            minor: 1,
            inode: 1941506,
        };
        let locks = "\
1: POSIX  ADVISORY  WRITE 11 fe:01:1941506 0 EOF
2: FLOCK  ADVISORY  READ 12 fe:01:1941506 0 EOF
2: -> FLOCK  ADVISORY  WRITE 13 fe:01:1941506 0 EOF
3: FLOCK  ADVISORY  WRITE 14 fe:00:1941506 0 EOF
4: FLOCK  ADVISORY  WRITE 15 fe:01:1941506 0 EOF
";
        assert_eq!(holder_in(locks, id), Some(15));
        assert_eq!(holder_in("", id), None);
        let hidden = "1: FLOCK  ADVISORY  WRITE 0 fe:01:1941506 0 EOF\n";
        assert_eq!(holder_in(hidden, id), None);
    }
}
