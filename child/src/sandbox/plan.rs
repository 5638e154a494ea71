//! Pure planning of the sandbox's file-system view: which mounts init makes,
//! in which order ([`MountPlan`]), and which paths get which Landlock rights
//! ([`RulePlan`]). No I/O: the caller gathers the facts (canonical paths,
//! what exists) and carries the plan out.

use std::path::{Path, PathBuf};

/// What a `--sandbox-hide` path is, as found on the host before any mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HideKind {
    /// Covered by an empty tmpfs.
    Directory,
    /// Covered by a bind mount of `/dev/null`.
    File,
}

/// A path to hide: canonical, and existing when the plan was made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hide {
    pub path: PathBuf,
    pub kind: HideKind,
}

/// One mount init makes, in plan order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MountStep {
    /// `/` becomes recursively private: nothing propagates to the host.
    PrivateRoot,
    /// A fresh `proc` on `/proc`: only this sandbox's processes.
    Proc,
    /// A new `devpts` instance on `/dev/pts`: the sandbox's own terminals,
    /// none of the host's.
    Devpts,
    /// The new instance's `ptmx` bound over `/dev/ptmx`, so that opening
    /// `/dev/ptmx` makes a terminal in the private instance.
    Ptmx,
    /// A fresh world-writable tmpfs (the private `/tmp`, `/dev/shm`).
    Scratch(PathBuf),
    /// An empty tmpfs over a hidden directory.
    HideDirectory(PathBuf),
    /// The same over a hidden directory that lay under a scratch directory:
    /// its path is made inside the scratch tmpfs first, so that the hidden
    /// path stays as unwritable as it is elsewhere (not a writable part of
    /// the private `/tmp`).
    HideDirectoryInScratch(PathBuf),
    /// `/dev/null` bound over a hidden file.
    HideFile(PathBuf),
    /// A writable directory (the project, or a private home of
    /// `sandbox-exec`) bound back where a covering tmpfs hid it.
    Expose(PathBuf),
    /// A hide's tmpfs made read-only, once everything below it is in place.
    Seal(PathBuf),
}

/// The mounts init makes, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountPlan {
    pub steps: Vec<MountStep>,
}

/// What the host offers for terminals, found before any mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TerminalFacts {
    /// `/dev/pts` is a directory (a private `devpts` can be mounted on it).
    pub pts_dir: bool,
    /// `/dev/ptmx` is a device node (not a symlink into `/dev/pts`), so
    /// the private instance's `ptmx` must be bound over it.
    pub ptmx_node: bool,
}

impl TerminalFacts {
    /// Whether the sandbox gets terminals of its own.
    pub fn private(self) -> bool {
        self.pts_dir
    }
}

impl MountPlan {
    /// The first steps of every plan, the same whatever the project and
    /// the hides: a private root, `/proc` and the terminals. A spare agent
    /// makes them before it knows its project.
    pub fn fixed(terminals: TerminalFacts) -> MountPlan {
        let mut steps = vec![MountStep::PrivateRoot, MountStep::Proc];
        if terminals.private() {
            steps.push(MountStep::Devpts);
            if terminals.ptmx_node {
                steps.push(MountStep::Ptmx);
            }
        }
        MountPlan { steps }
    }

    /// The steps after [`MountPlan::fixed`]'s, which must begin this plan.
    pub fn after_fixed(&self, terminals: TerminalFacts) -> Option<MountPlan> {
        let fixed = MountPlan::fixed(terminals).steps;
        self.steps
            .strip_prefix(fixed.as_slice())
            .map(|rest| MountPlan {
                steps: rest.to_vec(),
            })
    }

