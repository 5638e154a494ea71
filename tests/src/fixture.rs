//! Fixtures that several test processes share (npm installs, staged
//! copies) are prepared under an exclusive file lock, so tests running in
//! parallel — threads of one binary or several binaries — never race on
//! them: the first prepares, the others wait and then find it ready.

use std::fs::OpenOptions;
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};

/// Runs `prepare` while holding an exclusive lock on the file `lock`
/// (created if missing). `prepare` should check first whether the fixture
/// is already there: another process may have made it while this one
/// waited.
pub fn prepare_locked<T>(lock: &Path, prepare: impl FnOnce() -> T) -> T {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock)
        .unwrap_or_else(|e| panic!("cannot open the lock file {}: {e}", lock.display()));
    let _held = Flock::lock(file, FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("cannot lock {}: {e}", lock.display()));
    prepare()
}
