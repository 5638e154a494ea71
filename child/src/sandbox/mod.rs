//! The agent's sandbox, entered by the agent itself before any thread
//! exists: user, mount, pid and ipc namespaces; a session of its own; a
//! private `/proc`, `/dev/pts` (terminals), `/tmp` and `/dev/shm`; hidden
//! paths; Landlock over the whole file system (writes only in the project
//! and the scratch directories); no new privileges; with
//! [`SandboxConfig::without_host_network`], a network namespace of its own.
//! [`enter`] returns in the confined agent process only.

mod ahead;
mod error;
mod exec;
mod init;
mod mounts;
mod namespaces;
mod plan;
mod probe;
mod ruleset;
mod sys;
mod tool;
mod tree;

use std::path::{Path, PathBuf};

pub use error::SandboxError;
pub use exec::{exec, EXIT_NOT_EXECUTABLE, EXIT_NOT_FOUND};
pub use init::start_reaping;
pub use probe::{probe, ProbedNetwork};
pub(crate) use sys::die_by_signal;
pub use tool::{ToolConfinement, ToolNet};

use ahead::Ahead;
use plan::{Hide, HideKind, MountPlan, MountStep, RulePlan, TerminalFacts, DEVICES, TERMINALS};

/// Exit code when the sandbox cannot be entered (`EX_CONFIG`).
pub const EXIT_SANDBOX_UNAVAILABLE: u8 = 78;

/// Test hook: `landlock` or `userns` makes the sandbox fail as if that
/// feature were missing. It can only ever make things fail.
pub const SIMULATE_MISSING_VAR: &str = "CORRAL_SANDBOX_SIMULATE_MISSING";

/// A kernel feature the test hook pretends is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Missing {
    Landlock,
    UserNamespace,
}

impl Missing {
    /// The value of [`SIMULATE_MISSING_VAR`], if it names a feature.
    pub fn parse(value: &str) -> Option<Missing> {
        match value.trim() {
            "landlock" => Some(Missing::Landlock),
            "userns" => Some(Missing::UserNamespace),
            _ => None,
        }
    }

    fn from_env() -> Option<Missing> {
        std::env::var(SIMULATE_MISSING_VAR)
            .ok()
            .and_then(|v| Missing::parse(&v))
    }
}

/// What the sandbox is entered with.
#[derive(Clone, Debug)]
pub struct SandboxConfig {
    /// The canonical project directory: readable and writable inside.
    project: PathBuf,
    /// Further canonical directories writable inside (the private home of
    /// `sandbox-exec`), none inside the project.
    writable: Vec<PathBuf>,
    /// Existing paths to hide, canonical.
    hides: Vec<Hide>,
    /// The network tool commands get.
    tool_network: ToolNet,
    /// Whether the agent keeps the host's network; without it, it gets a
    /// network namespace of its own with only `lo` (`--model-socket`: its
    /// model calls go through the gateway's broker instead).
    host_network: bool,
    /// The feature the test hook pretends is missing.
    simulate: Option<Missing>,
}

impl SandboxConfig {
    /// Resolves `project` and the `hide` paths (relative ones against the
    /// current directory; those that do not exist need no hiding).
    pub fn new(
        project: &Path,
        hide: &[PathBuf],
        tool_network: ToolNet,
    ) -> Result<SandboxConfig, SandboxError> {
        let project = project
            .canonicalize()
            .map_err(|source| SandboxError::Project {
                path: project.to_path_buf(),
                source,
            })?;
        if project == Path::new("/") {
            return Err(SandboxError::RootProject);
        }
        Ok(SandboxConfig {
            project,
            writable: Vec::new(),
            hides: resolve_hides(hide),
            tool_network,
            host_network: true,
            simulate: Missing::from_env(),
        })
    }

