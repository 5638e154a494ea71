//! The session journal: an append-only JSONL file of transcript changes.
//!
//! Each line is one [`Entry`]. Lines are written whole and synced to disk at
//! every message boundary, so a process killed at any moment leaves every
//! completed message on disk and at worst a torn last line, which loading
//! ignores. Replaying the entries in order rebuilds the transcript.

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

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
}

/// An open journal, positioned for appending.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
}

impl Journal {
    /// Opens (creating if needed) the journal at `path` and returns it with
    /// the transcript it describes. A torn final line is dropped (and cut
    /// off the file so the next append starts on a fresh line); a bad line
    /// anywhere else is an error, so a foreign file is never overwritten.
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
}