    /// Plans the view for the `writable` directories (the project first,
    /// then any private home) with the scratch directories that exist
    /// (`/tmp`, `/dev/shm`) and the paths to hide. Paths must be canonical.
    ///
    /// A hide inside a hidden directory is skipped (it no longer exists in
    /// that view), and so is a hidden scratch directory (the private tmpfs
    /// already replaced it). A hidden directory under a scratch directory is made
    /// again inside the scratch tmpfs and covered there; a hidden file
    /// there simply no longer exists. Hides inside a writable directory are
    /// applied after it is exposed again, so its own hidden parts stay
    /// hidden. A hide that covers a writable directory (or is one) hides
    /// everything around it; the directory is bound back. Last, every
    /// hidden directory is made read-only.
    pub fn new(
        writable: &[PathBuf],
        scratch: &[PathBuf],
        hides: &[Hide],
        terminals: TerminalFacts,
    ) -> MountPlan {
        let mut steps = MountPlan::fixed(terminals).steps;
        for dir in scratch {
            steps.push(MountStep::Scratch(dir.clone()));
        }
        let scratch: Vec<&Path> = scratch.iter().map(PathBuf::as_path).collect();
        let inside_writable = |h: &&Hide| {
            writable
                .iter()
                .any(|w| h.path != *w && h.path.starts_with(w))
        };
        let (mut inner, mut outer): (Vec<&Hide>, Vec<&Hide>) =
            hides.iter().partition(inside_writable);
        outer.sort_by_key(|h| h.path.components().count());
        inner.sort_by_key(|h| h.path.components().count());
        let mut hidden = Vec::new();
        push_hides(&mut steps, &mut hidden, &scratch, &outer);
        let covered = |p: &Path| scratch.iter().chain(&hidden).any(|c| p.starts_with(c));
        for dir in writable.iter().filter(|dir| covered(dir)) {
            steps.push(MountStep::Expose(dir.clone()));
        }
        let mut hidden_inside = Vec::new();
        push_hides(&mut steps, &mut hidden_inside, &[], &inner);
        for dir in hidden.into_iter().chain(hidden_inside) {
            steps.push(MountStep::Seal(dir.to_path_buf()));
        }
        MountPlan { steps }
    }
}

/// Appends a step per hide not already under a hidden directory, and adds
/// the hidden directories to `hidden`.
fn push_hides<'a>(
    steps: &mut Vec<MountStep>,
    hidden: &mut Vec<&'a Path>,
    scratch: &[&Path],
    hides: &[&'a Hide],
) {
    for hide in hides {
        if hidden.iter().any(|c| hide.path.starts_with(c)) || scratch.contains(&hide.path.as_path())
        {
            continue;
        }
        let in_scratch = scratch.iter().any(|s| hide.path.starts_with(s));
        match (hide.kind, in_scratch) {
            (HideKind::Directory, false) => steps.push(MountStep::HideDirectory(hide.path.clone())),
            (HideKind::Directory, true) => {
                steps.push(MountStep::HideDirectoryInScratch(hide.path.clone()))
            }
            (HideKind::File, false) => steps.push(MountStep::HideFile(hide.path.clone())),
            (HideKind::File, true) => continue,
        }
        if hide.kind == HideKind::Directory {
            hidden.push(&hide.path);
        }
    }
}

/// The kind of Landlock rights a path gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// List directories (given on `/`, so it holds everywhere).
    ListDirectories,
    /// Read files and execute them.
    ReadExecute,
    /// Read and write an existing device file (no ioctl).
    Device,
    /// Read and write a terminal of the sandbox's own `devpts`, with the
    /// ioctls terminals need.
    Terminal,
    /// Everything but device creation and device ioctls.
    Writable,
}

/// Device files tools may open for reading and writing.
pub const DEVICES: [&str; 6] = [
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
];

/// The terminal devices, granted [`Grant::Terminal`] once the private
/// `devpts` is in place: its directory, its `ptmx` (bound over
/// `/dev/ptmx`), and `/dev/tty`, which names the caller's controlling
/// terminal, and inside the sandbox (a session of its own) that can only be
/// one of the private ones.
pub const TERMINALS: [&str; 3] = ["/dev/pts", "/dev/ptmx", "/dev/tty"];

/// The Landlock rules: one grant per path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RulePlan {
    pub rules: Vec<(PathBuf, Grant)>,
}

