//! Per-child resource limits (`--child-memory-max`, `--child-pids-max`).
//!
//! A backend is chosen once at start ([`Limits::choose`]): cgroup v2 when
//! the gateway's own cgroup offers the memory and pids controllers
//! (`cgroup_v2`), else separate cgroup v1 hierarchies (`cgroup_v1`), else
//! rlimits (`RLIMIT_AS`, `RLIMIT_NPROC`). Each spawn gets a
//! [`ChildLimits`]: its own cgroup, joined by the child before `exec`
//! through a `cgroup.procs` descriptor opened before the fork, whose
//! counters the process layer polls ([`watch`]) to kill a child that hit a
//! limit and name the reason. The cgroup is removed once the child is gone.

mod cgroup_v1;
mod cgroup_v2;
pub mod parse;
pub mod watch;

use std::fs::{self, File, OpenOptions};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use nix::sys::resource::Resource;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How often the counters of a live child are read.
pub const POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(250);

/// Which limit a child hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitHit {
    Memory,
    Pids,
}

impl LimitHit {
    /// The exit reason reported for it (metrics, admin API, events).
    pub fn reason(self) -> &'static str {
        match self {
            LimitHit::Memory => "memory_limit",
            LimitHit::Pids => "pids_limit",
        }
    }
}

/// A cgroup could not be set up for a child.
#[derive(Debug, thiserror::Error)]
#[error("cannot set up the child's limits at {}: {source}", path.display())]
pub struct LimitsError {
    pub path: PathBuf,
    #[source]
    pub source: std::io::Error,
}

/// The backend enforcing the limits.
#[derive(Debug)]
enum Backend {
    /// No limit configured.
    None,
    /// `children/` of the gateway's cgroup (memory and pids enabled).
    Cgroup2 {
        children: PathBuf,
    },
    /// The gateway's directories in each needed v1 hierarchy.
    Cgroup1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
    },
    Rlimit,
}

/// The limits of every child and the backend that enforces them.
#[derive(Debug)]
pub struct Limits {
    backend: Backend,
    memory_max: Option<u64>,
    pids_max: Option<u64>,
    /// Numbers the cgroups of successive spawns.
    spawns: AtomicU64,
}

impl Limits {
    /// No limits.
    pub fn none() -> Limits {
        Limits {
            backend: Backend::None,
            memory_max: None,
            pids_max: None,
            spawns: AtomicU64::new(0),
        }
    }

    /// Chooses the backend for these limits and prepares it; logs which.
    /// Call before any thread exists: cgroup v2 moves the whole process.
    pub fn choose(memory_max: Option<u64>, pids_max: Option<u64>) -> Limits {
        let mut limits = Limits::none();
        limits.memory_max = memory_max;
        limits.pids_max = pids_max;
        if memory_max.is_none() && pids_max.is_none() {
            return limits;
        }
        let read = |path: &str| fs::read_to_string(path).unwrap_or_default();
        let memberships = parse::proc_cgroup(&read("/proc/self/cgroup"));
        let mounts = parse::mountinfo(&read("/proc/self/mountinfo"));
        let mut wanted = Vec::new();
        if memory_max.is_some() {
            wanted.push("memory");
        }
        if pids_max.is_some() {
            wanted.push("pids");
        }
        limits.backend = match cgroup_v2::setup(&memberships, &mounts, &wanted) {
            Ok(children) => Backend::Cgroup2 { children },
            Err(v2) => match cgroup_v1::setup(&memberships, &mounts, &wanted) {
                Ok((memory, pids)) => {
                    tracing::debug!(reason = %v2, "cgroup v2 is not usable for child limits");
                    Backend::Cgroup1 { memory, pids }
                }
                Err(v1) => {
                    tracing::warn!(cgroup2 = %v2, cgroup1 = %v1, "no cgroup is usable for child limits; falling back to rlimits (RLIMIT_AS per process, RLIMIT_NPROC per user), whose hits are not attributed to a limit");
                    Backend::Rlimit
                }
            },
        };
        tracing::info!(
            backend = limits.backend_name(),
            memory_max = ?memory_max,
            pids_max = ?pids_max,
            "child resource limits"
        );
        limits
    }

    /// `cgroup2`, `cgroup1`, `rlimit` or `none`.
    pub fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::None => "none",
            Backend::Cgroup2 { .. } => "cgroup2",
            Backend::Cgroup1 { .. } => "cgroup1",
            Backend::Rlimit => "rlimit",
        }
    }

    pub fn memory_max(&self) -> Option<u64> {
        self.memory_max
    }

    pub fn pids_max(&self) -> Option<u64> {
        self.pids_max
    }

    /// Sets up the limits of one spawn of `project` (a valid project name).
    pub fn prepare(&self, project: &str) -> Result<ChildLimits, LimitsError> {
        let n = self.spawns.fetch_add(1, Ordering::Relaxed) + 1;
        let name = format!("{project}-{n}");
        let mut child = ChildLimits::default();
        let result = match &self.backend {
            Backend::None => Ok(()),
            Backend::Rlimit => {
                child
                    .rlimits
                    .extend(self.memory_max.map(|m| (Resource::RLIMIT_AS, m)));
                child
                    .rlimits
                    .extend(self.pids_max.map(|p| (Resource::RLIMIT_NPROC, p)));
                Ok(())
            }
            Backend::Cgroup2 { children } => cgroup_v2::prepare(
                &mut child,
                &children.join(&name),
                self.memory_max,
                self.pids_max,
            ),
            Backend::Cgroup1 { memory, pids } => cgroup_v1::prepare(
                &mut child,
                memory
                    .as_ref()
                    .map(|dir| dir.join(&name))
                    .zip(self.memory_max),
                pids.as_ref().map(|dir| dir.join(&name)).zip(self.pids_max),
            ),
        };
        match result {
            Ok(()) => Ok(child),
            Err(e) => {
                child.remove();
                Err(e)
            }
        }
    }

    /// Removes the gateway's own cgroup directories (at shutdown, once
    /// every child is gone). Best effort.
    pub fn cleanup(&self) {
        match &self.backend {
            Backend::Cgroup2 { children } => remove_dir(children),
            Backend::Cgroup1 { memory, pids } => {
                for dir in [memory, pids].into_iter().flatten() {
                    remove_dir(dir);
                }
            }
            Backend::None | Backend::Rlimit => {}
        }
    }
}

