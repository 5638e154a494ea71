//! What a spawn is and how it ends: [`SpawnSpec`] with its [`Confine`]ment,
//! the child's [`ChildOutput`], its [`ExitInfo`], and the errors of
//! starting it or writing to it.

use std::ffi::OsString;
use std::fmt;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::sync::Arc;

use bytes::Bytes;
use nix::sys::signal::Signal;

use super::limits::{Limits, LimitsError};
use super::sys::Credentials;

/// Everything needed to start one child. Its `Debug` shows the names of
/// the environment's variables, never their values (the child's token and
/// egress secret, maybe provider keys).
#[derive(Clone)]
pub struct SpawnSpec {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    /// The complete environment: nothing else is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// The project name, for log fields.
    pub project: String,
    /// Longest accepted stdout line in bytes, excluding the LF.
    pub max_line: usize,
    /// Directory, account and resource limits of the child.
    pub confine: Confine,
    /// The file the child writes its stderr to (`/dev/null` when `None`).
    pub stderr_log: Option<super::StderrLog>,
    /// Fork the child from `program template` (a `corral-agent`) rather
    /// than executing `program` (see `template`).
    pub template: bool,
}

impl fmt::Debug for SpawnSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("SpawnSpec")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("env", &env)
            .field("project", &self.project)
            .field("max_line", &self.max_line)
            .field("confine", &self.confine)
            .field("stderr_log", &self.stderr_log)
            .field("template", &self.template)
            .finish()
    }
}

/// How a child is confined beyond its own process group (the sandbox
/// itself is the agent's: flags in `args`).
#[derive(Clone, Debug, Default)]
pub struct Confine {
    /// The working directory, opened without following a symlink; the
    /// child enters it by descriptor, and `cwd` only names it.
    pub cwd_dir: Option<Arc<OwnedFd>>,
    /// The account the child runs as (the gateway's when `None`).
    pub credentials: Option<Credentials>,
    /// The limits every child gets.
    pub limits: Option<Arc<Limits>>,
    /// The child confines itself in a pid namespace (the agent sandbox):
    /// when it dies, the kernel kills whatever it started.
    pub sandboxed: bool,
}

/// What the child said on stdout, in order; `Exited` is always last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChildOutput {
    /// One non-blank stdout line, valid UTF-8, without LF (and CR).
    Line(Bytes),
    /// An over-long or non-UTF-8 line that was dropped, described.
    Invalid(String),
    /// The child was reaped and its process group killed.
    Exited(ExitInfo),
}

/// How the child ended: an exit code, or the signal that killed it.
/// Both are `None` only if the exit status could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExitInfo {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitInfo {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl From<ExitStatus> for ExitInfo {
    fn from(status: ExitStatus) -> Self {
        ExitInfo {
            code: status.code(),
            signal: status.signal(),
        }
    }
}

impl fmt::Display for ExitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(code), _) => write!(f, "exit code {code}"),
            (None, Some(sig)) => match Signal::try_from(sig) {
                Ok(name) => write!(f, "killed by signal {sig} ({name})"),
                Err(_) => write!(f, "killed by signal {sig}"),
            },
            (None, None) => f.write_str("unknown exit status"),
        }
    }
}

/// Why a child could not be started.
#[derive(Debug, thiserror::Error)]
pub enum SpawnError {
    #[error("cannot start {}: program not found", .program.display())]
    NotFound { program: PathBuf },
    #[error("cannot start {}: permission denied", .program.display())]
    PermissionDenied { program: PathBuf },
    #[error("cannot start {}: working directory {} does not exist", .program.display(), .cwd.display())]
    CwdMissing { program: PathBuf, cwd: PathBuf },
    #[error("cannot start {}: {source}", .program.display())]
    Limits {
        program: PathBuf,
        #[source]
        source: LimitsError,
    },
    /// No descriptor left for the child's stdio socket: the gateway is at its
    /// open-file limit (or the system at its own).
    #[error("cannot start {}: the gateway is at its open-file limit; try again once other projects stop", .program.display())]
    NoDescriptors { program: PathBuf },
    #[error("cannot start {}: {source}", .program.display())]
    Io {
        program: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl SpawnError {
    pub(super) fn classify(spec: &SpawnSpec, source: std::io::Error) -> Self {
        let program = spec.program.clone();
        match source.kind() {
            std::io::ErrorKind::NotFound if !spec.cwd.is_dir() => SpawnError::CwdMissing {
                program,
                cwd: spec.cwd.clone(),
            },
            std::io::ErrorKind::NotFound => SpawnError::NotFound { program },
            std::io::ErrorKind::PermissionDenied => SpawnError::PermissionDenied { program },
            _ if crate::fdlimit::exhausted(&source) => SpawnError::NoDescriptors { program },
            _ => SpawnError::Io { program, source },
        }
    }
}

/// The child's stdin is closed or the child has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the child process is gone (stdin closed)")]
pub struct ChildGone;

/// Why a line was not queued for the child's stdin without waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LineRefused {
    #[error("the child's stdin queue is full")]
    Full,
    #[error("the child process is gone (stdin closed)")]
    Gone,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_names_the_variables_but_shows_no_value() {
        let spec = SpawnSpec {
            program: "/bin/agent".into(),
            args: vec!["rpc".into()],
            cwd: "/srv/p".into(),
            env: vec![("ZUTCORE_RPC_TOKEN".into(), "secret-value-123".into())],
            project: "p".into(),
            max_line: 1,
            confine: Confine::default(),
            stderr_log: None,
            template: false,
        };
        let shown = format!("{spec:?}");
        assert!(shown.contains("ZUTCORE_RPC_TOKEN"), "{shown}");
        assert!(!shown.contains("secret-value-123"), "{shown}");
    }
}
