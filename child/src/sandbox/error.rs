//! Why the sandbox cannot be entered. Every message names the missing
//! feature and the way out; the process then exits with
//! [`EXIT_SANDBOX_UNAVAILABLE`](super::EXIT_SANDBOX_UNAVAILABLE).

use std::path::PathBuf;

use nix::errno::Errno;

/// The way out, appended to every "unavailable" message.
const WAY_OUT: &str = "fix the host, or run without --sandbox (unconfined)";

/// A sandbox step that failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// `--sandbox` with `/` as the project: nothing would be confined.
    #[error(
        "the sandbox needs a project directory other than /: with / nothing would be confined"
    )]
    RootProject,
    /// The project directory cannot be entered.
    #[error("the sandbox cannot enter the project directory {path}: {source}")]
    Project {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A further writable directory (`sandbox-exec --home`) is unusable.
    #[error("the sandbox cannot use the directory {path}: {source}")]
    Directory {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A further writable directory holds the project (or is `/`): more
    /// than the project would be writable.
    #[error(
        "the sandbox cannot make {0} writable: it holds the project, so more than the project \
         would be writable"
    )]
    AroundProject(PathBuf),
    /// Threads already exist, so namespaces and fork are unsafe.
    #[error("the sandbox must be entered before any thread starts ({0} threads run)")]
    Threads(usize),
    /// No user namespace (disabled, limited to 0, or forbidden by a
    /// container's seccomp or AppArmor policy).
    #[error(
        "the sandbox is unavailable: user namespaces are not permitted ({0}); allow them \
         (sysctl user.max_user_namespaces > 0, kernel.apparmor_restrict_unprivileged_userns=0, \
         a container's seccomp profile), {WAY_OUT}"
    )]
    UserNamespace(String),
    /// Landlock is not built in or not enabled at boot.
    #[error(
        "the sandbox is unavailable: Landlock is not enabled in this kernel ({0}); use Linux \
         5.13 or newer with landlock in the lsm= boot list, {WAY_OUT}"
    )]
    Landlock(String),
    /// Landlock is there but refused the ruleset.
    #[error("the sandbox is unavailable: Landlock refused the rules ({0}); {WAY_OUT}")]
    LandlockRules(String),
    /// A mount init needs was refused (typically in a container).
    #[error("the sandbox is unavailable: cannot mount {what} ({source}); {WAY_OUT}")]
    Mount { what: String, source: Errno },
    /// fork, pipe or a signal handler failed.
    #[error("the sandbox cannot start its processes: {what} ({source})")]
    Process { what: &'static str, source: Errno },
    /// A spare agent cannot take its assignment: what it prepared ahead
    /// does not fit it.
    #[error("this spare agent cannot take the assignment: {0}")]
    Spare(String),
    /// The confinement checks of `sandbox-probe` failed.
    #[error("the sandbox is not effective: {0}; {WAY_OUT}")]
    NotConfined(String),
}
