//! Directories and files under the state directory, made and opened without
//! following a symbolic link anywhere below it: each step is an `openat`
//! (or `mkdirat`) with `O_NOFOLLOW` from the handle of the directory before
//! it. A link planted at `STATE/homes`, `STATE/homes/PROJECT`,
//! `STATE/sessions` or a journal is refused with [`StateFsError`], never
//! followed, so the gateway (possibly root) never creates, chmods, chowns or
//! writes anything outside its state directory on a link's word.

use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, CWD};
use rustix::io::Errno;

pub mod ahead;

/// Why a path under the state directory could not be made or opened.
#[derive(Debug, thiserror::Error)]
#[error("{}: {}", path.display(), describe(*errno))]
pub struct StateFsError {
    /// The path that failed.
    pub path: PathBuf,
    errno: Errno,
}

impl StateFsError {
    /// Whether the path is a symbolic link (or something else where a
    /// directory was expected).
    pub fn is_link(&self) -> bool {
        self.errno == Errno::LOOP || self.errno == Errno::NOTDIR
    }

    /// Whether the path is not what was asked for: a link, a directory
    /// where a file was expected or the other way round, a FIFO, socket
    /// or device where a regular file was expected.
    pub fn is_wrong_kind(&self) -> bool {
        matches!(
            self.errno,
            Errno::LOOP | Errno::NOTDIR | Errno::ISDIR | Errno::NXIO
        )
    }

    /// Whether the path does not exist.
    pub fn is_not_found(&self) -> bool {
        self.errno == Errno::NOENT
    }

    /// Whether something exists at the path already.
    pub fn errno_is_exists(&self) -> bool {
        self.errno == Errno::EXIST
    }
}

/// A failed I/O call on `path` (after it was opened) as a [`StateFsError`].
pub fn io_error(path: PathBuf, e: &std::io::Error) -> StateFsError {
    StateFsError {
        path,
        errno: Errno::from_io_error(e).unwrap_or(Errno::IO),
    }
}

fn describe(errno: Errno) -> String {
    match errno {
        Errno::LOOP | Errno::NOTDIR => "is a symbolic link or not a directory; corral follows no \
                                        link under its state directory (remove it, and keep the \
                                        state directory to corral)"
            .to_string(),
        other => std::io::Error::from(other).to_string(),
    }
}

