//! `corral-agent egress-relay --socket-fd N [--listen ADDR] -- CMD…` (a
//! hidden command): runs inside a tool command's network namespace, where
//! `lo` is the only interface. It listens on [`PROXY_ADDR`], starts CMD with
//! the proxy variables pointing there, and carries each TCP connection CMD
//! (or anything it starts) makes to the gateway's egress socket, behind the
//! preamble naming the secret. With `--broker-fd N` it also listens on
//! [`BROKER_ADDR`] and carries each connection there to the gateway's
//! model-key broker as it is (no preamble: the HTTP request names its
//! placeholder key). It exits as CMD does.
//!
//! Tasks: one accept loop over both listeners (at most
//! [`MAX_CONNECTIONS`] relayed at once, together),
//! one task per connection, CMD's wait, and the forwarding of
//! SIGTERM/SIGINT/SIGHUP/SIGQUIT to CMD.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::Arc;

use corral_protocol::egress::{preamble, NO_PROXY, SECRET_ENV};
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::signal::Signal;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::process::Child;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use corral_protocol::egress::{BROKER_ADDR, PROXY_ADDR};

use super::route::checked_secret;
use crate::sandbox::{self, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND, EXIT_SANDBOX_UNAVAILABLE};

pub use super::route::{BROKER_FD_FLAG, SELF_EXE, SOCKET_FD_FLAG, SUBCOMMAND};
/// TCP connections one command may have relayed at once; further ones
/// wait in the listen queue. The gateway caps a project at a quarter of
/// `--egress-max-connections` anyway; this keeps one command from taking
/// all of its project's.
pub const MAX_CONNECTIONS: usize = 64;
/// Exit code when the relay cannot start (its reason on stderr): the
/// confinement cannot be set up, as with the sandbox (`EX_CONFIG`).
pub const EXIT_RELAY_UNAVAILABLE: u8 = EXIT_SANDBOX_UNAVAILABLE;

/// Signals passed on to CMD.
const FORWARDED: [Signal; 4] = [
    Signal::SIGTERM,
    Signal::SIGINT,
    Signal::SIGHUP,
    Signal::SIGQUIT,
];

