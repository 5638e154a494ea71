//! cgroup v2: the gateway's own cgroup must offer the memory and pids
//! controllers. A cgroup with controllers enabled for its children may hold
//! no process itself, so the gateway first moves into a leaf `gateway`,
//! then enables the controllers for `children`, under which each spawn gets
//! its own cgroup.

use std::fs;
use std::path::PathBuf;

use super::parse::{self, CgroupMount, Membership};
use super::{create_dir, write_control, ChildLimits, LimitHit, LimitsError};

/// Sets up `OWN/gateway` (holding the gateway) and `OWN/children`; returns
/// the latter.
pub(super) fn setup(
    memberships: &[Membership],
    mounts: &[CgroupMount],
    wanted: &[&str],
) -> Result<PathBuf, String> {
    let path = memberships
        .iter()
        .find(|m| m.unified)
        .map(|m| m.path.as_str())
        .ok_or("the gateway is in no cgroup v2")?;
    let own = mounts
        .iter()
        .filter(|m| m.v2)
        .find_map(|m| m.dir_of(path))
        .ok_or("no cgroup2 mount shows the gateway's cgroup")?;
    let read = |name: &str| fs::read_to_string(own.join(name)).map_err(|e| format!("{name}: {e}"));
    let offered = read("cgroup.controllers")?;
    if !parse::has_all(&offered, wanted) {
        return Err(format!(
            "{} offers the controllers [{}], not all of {wanted:?}",
            own.display(),
            offered.trim()
        ));
    }
    let me = std::process::id();
    let others = parse::pids(&read("cgroup.procs")?)
        .into_iter()
        .any(|pid| u32::try_from(pid).ok() != Some(me));
    if others {
        return Err(format!(
            "other processes share the gateway's cgroup {}",
            own.display()
        ));
    }
    let enable: Vec<String> = wanted.iter().map(|c| format!("+{c}")).collect();
    let enable = enable.join(" ");
    let leaf = own.join("gateway");
    create_dir(&leaf).map_err(|e| e.to_string())?;
    write_control(&leaf.join("cgroup.procs"), &me.to_string()).map_err(|e| e.to_string())?;
    if let Err(e) = write_control(&own.join("cgroup.subtree_control"), &enable) {
        // Back where it was, and leave nothing behind.
        let _ = write_control(&own.join("cgroup.procs"), &me.to_string());
        let _ = fs::remove_dir(&leaf);
        return Err(e.to_string());
    }
    let children = own.join("children");
    create_dir(&children).map_err(|e| e.to_string())?;
    write_control(&children.join("cgroup.subtree_control"), &enable).map_err(|e| e.to_string())?;
    Ok(children)
}

/// Creates the child's cgroup `dir` with its limits.
pub(super) fn prepare(
    child: &mut ChildLimits,
    dir: &std::path::Path,
    memory_max: Option<u64>,
    pids_max: Option<u64>,
) -> Result<(), LimitsError> {
    child.add_dir(dir)?;
    if let Some(max) = memory_max {
        write_control(&dir.join("memory.max"), &max.to_string())?;
        child.add_counter(dir.join("memory.events"), "oom_kill", LimitHit::Memory);
    }
    if let Some(max) = pids_max {
        write_control(&dir.join("pids.max"), &max.to_string())?;
        child.add_counter(dir.join("pids.events"), "max", LimitHit::Pids);
    }
    Ok(())
}
