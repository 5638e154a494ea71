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

    /// Whether the path does not exist.
    pub fn is_not_found(&self) -> bool {
        self.errno == Errno::NOENT
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

    /// Opens the regular file `name` for reading; a link is refused.
    pub fn read_file(&self, name: &str) -> Result<File, StateFsError> {
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY;
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
