//! Carries out a [`MountPlan`] inside init's new mount namespace: a private
//! root, a fresh `/proc`, a private `devpts`, private scratch tmpfs, hides,
//! and the writable
//! directories (the project, a private home) bound back from handles opened
//! before the first mount, while their paths still name the real ones.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};

use super::ahead::{self, Ahead, Tmpfs};
use super::plan::{MountPlan, MountStep};
use super::SandboxError;

/// Options of the private `devpts`: a new instance whose `ptmx` anyone in
/// the sandbox may open, terminals readable and writable by their owner
/// (and writable by the group, as `write(1)` expects), at most
/// [`PTYS_MAX`] of them at once.
fn devpts_options() -> String {
    format!("newinstance,ptmxmode=0666,mode=0620,max={PTYS_MAX}")
}

/// Most terminals one sandbox may hold open at once (`max=` of its devpts;
/// the host's own instance keeps `kernel.pty.reserve` for itself anyway).
pub const PTYS_MAX: u32 = 64;

/// Makes every mount of `plan`, in order, attaching the tmpfs made
/// `ahead` where one is left.
pub fn apply(plan: &MountPlan, ahead: &mut Ahead) -> Result<(), SandboxError> {
    let sources = Sources::open(plan)?;
    plan.steps
        .iter()
        .try_for_each(|step| apply_step(step, &sources, ahead))
}

/// The real directories of the plan's [`MountStep::Expose`] steps, opened
/// before any mount covers their paths, and the working directory to come
/// back to after binding each.
struct Sources {
    origin: File,
    dirs: Vec<(PathBuf, File)>,
}

impl Sources {
    fn open(plan: &MountPlan) -> Result<Sources, SandboxError> {
        let origin = open_dir(Path::new("."), "the working directory")?;
        let dirs = plan
            .steps
            .iter()
            .filter_map(|step| match step {
                MountStep::Expose(dir) => Some(dir),
                _ => None,
            })
            .map(|dir| Ok((dir.clone(), open_dir(dir, &dir.display().to_string())?)))
            .collect::<Result<_, SandboxError>>()?;
        Ok(Sources { origin, dirs })
    }

    fn get(&self, dir: &Path) -> Option<&File> {
        self.dirs.iter().find(|(d, _)| d == dir).map(|(_, f)| f)
    }
}

/// A handle on `dir` that only names it (`O_PATH`): no read right needed.
fn open_dir(dir: &Path, what: &str) -> Result<File, SandboxError> {
    File::options()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| SandboxError::Mount {
            what: format!("{what}, which cannot be opened"),
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        })
}

fn apply_step(step: &MountStep, sources: &Sources, ahead: &mut Ahead) -> Result<(), SandboxError> {
    let none = None::<&str>;
    let safe = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    match step {
        MountStep::PrivateRoot => {
            mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none)
                .map_err(failed("/ as private"))
        }
        MountStep::Proc => mount(
            Some("proc"),
            "/proc",
            Some("proc"),
            safe | MsFlags::MS_NOEXEC,
            none,
        )
        .map_err(failed("a fresh /proc for the new pid namespace")),
        MountStep::Devpts => mount(
            Some("devpts"),
            "/dev/pts",
            Some("devpts"),
            MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC,
            Some(devpts_options().as_str()),
        )
        .map_err(failed("a private devpts on /dev/pts")),
        MountStep::Ptmx => mount(
            Some("/dev/pts/ptmx"),
            "/dev/ptmx",
            none,
            MsFlags::MS_BIND,
            none,
        )
        .map_err(failed("the private /dev/pts/ptmx over /dev/ptmx")),
        MountStep::Scratch(dir) => tmpfs(dir, ahead::SCRATCH, ahead, "a private tmpfs on"),
        MountStep::HideDirectory(dir) => {
            tmpfs(dir, ahead::HIDE, ahead, "an empty tmpfs over the hidden")
        }
        MountStep::HideDirectoryInScratch(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| SandboxError::Mount {
                what: format!("the hidden {} inside the private tmpfs", dir.display()),
                source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            })?;
            tmpfs(dir, ahead::HIDE, ahead, "an empty tmpfs over the hidden")
        }
        MountStep::Seal(dir) => mount(
            none,
            dir,
            none,
            MsFlags::MS_REMOUNT | MsFlags::MS_BIND | MsFlags::MS_RDONLY | safe | MsFlags::MS_NOEXEC,
            none,
        )
        .map_err(failed(&format!("the hidden {} read-only", dir.display()))),
        MountStep::HideFile(file) => mount(Some("/dev/null"), file, none, MsFlags::MS_BIND, none)
            .map_err(failed(&format!(
                "/dev/null over the hidden {}",
                file.display()
            ))),
        MountStep::Expose(dir) => expose(dir, sources),
    }
}

/// Lays an empty tmpfs of `kind` on `dir`: one made ahead if any is
/// left, else a new one.
fn tmpfs(dir: &Path, kind: Tmpfs, ahead: &mut Ahead, what: &str) -> Result<(), SandboxError> {
    if ahead.attach(kind, dir) {
        return Ok(());
    }
    let what = format!("{what} {}", dir.display());
    let failed = failed(&what);
    let mut flags = MsFlags::MS_NOSUID | MsFlags::MS_NODEV;
    if kind.noexec {
        flags |= MsFlags::MS_NOEXEC;
    }
    mount(Some("tmpfs"), dir, Some("tmpfs"), flags, Some(kind.options)).map_err(failed)
}

/// Binds the real directory `dir` back onto its path, creating that path
/// inside the tmpfs that covers it. The bind's source is the directory's
/// handle, entered as the working directory for the moment of the mount.
fn expose(dir: &Path, sources: &Sources) -> Result<(), SandboxError> {
    let what = format!("the directory {} back in place", dir.display());
    let Some(source) = sources.get(dir) else {
        return Err(SandboxError::Mount {
            what,
            source: Errno::ENOENT,
        });
    };
    std::fs::create_dir_all(dir).map_err(|e| SandboxError::Mount {
        what: what.clone(),
        source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    })?;
    nix::unistd::fchdir(source.as_raw_fd()).map_err(failed(&what))?;
    // Recursive: mounts below the directory stay as they were.
    let bound = mount(
        Some("."),
        dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(failed(&what));
    nix::unistd::fchdir(sources.origin.as_raw_fd())
        .map_err(failed("the working directory back"))?;
    bound
}

fn failed(what: &str) -> impl FnOnce(Errno) -> SandboxError + '_ {
    move |source| SandboxError::Mount {
        what: what.to_string(),
        source,
    }
}