/// Why the relay cannot start.
#[derive(Debug, thiserror::Error)]
enum RelayError {
    #[error("{SECRET_ENV} is missing or malformed")]
    Secret,
    #[error("descriptor {fd} is not the egress socket: {reason}")]
    Socket { fd: RawFd, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot start its async runtime: {0}")]
    Runtime(std::io::Error),
}

/// How the relay ends: as CMD ended, or with an exit code of its own.
enum End {
    Status(ExitStatus),
    Code(u8),
}

/// The model broker's side of a relay: its inherited descriptor, and
/// where CMD's model calls are taken.
#[derive(Clone, Copy, Debug)]
pub struct BrokerSeat {
    pub fd: RawFd,
    pub listen: SocketAddr,
}

/// Runs the relay; returns the exit code (or dies by CMD's signal).
/// `secret` is the value [`SECRET_ENV`] had at start (`main` removed it
/// from the environment).
pub fn run(
    socket_fd: RawFd,
    listen: SocketAddr,
    broker: Option<BrokerSeat>,
    command: &[OsString],
    secret: Option<OsString>,
) -> u8 {
    // The secret sits in this process's initial environment block.
    if let Err(e) = sandbox::make_undumpable() {
        eprintln!("corral-agent: egress relay: cannot make the process undumpable: {e}");
        return EXIT_RELAY_UNAVAILABLE;
    }
    let Some((program, args)) = command.split_first() else {
        eprintln!("corral-agent: {SUBCOMMAND} needs a command after --");
        return 2;
    };
    let end = prepare(socket_fd, secret).and_then(|(socket, preamble)| {
        let broker = broker
            .map(|seat| inherited_socket(seat.fd).map(|path| (path, seat.listen)))
            .transpose()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(RelayError::Runtime)?;
        let relay = Relay {
            socket,
            preamble: preamble.into(),
            broker: broker.as_ref().map(|(path, _)| path.clone()),
            limit: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
        };
        let broker_listen = broker.map(|(_, listen)| listen);
        runtime.block_on(relay.serve(listen, broker_listen, program, args))
    });
    match end {
        Ok(End::Code(code)) => code,
        Ok(End::Status(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => code as u8,
            (None, Some(signal)) => match Signal::try_from(signal) {
                Ok(signal) => sandbox::die_by_signal(signal),
                Err(_) => 128u8.wrapping_add(signal as u8),
            },
            (None, None) => 1,
        },
        Err(e) => {
            eprintln!("corral-agent: egress relay: {e}");
            EXIT_RELAY_UNAVAILABLE
        }
    }
}

/// Checks the secret and the descriptor (a socket, kept from CMD), and
/// returns the path to connect through and the preamble.
fn prepare(socket_fd: RawFd, secret: Option<OsString>) -> Result<(PathBuf, String), RelayError> {
    let secret = secret
        .and_then(|s| s.into_string().ok())
        .ok_or(RelayError::Secret)?;
    let secret = checked_secret(&secret).ok_or(RelayError::Secret)?;
    Ok((inherited_socket(socket_fd)?, preamble(secret)))
}

/// The path to connect to an inherited socket descriptor through, once
/// checked (a socket, kept from CMD).
fn inherited_socket(fd: RawFd) -> Result<PathBuf, RelayError> {
    let socket_error = |reason: String| RelayError::Socket { fd, reason };
    fcntl(fd, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)).map_err(|e| socket_error(e.to_string()))?;
    // connect(2) and stat(2) follow this link to the socket file.
    let path = PathBuf::from(format!("/proc/self/fd/{fd}"));
    let kind = std::fs::metadata(&path)
        .map_err(|e| socket_error(e.to_string()))?
        .file_type();
    if !kind.is_socket() {
        return Err(socket_error("not a socket".into()));
    }
    Ok(path)
}

/// What each connection needs.
struct Relay {
    /// `/proc/self/fd/N`: the gateway's egress socket.
    socket: PathBuf,
    /// The first line of every connection, naming the secret.
    preamble: Arc<str>,
    /// `/proc/self/fd/N`: the gateway's model broker, if any.
    broker: Option<PathBuf>,
    /// One permit per connection being relayed.
    limit: Arc<Semaphore>,
}

impl Relay {
    /// Listens, starts CMD, and relays until CMD ends.
    async fn serve(
        self,
        listen: SocketAddr,
        broker_listen: Option<SocketAddr>,
        program: &OsString,
        args: &[OsString],
    ) -> Result<End, RelayError> {
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| RelayError::Listen { addr, source })
        };
        let listener = bind(listen).await?;
        let broker_listener = match broker_listen {
            Some(addr) => Some(bind(addr).await?),
            None => None,
        };
        let addr = listener.local_addr().map_err(|source| RelayError::Listen {
            addr: listen,
            source,
        })?;
        let mut forwarded = Vec::new();
        for caught in FORWARDED {
            let stream =
                signal(SignalKind::from_raw(caught as i32)).map_err(RelayError::Runtime)?;
            forwarded.push((caught, stream));
        }
        let mut child = match spawn(program, args, addr) {
            Ok(child) => child,
            Err(code) => return Ok(End::Code(code)),
        };
        // Only CMD holds the tool's pipes now, so they close when it (and
        // what it leaves behind) closes them.
        detach_stdio();
        loop {
            tokio::select! {
                status = child.wait() => {
                    return Ok(match status {
                        Ok(status) => End::Status(status),
                        Err(_) => End::Code(1),
                    });
                }
                accepted = accept(&listener, &self.limit) => {
                    if let Some((stream, permit)) = accepted {
                        let socket = self.socket.clone();
                        let preamble = self.preamble.clone();
                        tokio::spawn(async move {
                            carry(stream, &socket, Some(&preamble)).await;
                            drop(permit);
                        });
                    }
                }
                accepted = accept_if(broker_listener.as_ref(), &self.limit) => {
                    if let (Some((stream, permit)), Some(broker)) = (accepted, &self.broker) {
                        let broker = broker.clone();
                        tokio::spawn(async move {
                            carry(stream, &broker, None).await;
                            drop(permit);
                        });
                    }
                }
                caught = next_signal(&mut forwarded) => {
                    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
                        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), caught);
                    }
                }
            }
        }
    }
}

