//! systemd readiness notification (`sd_notify`), without libsystemd: when
//! `NOTIFY_SOCKET` is set, `READY=1` goes to it once the gateway accepts
//! connections and `STOPPING=1` when SIGTERM or SIGINT starts the shutdown
//! (sent by the one signal listener, [`crate::shutdown`]).
//! The socket is a unix datagram socket, named by a path or, with a leading
//! `@`, in the abstract namespace. Without `NOTIFY_SOCKET` nothing happens.

use std::ffi::{OsStr, OsString};
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The variable systemd sets for `Type=notify` services.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Why the notification socket cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("{NOTIFY_SOCKET}={0:?} is not a unix socket path or @abstract name")]
    Unsupported(OsString),
    #[error("{NOTIFY_SOCKET}: {0}")]
    Io(#[from] io::Error),
}

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    socket: UnixDatagram,
    addr: SocketAddr,
}

impl Notifier {
    /// The notifier `NOTIFY_SOCKET` names, if it is set and not empty.
    pub fn from_env() -> Option<Result<Notifier, NotifyError>> {
        let address = std::env::var_os(NOTIFY_SOCKET).filter(|v| !v.is_empty())?;
        Some(Notifier::new(&address))
    }

    /// A notifier for `address`: an absolute socket path, or `@name` for an
    /// abstract socket (what `sd_notify(3)` accepts).
    pub fn new(address: &OsStr) -> Result<Notifier, NotifyError> {
        let bytes = address.as_bytes();
        let addr = match bytes.split_first() {
            Some((b'@', name)) => SocketAddr::from_abstract_name(name)?,
            Some((b'/', _)) => SocketAddr::from_pathname(address)?,
            // `vsock:…` and other schemes of newer systemd are not spoken.
            _ => return Err(NotifyError::Unsupported(address.to_os_string())),
        };
        let socket = UnixDatagram::unbound()?;
        // A full receive queue must never stall the runtime: drop instead.
        socket.set_nonblocking(true)?;
        Ok(Notifier { socket, addr })
    }

    /// Sends one state datagram, e.g. `READY=1`.
    pub fn send(&self, state: &str) -> io::Result<()> {
        self.socket
            .send_to_addr(state.as_bytes(), &self.addr)
            .map(drop)
    }
}

/// The service manager's notifier, when `NOTIFY_SOCKET` names one. A
/// socket that cannot be used is logged and treated as none: the gateway
/// works the same without a service manager.
pub fn service_manager() -> Option<Notifier> {
    match Notifier::from_env()? {
        Ok(notifier) => Some(notifier),
        Err(e) => {
            tracing::warn!("cannot notify the service manager: {e}");
            None
        }
    }
}

impl Notifier {
    /// Sends `state`, logging a failure instead of returning it.
    pub fn notify(&self, state: &str) {
        match self.send(state) {
            Ok(()) => tracing::debug!(state, "notified the service manager"),
            Err(e) => tracing::warn!(state, "cannot notify the service manager: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn received(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).unwrap();
        String::from_utf8(buf[..n].to_vec()).unwrap()
    }

    #[test]
    fn sends_states_to_a_socket_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let manager = UnixDatagram::bind(&path).unwrap();
        let notifier = Notifier::new(path.as_os_str()).unwrap();
        notifier.send("READY=1").unwrap();
        notifier.send("STOPPING=1").unwrap();
        assert_eq!(received(&manager), "READY=1");
        assert_eq!(received(&manager), "STOPPING=1");
    }

    #[test]
    fn sends_to_an_abstract_socket() {
        let name = format!("corral-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let manager = UnixDatagram::bind_addr(&addr).unwrap();
        let notifier = Notifier::new(OsStr::new(&format!("@{name}"))).unwrap();
        notifier.send("READY=1").unwrap();
        assert_eq!(received(&manager), "READY=1");
    }

    #[test]
    fn other_addresses_are_refused() {
        for address in ["vsock:2:1234", "notify.sock", "./notify.sock"] {
            let err = Notifier::new(OsStr::new(address)).unwrap_err();
            assert!(matches!(err, NotifyError::Unsupported(_)), "{err}");
        }
    }

    #[test]
    fn a_missing_manager_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let notifier = Notifier::new(dir.path().join("gone.sock").as_os_str()).unwrap();
        assert!(notifier.send("READY=1").is_err());
    }
}
