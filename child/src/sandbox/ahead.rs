//! Empty tmpfs made ahead of time and not yet attached anywhere (the
//! mount API's `fsopen`, `fsconfig` and `fsmount`). A spare agent makes
//! those its sandbox will need while it waits, inside its own namespaces,
//! so that finishing the sandbox attaches each (`move_mount`) instead of
//! making a new file system then. A detached mount is reachable only
//! through its descriptor, which this process alone holds, and is empty
//! until attached: what the sandbox shows is the same as with `mount(2)`.

use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::CWD;
use rustix::mount::{
    fsconfig_create, fsconfig_set_string, fsmount, fsopen, move_mount, FsMountFlags, FsOpenFlags,
    MountAttrFlags, MoveMountFlags,
};

/// One kind of tmpfs the sandbox lays: its options and whether it refuses
/// execution. Every such tmpfs is `nosuid` and `nodev`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tmpfs {
    /// `mount -o` options, comma separated `key=value` pairs.
    pub options: &'static str,
    pub noexec: bool,
}

/// The private `/tmp` and `/dev/shm`: anyone may make files there.
pub const SCRATCH: Tmpfs = Tmpfs {
    options: "mode=1777",
    noexec: false,
};

/// Laid over a hidden directory: small, and made read-only once the
/// project is bound back into it, if it must be.
pub const HIDE: Tmpfs = Tmpfs {
    options: "mode=0755,size=16k",
    noexec: true,
};

/// Detached tmpfs, by kind, for [`super::mounts::apply`] to use up.
#[derive(Debug, Default)]
pub struct Ahead {
    scratch: Vec<OwnedFd>,
    hides: Vec<OwnedFd>,
}

impl Ahead {
    /// None made: every tmpfs is mounted when its step comes.
    pub fn none() -> Ahead {
        Ahead::default()
    }

    /// Makes `scratches` scratch and `hides` hide tmpfs. Best effort: a
    /// kernel without the mount API (or a filter that refuses it) leaves
    /// fewer, and the steps that find none mount as usual.
    pub fn make(scratches: usize, hides: usize) -> Ahead {
        let made = |kind: Tmpfs, count: usize| -> Vec<OwnedFd> {
            std::iter::repeat_with(|| detached(kind).ok())
                .take(count)
                .map_while(|mount| mount)
                .collect()
        };
        let scratch = made(SCRATCH, scratches);
        // When the first one failed, the others would too.
        let hides = match scratches > 0 && scratch.is_empty() {
            true => Vec::new(),
            false => made(HIDE, hides),
        };
        Ahead { scratch, hides }
    }

    /// Attaches a tmpfs of `kind` made ahead onto `dir`; false when none
    /// is left or it could not be attached (a policy that allows making
    /// one but not `move_mount`, say): then the caller mounts one, as a
    /// failed `move_mount` attached nothing.
    pub fn attach(&mut self, kind: Tmpfs, dir: &Path) -> bool {
        let pool = match kind {
            SCRATCH => &mut self.scratch,
            HIDE => &mut self.hides,
            _ => return false,
        };
        let Some(mount) = pool.pop() else {
            return false;
        };
        let flags = MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH;
        match move_mount(&mount, "", CWD, dir, flags) {
            Ok(()) => true,
            Err(_) => {
                // The others would fail alike.
                self.scratch.clear();
                self.hides.clear();
                false
            }
        }
    }
}

/// A new, empty, detached tmpfs of `kind`.
fn detached(kind: Tmpfs) -> rustix::io::Result<OwnedFd> {
    let fs = fsopen("tmpfs", FsOpenFlags::FSOPEN_CLOEXEC)?;
    // As mount(2) names it in the mount table.
    fsconfig_set_string(&fs, "source", "tmpfs")?;
    for option in kind.options.split(',') {
        let (key, value) = option.split_once('=').unwrap_or((option, ""));
        fsconfig_set_string(&fs, key, value)?;
    }
    fsconfig_create(&fs)?;
    let mut attributes = MountAttrFlags::MOUNT_ATTR_NOSUID | MountAttrFlags::MOUNT_ATTR_NODEV;
    if kind.noexec {
        attributes |= MountAttrFlags::MOUNT_ATTR_NOEXEC;
    }
    fsmount(&fs, FsMountFlags::FSMOUNT_CLOEXEC, attributes)
}
