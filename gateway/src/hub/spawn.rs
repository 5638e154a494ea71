//! What one spawn of a project's child is: its command line (the dialect's
//! flags, the sandbox flags, the user's extra arguments), its environment
//! with a fresh token, and its confinement (the project directory checked
//! again and opened, the journal file owned by the child user, the
//! account and the limits). Also how a failed start is classified.

use std::ffi::OsString;
use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::sync::Arc;

use super::actor::Hub;
use crate::projects;
use crate::supervisor::{Confine, Credentials, SpawnSpec};

/// The child's exit code when its session journal is held by another
/// agent process (`corral-agent` exits with `EX_TEMPFAIL` then).
pub(super) const SESSION_IN_USE_EXIT: i32 = 75;
/// The child's exit code when its sandbox cannot be set up on this host
/// (`EX_CONFIG`); its last stderr line says why.
pub(super) const SANDBOX_UNAVAILABLE_EXIT: i32 = 78;

/// Why a child did not become ready.
pub(super) struct StartError {
    pub message: String,
    pub kind: StartFailure,
}

/// What a failed start means for the hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum StartFailure {
    /// Counts as a crash: retried with backoff.
    Crash,
    /// The session runs in another agent process: not a crash, no retry.
    Elsewhere,
    /// The project may not run (its directory is no longer a real
    /// directory under the root): clients are told and the hub ends.
    Refused,
}

impl StartError {
    pub fn crash(message: impl Into<String>) -> StartError {
        StartError {
            message: message.into(),
            kind: StartFailure::Crash,
        }
    }
}

impl Hub {
    /// The spawn of this project's child with `token`, after checking its
    /// directory again.
    pub(super) fn spawn_spec(&self, token: &str) -> Result<SpawnSpec, StartError> {
        let refused = |e: projects::ProjectError| StartError {
            message: e.to_string(),
            kind: StartFailure::Refused,
        };
        let (dir, dir_fd) =
            projects::open_dir(&self.settings.projects_root, &self.project).map_err(refused)?;
        if dir != self.dir {
            return Err(refused(projects::ProjectError::OutsideRoot {
                name: self.project.clone(),
            }));
        }
        let session = self
            .settings
            .sessions_dir
            .join(format!("{}.jsonl", self.project));
        if let Some(user) = &self.settings.credentials {
            prepare_journal(&session, user).map_err(|e| {
                StartError::crash(format!(
                    "cannot prepare the session journal {} for the child user: {e}",
                    session.display()
                ))
            })?;
        }
        let mut args: Vec<OsString> = vec!["rpc".into()];
        args.extend(self.settings.dialect.child_args());
        args.extend(self.settings.sandbox_args.iter().cloned());
        args.extend([
            "--cwd".into(),
            dir.clone().into_os_string(),
            "--session".into(),
            session.into_os_string(),
        ]);
        args.extend(self.settings.child_args.iter().cloned());
        let mut env = self.settings.child_env.clone();
        if self.settings.dialect.child_token() {
            env.push((crate::supervisor::env::TOKEN_VAR.into(), token.into()));
        }
        Ok(SpawnSpec {
            program: self.settings.child_bin.clone(),
            args,
            cwd: dir,
            env,
            project: self.project.clone(),
            max_line: self.settings.max_line,
            confine: Confine {
                cwd_dir: Some(Arc::new(dir_fd)),
                credentials: self.settings.credentials.clone(),
                limits: self.settings.limits.clone(),
                sandboxed: !self.settings.sandbox_args.is_empty(),
            },
        })
    }
}

/// Creates the journal if missing, owned by the child user with mode 0600,
/// so the child can open it after dropping to that user.
fn prepare_journal(path: &Path, user: &Credentials) -> std::io::Result<()> {
    let file = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)?;
    std::os::unix::fs::fchown(&file, Some(user.uid), Some(user.gid))?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
}
