//! Memory headroom for alerts, read from `/proc` and the cgroup files when
//! `/metrics` is scraped: `corral_memory_limit_bytes` is what the gateway
//! and its children may use in all (the host's memory, or less when a
//! cgroup the gateway is in has a lower limit) and
//! `corral_memory_available_bytes` how much of it is still free, taken at
//! the tightest level (the host's `MemAvailable`, or a cgroup's limit minus
//! its usage).

use std::path::Path;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntGauge, Opts};

use crate::process::limits::parse::{mountinfo, proc_cgroup};

/// A memory budget and what is left of it, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Headroom {
    pub limit: u64,
    pub available: u64,
}

impl Headroom {
    /// The host's `MemTotal` and `MemAvailable` from `/proc/meminfo` text.
    pub fn from_meminfo(text: &str) -> Option<Headroom> {
        let field = |name: &str| -> Option<u64> {
            let line = text.lines().find(|l| l.starts_with(name))?;
            let kib: u64 = line[name.len()..].split_whitespace().next()?.parse().ok()?;
            kib.checked_mul(1024)
        };
        Some(Headroom {
            limit: field("MemTotal:")?,
            available: field("MemAvailable:")?,
        })
    }

    /// Narrows this budget to a cgroup with `limit` (`None`: unlimited)
    /// and `usage`, where that leaves less available.
    pub fn within(self, limit: Option<u64>, usage: u64) -> Headroom {
        match limit {
            Some(limit) if limit.saturating_sub(usage) < self.available => Headroom {
                limit: limit.min(self.limit),
                available: limit.saturating_sub(usage),
            },
            _ => self,
        }
    }
}

/// A cgroup memory limit file's value: `max` (v2) or a number; v1's
/// "unlimited" is a huge number, which never narrows the host's budget.
pub fn parse_limit(text: &str) -> Option<u64> {
    text.trim().parse().ok()
}

/// The host's headroom narrowed by every memory-limited cgroup from the
/// gateway's own up to its hierarchy's root (cgroup v2 `memory.max` /
/// `memory.current`, or the v1 memory hierarchy's `memory.limit_in_bytes`
/// / `memory.usage_in_bytes`).
pub fn read() -> Option<Headroom> {
    let mut headroom = Headroom::from_meminfo(&std::fs::read_to_string("/proc/meminfo").ok()?)?;
    let memberships =
        proc_cgroup(&std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default());
    let mounts = mountinfo(&std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default());
    for mount in &mounts {
        let (membership, files) = if mount.v2 {
            let Some(m) = memberships.iter().find(|m| m.unified) else {
                continue;
            };
            (m, ("memory.max", "memory.current"))
        } else if mount.has_controller("memory") {
            let Some(m) = memberships
                .iter()
                .find(|m| m.controllers.iter().any(|c| c == "memory"))
            else {
                continue;
            };
            (m, ("memory.limit_in_bytes", "memory.usage_in_bytes"))
        } else {
            continue;
        };
        let Some(dir) = mount.dir_of(&membership.path) else {
            continue;
        };
        let mut level: Option<&Path> = Some(&dir);
        while let Some(dir) = level.filter(|d| d.starts_with(&mount.mount_point)) {
            let read = |name: &str| std::fs::read_to_string(dir.join(name)).ok();
            if let (Some(limit), Some(usage)) = (read(files.0), read(files.1)) {
                if let Some(usage) = parse_limit(&usage) {
                    headroom = headroom.within(parse_limit(&limit), usage);
                }
            }
            level = dir.parent();
        }
    }
    Some(headroom)
}

/// Sets the two gauges from [`read`] on every scrape.
pub struct MemoryCollector {
    limit: IntGauge,
    available: IntGauge,
    descs: Vec<Desc>,
}

impl MemoryCollector {
    pub fn new() -> Result<MemoryCollector, prometheus::Error> {
        let limit = IntGauge::with_opts(Opts::new(
            "memory_limit_bytes",
            "Memory the gateway and its children may use in all: the host's, or a lower limit of a cgroup the gateway is in.",
        ).namespace("corral"))?;
        let available = IntGauge::with_opts(Opts::new(
            "memory_available_bytes",
            "Memory still available to the gateway and its children, at the tightest of the host and its cgroups.",
        ).namespace("corral"))?;
        let descs = limit
            .desc()
            .into_iter()
            .chain(available.desc())
            .cloned()
            .collect();
        Ok(MemoryCollector {
            limit,
            available,
            descs,
        })
    }
}

impl Collector for MemoryCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let Some(headroom) = read() else {
            return Vec::new();
        };
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.limit.set(clamp(headroom.limit));
        self.available.set(clamp(headroom.available));
        self.limit
            .collect()
            .into_iter()
            .chain(self.available.collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEMINFO: &str =
        "MemTotal:        8000000 kB\nMemFree:  100 kB\nMemAvailable:    6000000 kB\n";

    #[test]
    fn host_budget_from_meminfo() {
        let host = Headroom::from_meminfo(MEMINFO).unwrap();
        assert_eq!(host.limit, 8_000_000 * 1024);
        assert_eq!(host.available, 6_000_000 * 1024);
        assert_eq!(Headroom::from_meminfo("MemTotal: 1 kB\n"), None);
    }

    #[test]
    fn a_tighter_cgroup_narrows_the_budget() {
        let host = Headroom::from_meminfo(MEMINFO).unwrap();
        let gib = 1 << 30;
        let tight = host.within(Some(2 * gib), gib + 1);
        assert_eq!(
            tight,
            Headroom {
                limit: 2 * gib,
                available: gib - 1
            }
        );
        // Unlimited (v2 `max`) and v1's huge "unlimited" leave it alone.
        assert_eq!(host.within(parse_limit("max\n"), gib), host);
        assert_eq!(host.within(parse_limit("9223372036854771712"), gib), host);
        // Over the limit: nothing available.
        assert_eq!(host.within(Some(gib), 2 * gib).available, 0);
    }
}
