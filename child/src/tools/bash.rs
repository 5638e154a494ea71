//! `bash {command, timeout?}`: runs `bash -c COMMAND` (or `sh`) in the working
//! directory, in its own process group, stdin closed. Output (stdout and
//! stderr merged) streams to `tool_progress` line by line and comes back cut
//! to [`MAX_OUTPUT_BYTES`] / [`MAX_OUTPUT_LINES`]. Timeout (default
//! [`DEFAULT_TIMEOUT_SECS`], at most [`MAX_TIMEOUT_SECS`]), abort, dropping the
//! future, and the shell exiting all SIGKILL the whole group.

use std::io;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

use super::group::ProcessGroup;
use super::{Args, HeadTail, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

/// Seconds a command may run when the call gives no `timeout`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 120;
/// Largest `timeout` honoured; larger values are lowered to it.
pub const MAX_TIMEOUT_SECS: u64 = 600;
/// Output bytes returned to the model (head and tail kept).
pub const MAX_OUTPUT_BYTES: usize = 50 * 1024;
/// Output lines returned to the model (head and tail kept).
pub const MAX_OUTPUT_LINES: usize = 2000;
/// A partial line longer than this is passed on without waiting for `\n`.
const MAX_PENDING_LINE: usize = 8 * 1024;
/// How long to wait, once the group is killed, for the pipes to close.
const KILL_GRACE: Duration = Duration::from_secs(2);
/// The same after an abort.
const ABORT_DRAIN: Duration = Duration::from_millis(200);

pub struct BashTool;

impl Tool for BashTool {
    fn name(&self) -> &'static str {
        "bash"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Run a shell command with `bash -c` in the working directory and return its \
                 combined stdout and stderr (long output keeps the first and last lines) and \
                 its exit code. stdin is closed, so interactive commands fail. `timeout` is in \
                 seconds (default {DEFAULT_TIMEOUT_SECS}, max {MAX_TIMEOUT_SECS}). Background \
                 processes are killed when the command finishes. Prefer the read, ls, find \
                 and grep tools for looking at files."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command to run."},
                    "timeout": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_SECS, "description": format!("Seconds before the command is killed. Default {DEFAULT_TIMEOUT_SECS}.")}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        match parse(&args) {
            Ok((command, timeout_secs)) => Box::pin(run_command(command, timeout_secs, ctx)),
            Err(out) => Box::pin(async move { out }),
        }
    }
}

/// The command and its timeout in seconds (defaulted, capped).
fn parse(args: &Value) -> Result<(String, u64), ToolOutput> {
    let args = Args::new(args)?;
    let command = args.non_empty("command")?.to_string();
    match args.opt_u64("timeout")? {
        Some(0) => Err(ToolOutput::error("argument `timeout` must be at least 1")),
        timeout => Ok((
            command,
            timeout
                .unwrap_or(DEFAULT_TIMEOUT_SECS)
                .min(MAX_TIMEOUT_SECS),
        )),
    }
}

/// How the command ended.
enum Ending {
    /// The shell's exit status, or why it could not be had.
    Exited(Result<ExitStatus, String>),
    Aborted,
    TimedOut,
}

