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

/// `package` (a folder of the checkout: its scripts and `node_modules`)
/// where a sandboxed agent can reach it. The sandbox gives an agent a
/// private, empty `/tmp`, so a checkout under `/tmp` is copied once to a
/// folder under `/var/tmp` named by `tag` and the package's own files
/// (reused by later runs; copied under a file lock, so parallel test
/// binaries copy once). `needed` is a path in the package whose presence
/// says the copy is complete. Elsewhere, the package itself.
pub fn reachable_by_agents(package: &Path, tag: &str, needed: &str) -> std::path::PathBuf {
    if !package.starts_with("/tmp") {
        return package.to_path_buf();
    }
    // Named by the package's own files (its lock file and scripts; not
    // node_modules, which the lock file names), so an edit stages afresh.
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(package)
        .expect("the package folder")
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.is_file())
        .collect();
    files.sort();
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for file in files {
        let bytes = std::fs::read(&file).unwrap_or_default();
        for b in file.as_os_str().as_encoded_bytes().iter().chain(&bytes) {
            hash = (hash ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    let stage = std::path::PathBuf::from(format!("/var/tmp/corral-e2e-{tag}-{hash:016x}"));
    prepare_locked(&stage.with_extension("lock"), || {
        if stage.join(needed).exists() {
            return;
        }
        let partial = stage.with_extension(format!("part{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&partial);
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(package)
            .arg(&partial)
            .status()
            .expect("cp runs");
        assert!(
            copied.success(),
            "cannot copy {} to {}",
            package.display(),
            partial.display()
        );
        let _ = std::fs::remove_dir_all(&stage);
        std::fs::rename(&partial, &stage).expect("the copy takes its name");
    });
    stage
}
