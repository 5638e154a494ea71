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
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream as StdUnixStream;
use std::pin::Pin;
use std::task::{Context, Poll};

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
    let polled = match kind(io::stdin().as_fd()) {
        Kind::Socket(fd) => socket(fd).map(Input::Socket),
        Kind::Pipe(fd) => pipe::Receiver::from_owned_fd(fd).map(Input::Pipe),
        Kind::Other => return Input::Blocking(tokio::io::stdin()),
    };
    polled.unwrap_or_else(|_| Input::Blocking(tokio::io::stdin()))
}

/// Stdout, polled by the runtime where it can be. Call on the runtime.
pub fn output() -> Output {
    let polled = match kind(io::stdout().as_fd()) {
        Kind::Socket(fd) => socket(fd).map(Output::Socket),
        Kind::Pipe(fd) => pipe::Sender::from_owned_fd(fd).map(Output::Pipe),
        Kind::Other => return Output::Blocking(tokio::io::stdout()),
    };
    polled.unwrap_or_else(|_| Output::Blocking(tokio::io::stdout()))
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
    fn a_regular_file_is_left_to_the_blocking_pool() {
        let file = tempfile::tempfile().unwrap();
        assert!(matches!(kind(file.as_fd()), Kind::Other));
    }
}