    /// Makes the existing directory `dir` writable inside too, visible even
    /// where a hide covers it (`sandbox-exec --home`).
    pub fn writable_too(mut self, dir: &Path) -> Result<SandboxConfig, SandboxError> {
        let dir = dir
            .canonicalize()
            .map_err(|source| SandboxError::Directory {
                path: dir.to_path_buf(),
                source,
            })?;
        if !dir.is_dir() {
            return Err(SandboxError::Directory {
                path: dir,
                source: std::io::Error::from(std::io::ErrorKind::NotADirectory),
            });
        }
        if dir.starts_with(&self.project) || self.writable.contains(&dir) {
            return Ok(self);
        }
        if self.project.starts_with(&dir) {
            return Err(SandboxError::AroundProject(dir));
        }
        self.writable.push(dir);
        Ok(self)
    }

    /// Takes the host's network from the agent itself (and so from
    /// everything it starts) at [`enter`].
    pub fn without_host_network(mut self) -> SandboxConfig {
        self.host_network = false;
        self
    }

    pub fn project(&self) -> &Path {
        &self.project
    }

    /// The network tool commands get.
    pub fn tool_network(&self) -> &ToolNet {
        &self.tool_network
    }

    /// The writable directories: the project first.
    fn writable(&self) -> Vec<PathBuf> {
        std::iter::once(&self.project)
            .chain(&self.writable)
            .cloned()
            .collect()
    }
}

/// What the agent got from [`enter`].
#[derive(Clone, Debug)]
pub struct Confined {
    /// The Landlock ABI in force.
    pub landlock_abi: u32,
    /// Whether signals and abstract unix sockets are scoped to the sandbox.
    pub scoped: bool,
    /// What each tool command gives up on top.
    pub tools: ToolConfinement,
}

/// Enters the sandbox. Must run before any thread exists. Returns in the
/// agent, pid 1 of the new pid namespace, which reaps the orphans of its
/// tools (a thread it starts) and ends on SIGHUP/SIGQUIT, and on
/// SIGTERM/SIGINT until it handles them itself, as a process that is not
/// an init would; the calling process becomes outer, and a failure in the
/// agent before it returns ends both with [`EXIT_SANDBOX_UNAVAILABLE`].
/// Every process the agent starts must come from
/// [`ToolConfinement::command`] (its pid is registered, so the orphan
/// reaper leaves its exit status to the agent).
pub fn enter(config: &SandboxConfig) -> Result<Confined, SandboxError> {
    enter_as(config, tree::Shape::AgentIsInit)
}

/// Enters the sandbox under a small init (pid 1), returning in pid 2:
/// for a program that will replace the process (`sandbox-exec`).
fn enter_under_init(config: &SandboxConfig) -> Result<Confined, SandboxError> {
    enter_as(config, tree::Shape::UnderInit)
}

fn enter_as(config: &SandboxConfig, shape: tree::Shape) -> Result<Confined, SandboxError> {
    let view = View::of(config)?;
    let terminals = terminal_facts();
    let mounts = MountPlan::new(&view.writable, &view.scratch, &config.hides, terminals);
    namespaces::enter(config.simulate == Some(Missing::UserNamespace))?;
    if !config.host_network {
        isolate_network()?;
    }
    tree::start(shape, || {
        mounts::apply(&mounts, &mut Ahead::none())?;
        let rules = ruleset::prepare(
            &base_rules(terminals),
            config.simulate == Some(Missing::Landlock),
        )?;
        view.confine(config, rules)
    })
}

/// Checks that `path` is the directory `expected` was opened on (device
/// and inode): a spare's view of the host is as old as the spare, and a
/// file system mounted or unmounted since could put another directory at
/// the project's path.
fn same_directory(expected: &std::os::fd::OwnedFd, path: &Path) -> Result<(), SandboxError> {
    use std::os::unix::fs::MetadataExt;
    let stale = |why: String| {
        SandboxError::Spare(format!(
            "{} is not the project directory the gateway opened: {why}",
            path.display()
        ))
    };
    let opened = expected
        .try_clone()
        .map(std::fs::File::from)
        .and_then(|dir| dir.metadata())
        .map_err(|e| stale(e.to_string()))?;
    let seen = std::fs::metadata(path).map_err(|e| stale(e.to_string()))?;
    match opened.dev() == seen.dev() && opened.ino() == seen.ino() {
        true => Ok(()),
        false => Err(stale(
            "this spare agent sees another directory there".into(),
        )),
    }
}