impl RulePlan {
    /// Rules for a view whose root holds `top_level` entries (names),
    /// where `devices` of [`DEVICES`] and [`TERMINALS`] exist and
    /// `writable` are the project and the scratch directories. Terminals get
    /// their ioctls only with a `private_terminals` instance; without one
    /// `/dev/tty` is a plain device and the host's `/dev/pts` is left out.
    pub fn new(
        top_level: &[String],
        devices: &[&str],
        writable: &[PathBuf],
        private_terminals: bool,
    ) -> RulePlan {
        let mut rules = vec![(PathBuf::from("/"), Grant::ListDirectories)];
        let mut names: Vec<&String> = top_level.iter().filter(|n| n.as_str() != "dev").collect();
        names.sort();
        rules.extend(
            names
                .into_iter()
                .map(|name| (Path::new("/").join(name), Grant::ReadExecute)),
        );
        rules.extend(devices.iter().filter_map(|d| {
            let grant = match (TERMINALS.contains(d), private_terminals) {
                (true, true) => Grant::Terminal,
                _ if DEVICES.contains(d) => Grant::Device,
                _ => return None,
            };
            Some((PathBuf::from(d), grant))
        }));
        rules.extend(writable.iter().map(|w| (w.clone(), Grant::Writable)));
        RulePlan { rules }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(path: &str) -> Hide {
        Hide {
            path: PathBuf::from(path),
            kind: HideKind::Directory,
        }
    }

    fn file(path: &str) -> Hide {
        Hide {
            path: PathBuf::from(path),
            kind: HideKind::File,
        }
    }

    const NO_TERMINALS: TerminalFacts = TerminalFacts {
        pts_dir: false,
        ptmx_node: false,
    };

    fn scratch() -> Vec<PathBuf> {
        vec![PathBuf::from("/tmp"), PathBuf::from("/dev/shm")]
    }

    fn after_scratch(plan: &MountPlan) -> &[MountStep] {
        &plan.steps[4..]
    }

    #[test]
    fn what_follows_the_fixed_steps_is_the_rest_of_the_plan() {
        let terminals = TerminalFacts {
            pts_dir: true,
            ptmx_node: true,
        };
        let plan = MountPlan::new(&["/srv/p".into()], &scratch(), &[dir("/srv")], terminals);
        let fixed = MountPlan::fixed(terminals);
        assert_eq!(fixed.steps.len(), 4);
        let rest = plan.after_fixed(terminals).unwrap();
        assert_eq!([fixed.steps, rest.steps.clone()].concat(), plan.steps);
        assert_eq!(rest.steps[0], MountStep::Scratch("/tmp".into()));
        let without = MountPlan::new(&["/srv/p".into()], &scratch(), &[], NO_TERMINALS);
        assert_eq!(
            without.after_fixed(terminals),
            None,
            "planned without the terminals"
        );
    }

    #[test]
    fn fixed_steps_come_first() {
        let plan = MountPlan::new(&["/srv/p".into()], &scratch(), &[], NO_TERMINALS);
        assert_eq!(
            plan.steps,
            vec![
                MountStep::PrivateRoot,
                MountStep::Proc,
                MountStep::Scratch("/tmp".into()),
                MountStep::Scratch("/dev/shm".into()),
            ]
        );
    }

    #[test]
    fn a_project_under_a_hidden_root_is_exposed_again() {
        let hides = [
            dir("/srv/state"),
            dir("/srv/projects"),
            file("/etc/corral.toml"),
        ];
        let plan = MountPlan::new(
            &["/srv/projects/a".into()],
            &scratch(),
            &hides,
            NO_TERMINALS,
        );
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::HideDirectory("/srv/state".into()),
                MountStep::HideDirectory("/srv/projects".into()),
                MountStep::HideFile("/etc/corral.toml".into()),
                MountStep::Expose("/srv/projects/a".into()),
                MountStep::Seal("/srv/state".into()),
                MountStep::Seal("/srv/projects".into()),
            ]
        );
    }

    #[test]
    fn hidden_directories_under_tmp_are_made_again_and_stay_unwritable() {
        let hides = [
            dir("/tmp/x/journal"),
            dir("/tmp/x/projects"),
            file("/tmp/x/token"),
        ];
        let plan = MountPlan::new(
            &["/tmp/x/projects/p".into()],
            &scratch(),
            &hides,
            NO_TERMINALS,
        );
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::HideDirectoryInScratch("/tmp/x/journal".into()),
                MountStep::HideDirectoryInScratch("/tmp/x/projects".into()),
                MountStep::Expose("/tmp/x/projects/p".into()),
                MountStep::Seal("/tmp/x/journal".into()),
                MountStep::Seal("/tmp/x/projects".into()),
            ]
        );
    }

    #[test]
    fn a_project_under_tmp_is_exposed_again() {
        let plan = MountPlan::new(&["/tmp/x/project".into()], &scratch(), &[], NO_TERMINALS);
        assert_eq!(
            after_scratch(&plan),
            [MountStep::Expose("/tmp/x/project".into())]
        );
    }

    #[test]
    fn hides_inside_the_project_follow_its_exposure() {
        let hides = [
            dir("/tmp/p/.corral"),
            dir("/tmp/p/.corral/sessions"),
            file("/tmp/p/s.jsonl"),
        ];
        let plan = MountPlan::new(&["/tmp/p".into()], &scratch(), &hides, NO_TERMINALS);
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::Expose("/tmp/p".into()),
                MountStep::HideDirectory("/tmp/p/.corral".into()),
                MountStep::HideFile("/tmp/p/s.jsonl".into()),
                MountStep::Seal("/tmp/p/.corral".into()),
            ]
        );
    }

    #[test]
    fn nested_hides_are_covered_by_the_outermost_whatever_the_order() {
        let hides = [dir("/srv/a/b"), dir("/srv/a"), file("/srv/a/b/c")];
        let plan = MountPlan::new(&["/home/p".into()], &scratch(), &hides, NO_TERMINALS);
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::HideDirectory("/srv/a".into()),
                MountStep::Seal("/srv/a".into()),
            ]
        );
    }

    #[test]
    fn hiding_the_project_itself_leaves_the_project_visible() {
        let hides = [dir("/srv/projects")];
        let plan = MountPlan::new(&["/srv/projects".into()], &scratch(), &hides, NO_TERMINALS);
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::HideDirectory("/srv/projects".into()),
                MountStep::Expose("/srv/projects".into()),
                MountStep::Seal("/srv/projects".into()),
            ]
        );
    }

    #[test]
    fn a_home_under_the_hidden_state_directory_is_exposed_after_the_project() {
        let hides = [
            dir("/srv/state"),
            dir("/srv/projects"),
            dir("/srv/state/homes/a/.ssh"),
        ];
        let writable = ["/srv/projects/a".into(), "/srv/state/homes/a".into()];
        let plan = MountPlan::new(&writable, &scratch(), &hides, NO_TERMINALS);
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::HideDirectory("/srv/state".into()),
                MountStep::HideDirectory("/srv/projects".into()),
                MountStep::Expose("/srv/projects/a".into()),
                MountStep::Expose("/srv/state/homes/a".into()),
                MountStep::HideDirectory("/srv/state/homes/a/.ssh".into()),
                MountStep::Seal("/srv/state".into()),
                MountStep::Seal("/srv/projects".into()),
                MountStep::Seal("/srv/state/homes/a/.ssh".into()),
            ]
        );
    }

    #[test]
    fn a_home_nobody_hides_needs_no_mount() {
        let writable = ["/srv/projects/a".into(), "/srv/home".into()];
        let plan = MountPlan::new(&writable, &scratch(), &[dir("/srv/projects")], NO_TERMINALS);
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::HideDirectory("/srv/projects".into()),
                MountStep::Expose("/srv/projects/a".into()),
                MountStep::Seal("/srv/projects".into()),
            ]
        );
    }

    #[test]
    fn a_sibling_with_a_common_name_prefix_is_not_inside() {
        let hides = [dir("/srv/projects-old")];
        let plan = MountPlan::new(&["/srv/projects".into()], &[], &hides, NO_TERMINALS);
        assert_eq!(
            &plan.steps[2..],
            [
                MountStep::HideDirectory("/srv/projects-old".into()),
                MountStep::Seal("/srv/projects-old".into()),
            ]
        );
    }

    #[test]
    fn rules_read_everything_but_dev_and_write_only_where_allowed() {
        let top: Vec<String> = ["usr", "dev", "etc", "tmp", "proc"]
            .map(String::from)
            .to_vec();
        let plan = RulePlan::new(
            &top,
            &["/dev/null", "/dev/urandom", "/dev/sda"],
            &["/srv/p".into(), "/tmp".into()],
            false,
        );
        let expect: Vec<(PathBuf, Grant)> = vec![
            ("/".into(), Grant::ListDirectories),
            ("/etc".into(), Grant::ReadExecute),
            ("/proc".into(), Grant::ReadExecute),
            ("/tmp".into(), Grant::ReadExecute),
            ("/usr".into(), Grant::ReadExecute),
            ("/dev/null".into(), Grant::Device),
            ("/dev/urandom".into(), Grant::Device),
            ("/srv/p".into(), Grant::Writable),
            ("/tmp".into(), Grant::Writable),
        ];
        assert_eq!(plan.rules, expect);
    }

    #[test]
    fn a_private_devpts_comes_before_scratch_and_hides() {
        let terminals = TerminalFacts {
            pts_dir: true,
            ptmx_node: true,
        };
        let plan = MountPlan::new(&["/srv/p".into()], &scratch(), &[], terminals);
        assert_eq!(
            &plan.steps[..4],
            [
                MountStep::PrivateRoot,
                MountStep::Proc,
                MountStep::Devpts,
                MountStep::Ptmx,
            ]
        );
        // A /dev/ptmx that is a link into /dev/pts needs no bind.
        let link = TerminalFacts {
            ptmx_node: false,
            ..terminals
        };
        let plan = MountPlan::new(&["/srv/p".into()], &[], &[], link);
        assert_eq!(plan.steps[2..], [MountStep::Devpts]);
        // Without /dev/pts there is nothing to mount on.
        let none = TerminalFacts {
            pts_dir: false,
            ptmx_node: true,
        };
        let plan = MountPlan::new(&["/srv/p".into()], &[], &[], none);
        assert_eq!(plan.steps, [MountStep::PrivateRoot, MountStep::Proc]);
    }

    #[test]
    fn a_hidden_scratch_directory_is_left_to_its_private_tmpfs() {
        let hides = [dir("/tmp"), dir("/dev/shm"), dir("/tmp/x")];
        let plan = MountPlan::new(&["/srv/p".into()], &scratch(), &hides, NO_TERMINALS);
        assert_eq!(
            after_scratch(&plan),
            [
                MountStep::HideDirectoryInScratch("/tmp/x".into()),
                MountStep::Seal("/tmp/x".into()),
            ]
        );
    }

    #[test]
    fn terminals_get_ioctls_only_with_a_private_devpts() {
        let devices = ["/dev/null", "/dev/pts", "/dev/ptmx", "/dev/tty"];
        let private = RulePlan::new(&[], &devices, &[], true);
        assert_eq!(
            private.rules[1..],
            [
                ("/dev/null".into(), Grant::Device),
                ("/dev/pts".into(), Grant::Terminal),
                ("/dev/ptmx".into(), Grant::Terminal),
                ("/dev/tty".into(), Grant::Terminal),
            ]
        );
        // The host's terminals: /dev/tty as a plain device, no pts, no ptmx.
        let host = RulePlan::new(&[], &devices, &[], false);
        assert_eq!(
            host.rules[1..],
            [
                ("/dev/null".into(), Grant::Device),
                ("/dev/tty".into(), Grant::Device),
            ]
        );
    }
}
