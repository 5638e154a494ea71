//! Stdin and stdout for the transport, without a thread.
//!
//! Tokio's `stdin()`/`stdout()` do every read and write on its blocking
//! pool: an idle agent keeps one thread parked in `read(0)` for its whole
//! life, and every written line wakes another. Under a gateway that hosts
//! thousands of idle agents each of those threads is a kernel task (the
//! host's `pid_max` counts them) and a stack. So when a descriptor can be
//! polled (a socket, as the gateway gives, or a pipe, as editors give) it
//! is made non-blocking and driven by the runtime's own reactor. A
//! terminal (whose file description the shell shares, and would find
//! non-blocking after the agent exits) and a regular file (which epoll
//! refuses) keep tokio's blocking-pool handles.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::libc;
use nix::sys::stat::{fstat, SFlag};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;
use tokio::net::UnixStream;

/// The transport's input: stdin.
pub enum Input {
    Socket(UnixStream),
    Pipe(pipe::Receiver),
    Blocking(tokio::io::Stdin),
}

/// The transport's output: stdout.
pub enum Output {
    Socket(UnixStream),
    Pipe(pipe::Sender),
    Blocking(tokio::io::Stdout),
}

/// What a descriptor is, as far as polling it goes.
enum Kind {
    Socket(OwnedFd),
    Pipe(OwnedFd),
    Other,
}

/// Stdin, polled by the runtime where it can be. Call on the runtime.
pub fn input() -> Input {
    let stdin = io::stdin();
    polled(stdin.as_fd(), libc::STDIN_FILENO, Input::Socket, |fd| {
        pipe::Receiver::from_owned_fd(fd).map(Input::Pipe)
    })
    .unwrap_or_else(|| Input::Blocking(tokio::io::stdin()))
}

/// Stdout, polled by the runtime where it can be. Call on the runtime.
/// Not when stderr is the same file (`2>&1`): stderr would turn
/// non-blocking too, and a write to it that would block fails.
pub fn output() -> Output {
    let stdout = io::stdout();
    let polled = match same_file(stdout.as_fd(), io::stderr().as_fd()) {
        true => None,
        false => polled(stdout.as_fd(), libc::STDOUT_FILENO, Output::Socket, |fd| {
            pipe::Sender::from_owned_fd(fd).map(Output::Pipe)
        }),
    };
    polled.unwrap_or_else(|| Output::Blocking(tokio::io::stdout()))
}

/// Descriptor `number` (`fd`) on the reactor as a socket or a pipe, or
/// `None` for the blocking pool: a terminal, a regular file, or a failure
/// to register (then its flags are put back as they were).
fn polled<T>(
    fd: BorrowedFd<'_>,
    number: RawFd,
    socket_of: impl FnOnce(UnixStream) -> T,
    pipe_of: impl FnOnce(OwnedFd) -> io::Result<T>,
) -> Option<T> {
    let original = status_flags(fd);
    let polled = match kind(fd) {
        Kind::Socket(dup) => socket(dup).map(socket_of),
        Kind::Pipe(dup) => pipe_of(dup),
        Kind::Other => return None,
    };
    match polled {
        Ok(polled) => {
            remember(number, original);
            Some(polled)
        }
        Err(_) => {
            put_back(fd, original);
            None
        }
    }
}

/// The file status flags stdin and stdout had before they were made
/// non-blocking: [`restore`] puts them back.
static ORIGINAL: Mutex<Vec<(RawFd, Option<OFlag>)>> = Mutex::new(Vec::new());

fn remember(fd: RawFd, flags: Option<OFlag>) {
    ORIGINAL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((fd, flags));
}

/// Puts stdin's and stdout's file status flags back as they were (their
/// file descriptions may be shared with whoever started the agent, a
/// shell's pipeline say). Call before exiting.
pub fn restore() {
    for (fd, flags) in ORIGINAL.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
        if let Some(flags) = flags {
            let _ = fcntl(fd, FcntlArg::F_SETFL(flags));
        }
    }
}

fn status_flags(fd: BorrowedFd<'_>) -> Option<OFlag> {
    fcntl(fd.as_raw_fd(), FcntlArg::F_GETFL)
        .ok()
        .map(OFlag::from_bits_truncate)
}

fn put_back(fd: BorrowedFd<'_>, flags: Option<OFlag>) {
    if let Some(flags) = flags {
        let _ = fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(flags));
    }
}

