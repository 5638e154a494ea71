//! Pure parsing for the limits backends: `/proc/self/cgroup`,
//! `/proc/self/mountinfo` and the flat keyed files of cgroups
//! (`memory.events`, `pids.events`, `memory.oom_control`).

use std::path::{Path, PathBuf};

/// One line of `/proc/self/cgroup`: `ID:CONTROLLERS:PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Membership {
    /// Empty for the unified (v2) hierarchy; `name=systemd` style entries
    /// are listed as they are.
    pub controllers: Vec<String>,
    /// The cgroup's path from its hierarchy's root, e.g. `/a/b`.
    pub path: String,
    /// `0::PATH`: the cgroup v2 hierarchy.
    pub unified: bool,
}

/// Parses `/proc/self/cgroup`; malformed lines are skipped.
pub fn proc_cgroup(text: &str) -> Vec<Membership> {
    text.lines()
        .filter_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            if !path.starts_with('/') {
                return None;
            }
            Some(Membership {
                controllers: controllers
                    .split(',')
                    .filter(|c| !c.is_empty())
                    .map(str::to_string)
                    .collect(),
                path: path.to_string(),
                unified: id == "0" && controllers.is_empty(),
            })
        })
        .collect()
}

/// A cgroup file system mount from `/proc/self/mountinfo`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// `cgroup2` rather than a v1 `cgroup` hierarchy.
    pub v2: bool,
    /// The path inside the hierarchy that is mounted (`/` unless bound).
    pub root: String,
    pub mount_point: PathBuf,
    /// Super options; for v1 they name the controllers (`rw,memory`).
    pub options: Vec<String>,
}

impl CgroupMount {
    /// Whether this v1 hierarchy carries `controller`.
    pub fn has_controller(&self, controller: &str) -> bool {
        !self.v2 && self.options.iter().any(|o| o == controller)
    }

    /// The directory of cgroup `path` (from the hierarchy's root) under this
    /// mount, or `None` when the mount does not show it.
    pub fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let rest = if self.root == "/" {
            path
        } else {
            let rest = path.strip_prefix(self.root.as_str())?;
            if !(rest.is_empty() || rest.starts_with('/')) {
                return None;
            }
            rest
        };
        let rest = rest.trim_start_matches('/');
        if rest.split('/').any(|c| c == "..") {
            return None;
        }
        Some(if rest.is_empty() {
            self.mount_point.clone()
        } else {
            self.mount_point.join(rest)
        })
    }
}

/// The cgroup mounts listed in `/proc/self/mountinfo`.
pub fn mountinfo(text: &str) -> Vec<CgroupMount> {
    text.lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let left: Vec<&str> = left.split(' ').collect();
            let right: Vec<&str> = right.split(' ').collect();
            let fstype = *right.first()?;
            let v2 = match fstype {
                "cgroup2" => true,
                "cgroup" => false,
                _ => return None,
            };
            Some(CgroupMount {
                v2,
                root: unescape(left.get(3)?),
                mount_point: PathBuf::from(unescape(left.get(4)?)),
                options: right
                    .get(2)
                    .map(|o| o.split(',').map(str::to_string).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            let octal = &bytes[i + 1..i + 4];
            let value = std::str::from_utf8(octal)
                .ok()
                .and_then(|o| u8::from_str_radix(o, 8).ok());
            if let Some(value) = value {
                out.push(value);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of `key` in a flat keyed file (`key value` per line).
pub fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.trim().split_once(char::is_whitespace)?;
        (name == key).then(|| value.trim().parse().ok()).flatten()
    })
}

/// Whether a `cgroup.controllers` / `cgroup.subtree_control` list holds
/// every one of `wanted`.
pub fn has_all(list: &str, wanted: &[&str]) -> bool {
    let have: Vec<&str> = list.split_whitespace().collect();
    wanted.iter().all(|w| have.contains(w))
}

/// The pids listed in a `cgroup.procs` file.
pub fn pids(text: &str) -> Vec<i32> {
    text.lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|&pid| pid > 0)
        .collect()
}

/// Whether `path` is a plain component usable as a cgroup name.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.contains('/')
        && Path::new(name).components().count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROC_CGROUP: &str = "9:name=systemd:/\n8:pids:/\n4:memory:/jobs/42\n1:cpu,cpuacct:/\n0::/user.slice/corral.service\n";

    #[test]
    fn proc_cgroup_lines() {
        let all = proc_cgroup(PROC_CGROUP);
        assert_eq!(all.len(), 5);
        assert_eq!(all[2].controllers, ["memory"]);
        assert_eq!(all[2].path, "/jobs/42");
        assert!(!all[2].unified);
        assert_eq!(all[3].controllers, ["cpu", "cpuacct"]);
        assert!(all[4].unified);
        assert_eq!(all[4].path, "/user.slice/corral.service");
        assert!(proc_cgroup("garbage\n1:x\n").is_empty());
    }

    const MOUNTINFO: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:38 /ctr /mnt/my\\040cg rw shared:5 - cgroup2 cgroup2 rw,nsdelegate
";

    #[test]
    fn mountinfo_finds_cgroup_mounts() {
        let mounts = mountinfo(MOUNTINFO);
        assert_eq!(mounts.len(), 4);
        assert!(mounts[0].has_controller("memory"));
        assert!(!mounts[0].has_controller("pids"));
        assert!(mounts[1].has_controller("pids"));
        assert!(mounts[2].v2 && !mounts[2].has_controller("memory"));
        assert_eq!(mounts[3].mount_point, PathBuf::from("/mnt/my cg"));
        assert_eq!(mounts[3].root, "/ctr");
        assert_eq!(mounts[3].options, ["rw", "nsdelegate"]);
    }

    #[test]
    fn dir_of_strips_the_mount_root() {
        let mounts = mountinfo(MOUNTINFO);
        assert_eq!(
            mounts[0].dir_of("/jobs/42"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/jobs/42"))
        );
        assert_eq!(
            mounts[1].dir_of("/"),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(
            mounts[3].dir_of("/ctr/svc"),
            Some(PathBuf::from("/mnt/my cg/svc"))
        );
        assert_eq!(mounts[3].dir_of("/ctr"), Some(PathBuf::from("/mnt/my cg")));
        assert_eq!(mounts[3].dir_of("/ctrl"), None);
        assert_eq!(mounts[3].dir_of("/other"), None);
        assert_eq!(mounts[1].dir_of("/a/../b"), None);
    }

    #[test]
    fn keyed_files() {
        let oom = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
        assert_eq!(keyed(oom, "oom_kill"), Some(2));
        assert_eq!(keyed(oom, "oom"), None);
        let events = "low 0\nhigh 0\nmax 7\noom 1\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(keyed(events, "oom_kill"), Some(1));
        assert_eq!(keyed(events, "max"), Some(7));
        assert_eq!(keyed("max 0\n", "max"), Some(0));
        assert_eq!(keyed("max lots\n", "max"), None);
        assert_eq!(keyed("", "max"), None);
    }

    #[test]
    fn controller_lists_and_pids() {
        assert!(has_all("cpuset cpu io memory pids\n", &["memory", "pids"]));
        assert!(!has_all("cpu io memory\n", &["memory", "pids"]));
        assert!(has_all("", &[]));
        assert_eq!(pids("12\n 13 \n\nx\n0\n"), [12, 13]);
    }

    #[test]
    fn plain_names() {
        assert!(is_plain_name("alpha-3"));
        for bad in ["", ".", "..", "a/b"] {
            assert!(!is_plain_name(bad), "{bad}");
        }
    }
}
