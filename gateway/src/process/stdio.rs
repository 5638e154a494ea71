//! A child's stdin and stdout: one Unix socket pair, whose gateway end
//! is the only descriptor the gateway holds for a running child (stderr
//! goes to a file, `stderr_log`). [`pair`] makes it; two pumps use it: the
//! writer that alone writes to it (the child's stdin; its end is a
//! `shutdown(SHUT_WR)`, which the child reads as end of file), and the
//! reader that turns the child's stdout lines into [`ChildOutput`].

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream as StdUnixStream;

use bytes::Bytes;
use corral_protocol::ndjson::{FrameError, FrameReader};
use tokio::io::{AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::mpsc;

use super::spec::ChildOutput;
use super::stderr_log::ChildTag;

/// The two ends of a child's stdio.
pub(super) struct Pair {
    /// The gateway's end.
    pub gateway: StdUnixStream,
    /// The child's stdin and stdout (one socket under two descriptors,
    /// both closed in the gateway once the child is spawned).
    pub stdin: OwnedFd,
    pub stdout: OwnedFd,
}

/// A connected stream socket pair, both ends close-on-exec (the child's
/// end is dup'ed onto its descriptors 0 and 1, which keep it).
pub(super) fn pair() -> std::io::Result<Pair> {
    let (gateway, child) = StdUnixStream::pair()?;
    let stdout = OwnedFd::from(child);
    let stdin = stdout.try_clone()?;
    Ok(Pair {
        gateway,
        stdin,
        stdout,
    })
}

/// Writes queued lines to the child's stdin in order. Returns (and so
/// shuts the socket down for writing: the child reads end of file) when
/// every sender is gone or a write fails.
pub(super) async fn write_stdin(
    mut stdin: OwnedWriteHalf,
    mut lines: mpsc::Receiver<Bytes>,
    tag: ChildTag,
) {
    while let Some(line) = lines.recv().await {
        let written = async {
            stdin.write_all(&line).await?;
            stdin.flush().await
        };
        if let Err(e) = written.await {
            tracing::debug!(project = %tag.project, pid = tag.pid, error = %e, "child stdin closed");
            return;
        }
    }
    tracing::debug!(project = %tag.project, pid = tag.pid, "closing child stdin");
}

/// Reads stdout lines until end of file and sends them on. If the receiver
/// is gone the lines are still read and dropped, so the child never blocks.
pub(super) async fn read_stdout(
    stdout: OwnedReadHalf,
    max_line: usize,
    out: mpsc::Sender<ChildOutput>,
    tag: ChildTag,
) {
    let mut frames = FrameReader::with_max_line(BufReader::new(stdout), max_line);
    while let Some(line) = frames.next_line().await {
        let item = match line {
            Ok(line) if std::str::from_utf8(&line).is_ok() => ChildOutput::Line(Bytes::from(line)),
            Ok(line) => ChildOutput::Invalid(format!(
                "dropped a stdout line of {} bytes: {}",
                line.len(),
                FrameError::InvalidUtf8
            )),
            Err(FrameError::Io(e)) => {
                tracing::warn!(project = %tag.project, pid = tag.pid, error = %e, "reading child stdout failed");
                return;
            }
            Err(e) => ChildOutput::Invalid(format!("dropped a stdout line: {e}")),
        };
        if let ChildOutput::Invalid(why) = &item {
            tracing::warn!(project = %tag.project, pid = tag.pid, "{why}");
        }
        // A closed receiver is not an error: keep draining.
        let _ = out.send(item).await;
    }
}
