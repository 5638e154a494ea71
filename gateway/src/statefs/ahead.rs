//! Files made ahead: a few empty files (`.ahead-0` … `.ahead-7`) kept in
//! a directory where cold starts create one file each (the session
//! journals, the children's stderr files), so that a start finding its
//! file missing renames one of them into place instead of creating it.
//!
//! Why: on ext4, creating a file allocates an inode, and how long that
//! takes depends on the disk's history (where the free inodes are, what
//! was freed lately): on the project's 2-core machine from 0.05 ms to
//! over 1 ms per file, while a rename (and open) of a file made earlier
//! took 0.02–0.04 ms (`bench-scale --only disk`). The replacements are made
//! off the start's path ([`REFILL_AFTER`] later, on the files lane).
//!
//! A file is taken with `renameat2(RENAME_NOREPLACE)`, so it never
//! replaces a file of the same name (a journal a start raced to make) and
//! of two gateways sharing the directory only one takes it. What is
//! taken is used only if, opened at its new name (no link followed, not
//! blocking), it is still an empty regular file of this process's user
//! with one link; else it is removed from that name and the file created
//! as usual. A leftover `.ahead-N` (from an earlier run) is adopted only
//! if it is such a file; anything else under that name is left alone and
//! the name skipped. On a file system without `RENAME_NOREPLACE` (some
//! network ones) the files made ahead are removed and files are created.

use std::collections::BTreeMap;
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
static SHELVES: Mutex<BTreeMap<PathBuf, Shelf>> = Mutex::new(BTreeMap::new());

#[derive(Default)]
struct Shelf {
    /// Numbers of the files ready.
    ready: Vec<usize>,
    /// A refill is on its way.
    filling: bool,
    /// Files were taken while it was: another refill follows it.
    again: bool,
    /// The file system cannot take a file without replacing: none kept.
    unsupported: bool,
}

fn shelves() -> MutexGuard<'static, BTreeMap<PathBuf, Shelf>> {
    SHELVES.lock().unwrap_or_else(PoisonError::into_inner)
}

fn with_shelf<T>(dir: &Dir, f: impl FnOnce(&mut Shelf) -> T) -> T {
    f(shelves().entry(dir.path().to_path_buf()).or_default())
}

impl Shelf {
    /// Lists `number` as ready, once.
    fn put(&mut self, number: usize) {
        if !self.ready.contains(&number) {
            self.ready.push(number);
        }
    }
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
    match taken.then(|| adopt(dir, name, mode)).flatten() {
        Some(file) => Ok(file),
        None => dir.append_file(name, mode),
    }
}

fn append_flags() -> OFlags {
    OFlags::WRONLY | OFlags::APPEND | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NOCTTY
}

/// Whether `meta` is what a file made ahead is: an empty regular file of
/// this user with one link.
fn made_ahead(meta: &std::fs::Metadata) -> bool {
    meta.is_file()
        && meta.len() == 0
        && meta.nlink() == 1
        && meta.uid() == nix::unistd::geteuid().as_raw()
}

/// Opens the file just renamed to `name`, if it is still what was made
/// ahead (someone able to write the directory could have put something
/// else under its `.ahead-N` name since); else removes it from that name.
fn adopt(dir: &Dir, name: &str, mode: u32) -> Option<File> {
    // Not blocking on a FIFO put there.
    let flags = append_flags() | OFlags::NONBLOCK;
    let file = rustix::fs::openat(dir, name, flags, Mode::empty())
        .ok()
        .map(File::from)
        .filter(|file| file.metadata().is_ok_and(|m| made_ahead(&m)));
    let Some(file) = file else {
        let _ = rustix::fs::unlinkat(dir, name, rustix::fs::AtFlags::empty());
        return None;
    };
    let now = SystemTime::now();
    let times = std::fs::FileTimes::new()
        .set_accessed(now)
        .set_modified(now);
    let ready = rustix::fs::fcntl_setfl(&file, OFlags::APPEND)
        .map_err(std::io::Error::from)
        .and_then(|()| file.set_times(times))
        .and_then(|()| file.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(mode)));
    // In place either way; the caller opens it again.
    ready.ok().map(|()| file)
}

/// Renames a ready file to `name`: false when none is ready, `name`
/// appeared meanwhile or the rename failed (the file is kept for the
/// next start).
fn take(dir: &Dir, name: &str) -> bool {
    if name.contains('/') {
        return false;
    }
    loop {
        let Some(number) = with_shelf(dir, |shelf| shelf.ready.pop()) else {
            return false;
        };
        let from = format!("{PREFIX}{number}");
        match rustix::fs::renameat_with(dir, from.as_str(), dir, name, RenameFlags::NOREPLACE) {
            Ok(()) => return true,
            // Gone (another gateway took it): try the next one.
            Err(Errno::NOENT) => {}
            Err(Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {
                unsupported(dir, number);
                return false;
            }
            Err(_) => {
                with_shelf(dir, |shelf| shelf.put(number));
                return false;
            }
        }
    }
}

/// Notes that `dir`'s file system cannot rename without replacing, and
/// removes the files made ahead there (`number` and the ready ones).
fn unsupported(dir: &Dir, number: usize) {
    let ready = with_shelf(dir, |shelf| {
        shelf.unsupported = true;
        std::mem::take(&mut shelf.ready)
    });
    for number in ready.into_iter().chain([number]) {
        let name = format!("{PREFIX}{number}");
        let _ = rustix::fs::unlinkat(dir, name.as_str(), rustix::fs::AtFlags::empty());
    }
}

/// Makes the missing files of `dir` [`REFILL_AFTER`] from now, on the
/// files lane; if a refill is on its way, another follows it. Needs the
/// tokio runtime; without it nothing is kept ahead.
fn refill_later(dir: &Dir) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let wanted = with_shelf(dir, |shelf| {
        if shelf.unsupported || shelf.ready.len() >= PER_DIR {
            return false;
        }
        if shelf.filling {
            shelf.again = true;
            return false;
        }
        shelf.filling = true;
        true
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
            if let Some(shelf) = shelves().get_mut(&path) {
                shelf.filling = false;
            }
        }
    });
}

/// Makes (or adopts) the files of `dir` that are not ready; then, if
/// files were taken while it ran, has another refill follow.
pub(super) fn refill(dir: &Dir) {
    let ready = with_shelf(dir, |shelf| shelf.ready.clone());
    let mut made = Vec::new();
    for number in (0..PER_DIR).filter(|n| !ready.contains(n)) {
        if make(dir, number) {
            made.push(number);
        }
    }
    let again = with_shelf(dir, |shelf| {
        for number in made {
            shelf.put(number);
        }
        shelf.filling = false;
        std::mem::take(&mut shelf.again)
    });
    if again {
        refill_later(dir);
    }
}

/// Makes `.ahead-NUMBER`, or adopts the one there if it is an empty
/// regular file of this user with one link (looked at without opening
/// it: `O_PATH`).
fn make(dir: &Dir, number: usize) -> bool {
    let name = format!("{PREFIX}{number}");
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOCTTY;
    match rustix::fs::openat(dir, name.as_str(), flags, Mode::from_raw_mode(0o600)) {
        Ok(_) => true,
        Err(Errno::EXIST) => {
            let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            rustix::fs::openat(dir, name.as_str(), flags, Mode::empty())
                .is_ok_and(|fd| File::from(fd).metadata().is_ok_and(|m| made_ahead(&m)))
        }
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests;
