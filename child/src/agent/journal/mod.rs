//! The session journal: an append-only JSONL file of transcript changes.
//!
//! Each line is one [`Entry`] (the format lives in `corral_protocol::journal`).
//! Lines are written whole and synced to disk at every message boundary, so a
//! process killed at any moment leaves every completed message on disk and at
//! worst a torn last line, which loading ignores. A write the disk refuses
//! (full, I/O error) is cut off again and retried with the next append
//! (`append`). Replaying the entries in order rebuilds the transcript.
//!
//! An open journal holds an exclusive `flock` on its file for as long as it
//! lives (the kernel drops it when the process dies), so two agents never
//! append to one journal: the second open fails with
//! [`JournalError::InUse`]. This is what keeps two gateways sharing a state
//! directory from running two children for one project.

mod append;
mod holder;

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use corral_protocol::journal::{apply, Entry};
use corral_protocol::journal::{scan, Damage};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

use crate::transcript::Message;
use append::Appender;

/// Errors opening or writing the journal.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    #[error("session journal {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("session journal {path}: line {line} is not a journal entry: {message} (`corral journal repair` keeps the entries before it and moves the rest aside)")]
    Corrupt {
        path: PathBuf,
        line: usize,
        message: String,
    },
    /// A write failed; the file was cut back to its last whole entry and
    /// the change waits in memory for the next append.
    #[error("the conversation could not be saved to {path}: {source}; {pending} change(s) are kept in memory and written when the disk accepts them")]
    Unsaved {
        path: PathBuf,
        source: io::Error,
        pending: usize,
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
    /// The file, locked exclusively until the journal is dropped, with the
    /// changes the disk has not taken yet.
    appender: Appender<Flock<File>>,
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
        // A link in the journal's place is refused, not followed: the
        // journal is written wherever it points otherwise.
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(io_err)?;
        let file = lock(path, file)?;
        let mut messages = Vec::new();
        let scanned =
            scan(BufReader::new(&*file), |entry| apply(&mut messages, entry)).map_err(io_err)?;
        match scanned.damage {
            None => {}
            Some(Damage::Torn { line }) => {
                tracing::warn!(path = %path.display(), line, "ignoring torn last journal line");
                file.set_len(scanned.valid_len).map_err(io_err)?;
            }
            Some(Damage::Bad { line, message }) => {
                return Err(JournalError::Corrupt {
                    path: path.to_path_buf(),
                    line,
                    message,
                })
            }
        }
        Ok((
            Journal {
                path: path.to_path_buf(),
                appender: Appender::new(file, scanned.valid_len),
            },
            messages,
        ))
    }

    /// Appends one entry and syncs it to disk, after any entries an earlier
    /// failure left waiting. On failure the file keeps only whole entries and
    /// this one waits too: the error says so, and nothing is lost unless the
    /// process ends before the disk accepts writes again.
    pub fn append(&mut self, entry: &Entry) -> Result<(), JournalError> {
        let line = corral_protocol::journal::to_line(entry).map_err(|e| JournalError::Io {
            path: self.path.clone(),
            source: io::Error::other(e),
        })?;
        let was_stalled = self.appender.pending() > 0;
        match self.appender.append(line) {
            Ok(()) => {
                if was_stalled {
                    tracing::info!(path = %self.path.display(), "session journal writes resumed");
                }
                Ok(())
            }
            Err(stalled) => Err(JournalError::Unsaved {
                path: self.path.clone(),
                source: stalled.source,
                pending: stalled.pending,
            }),
        }
    }

    /// Changes kept in memory because the disk refused them.
    pub fn pending(&self) -> usize {
        self.appender.pending()
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for Journal {
    /// A last try at writing what the disk refused before.
    fn drop(&mut self) {
        if self.appender.pending() == 0 {
            return;
        }
        if let Err(stalled) = self.appender.flush() {
            tracing::error!(path = %self.path.display(), error = %stalled.source, lost = stalled.pending, "session journal: changes could not be saved before exit");
        }
    }
}

/// Takes the exclusive lock without waiting.
fn lock(path: &Path, file: File) -> Result<Flock<File>, JournalError> {
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => Ok(locked),
        Err((file, Errno::EWOULDBLOCK)) => Err(JournalError::InUse {
            path: path.to_path_buf(),
            holder: holder::lock_holder(&file),
        }),
        Err((_, errno)) => Err(JournalError::Lock {
            path: path.to_path_buf(),
            source: io::Error::from(errno),
        }),
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
}