/// Takes the host's network away, while outer holds every capability of
/// its new user namespace.
fn isolate_network() -> Result<(), SandboxError> {
    sys::isolate_network()
        .map_err(|e| SandboxError::NotConfined(format!("cannot take the host's network away: {e}")))
}

/// The Landlock rules of every sandbox: `/` listable, its entries
/// readable and executable, the devices and terminals.
fn base_rules(terminals: TerminalFacts) -> RulePlan {
    RulePlan::new(
        &top_level_entries(),
        &existing_devices(),
        &[],
        terminals.private(),
    )
}

/// The project's side of the view: the writable and scratch directories,
/// found with the project as the working directory.
struct View {
    writable: Vec<PathBuf>,
    scratch: Vec<PathBuf>,
}

impl View {
    fn of(config: &SandboxConfig) -> Result<View, SandboxError> {
        std::env::set_current_dir(&config.project).map_err(|source| SandboxError::Project {
            path: config.project.clone(),
            source,
        })?;
        Ok(View {
            writable: config.writable(),
            scratch: scratch_dirs(),
        })
    }

    /// Once the mounts are made: enters the exposed project, and restricts
    /// the process to `rules` plus the writable and scratch directories,
    /// with no new privileges.
    fn confine(
        self,
        config: &SandboxConfig,
        rules: ruleset::Prepared,
    ) -> Result<Confined, SandboxError> {
        std::env::set_current_dir(&config.project).map_err(|source| SandboxError::Project {
            path: config.project.clone(),
            source,
        })?;
        let mut writable = self.writable;
        writable.extend(self.scratch);
        let _ = nix::sys::prctl::set_no_new_privs();
        let enforced = rules.restrict(&writable)?;
        Ok(Confined {
            landlock_abi: enforced.abi,
            scoped: enforced.scoped,
            tools: ToolConfinement::sandboxed(config.tool_network.clone()),
        })
    }
}

/// An agent's sandbox entered as far as it can be without a project, by
/// a spare agent started ahead of time ([`enter_spare`]): its namespaces
/// (the network's too, unless it keeps the host's), the agent as pid 1,
/// a private root with its own `/proc` and terminals, a Landlock
/// ruleset with the rules every sandbox has, not yet in force, and the
/// empty tmpfs the rest will lay, made but not attached.
/// [`Spare::finish`] does the rest once the project is known.
#[derive(Debug)]
pub struct Spare {
    terminals: TerminalFacts,
    host_network: bool,
    rules: ruleset::Prepared,
    ahead: Ahead,
    /// The project directory as whoever assigned the spare opened it.
    project: Option<std::os::fd::OwnedFd>,
}

/// Enters as much of the sandbox as needs no project (see [`Spare`]),
/// with the tmpfs that the scratch directories and the directories of
/// `hide` (the hides its projects will have) need made ahead. Must run
/// before any thread exists. Returns in the agent, pid 1 of its pid
/// namespace, exactly as [`enter`] does.
pub fn enter_spare(host_network: bool, hide: &[PathBuf]) -> Result<Spare, SandboxError> {
    let simulate = Missing::from_env();
    let terminals = terminal_facts();
    let (scratch, hides) = tmpfs_needed(hide, terminals);
    namespaces::enter(simulate == Some(Missing::UserNamespace))?;
    if !host_network {
        isolate_network()?;
    }
    tree::start(tree::Shape::SpareAgent, || {
        mounts::apply(&MountPlan::fixed(terminals), &mut Ahead::none())?;
        let rules = ruleset::prepare(&base_rules(terminals), simulate == Some(Missing::Landlock))?;
        Ok(Spare {
            terminals,
            host_network,
            rules,
            ahead: Ahead::make(scratch, hides),
            project: None,
        })
    })
}