/// A counter file whose value above zero means `hit`.
#[derive(Debug)]
struct Counter {
    file: PathBuf,
    key: &'static str,
    hit: LimitHit,
}

/// The limits of one spawned child.
#[derive(Debug, Default)]
pub struct ChildLimits {
    /// The cgroup directories made for it (one per hierarchy).
    dirs: Vec<PathBuf>,
    /// Their `cgroup.procs`, opened before the fork; the child writes "0".
    procs: Vec<OwnedFd>,
    counters: Vec<Counter>,
    /// rlimits the child sets on itself before `exec`.
    rlimits: Vec<(Resource, u64)>,
    /// The first limit seen hit.
    hit: OnceLock<LimitHit>,
}

impl ChildLimits {
    /// Takes the descriptors the child writes "0" to, joining its cgroups
    /// (they go to the fork hook and are closed once the child exists).
    pub(in crate::process) fn take_join_fds(&mut self) -> Vec<OwnedFd> {
        std::mem::take(&mut self.procs)
    }

    /// rlimits the child sets on itself.
    pub(in crate::process) fn rlimits(&self) -> &[(Resource, u64)] {
        &self.rlimits
    }

    /// Whether there are counters to watch (a cgroup backend).
    pub fn is_watched(&self) -> bool {
        !self.counters.is_empty()
    }

    /// The limit hit so far, if any (without reading the counters).
    pub fn hit(&self) -> Option<LimitHit> {
        self.hit.get().copied()
    }

    /// Reads the counters; returns (and remembers) the limit hit, if any.
    pub fn check(&self) -> Option<LimitHit> {
        if let Some(hit) = self.hit() {
            return Some(hit);
        }
        let hit = self.counters.iter().find_map(|counter| {
            let text = fs::read_to_string(&counter.file).ok()?;
            (parse::keyed(&text, counter.key)? > 0).then_some(counter.hit)
        })?;
        Some(*self.hit.get_or_init(|| hit))
    }

    /// SIGKILLs every process left in the child's cgroups.
    pub fn kill_all(&self) {
        for dir in &self.dirs {
            let text = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
            for pid in parse::pids(&text) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
            }
        }
    }

    /// Whether no process is left in the child's cgroups.
    pub fn is_empty(&self) -> bool {
        self.dirs.iter().all(|dir| {
            fs::read_to_string(dir.join("cgroup.procs"))
                .map(|text| parse::pids(&text).is_empty())
                .unwrap_or(true)
        })
    }

    /// Removes the child's cgroups (they must be empty).
    pub fn remove(&self) {
        for dir in &self.dirs {
            remove_dir(dir);
        }
    }

    /// Creates the cgroup `dir` for this child and opens its `cgroup.procs`.
    fn add_dir(&mut self, dir: &Path) -> Result<(), LimitsError> {
        create_dir(dir)?;
        self.dirs.push(dir.to_path_buf());
        let procs = dir.join("cgroup.procs");
        let file = OpenOptions::new()
            .write(true)
            .open(&procs)
            .map_err(|source| LimitsError {
                path: procs,
                source,
            })?;
        self.procs.push(OwnedFd::from(file));
        Ok(())
    }

    fn add_counter(&mut self, file: PathBuf, key: &'static str, hit: LimitHit) {
        self.counters.push(Counter { file, key, hit });
    }
}

/// `mkdir`, where an existing directory is fine.
fn create_dir(dir: &Path) -> Result<(), LimitsError> {
    match fs::create_dir(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(LimitsError {
            path: dir.to_path_buf(),
            source,
        }),
    }
}

/// Writes `value` to the control file `path`.
fn write_control(path: &Path, value: &str) -> Result<(), LimitsError> {
    let error = |source| LimitsError {
        path: path.to_path_buf(),
        source,
    };
    let mut file = OpenOptions::new().write(true).open(path).map_err(error)?;
    std::io::Write::write_all(&mut file, value.as_bytes()).map_err(error)
}

/// `rmdir`, logging a failure other than "already gone".
fn remove_dir(dir: &Path) {
    match fs::remove_dir(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a child cgroup"),
    }
}

/// Whether a file can be read (used to probe optional control files).
fn exists(path: &Path) -> bool {
    File::open(path).is_ok()
}
