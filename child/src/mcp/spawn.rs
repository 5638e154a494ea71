//! Starting a stdio MCP server: `command args…` in the project directory,
//! confined like a tool command (with `--sandbox`: the agent's sandbox, no
//! capabilities, the tool network, and a Landlock domain of its own, so
//! neither tool commands nor other servers can read its memory or
//! `/proc/<pid>/environ`), in a process group of its own that is killed with
//! the agent. Its environment is a few harmless variables of the agent's
//! plus the config's `env`: never the agent's credentials or anything else
//! it was given.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;

use tokio::process::{Child, ChildStdin, ChildStdout, Command};

use crate::sandbox::ToolConfinement;
use crate::tools::group::ProcessGroup;

/// The agent's variables a server inherits (the MCP SDKs' default set,
/// plus locale and temp dir). Everything else it needs comes from `env`.
pub const INHERITED_VARS: [&str; 9] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "TMPDIR",
];

/// A running stdio server.
pub struct StdioProcess {
    pub child: Child,
    /// SIGKILLed on drop and by the agent's exit.
    pub group: ProcessGroup,
}

/// Starts `command` with `args` in `cwd`.
pub fn start(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    confinement: &ToolConfinement,
) -> std::io::Result<(StdioProcess, ChildStdout, ChildStdin)> {
    let mut cmd: Command = confinement.command(command);
    cmd.args(args)
        .current_dir(cwd)
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        // The server's log lines join the agent's on stderr.
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true);
    for name in INHERITED_VARS {
        if let Some(value) = std::env::var_os(name) {
            cmd.env(name, value);
        }
    }
    // A proxy route's relay needs its secret: `confinement.command` set it
    // before the clear.
    for (name, value) in confinement.command_env() {
        cmd.env(name, value);
    }
    cmd.envs(env);
    let mut child = cmd.spawn()?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .ok_or_else(|| std::io::Error::other("the server exited at once"))?;
    let group = ProcessGroup::new(pgid);
    let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(std::io::Error::other("the server's pipes are missing"));
    };
    Ok((StdioProcess { child, group }, stdout, stdin))
}