/// How many scratch and hide tmpfs a sandbox hiding `hide` lays, as
/// far as is known without its project.
fn tmpfs_needed(hide: &[PathBuf], terminals: TerminalFacts) -> (usize, usize) {
    let plan = MountPlan::new(&[], &scratch_dirs(), &resolve_hides(hide), terminals);
    let count = |kind: fn(&MountStep) -> bool| plan.steps.iter().filter(|s| kind(s)).count();
    (
        count(|step| matches!(step, MountStep::Scratch(_))),
        count(|step| {
            matches!(
                step,
                MountStep::HideDirectory(_) | MountStep::HideDirectoryInScratch(_)
            )
        }),
    )
}

impl Spare {
    /// The project directory as its sender opened it (on the host, before
    /// the spare's view of it was taken): [`Spare::finish`] refuses a
    /// project that is another directory in the spare's view.
    pub fn expect_project(&mut self, dir: Option<std::os::fd::OwnedFd>) {
        self.project = dir;
    }

    /// Finishes the sandbox for `config` as [`enter`] would have made it:
    /// the scratch directories, the hides, the project bound back, then
    /// Landlock with the writable directories, no new privileges. Must run
    /// while the process has one thread: Landlock and no-new-privileges
    /// bind the calling thread (and what it starts) only.
    pub fn finish(mut self, config: &SandboxConfig) -> Result<Confined, SandboxError> {
        match config.simulate {
            Some(Missing::UserNamespace) => {
                return Err(SandboxError::UserNamespace(format!(
                    "unshare: {}",
                    nix::errno::Errno::EPERM
                )))
            }
            Some(Missing::Landlock) => {
                return Err(SandboxError::Landlock(ruleset::NOT_AVAILABLE.to_string()))
            }
            None => {}
        }
        let threads = std::fs::read_dir("/proc/self/task").map(Iterator::count);
        if !matches!(threads, Ok(1)) {
            return Err(SandboxError::Spare(
                "a spare agent must finish its sandbox before any thread starts".into(),
            ));
        }
        if config.host_network != self.host_network {
            return Err(SandboxError::Spare(format!(
                "this spare agent was prepared {} the host's network",
                match self.host_network {
                    true => "with",
                    false => "without",
                }
            )));
        }
        if let Some(expected) = &self.project {
            same_directory(expected, &config.project)?;
        }
        let view = View::of(config)?;
        let plan = MountPlan::new(&view.writable, &view.scratch, &config.hides, self.terminals);
        let rest = plan.after_fixed(self.terminals).ok_or_else(|| {
            SandboxError::NotConfined("the spare agent's mounts do not begin the plan".into())
        })?;
        mounts::apply(&rest, &mut self.ahead)?;
        // Those left over end with their descriptors.
        drop(self.ahead);
        view.confine(config, self.rules)
    }
}

/// The `hide` paths that exist, canonical, with their kinds.
fn resolve_hides(hide: &[PathBuf]) -> Vec<Hide> {
    hide.iter()
        .filter_map(|path| {
            let path = path.canonicalize().ok()?;
            let kind = match path.is_dir() {
                true => HideKind::Directory,
                false => HideKind::File,
            };
            Some(Hide { path, kind })
        })
        .collect()
}

/// The scratch directories that exist (`/tmp`, `/dev/shm`), canonical:
/// each gets a private tmpfs.
fn scratch_dirs() -> Vec<PathBuf> {
    ["/tmp", "/dev/shm"]
        .iter()
        .filter_map(|dir| Path::new(dir).canonicalize().ok())
        .filter(|dir| dir.is_dir())
        .collect()
}

/// Names in `/`.
fn top_level_entries() -> Vec<String> {
    std::fs::read_dir("/")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The [`DEVICES`] and [`TERMINALS`] that exist.
fn existing_devices() -> Vec<&'static str> {
    let mut devices: Vec<&str> = DEVICES.into_iter().chain(TERMINALS).collect();
    devices.sort();
    devices.dedup();
    devices.retain(|d| Path::new(d).exists());
    devices
}

