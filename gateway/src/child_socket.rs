//! The Unix sockets sandboxed children reach the gateway through (the
//! egress proxy's, the model broker's): binding them (a stale socket is
//! replaced, any other file is left alone, paths longer than `sun_path`
//! work, the mode is 0666 so that a child running as another user can
//! connect) and checking who connects ([`Peers`]: only the accounts
//! children run as, and then only a valid per-spawn secret gets anything).

use std::ffi::OsStr;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags, CWD};
use rustix::io::Errno;

/// Bytes of `sun_path`, the terminating NUL included: longer paths are
/// bound through the directory's descriptor (`/proc/self/fd/N/name`).
const SUN_PATH: usize = 108;

/// The socket's mode: connecting needs write permission, and any user's
/// tool may connect (the secret is what authorises).
const SOCKET_MODE: u32 = 0o666;

/// Binds a listening socket at `path`, whose directory must exist. A
/// socket already there (left by an earlier gateway) is unlinked first;
/// any other kind of file is an `AlreadyExists` error, never removed.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    let invalid = || io::Error::new(io::ErrorKind::InvalidInput, "the socket path names no file");
    let name: &OsStr = path.file_name().ok_or_else(invalid)?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let dir = rustix::fs::openat(
        CWD,
        parent,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    match rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Socket => {
            rustix::fs::unlinkat(&dir, name, AtFlags::empty())?;
        }
        Ok(_) => {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ))
        }
        Err(Errno::NOENT) => {}
        Err(errno) => return Err(errno.into()),
    }
    let listener = if path.as_os_str().len() < SUN_PATH {
        UnixListener::bind(path)?
    } else {
        let short: PathBuf = ["/proc/self/fd", &dir.as_raw_fd().to_string()]
            .iter()
            .collect::<PathBuf>()
            .join(name);
        UnixListener::bind(short)?
    };
    rustix::fs::chmodat(
        &dir,
        name,
        Mode::from_raw_mode(SOCKET_MODE),
        AtFlags::empty(),
    )?;
    Ok(listener)
}

/// Who may connect: the accounts children run as. The socket's mode lets
/// anyone connect (a `--child-user` child must), so the peer's uid
/// (`SO_PEERCRED`) is checked at accept; anyone else is closed at once and
/// holds no place under a connection limit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Peers {
    /// The uids admitted; `None`: any (tests).
    uids: Option<Vec<u32>>,
}

impl Peers {
    /// Only these accounts.
    pub fn only(uids: impl IntoIterator<Item = u32>) -> Peers {
        Peers {
            uids: Some(uids.into_iter().collect()),
        }
    }

    /// Whether the process at the other end of `stream` may be served.
    pub fn admits(&self, stream: &tokio::net::UnixStream) -> bool {
        let Some(uids) = &self.uids else {
            return true;
        };
        stream
            .peer_cred()
            .is_ok_and(|cred| uids.contains(&cred.uid()))
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};

    use super::*;

    #[test]
    fn binds_long_paths_replaces_stale_sockets_and_keeps_other_files() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d".repeat(120));
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("proxy.sock");
        assert!(path.as_os_str().len() > SUN_PATH);
        let first = bind(&path).unwrap();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, SOCKET_MODE);
        drop(first);
        // A stale socket from an earlier run is replaced.
        let _again = bind(&path).unwrap();
        let file = dir.join("notes");
        std::fs::write(&file, "keep").unwrap();
        let err = bind(&file).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    }

    #[tokio::test]
    async fn only_the_listed_accounts_are_admitted() {
        let (ours, _theirs) = tokio::net::UnixStream::pair().unwrap();
        let me = nix::unistd::getuid().as_raw();
        assert!(Peers::default().admits(&ours));
        assert!(Peers::only([me]).admits(&ours));
        assert!(!Peers::only([me.wrapping_add(1)]).admits(&ours));
        assert!(!Peers::only([]).admits(&ours));
    }
}
