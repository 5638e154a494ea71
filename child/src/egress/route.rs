//! The route to the gateway's egress proxy: a handle on its Unix socket and
//! the per-spawn secret every connection names. Both are taken at start,
//! before the sandbox hides the socket's path and before any tool could
//! inherit the secret from the environment.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use corral_protocol::egress::{parse_preamble, PREAMBLE_WORD, SECRET_BYTES, SECRET_ENV};

/// The relay's hidden command's name (`corral-agent egress-relay`).
pub const SUBCOMMAND: &str = "egress-relay";
/// The relay's flag naming the inherited descriptor of the egress socket.
pub const SOCKET_FD_FLAG: &str = "--socket-fd";
/// The relay's flag naming the inherited descriptor of the model broker's
/// socket.
pub const BROKER_FD_FLAG: &str = "--broker-fd";
/// The agent's own executable, the relay's program: the link works even
/// where the sandbox hides the binary's path.
pub const SELF_EXE: &str = "/proc/self/exe";

/// Why the egress route cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum EgressError {
    /// `--tool-network proxy` without the secret in the environment.
    #[error("--tool-network proxy needs the egress secret in {SECRET_ENV} (the gateway sets it)")]
    MissingSecret,
    /// The secret is not [`SECRET_BYTES`] bytes in lower-case hex.
    #[error("{SECRET_ENV} must be {} lower-case hex digits", SECRET_BYTES * 2)]
    BadSecret,
    /// The socket path cannot be opened.
    #[error("--egress-socket {path}: {source}")]
    Open {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The path names something other than a socket.
    #[error("--egress-socket {0} is not a socket")]
    NotASocket(PathBuf),
}

/// The gateway's egress socket, held open by an `O_PATH` descriptor (a
/// tool process connects through `/proc/self/fd/N`, which works where the
/// path is hidden), and the secret that opens it. Cheap to clone: every
/// clone shares the one descriptor.
#[derive(Clone)]
pub struct EgressRoute {
    /// `O_PATH | O_CLOEXEC` on the socket file; a relay gets it by number.
    socket: Arc<OwnedFd>,
    /// 64 lower-case hex digits, checked at start.
    secret: Arc<str>,
}

impl EgressRoute {
    /// Opens `socket` (which must be a socket) and checks `secret`, the
    /// value [`SECRET_ENV`] had at start.
    pub fn open(socket: &Path, secret: Option<OsString>) -> Result<EgressRoute, EgressError> {
        let secret = secret.ok_or(EgressError::MissingSecret)?;
        let secret = secret.into_string().map_err(|_| EgressError::BadSecret)?;
        let secret = checked_secret(&secret)
            .ok_or(EgressError::BadSecret)?
            .into();
        Ok(EgressRoute {
            socket: Arc::new(open_socket(socket)?),
            secret,
        })
    }

    /// The descriptor's number, valid in this process and, once made
    /// inheritable, in a command it starts.
    pub fn socket_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// The secret, for the relay's environment only.
    pub fn secret(&self) -> &str {
        &self.secret
    }
}

impl std::fmt::Debug for EgressRoute {
    /// Never shows the secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EgressRoute")
            .field("socket_fd", &self.socket_fd())
            .finish_non_exhaustive()
    }
}

impl PartialEq for EgressRoute {
    /// Two routes are the same when they share a descriptor.
    fn eq(&self, other: &EgressRoute) -> bool {
        Arc::ptr_eq(&self.socket, &other.socket)
    }
}

impl Eq for EgressRoute {}

/// `secret` if it has the form the gateway's preamble parser accepts
/// (asked of that parser, so the two never disagree).
pub fn checked_secret(secret: &str) -> Option<&str> {
    let line = format!("{PREAMBLE_WORD} {secret}");
    (parse_preamble(&line) == Some(secret)).then_some(secret)
}

/// Opens `path` with `O_PATH | O_CLOEXEC` (nothing is read or written
/// through it) and checks that it is a socket.
pub fn open_socket(path: &Path) -> Result<OwnedFd, EgressError> {
    let open_failed = |source| EgressError::Open {
        path: path.to_path_buf(),
        source,
    };
    // std adds O_CLOEXEC; with O_PATH the access mode is ignored.
    let file = File::options()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)
        .map_err(open_failed)?;
    let kind = file.metadata().map_err(open_failed)?.file_type();
    if !kind.is_socket() {
        return Err(EgressError::NotASocket(path.to_path_buf()));
    }
    Ok(file.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> String {
        "a1".repeat(SECRET_BYTES)
    }

    #[test]
    fn only_a_socket_with_a_well_formed_secret_makes_a_route() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("proxy.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let route = EgressRoute::open(&path, Some(secret().into())).unwrap();
        assert_eq!(route.secret(), secret());
        assert!(!format!("{route:?}").contains(&secret()), "{route:?}");
        assert_eq!(route.clone(), route);

        let err = EgressRoute::open(&path, None).unwrap_err();
        assert!(matches!(err, EgressError::MissingSecret), "{err}");
        assert!(err.to_string().contains(SECRET_ENV), "{err}");
        for bad in ["", "A1".repeat(SECRET_BYTES).as_str(), "a1", "a1 a1"] {
            let err = EgressRoute::open(&path, Some(bad.into())).unwrap_err();
            assert!(matches!(err, EgressError::BadSecret), "{bad:?}: {err}");
        }

        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        let err = EgressRoute::open(&file, Some(secret().into())).unwrap_err();
        assert!(matches!(err, EgressError::NotASocket(_)), "{err}");
        let err = EgressRoute::open(&dir.path().join("gone"), Some(secret().into())).unwrap_err();
        assert!(matches!(err, EgressError::Open { .. }), "{err}");
    }
}
