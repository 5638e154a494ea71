//! Who holds a journal's lock: the pid from `/proc/locks`, so the refusal
//! message can name the other agent process.

use std::fs::File;
use std::os::unix::fs::MetadataExt;

/// The pid holding an exclusive `flock` on `file`, from `/proc/locks`
/// (Linux; absent when the holder is on another host or in another pid
/// namespace).
pub(super) fn lock_holder(file: &File) -> Option<u32> {
    let meta = file.metadata().ok()?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    let dev = meta.dev();
    let id = FileId {
        major: nix::sys::stat::major(dev),
        minor: nix::sys::stat::minor(dev),
        inode: meta.ino(),
    };
    holder_in(&locks, id)
}

/// Identifies a file the way `/proc/locks` prints it (`MAJ:MIN:INODE`,
/// device numbers in hex).
#[derive(Clone, Copy, Debug, PartialEq)]
struct FileId {
    major: u64,
    minor: u64,
    inode: u64,
}

/// Finds the holder of a granted exclusive `FLOCK` on `id` in the text of
/// `/proc/locks`. Lines of waiters (`->`) and pid 0 (not visible from this
/// pid namespace) are skipped.
fn holder_in(proc_locks: &str, id: FileId) -> Option<u32> {
    proc_locks.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // "N: FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END"
        let [_, "FLOCK", _, "WRITE", pid, file, ..] = fields.as_slice() else {
            return None;
        };
        let mut parts = file.split(':');
        let major = u64::from_str_radix(parts.next()?, 16).ok()?;
        let minor = u64::from_str_radix(parts.next()?, 16).ok()?;
        let inode = parts.next()?.parse().ok()?;
        let pid = pid.parse().ok().filter(|pid| *pid != 0)?;
        (FileId {
            major,
            minor,
            inode,
        } == id)
            .then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holder_is_read_from_proc_locks() {
        let id = FileId {
            major: 0xfe,
            minor: 1,
            inode: 1941506,
        };
        let locks = "\
1: POSIX  ADVISORY  WRITE 11 fe:01:1941506 0 EOF
2: FLOCK  ADVISORY  READ 12 fe:01:1941506 0 EOF
2: -> FLOCK  ADVISORY  WRITE 13 fe:01:1941506 0 EOF
3: FLOCK  ADVISORY  WRITE 14 fe:00:1941506 0 EOF
4: FLOCK  ADVISORY  WRITE 15 fe:01:1941506 0 EOF
";
        assert_eq!(holder_in(locks, id), Some(15));
        assert_eq!(holder_in("", id), None);
        let hidden = "1: FLOCK  ADVISORY  WRITE 0 fe:01:1941506 0 EOF\n";
        assert_eq!(holder_in(hidden, id), None);
    }
}
