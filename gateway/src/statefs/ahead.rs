//! Files made ahead: a few empty files (`.ahead-0` … `.ahead-7`) kept in
//! a directory where cold starts create one file each (the session
//! journals, the children's stderr files), so that a start finding its
//! file missing renames one of them into place instead of creating it.
//!
//! Why: on ext4, creating a file allocates an inode, and how long that
//! takes depends on the disk's history (where the free inodes are, what
//! was freed lately): on the project's 2-core machine from ~0.02 ms to
//! over 1 ms per file, while a rename (and open) of a file made earlier
//! took ~0.03 ms (`bench-scale --only disk`). The replacements are made
//! off the start's path ([`REFILL_AFTER`] later, on the files lane).
//!
//! A file is taken with `renameat2(RENAME_NOREPLACE)`, so it never
//! replaces a file of the same name (a journal a start raced to make) and
//! of two gateways sharing the directory only one takes it. A leftover
//! `.ahead-N` (from an earlier run) is used only if it is an empty
//! regular file of this process's user with one link; anything else under
//! that name is left alone and the name skipped. A file system without
//! `RENAME_NOREPLACE` (some network ones) gets plain creation.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use rustix::fs::{Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use super::{Dir, StateFsError};

/// Files kept ahead per directory.
pub const PER_DIR: usize = 8;
/// How long after a file was taken its replacement is made: the start
/// that took it runs first.
pub const REFILL_AFTER: Duration = Duration::from_millis(20);
/// The files' names: this prefix and their number.
const PREFIX: &str = ".ahead-";

/// The files ready in each directory, by its path.
static SHELVES: Mutex<Option<HashMap<PathBuf, Shelf>>> = Mutex::new(None);

#[derive(Default)]
struct Shelf {
    /// Numbers of the files ready.
    ready: Vec<usize>,
    /// A refill is on its way.
    filling: bool,
    /// The file system cannot take a file without replacing: none kept.
    unsupported: bool,
}

fn shelves() -> MutexGuard<'static, Option<HashMap<PathBuf, Shelf>>> {
    SHELVES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_shelf<T>(dir: &Dir, f: impl FnOnce(&mut Shelf) -> T) -> T {
    let mut shelves = shelves();
    let shelf = shelves
        .get_or_insert_with(HashMap::new)
        .entry(dir.path().to_path_buf())
        .or_default();
    f(shelf)
}

/// Opens `name` in `dir` for appending, made with `mode` if missing: from
/// a file made ahead when one is ready (its times set to now), else
/// created. A link there is refused, as by [`Dir::append_file`].
pub(super) fn append_file(dir: &Dir, name: &str, mode: u32) -> Result<File, StateFsError> {
    match dir.open_file(name, append_flags(), 0) {
        Err(e) if e.errno == Errno::NOENT => {}
        opened => return opened,
    }
    let taken = take(dir, name);
    refill_later(dir);
    match taken {
        Some(()) => {
            let file = dir.open_file(name, append_flags(), 0)?;
            let now = SystemTime::now();
            let times = std::fs::FileTimes::new()
                .set_accessed(now)
                .set_modified(now);
            file.set_times(times)
                .and_then(|()| {
                    file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode))
                })
                .map_err(|e| dir.io_failed(name, e))?;
            Ok(file)
        }
        None => dir.append_file(name, mode),
    }
}

fn append_flags() -> OFlags {
    OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY
}

/// Renames a ready file to `name`; `None` when none is ready or `name`
/// appeared meanwhile (the file is kept for the next start).
fn take(dir: &Dir, name: &str) -> Option<()> {
    loop {
        let number = with_shelf(dir, |shelf| shelf.ready.pop())?;
        let from = format!("{PREFIX}{number}");
        match rustix::fs::renameat_with(dir, from.as_str(), dir, name, RenameFlags::NOREPLACE) {
            Ok(()) => return Some(()),
            Err(Errno::EXIST) => {
                with_shelf(dir, |shelf| shelf.ready.push(number));
                return None;
            }
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                with_shelf(dir, |shelf| {
                    shelf.unsupported = true;
                    shelf.ready.clear();
                });
                return None;
            }
            // Gone (another gateway took it): try the next one.
            Err(_) => {}
        }
    }
}

/// Makes the missing files of `dir` [`REFILL_AFTER`] from now, on the
/// files lane, unless a refill is on its way. Needs the tokio runtime;
/// without it nothing is kept ahead.
fn refill_later(dir: &Dir) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let wanted = with_shelf(dir, |shelf| {
        let wanted = !shelf.filling && !shelf.unsupported && shelf.ready.len() < PER_DIR;
        shelf.filling |= wanted;
        wanted
    });
    if !wanted {
        return;
    }
    let Ok(dir) = dir.try_clone() else {
        with_shelf(dir, |shelf| shelf.filling = false);
        return;
    };
    runtime.spawn(async move {
        tokio::time::sleep(REFILL_AFTER).await;
        let path = dir.path().to_path_buf();
        let filled = crate::offload::run(crate::offload::Lane::Files, move || {
            refill(&dir);
        })
        .await;
        if filled.is_err() {
            let mut shelves = shelves();
            if let Some(shelf) = shelves.as_mut().and_then(|s| s.get_mut(&path)) {
                shelf.filling = false;
            }
        }
    });
}

/// Makes (or adopts) the files of `dir` that are not ready.
pub(super) fn refill(dir: &Dir) {
    let ready = with_shelf(dir, |shelf| shelf.ready.clone());
    let mut made = Vec::new();
    for number in (0..PER_DIR).filter(|n| !ready.contains(n)) {
        if make(dir, number) {
            made.push(number);
        }
    }
    with_shelf(dir, |shelf| {
        for number in made {
            if !shelf.ready.contains(&number) {
                shelf.ready.push(number);
            }
        }
        shelf.filling = false;
    });
}

/// Makes `.ahead-NUMBER`, or adopts the one there if it is an empty
/// regular file of this user with one link.
fn make(dir: &Dir, number: usize) -> bool {
    let name = format!("{PREFIX}{number}");
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOCTTY;
    match rustix::fs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
        Ok(_) => true,
        Err(Errno::EXIST) => {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
            let Ok(fd) = rustix::fs::openat(dir, name.as_str(), flags, Mode::empty()) else {
                return false;
            };
            File::from(fd).metadata().is_ok_and(|m| {
                m.is_file()
                    && m.len() == 0
                    && m.nlink() == 1
                    && m.uid() == nix::unistd::geteuid().as_raw()
            })
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