/// Starts CMD with the proxy variables naming `addr`, without the secret,
/// sharing the relay's stdio, process group and working directory. On
/// failure the reason is on stderr and the exit code returned (127: not
/// found, 126: not executable, as a shell says).
fn spawn(program: &OsString, args: &[OsString], addr: SocketAddr) -> Result<Child, u8> {
    let url = format!("http://{addr}");
    let mut command = tokio::process::Command::new(program);
    command.args(args).env_remove(SECRET_ENV);
    for name in ["HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"] {
        command.env(name, &url);
    }
    for name in ["NO_PROXY", "no_proxy"] {
        command.env(name, NO_PROXY);
    }
    command.spawn().map_err(|error| {
        eprintln!(
            "corral-agent: cannot execute {}: {error}",
            Path::new(program).display()
        );
        match error.kind() {
            std::io::ErrorKind::NotFound => EXIT_NOT_FOUND,
            _ => EXIT_NOT_EXECUTABLE,
        }
    })
}

/// The next connection, once fewer than [`MAX_CONNECTIONS`] are relayed;
/// `None` when accept failed (that connection is lost, the loop goes on).
async fn accept(
    listener: &TcpListener,
    limit: &Arc<Semaphore>,
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
    let permit = limit.clone().acquire_owned().await.ok()?;
    let (stream, _) = listener.accept().await.ok()?;
    Some((stream, permit))
}

/// [`accept`] on `listener`, or never without one.
async fn accept_if(
    listener: Option<&TcpListener>,
    limit: &Arc<Semaphore>,
) -> Option<(TcpStream, OwnedSemaphorePermit)> {
    match listener {
        Some(listener) => accept(listener, limit).await,
        None => std::future::pending().await,
    }
}

/// Connects to the gateway's socket, writes the preamble if any, and
/// copies bytes both ways until either side closes. A failure just closes
/// the connection: the tool sees its proxy hang up.
async fn carry(mut tcp: TcpStream, socket: &Path, preamble: Option<&str>) {
    let _ = tcp.set_nodelay(true);
    let Ok(mut gateway) = UnixStream::connect(socket).await else {
        return;
    };
    if let Some(preamble) = preamble {
        if gateway.write_all(preamble.as_bytes()).await.is_err() {
            return;
        }
    }
    let _ = tokio::io::copy_bidirectional(&mut tcp, &mut gateway).await;
}

/// The next of the forwarded signals to arrive.
async fn next_signal(streams: &mut [(Signal, tokio::signal::unix::Signal)]) -> Signal {
    let waits = streams.iter_mut().map(|(caught, stream)| {
        let caught = *caught;
        Box::pin(async move {
            if stream.recv().await.is_none() {
                // The driver is gone: this signal will never come.
                std::future::pending::<()>().await;
            }
            caught
        })
    });
    futures_util::future::select_all(waits).await.0
}

/// Points stdin, stdout and stderr at /dev/null.
fn detach_stdio() {
    if let Ok(null) = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in [libc::STDIN_FILENO, libc::STDOUT_FILENO, libc::STDERR_FILENO] {
            let _ = nix::unistd::dup2(null.as_raw_fd(), fd);
        }
    }
}
