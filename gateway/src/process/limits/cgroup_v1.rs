//! cgroup v1: the `memory` and `pids` controllers on hierarchies of their
//! own. The gateway makes `corral-PID` inside its own cgroup of each
//! hierarchy it needs, and one cgroup per spawn below that.

use std::fs;
use std::path::{Path, PathBuf};

use super::parse::{CgroupMount, Membership};
use super::{create_dir, exists, write_control, ChildLimits, LimitHit, LimitsError};

/// The gateway's directories in the memory and pids hierarchies (each
/// only when `wanted`).
pub(super) fn setup(
    memberships: &[Membership],
    mounts: &[CgroupMount],
    wanted: &[&str],
) -> Result<(Option<PathBuf>, Option<PathBuf>), String> {
    let mut made: Vec<(&str, PathBuf)> = Vec::new();
    for &controller in wanted {
        let base = own_dir(memberships, mounts, controller).and_then(|dir| {
            remove_stale(&dir);
            let base = dir.join(format!("corral-{}", std::process::id()));
            create_dir(&base).map_err(|e| e.to_string())?;
            Ok(base)
        });
        match base {
            Ok(base) => made.push((controller, base)),
            Err(e) => {
                for (_, dir) in &made {
                    let _ = fs::remove_dir(dir);
                }
                return Err(e);
            }
        }
    }
    let take = |name: &str| {
        made.iter()
            .find(|(controller, _)| *controller == name)
            .map(|(_, dir)| dir.clone())
    };
    Ok((take("memory"), take("pids")))
}

/// The directory of the gateway's own cgroup in `controller`'s hierarchy.
fn own_dir(
    memberships: &[Membership],
    mounts: &[CgroupMount],
    controller: &str,
) -> Result<PathBuf, String> {
    let path = memberships
        .iter()
        .find(|m| !m.unified && m.controllers.iter().any(|c| c == controller))
        .map(|m| m.path.as_str())
        .ok_or_else(|| format!("no cgroup v1 {controller} hierarchy"))?;
    let dir = mounts
        .iter()
        .filter(|m| m.has_controller(controller))
        .find_map(|m| m.dir_of(path))
        .ok_or_else(|| format!("the cgroup v1 {controller} hierarchy is not mounted here"))?;
    if !dir.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    Ok(dir)
}

/// Removes the empty `corral-PID` trees of gateways that are gone.
fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("corral-"))
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        let stale = entry.path();
        if let Ok(children) = fs::read_dir(&stale) {
            for child in children.flatten() {
                if child.file_type().is_ok_and(|t| t.is_dir()) {
                    let _ = fs::remove_dir(child.path());
                }
            }
        }
        let _ = fs::remove_dir(&stale);
    }
}

/// Creates the child's cgroups: `memory` and `pids` are (directory, limit).
pub(super) fn prepare(
    child: &mut ChildLimits,
    memory: Option<(PathBuf, u64)>,
    pids: Option<(PathBuf, u64)>,
) -> Result<(), LimitsError> {
    if let Some((dir, max)) = memory {
        child.add_dir(&dir)?;
        write_control(&dir.join("memory.limit_in_bytes"), &max.to_string())?;
        // Swap would let the child go past the limit: cap memory + swap too.
        let memsw = dir.join("memory.memsw.limit_in_bytes");
        if exists(&memsw) {
            let _ = write_control(&memsw, &max.to_string());
        }
        child.add_counter(dir.join("memory.oom_control"), "oom_kill", LimitHit::Memory);
    }
    if let Some((dir, max)) = pids {
        child.add_dir(&dir)?;
        write_control(&dir.join("pids.max"), &max.to_string())?;
        child.add_counter(dir.join("pids.events"), "max", LimitHit::Pids);
    }
    Ok(())
}