/// Whether two descriptors name the same file (device and inode).
fn same_file(a: BorrowedFd<'_>, b: BorrowedFd<'_>) -> bool {
    match (fstat(a.as_raw_fd()), fstat(b.as_raw_fd())) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// A duplicate of `fd` when it is a socket or a pipe (a terminal, a
/// regular file or an error is `Other`, and nothing about it changes).
fn kind(fd: BorrowedFd<'_>) -> Kind {
    let Ok(stat) = fstat(fd.as_raw_fd()) else {
        return Kind::Other;
    };
    let format = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
    let duplicate = || fd.try_clone_to_owned();
    match format {
        SFlag::S_IFSOCK => duplicate().map_or(Kind::Other, Kind::Socket),
        SFlag::S_IFIFO => duplicate().map_or(Kind::Other, Kind::Pipe),
        _ => Kind::Other,
    }
}

/// A stream socket on the reactor (made non-blocking).
fn socket(fd: OwnedFd) -> io::Result<UnixStream> {
    let socket = StdUnixStream::from(fd);
    socket.set_nonblocking(true)?;
    UnixStream::from_std(socket)
}

impl AsyncRead for Input {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Input::Socket(socket) => Pin::new(socket).poll_read(cx, buf),
            Input::Pipe(pipe) => Pin::new(pipe).poll_read(cx, buf),
            Input::Blocking(stdin) => Pin::new(stdin).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Output::Socket(socket) => Pin::new(socket).poll_write(cx, data),
            Output::Pipe(pipe) => Pin::new(pipe).poll_write(cx, data),
            Output::Blocking(stdout) => Pin::new(stdout).poll_write(cx, data),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Output::Socket(socket) => Pin::new(socket).poll_flush(cx),
            Output::Pipe(pipe) => Pin::new(pipe).poll_flush(cx),
            Output::Blocking(stdout) => Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            // Not shut down: stdin may be the same socket.
            Output::Socket(_) => Poll::Ready(Ok(())),
            Output::Pipe(pipe) => Pin::new(pipe).poll_shutdown(cx),
            Output::Blocking(stdout) => Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_socket_is_read_and_written_on_the_reactor() {
        let (ours, theirs) = StdUnixStream::pair().unwrap();
        let Kind::Socket(fd) = kind(theirs.as_fd()) else {
            panic!("a socket");
        };
        let mut output = Output::Socket(socket(fd).unwrap());
        output.write_all(b"hello\n").await.unwrap();
        output.flush().await.unwrap();
        let mut got = [0u8; 6];
        (&ours).read_exact(&mut got).unwrap();
        assert_eq!(&got, b"hello\n");

        let Kind::Socket(fd) = kind(theirs.as_fd()) else {
            panic!("a socket");
        };
        let mut input = Input::Socket(socket(fd).unwrap());
        (&ours).write_all(b"ping\n").unwrap();
        drop((ours, theirs));
        let mut line = String::new();
        input.read_to_string(&mut line).await.unwrap();
        assert_eq!(line, "ping\n", "read until the peer closed");
    }

    #[tokio::test]
    async fn a_pipe_is_read_on_the_reactor() {
        let (read, write) = nix::unistd::pipe().unwrap();
        let Kind::Pipe(fd) = kind(read.as_fd()) else {
            panic!("a pipe");
        };
        drop(read);
        let mut input = Input::Pipe(pipe::Receiver::from_owned_fd(fd).unwrap());
        std::fs::File::from(write).write_all(b"one\ntwo\n").unwrap();
        let mut text = String::new();
        input.read_to_string(&mut text).await.unwrap();
        assert_eq!(text, "one\ntwo\n");
    }

    #[test]
    fn two_descriptors_of_one_pipe_are_the_same_file() {
        let (read, write) = nix::unistd::pipe().unwrap();
        let again = write.try_clone().unwrap();
        assert!(same_file(write.as_fd(), again.as_fd()));
        assert!(
            same_file(read.as_fd(), write.as_fd()),
            "one pipe, one inode"
        );
        let other = tempfile::tempfile().unwrap();
        assert!(!same_file(write.as_fd(), other.as_fd()));
    }

    #[test]
    fn a_regular_file_is_left_to_the_blocking_pool() {
        let file = tempfile::tempfile().unwrap();
        assert!(matches!(kind(file.as_fd()), Kind::Other));
    }
}
