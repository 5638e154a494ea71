//! The audit file on disk ([`AuditFile`]): opened append-only, created
//! mode 0600, never through a symbolic link and only if it is a regular
//! file; each append is one `write` then `fdatasync`; rotated by size to
//! `FILE.1` … `FILE.N`; reopened when the name no longer points at the
//! open file (moved or deleted by hand).

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Why the audit file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AuditFileError {
    #[error("{}: is a symbolic link; the audit log is never opened through one (name the file itself)", path.display())]
    Symlink { path: PathBuf },
    #[error("{}: is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

/// The open audit file and what rotation needs to know.
#[derive(Debug)]
pub struct AuditFile {
    path: PathBuf,
    file: File,
    /// Bytes in the file: where the next append starts.
    size: u64,
    /// Device and inode of the open file, to notice it was moved.
    id: (u64, u64),
    /// Rotate before an append would take the file past this.
    max_bytes: u64,
    /// Old files kept: `FILE.1` (newest) … `FILE.keep`.
    keep: usize,
}

impl AuditFile {
    /// Opens (or creates) `path` for appending.
    pub fn open(path: &Path, max_bytes: u64, keep: usize) -> Result<AuditFile, AuditFileError> {
        let (file, size, id) = open_append(path)?;
        Ok(AuditFile {
            path: path.to_path_buf(),
            file,
            size,
            id,
            max_bytes,
            keep,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether a line of `line` bytes, after `pending` bytes not yet
    /// appended, would take the file past its bound. A file that would
    /// be empty before it takes the line whatever its size (one entry is
    /// far below the smallest bound).
    pub fn would_overflow(&self, pending: usize, line: usize) -> bool {
        let before = self.size.saturating_add(pending as u64);
        before > 0 && before.saturating_add(line as u64) > self.max_bytes
    }

    /// Appends `bytes` with one `write` (more only if the kernel takes
    /// part of it) and makes them durable (`fdatasync`). On failure the
    /// file is cut back to where it was, so no half line stays behind.
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        if bytes.is_empty() {
            return Ok(());
        }
        let written = self
            .file
            .write_all(bytes)
            .and_then(|()| self.file.sync_data());
        match written {
            Ok(()) => {
                self.size += bytes.len() as u64;
                Ok(())
            }
            Err(e) => {
                if let Err(cut) = self.file.set_len(self.size) {
                    tracing::warn!(file = %self.path.display(), error = %cut, "cannot cut a failed append off the audit log");
                    // Where the end is now is unknown: ask the file.
                    self.size = self.file.metadata().map_or(self.size, |m| m.len());
                }
                Err(e)
            }
        }
    }

    /// Moves `FILE.k` to `FILE.k+1` (the oldest, `FILE.keep`, is
    /// replaced), `FILE` to `FILE.1`, and opens a new `FILE`.
    pub fn rotate(&mut self) -> Result<(), AuditFileError> {
        let io = |source| AuditFileError::Io {
            path: self.path.clone(),
            source,
        };
        for k in (1..self.keep).rev() {
            match std::fs::rename(numbered(&self.path, k), numbered(&self.path, k + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(io(e)),
                _ => {}
            }
        }
        std::fs::rename(&self.path, numbered(&self.path, 1)).map_err(io)?;
        self.reopen()?;
        if let Some(dir) = self.path.parent() {
            // The renames survive a crash only once the directory is synced.
            let synced = File::open(dir).and_then(|d| d.sync_all());
            if let Err(e) = synced {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot sync the audit log's directory after rotating");
            }
        }
        Ok(())
    }

    /// Reopens `FILE` unless the name still points at the open file.
    pub fn follow_name(&mut self) -> Result<(), AuditFileError> {
        match std::fs::symlink_metadata(&self.path) {
            Ok(meta) if (meta.dev(), meta.ino()) == self.id => Ok(()),
            _ => self.reopen(),
        }
    }

    fn reopen(&mut self) -> Result<(), AuditFileError> {
        let (file, size, id) = open_append(&self.path)?;
        self.file = file;
        self.size = size;
        self.id = id;
        Ok(())
    }
}

/// `FILE.k`.
pub fn numbered(path: &Path, k: usize) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(format!(".{k}"));
    PathBuf::from(name)
}

/// Opens `path` write-only, appending, created 0600, refusing a symbolic
/// link (`O_NOFOLLOW`) and anything but a regular file (`O_NONBLOCK`, so
/// a FIFO without a reader fails instead of blocking the open): the file,
/// its size and its (device, inode).
fn open_append(path: &Path) -> Result<(File, u64, (u64, u64)), AuditFileError> {
    let opened = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(AuditFileError::Symlink {
                path: path.to_path_buf(),
            })
        }
        Err(e) if matches!(e.raw_os_error(), Some(nix::libc::ENXIO | nix::libc::EISDIR)) => {
            return Err(AuditFileError::NotAFile {
                path: path.to_path_buf(),
            })
        }
        Err(source) => {
            return Err(AuditFileError::Io {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let meta = file.metadata().map_err(|source| AuditFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if !meta.is_file() {
        return Err(AuditFileError::NotAFile {
            path: path.to_path_buf(),
        });
    }
    Ok((file, meta.len(), (meta.dev(), meta.ino())))
}

#[cfg(test)]
#[path = "file_tests.rs"]
mod tests;