async fn run_command(command: String, timeout_secs: u64, ctx: ToolContext) -> ToolOutput {
    if !ctx.cwd.is_dir() {
        return ToolOutput::error(format!(
            "working directory {} does not exist",
            ctx.cwd.display()
        ));
    }
    if ctx.cancel.is_cancelled() {
        return ToolOutput::error("aborted");
    }
    let mut run = match Running::start(&command, &ctx) {
        Ok(run) => run,
        Err(e) => return ToolOutput::error(format!("cannot start the shell: {e}")),
    };
    let deadline = tokio::time::sleep(Duration::from_secs(timeout_secs));
    tokio::pin!(deadline);
    let ending = loop {
        if let Some(status) = &run.status {
            break Ending::Exited(status.clone());
        }
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => break Ending::Aborted,
            _ = &mut deadline => break Ending::TimedOut,
            _ = run.step() => {}
        }
    };
    // Ends background jobs once the shell is done, and everything on abort.
    run.group.kill();
    // An aborted run is waited for (an agent stopping): its output matters
    // less than ending soon.
    let grace = match ending {
        Ending::Aborted => ABORT_DRAIN,
        _ => KILL_GRACE,
    };
    let drained = tokio::time::timeout(grace, async {
        while !run.finished() {
            run.step().await;
        }
    })
    .await
    .is_ok();

    let mut text = run.output.finish();
    if !drained {
        text.push_str(&format!(
            "\n(output still open {}s after the process group was killed; a process that \
             left the group may still be running)",
            grace.as_secs_f32()
        ));
    }
    let (status_line, is_error) = match ending {
        Ending::Exited(Ok(status)) if status.success() => (None, false),
        Ending::Exited(Err(e)) => (Some(format!("could not wait for the shell: {e}")), true),
        Ending::Exited(Ok(status)) => match (status.code(), status.signal()) {
            (Some(code), _) => (Some(format!("exit code {code}")), true),
            (None, Some(signal)) => (Some(format!("killed by signal {signal}")), true),
            (None, None) => (Some(format!("exited with {status}")), true),
        },
        Ending::Aborted => (Some("aborted".to_string()), true),
        Ending::TimedOut => (Some(format!("timed out after {timeout_secs}s")), true),
    };
    if let Some(line) = status_line {
        if !text.is_empty() {
            text.push_str("\n\n");
        }
        text.push_str(&line);
    } else if text.is_empty() {
        text.push_str("(no output)");
    }
    ToolOutput {
        is_error,
        ..ToolOutput::ok(text)
    }
}

/// A started command: the shell, its pipes and what it printed so far.
struct Running {
    child: Child,
    /// Killed when the command ends and, through `Drop`, if the tool's
    /// future is dropped first.
    group: ProcessGroup,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
    out_buf: Box<[u8; 8192]>,
    err_buf: Box<[u8; 8192]>,
    status: Option<Result<ExitStatus, String>>,
    output: MergedOutput,
}

impl Running {
    fn start(command: &str, ctx: &ToolContext) -> io::Result<Running> {
        let mut child = shell(shell_program(), command, ctx).spawn()?;
        // `process_group(0)` makes the shell the leader of a group whose id
        // is its pid.
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .ok_or_else(|| {
                io::Error::other("the shell exited before its process group was known")
            })?;
        Ok(Running {
            stdout: child.stdout.take(),
            stderr: child.stderr.take(),
            child,
            group: ProcessGroup::new(pgid),
            out_buf: Box::new([0; 8192]),
            err_buf: Box::new([0; 8192]),
            status: None,
            output: MergedOutput::new(ctx.progress.clone()),
        })
    }

    /// Whether the shell was reaped and both pipes are closed.
    fn finished(&self) -> bool {
        self.status.is_some() && self.stdout.is_none() && self.stderr.is_none()
    }

    /// Waits for the next chunk of output or the shell's exit. Cancel-safe.
    async fn step(&mut self) {
        tokio::select! {
            read = read_some(&mut self.stdout, &mut self.out_buf[..]) => match read {
                Ok(n) if n > 0 => self.output.feed(0, &self.out_buf[..n]),
                _ => {
                    self.stdout = None;
                    self.output.close(0);
                }
            },
            read = read_some(&mut self.stderr, &mut self.err_buf[..]) => match read {
                Ok(n) if n > 0 => self.output.feed(1, &self.err_buf[..n]),
                _ => {
                    self.stderr = None;
                    self.output.close(1);
                }
            },
            status = self.child.wait(), if self.status.is_none() => {
                self.status = Some(status.map_err(|e| e.to_string()));
            }
        }
    }
}

