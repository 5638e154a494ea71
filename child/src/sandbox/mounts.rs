//! Carries out a [`MountPlan`] inside init's new mount namespace: a private
//! root, a fresh `/proc`, private scratch tmpfs, hides, and the project
//! bound back from the working directory (which still names the real one).

use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, MsFlags};

use super::plan::{MountPlan, MountStep};
use super::SandboxError;

/// Options of the empty tmpfs laid over a hidden directory (made read-only
/// once the project is bound back into it, if it must be).
const HIDE_OPTIONS: &str = "mode=0755,size=16k";

/// Makes every mount of `plan`, in order. The working directory must be the
/// project directory.
pub fn apply(plan: &MountPlan) -> Result<(), SandboxError> {
    plan.steps.iter().try_for_each(apply_step)
}

fn apply_step(step: &MountStep) -> Result<(), SandboxError> {
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
        MountStep::Scratch(dir) => tmpfs(dir, safe, "mode=1777", "a private tmpfs on"),
        MountStep::HideDirectory(dir) => tmpfs(
            dir,
            safe | MsFlags::MS_NOEXEC,
            HIDE_OPTIONS,
            "an empty tmpfs over the hidden",
        ),
        MountStep::HideDirectoryInScratch(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| SandboxError::Mount {
                what: format!("the hidden {} inside the private tmpfs", dir.display()),
                source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
            })?;
            tmpfs(
                dir,
                safe | MsFlags::MS_NOEXEC,
                HIDE_OPTIONS,
                "an empty tmpfs over the hidden",
            )
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
        MountStep::ExposeProject(dir) => expose(dir),
    }
}

fn tmpfs(dir: &Path, flags: MsFlags, options: &str, what: &str) -> Result<(), SandboxError> {
    mount(Some("tmpfs"), dir, Some("tmpfs"), flags, Some(options))
        .map_err(failed(&format!("{what} {}", dir.display())))
}

/// Binds the working directory (the real project) onto `dir`, creating
/// its path inside the tmpfs that covers it.
fn expose(dir: &Path) -> Result<(), SandboxError> {
    let what = format!("the project directory back on {}", dir.display());
    std::fs::create_dir_all(dir).map_err(|e| SandboxError::Mount {
        what: what.clone(),
        source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
    })?;
    // Recursive: mounts below the project stay as they were.
    mount(
        Some("."),
        dir,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .map_err(failed(&what))
}

fn failed(what: &str) -> impl FnOnce(Errno) -> SandboxError + '_ {
    move |source| SandboxError::Mount {
        what: what.to_string(),
        source,
    }
}