/// An open directory at or under the state directory.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens the state directory itself (`state`, as configured: canonical,
    /// so its own path holds no link).
    pub fn open_root(state: &Path) -> Result<Dir, StateFsError> {
        let fd = rustix::fs::openat(CWD, state, dir_flags(), Mode::empty()).map_err(|errno| {
            StateFsError {
                path: state.to_path_buf(),
                errno,
            }
        })?;
        Ok(Dir {
            fd,
            path: state.to_path_buf(),
        })
    }

    /// The directory `name` in this one, made with `mode` if missing; a
    /// link there is refused.
    pub fn subdir(&self, name: &str, mode: u32) -> Result<Dir, StateFsError> {
        let path = self.path.join(name);
        let failed = |errno| StateFsError {
            path: path.clone(),
            errno,
        };
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) | Err(Errno::EXIST) => {}
            Err(errno) => return Err(failed(errno)),
        }
        let fd = rustix::fs::openat(&self.fd, name, dir_flags(), Mode::empty()).map_err(failed)?;
        Ok(Dir { fd, path })
    }

    /// Opens the regular file `name` in this directory for appending,
    /// creating it with `mode` if missing; a link there is refused.
    pub fn append_file(&self, name: &str, mode: u32) -> Result<File, StateFsError> {
        let flags = OFlags::WRONLY
            | OFlags::APPEND
            | OFlags::CREATE
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        self.open_file(name, flags, mode)
    }

    /// [`Dir::append_file`] for a file that cold starts make: one made
    /// ahead is renamed into place when `name` is missing (see [`ahead`]).
    pub fn append_file_made_ahead(&self, name: &str, mode: u32) -> Result<File, StateFsError> {
        ahead::append_file(self, name, mode)
    }

    /// Another handle on this directory.
    pub fn try_clone(&self) -> Result<Dir, StateFsError> {
        let fd = rustix::io::fcntl_dupfd_cloexec(&self.fd, 0).map_err(|errno| StateFsError {
            path: self.path.clone(),
            errno,
        })?;
        Ok(Dir {
            fd,
            path: self.path.clone(),
        })
    }

    /// Opens the regular file `name` for reading; a link is refused, and
    /// so is anything else that is not a regular file, without waiting
    /// (`O_NONBLOCK`: opening a FIFO for reading would otherwise block
    /// until someone writes to it; regular files ignore the flag).
    pub fn read_file(&self, name: &str) -> Result<File, StateFsError> {
        let flags =
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK;
        self.open_file(name, flags, 0)
    }

    /// Writes `text` to `name` whole: into `name.tmp` (a link there is
    /// refused, a stale file replaced), then renamed over `name`.
    pub fn replace_file(&self, name: &str, text: &str) -> Result<(), StateFsError> {
        use std::io::Write as _;
        let tmp = format!("{name}.tmp");
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::TRUNC
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        let mut file = self.open_file(&tmp, flags, 0o600)?;
        file.write_all(text.as_bytes())
            .map_err(|e| self.io_failed(&tmp, e))?;
        rustix::fs::renameat(&self.fd, tmp.as_str(), &self.fd, name).map_err(|errno| StateFsError {
            path: self.path.join(name),
            errno,
        })
    }

    /// Writes `text` to a new file `name`, failing with `EEXIST` when one
    /// is there: written whole under a unique temporary name, then linked
    /// to `name` (`link(2)` never replaces, also on network file systems,
    /// so of two writers racing for one name exactly one wins).
    pub fn create_new_file(&self, name: &str, text: &str, mode: u32) -> Result<(), StateFsError> {
        use std::io::Write as _;
        let mut unique = [0u8; 8];
        getrandom::getrandom(&mut unique).map_err(|_| StateFsError {
            path: self.path.join(name),
            errno: Errno::IO,
        })?;
        let tmp = format!(
            ".{name}.{}.tmp",
            unique
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOCTTY;
        let mut file = self.open_file(&tmp, flags, mode)?;
        let written = file
            .write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(|e| self.io_failed(&tmp, e));
        let linked = written.and_then(|()| {
            rustix::fs::linkat(
                &self.fd,
                tmp.as_str(),
                &self.fd,
                name,
                rustix::fs::AtFlags::empty(),
            )
            .map_err(|errno| StateFsError {
                path: self.path.join(name),
                errno,
            })
        });
        let _ = rustix::fs::unlinkat(&self.fd, tmp.as_str(), rustix::fs::AtFlags::empty());
        linked
    }

    /// Writes `text` to `name` whole and durably, for files several
    /// processes share (on a network file system too): into `tmp`, a
    /// name of the caller's own so that two writers never share a
    /// temporary file (a link there is refused, a stale file replaced),
    /// flushed to storage, then renamed over `name`. Readers see the old
    /// file or the new one, never a part.
    pub fn replace_file_durably(
        &self,
        name: &str,
        tmp: &str,
        text: &str,
    ) -> Result<(), StateFsError> {
        use std::io::Write as _;
        let flags = OFlags::WRONLY
            | OFlags::CREATE
            | OFlags::TRUNC
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NOCTTY;
        let mut file = self.open_file(tmp, flags, 0o600)?;
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_data())
            .map_err(|e| self.io_failed(tmp, e))?;
        self.rename(tmp, name)
    }

    /// Renames `from` to `to` within this directory, replacing `to`
    /// atomically. Only one of several processes renaming the same
    /// `from` succeeds; the others get a not-found error.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), StateFsError> {
        rustix::fs::renameat(&self.fd, from, &self.fd, to).map_err(|errno| StateFsError {
            path: self.path.join(from),
            errno,
        })
    }

    /// Removes the file `name` (a link is removed, not followed).
    pub fn remove_file(&self, name: &str) -> Result<(), StateFsError> {
        rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::empty()).map_err(|errno| {
            StateFsError {
                path: self.path.join(name),
                errno,
            }
        })
    }

    /// The names of the entries of this directory (not `.` and `..`; names
    /// that are not UTF-8 are left out), at most `limit` of them.
    pub fn names(&self, limit: usize) -> Result<Vec<String>, StateFsError> {
        let failed = |errno| StateFsError {
            path: self.path.clone(),
            errno,
        };
        let mut names = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd).map_err(failed)? {
            let entry = entry.map_err(failed)?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            if names.len() == limit {
                break;
            }
            names.push(name.to_string());
        }
        Ok(names)
    }

    /// When this directory last changed (a file added, removed or renamed).
    pub fn modified(&self) -> Result<(i64, u64), StateFsError> {
        let stat = rustix::fs::fstat(&self.fd).map_err(|errno| StateFsError {
            path: self.path.clone(),
            errno,
        })?;
        Ok((stat.st_mtime, stat.st_mtime_nsec as u64))
    }

    /// Sets the mode and, when given, the owner of this directory.
    pub fn set_owner_and_mode(
        &self,
        owner: Option<(u32, u32)>,
        mode: u32,
    ) -> Result<(), StateFsError> {
        let failed = |errno| StateFsError {
            path: self.path.clone(),
            errno,
        };
        if let Some((uid, gid)) = owner {
            let (uid, gid) = (
                rustix::fs::Uid::from_raw(uid),
                rustix::fs::Gid::from_raw(gid),
            );
            rustix::fs::fchown(&self.fd, Some(uid), Some(gid)).map_err(failed)?;
        }
        rustix::fs::fchmod(&self.fd, Mode::from_raw_mode(mode)).map_err(failed)
    }

    /// Where this directory is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn open_file(&self, name: &str, flags: OFlags, mode: u32) -> Result<File, StateFsError> {
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(mode)).map_err(
            |errno| StateFsError {
                path: self.path.join(name),
                errno,
            },
        )?;
        let file = File::from(fd);
        match file.metadata() {
            Ok(meta) if meta.is_file() => Ok(file),
            Ok(_) => Err(StateFsError {
                path: self.path.join(name),
                errno: Errno::ISDIR,
            }),
            Err(e) => Err(self.io_failed(name, e)),
        }
    }

    fn io_failed(&self, name: &str, e: std::io::Error) -> StateFsError {
        io_error(self.path.join(name), &e)
    }
}