/// What the host's `/dev` offers for a private `devpts`.
fn terminal_facts() -> TerminalFacts {
    let kind = |path: &str| std::fs::symlink_metadata(path).ok().map(|m| m.file_type());
    TerminalFacts {
        pts_dir: kind("/dev/pts").is_some_and(|t| t.is_dir()),
        ptmx_node: kind("/dev/ptmx").is_some_and(|t| !t.is_symlink()),
    }
}

/// What to hide for a session journal at `journal`: its directory, unless
/// that directory is the project or holds it (then only the file). Both
/// paths canonical.
pub fn session_hide(journal: &Path, project: &Path) -> PathBuf {
    match journal.parent() {
        Some(dir) if !project.starts_with(dir) => dir.to_path_buf(),
        _ => journal.to_path_buf(),
    }
}

/// Forbids core dumps, ptrace attach and reading `/proc/<pid>/{environ,mem}`
/// of this process by its own uid (and so by its tools).
pub fn make_undumpable() -> Result<(), nix::errno::Errno> {
    nix::sys::prctl::set_dumpable(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_simulation_hook_names_two_features() {
        assert_eq!(Missing::parse("landlock"), Some(Missing::Landlock));
        assert_eq!(Missing::parse("userns\n"), Some(Missing::UserNamespace));
        assert_eq!(Missing::parse(""), None);
        assert_eq!(Missing::parse("seccomp"), None);
    }

    #[test]
    fn the_journal_directory_is_hidden_unless_it_holds_the_project() {
        let p = Path::new("/srv/p");
        assert_eq!(
            session_hide(Path::new("/var/lib/corral/sessions/p.jsonl"), p),
            PathBuf::from("/var/lib/corral/sessions")
        );
        assert_eq!(
            session_hide(Path::new("/srv/p/session.jsonl"), p),
            PathBuf::from("/srv/p/session.jsonl")
        );
        assert_eq!(
            session_hide(Path::new("/srv/s.jsonl"), p),
            PathBuf::from("/srv/s.jsonl")
        );
        assert_eq!(
            session_hide(Path::new("/srv/p/.corral/s.jsonl"), p),
            PathBuf::from("/srv/p/.corral")
        );
    }

    #[test]
    fn the_root_directory_is_refused_as_a_project() {
        let err = SandboxConfig::new(Path::new("/"), &[], ToolNet::Host).unwrap_err();
        assert!(matches!(err, SandboxError::RootProject), "{err}");
    }

    #[test]
    fn a_further_writable_directory_may_not_hold_the_project() {
        let dir = tempfile::tempdir().unwrap();
        let project = dir.path().join("p");
        let home = dir.path().join("home");
        std::fs::create_dir_all(project.join("sub")).unwrap();
        std::fs::create_dir(&home).unwrap();
        let config = SandboxConfig::new(&project, &[], ToolNet::Host).unwrap();
        for around in [dir.path(), Path::new("/")] {
            let err = config.clone().writable_too(around).unwrap_err();
            assert!(matches!(err, SandboxError::AroundProject(_)), "{err}");
        }
        let err = config.clone().writable_too(&home.join("gone")).unwrap_err();
        assert!(matches!(err, SandboxError::Directory { .. }), "{err}");
        let config = config
            .writable_too(&home)
            .and_then(|c| c.writable_too(&home))
            .and_then(|c| c.writable_too(&project.join("sub")))
            .unwrap();
        let real = |p: &Path| p.canonicalize().unwrap();
        assert_eq!(config.writable(), [real(&project), real(&home)]);
    }

    #[test]
    fn missing_hides_are_dropped_and_kinds_recorded() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "x").unwrap();
        let hides = [
            dir.path().join("gone"),
            file.clone(),
            dir.path().to_path_buf(),
        ];
        let config = SandboxConfig::new(dir.path(), &hides, ToolNet::Isolated).unwrap();
        let kinds: Vec<HideKind> = config.hides.iter().map(|h| h.kind).collect();
        assert_eq!(kinds, [HideKind::File, HideKind::Directory]);
        assert_eq!(config.tool_network, ToolNet::Isolated);
    }
}