/// Variables the agent reads its own credentials from. A command never
/// inherits them: what the model runs has no use for the agent's API keys,
/// and a prompt-injected command would send them elsewhere.
const CREDENTIAL_VARS: [&str; 2] = [
    crate::provider::anthropic::KEY_ENV,
    crate::provider::openai::KEY_ENV,
];

/// `bash`, or `sh` where `PATH` has no `bash`. Decided here, once, rather
/// than by trying: behind the egress relay it is the relay that would find
/// a shell missing, not this spawn.
fn shell_program() -> &'static str {
    static SHELL: OnceLock<&'static str> = OnceLock::new();
    SHELL.get_or_init(|| {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let has_bash = std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join("bash"))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        });
        if has_bash {
            "bash"
        } else {
            "sh"
        }
    })
}

/// `program -c command` in the tool's working directory, confined as the
/// context says (behind the egress relay with a proxy route), without the
/// agent's credentials in its environment.
fn shell(program: &str, command: &str, ctx: &ToolContext) -> Command {
    let mut cmd = ctx.confinement.command(program);
    for name in CREDENTIAL_VARS {
        cmd.env_remove(name);
    }
    cmd.arg("-c")
        .arg(command)
        .current_dir(&ctx.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    cmd
}

/// Reads from a pipe; a closed (`None`) pipe never yields.
async fn read_some<R: AsyncRead + Unpin>(
    pipe: &mut Option<R>,
    buf: &mut [u8],
) -> io::Result<usize> {
    match pipe {
        Some(pipe) => pipe.read(buf).await,
        None => std::future::pending().await,
    }
}

/// stdout and stderr as lines in arrival order: kept (head and tail) for the
/// result and sent, batched per chunk, as progress.
struct MergedOutput {
    kept: HeadTail,
    /// The unterminated last line of stdout (0) and stderr (1).
    partial: [Vec<u8>; 2],
    progress: tokio::sync::mpsc::UnboundedSender<String>,
}

impl MergedOutput {
    fn new(progress: tokio::sync::mpsc::UnboundedSender<String>) -> MergedOutput {
        MergedOutput {
            kept: HeadTail::new(MAX_OUTPUT_BYTES, MAX_OUTPUT_LINES),
            partial: [Vec::new(), Vec::new()],
            progress,
        }
    }

    fn feed(&mut self, stream: usize, bytes: &[u8]) {
        let buf = &mut self.partial[stream];
        buf.extend_from_slice(bytes);
        let mut lines = Vec::new();
        let mut start = 0;
        while let Some(len) = buf[start..].iter().position(|&b| b == b'\n') {
            lines.push(String::from_utf8_lossy(&buf[start..start + len]).into_owned());
            start += len + 1;
        }
        buf.drain(..start);
        if buf.len() > MAX_PENDING_LINE {
            lines.push(String::from_utf8_lossy(buf).into_owned());
            buf.clear();
        }
        self.emit(lines);
    }

    /// The stream ended: its unterminated last line counts as a line.
    fn close(&mut self, stream: usize) {
        let rest = std::mem::take(&mut self.partial[stream]);
        if !rest.is_empty() {
            self.emit(vec![String::from_utf8_lossy(&rest).into_owned()]);
        }
    }

    fn emit(&mut self, lines: Vec<String>) {
        if lines.is_empty() {
            return;
        }
        // A `\r`-redrawn line (progress bars) shows as its final state.
        let lines: Vec<&str> = lines
            .iter()
            .map(|l| {
                l.trim_end_matches('\r')
                    .rsplit('\r')
                    .next()
                    .unwrap_or_default()
            })
            .collect();
        for line in &lines {
            self.kept.push_line(line);
        }
        // Unbounded: never blocks; a closed receiver just means nobody watches.
        let _ = self.progress.send(lines.join("\n"));
    }

    fn finish(&self) -> String {
        self.kept.finish()
    }
}

#[cfg(test)]
#[path = "bash_tests.rs"]
mod tests;
