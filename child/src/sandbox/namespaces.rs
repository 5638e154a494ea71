//! outer's namespaces: new user, mount, pid and ipc namespaces at once,
//! with the caller's uid and gid mapped to themselves (no privilege needed:
//! the user namespace is what makes the later mounts possible).

use nix::sched::{unshare, CloneFlags};
use nix::unistd::{getgid, getuid};

use super::SandboxError;

/// Unshares the namespaces and writes the identity maps. The calling
/// process stays in its pid namespace; its next child is pid 1 of the new one.
pub fn enter(simulate_missing: bool) -> Result<(), SandboxError> {
    if simulate_missing {
        return Err(SandboxError::UserNamespace(format!(
            "unshare: {}",
            nix::errno::Errno::EPERM
        )));
    }
    let (uid, gid) = (getuid().as_raw(), getgid().as_raw());
    unshare(
        CloneFlags::CLONE_NEWUSER
            | CloneFlags::CLONE_NEWNS
            | CloneFlags::CLONE_NEWPID
            | CloneFlags::CLONE_NEWIPC,
    )
    .map_err(|e| SandboxError::UserNamespace(format!("unshare: {e}")))?;
    // An undumpable process's /proc files belong to root until its user
    // namespace maps root, so an unprivileged caller could not write its own
    // maps. It turns dumpable for these three writes only: no tool and no
    // untrusted input exists yet, and nothing sandboxed can reach it.
    let _ = nix::sys::prctl::set_dumpable(true);
    let written = write_maps(uid, gid);
    let undumpable = nix::sys::prctl::set_dumpable(false);
    written?;
    undumpable.map_err(|e| SandboxError::Process {
        what: "prctl(PR_SET_DUMPABLE)",
        source: e,
    })
}

fn write_maps(uid: u32, gid: u32) -> Result<(), SandboxError> {
    // setgroups must be denied before an unprivileged gid_map is accepted.
    write_proc("/proc/self/setgroups", "deny")?;
    write_proc("/proc/self/uid_map", &identity_map(uid))?;
    write_proc("/proc/self/gid_map", &identity_map(gid))
}

/// One line mapping `id` to itself.
fn identity_map(id: u32) -> String {
    format!("{id} {id} 1\n")
}

fn write_proc(path: &str, text: &str) -> Result<(), SandboxError> {
    std::fs::write(path, text).map_err(|e| SandboxError::UserNamespace(format!("{path}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_map_is_one_identity_line() {
        assert_eq!(identity_map(1000), "1000 1000 1\n");
        assert_eq!(identity_map(0), "0 0 1\n");
    }
}
