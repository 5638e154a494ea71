//! The three stdio pumps of one child: the writer that alone owns stdin, the
//! stdout reader that turns lines into [`ChildOutput`], and the stderr reader
//! that forwards the child's logs to `tracing` with a per-line cap.

use bytes::Bytes;
use corral_protocol::ndjson::{FrameError, FrameReader};
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::mpsc;

use super::spec::ChildOutput;

/// Longest stderr line logged, in bytes; the rest of the line is dropped.
pub(super) const STDERR_LINE_CAP: usize = 4 * 1024;

/// Log fields shared by the pumps of one child.
#[derive(Clone)]
pub(super) struct ChildTag {
    pub project: String,
    pub pid: u32,
}

/// Writes queued lines to stdin in order, flushing after each. Returns (and
/// so closes stdin) when every sender is gone or a write fails.
pub(super) async fn write_stdin(
    mut stdin: ChildStdin,
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
    stdout: ChildStdout,
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

/// Lines of a child's stderr kept for the admin API.
pub const STDERR_TAIL_LINES: usize = 50;

/// The last [`STDERR_TAIL_LINES`] stderr lines of a child.
pub type StderrTail = std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>;

/// Logs every stderr line at info level (target `corral::child`) and keeps
/// the last ones in `tail`.
pub(super) async fn log_stderr(stderr: ChildStderr, tag: ChildTag, tail: StderrTail) {
    let mut reader = BufReader::new(stderr);
    loop {
        match read_capped_line(&mut reader, STDERR_LINE_CAP).await {
            Ok(Some((line, truncated))) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches('\r');
                if !text.trim().is_empty() {
                    let mut tail = tail
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if tail.len() == STDERR_TAIL_LINES {
                        tail.pop_front();
                    }
                    tail.push_back(text.to_string());
                }
                if truncated {
                    tracing::info!(target: "corral::child", project = %tag.project, pid = tag.pid, truncated = true, "{text}…");
                } else if !text.trim().is_empty() {
                    tracing::info!(target: "corral::child", project = %tag.project, pid = tag.pid, "{text}");
                }
            }
            Ok(None) => return,
            Err(e) => {
                tracing::debug!(project = %tag.project, pid = tag.pid, error = %e, "reading child stderr failed");
                return;
            }
        }
    }
}

/// Reads one line (without its LF), keeping at most `cap` bytes of it and
/// skipping the rest; `None` at end of input. The flag says it was cut.
pub(super) async fn read_capped_line<R: AsyncBufRead + Unpin>(
    reader: &mut R,
    cap: usize,
) -> std::io::Result<Option<(Vec<u8>, bool)>> {
    let mut line = Vec::new();
    let mut truncated = false;
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            let seen = !line.is_empty() || truncated;
            return Ok(seen.then_some((line, truncated)));
        }
        let (chunk, found_lf) = match available.iter().position(|&b| b == b'\n') {
            Some(pos) => (&available[..pos], true),
            None => (available, false),
        };
        let room = cap.saturating_sub(line.len());
        if chunk.len() > room {
            truncated = true;
        }
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        let consumed = chunk.len() + usize::from(found_lf);
        reader.consume(consumed);
        if found_lf {
            return Ok(Some((line, truncated)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn capped_lines_are_cut_and_resynchronised() {
        let mut input = vec![b'x'; 10_000];
        input.extend_from_slice(b"\nshort\nlast");
        let mut reader = BufReader::with_capacity(7, &input[..]);
        let (first, cut) = read_capped_line(&mut reader, 100).await.unwrap().unwrap();
        assert_eq!((first.len(), cut), (100, true));
        let next = read_capped_line(&mut reader, 100).await.unwrap().unwrap();
        assert_eq!(next, (b"short".to_vec(), false));
        let last = read_capped_line(&mut reader, 100).await.unwrap().unwrap();
        assert_eq!(last, (b"last".to_vec(), false));
        assert!(read_capped_line(&mut reader, 100).await.unwrap().is_none());
    }
}