impl AsFd for Dir {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A directory, opened read-only without following a link.
fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{symlink, PermissionsExt};

    #[test]
    fn directories_and_files_are_made_below_the_state_directory() {
        let state = tempfile::tempdir().unwrap();
        let root = Dir::open_root(state.path()).unwrap();
        let homes = root.subdir("homes", 0o755).unwrap();
        let home = homes.subdir("alpha", 0o700).unwrap();
        home.set_owner_and_mode(None, 0o700).unwrap();
        let meta = std::fs::metadata(state.path().join("homes/alpha")).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        // Again: everything already exists.
        let homes = root.subdir("homes", 0o755).unwrap();
        homes.subdir("alpha", 0o700).unwrap();
        let sessions = root.subdir("sessions", 0o755).unwrap();
        drop(sessions.append_file("a.jsonl", 0o600).unwrap());
        sessions.replace_file("a.session-id", "s1\n").unwrap();
        sessions.replace_file("a.session-id", "s2\n").unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut sessions.read_file("a.session-id").unwrap(), &mut text)
            .unwrap();
        assert_eq!(text, "s2\n");
        assert!(!state.path().join("sessions/a.session-id.tmp").exists());
    }

    #[test]
    fn shared_files_are_replaced_renamed_listed_and_removed() {
        let state = tempfile::tempdir().unwrap();
        let dir = Dir::open_root(state.path())
            .unwrap()
            .subdir("shared", 0o755)
            .unwrap();
        dir.replace_file_durably("a.json", "a.json.w1.tmp", "one\n")
            .unwrap();
        dir.replace_file_durably("a.json", "a.json.w2.tmp", "two\n")
            .unwrap();
        assert_eq!(
            std::fs::read_to_string(state.path().join("shared/a.json")).unwrap(),
            "two\n"
        );
        dir.rename("a.json", "b.json").unwrap();
        assert!(dir.rename("a.json", "c.json").unwrap_err().is_not_found());
        let mut names = dir.names(10).unwrap();
        names.sort();
        assert_eq!(names, ["b.json"]);
        std::fs::write(state.path().join("shared/c.json"), "").unwrap();
        assert_eq!(dir.names(1).unwrap().len(), 1);
        dir.remove_file("b.json").unwrap();
        assert!(dir.remove_file("b.json").unwrap_err().is_not_found());
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().join("target");
        std::fs::write(&target, "precious").unwrap();
        symlink(&target, state.path().join("shared/d.json.tmp")).unwrap();
        assert!(dir
            .replace_file_durably("d.json", "d.json.tmp", "x")
            .unwrap_err()
            .is_link());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    }

    #[test]
    fn a_link_anywhere_below_is_refused_and_nothing_is_made_through_it() {
        let state = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        symlink(elsewhere.path(), state.path().join("homes")).unwrap();
        let root = Dir::open_root(state.path()).unwrap();
        let err = root.subdir("homes", 0o755).unwrap_err();
        assert!(err.is_link(), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");

        std::fs::create_dir(state.path().join("real")).unwrap();
        let real = root.subdir("real", 0o755).unwrap();
        symlink(elsewhere.path(), state.path().join("real/alpha")).unwrap();
        assert!(real.subdir("alpha", 0o700).unwrap_err().is_link());

        let target = elsewhere.path().join("target");
        std::fs::write(&target, "precious").unwrap();
        symlink(&target, state.path().join("real/j.jsonl")).unwrap();
        symlink(&target, state.path().join("real/s.session-id.tmp")).unwrap();
        symlink(&target, state.path().join("real/r.session-id")).unwrap();
        assert!(real.append_file("j.jsonl", 0o600).unwrap_err().is_link());
        assert!(real
            .replace_file("s.session-id", "x")
            .unwrap_err()
            .is_link());
        assert!(real.read_file("r.session-id").unwrap_err().is_link());
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
        assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 1);
    }
}
