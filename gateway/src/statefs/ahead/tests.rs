use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};

use super::*;

fn ahead_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(PREFIX))
        .collect();
    names.sort();
    names
}

/// A state directory, its `sessions` directory's path and the directory.
fn sessions() -> (tempfile::TempDir, PathBuf, Dir) {
    let state = tempfile::tempdir().unwrap();
    let dir = Dir::open_root(state.path())
        .unwrap()
        .subdir("sessions", 0o755)
        .unwrap();
    (state, dir.path().to_path_buf(), dir)
}

#[test]
fn a_missing_file_is_one_made_ahead_renamed_into_place() {
    let (_state, path, dir) = sessions();
    refill(&dir);
    assert_eq!(ahead_files(&path).len(), PER_DIR);
    let before = ahead_files(&path);
    // Made ahead an hour ago, as far as its times say.
    let old = SystemTime::now() - Duration::from_secs(3600);
    for name in &before {
        let file = std::fs::File::options()
            .write(true)
            .open(path.join(name))
            .unwrap();
        file.set_times(std::fs::FileTimes::new().set_modified(old))
            .unwrap();
    }
    let inode = |name: &str| std::fs::metadata(path.join(name)).unwrap().ino();
    let inodes: Vec<u64> = before.iter().map(|n| inode(n)).collect();

    let mut file = dir.append_file_made_ahead("p.jsonl", 0o640).unwrap();
    std::io::Write::write_all(&mut file, b"{}\n").unwrap();
    // One was taken (not refilled: no runtime here), and it is the file.
    assert_eq!(ahead_files(&path).len(), PER_DIR - 1);
    assert!(inodes.contains(&inode("p.jsonl")));
    let meta = std::fs::metadata(path.join("p.jsonl")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o640);
    assert!(meta.modified().unwrap() > old + Duration::from_secs(3000));
    assert_eq!(std::fs::read(path.join("p.jsonl")).unwrap(), b"{}\n");

    // An existing file is opened for appending, nothing taken.
    let mut again = dir.append_file_made_ahead("p.jsonl", 0o600).unwrap();
    std::io::Write::write_all(&mut again, b"[]\n").unwrap();
    assert_eq!(std::fs::read(path.join("p.jsonl")).unwrap(), b"{}\n[]\n");
    assert_eq!(ahead_files(&path).len(), PER_DIR - 1);

    // Refilled: the one taken is made again.
    refill(&dir);
    assert_eq!(ahead_files(&path), before);
}

#[test]
fn with_none_made_ahead_the_file_is_created() {
    let (_state, path, dir) = sessions();
    drop(dir.append_file_made_ahead("q.jsonl", 0o600).unwrap());
    let meta = std::fs::metadata(path.join("q.jsonl")).unwrap();
    assert!(meta.is_file());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
}

#[test]
fn a_link_in_place_is_refused_and_takes_nothing() {
    let (_state, path, dir) = sessions();
    let elsewhere = tempfile::tempdir().unwrap();
    let target = elsewhere.path().join("target");
    std::fs::write(&target, "precious").unwrap();
    refill(&dir);
    symlink(&target, path.join("j.jsonl")).unwrap();
    assert!(dir
        .append_file_made_ahead("j.jsonl", 0o600)
        .unwrap_err()
        .is_link());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "precious");
    assert_eq!(ahead_files(&path).len(), PER_DIR);
}

#[test]
fn leftovers_are_used_only_when_empty_plain_and_unlinked_elsewhere() {
    let (state, path, dir) = sessions();
    let elsewhere = tempfile::tempdir().unwrap();
    // An empty leftover of an earlier run is fine; one with content, a
    // link, a hard link to a file elsewhere in the state directory and a
    // directory are not.
    std::fs::write(path.join(".ahead-0"), "").unwrap();
    std::fs::write(path.join(".ahead-1"), "someone's lines").unwrap();
    let target = elsewhere.path().join("target");
    std::fs::write(&target, "").unwrap();
    symlink(&target, path.join(".ahead-2")).unwrap();
    std::fs::write(state.path().join("other"), "").unwrap();
    std::fs::hard_link(state.path().join("other"), path.join(".ahead-3")).unwrap();
    std::fs::create_dir(path.join(".ahead-4")).unwrap();
    refill(&dir);
    for project in 0..PER_DIR {
        drop(
            dir.append_file_made_ahead(&format!("p{project}.jsonl"), 0o600)
                .unwrap(),
        );
    }
    // Four were taken, then the rest created.
    assert_eq!(
        ahead_files(&path),
        [".ahead-1", ".ahead-2", ".ahead-3", ".ahead-4"]
    );
    assert_eq!(
        std::fs::read_to_string(path.join(".ahead-1")).unwrap(),
        "someone's lines"
    );
    for project in 0..PER_DIR {
        let meta = std::fs::symlink_metadata(path.join(format!("p{project}.jsonl"))).unwrap();
        assert!(meta.is_file() && meta.len() == 0 && meta.nlink() == 1);
    }
    assert_eq!(std::fs::metadata(&target).unwrap().nlink(), 1);
}

#[test]
fn a_file_made_meanwhile_is_not_replaced() {
    let (_state, path, dir) = sessions();
    refill(&dir);
    // The name is missing when looked up, then made by someone else before
    // the rename: the rename fails rather than replacing it.
    std::fs::write(path.join("r.jsonl"), "theirs").unwrap();
    assert!(!take(&dir, "r.jsonl"));
    assert_eq!(
        std::fs::read_to_string(path.join("r.jsonl")).unwrap(),
        "theirs"
    );
    assert_eq!(ahead_files(&path).len(), PER_DIR);
    // The file is still ready for the next start.
    assert!(take(&dir, "s.jsonl"));
    assert_eq!(ahead_files(&path).len(), PER_DIR - 1);
}

#[tokio::test]
async fn a_taken_file_is_replaced_in_the_background() {
    let (_state, path, dir) = sessions();
    // The first start creates its file and has the rest made.
    drop(dir.append_file_made_ahead("a.jsonl", 0o600).unwrap());
    let filled = |want: usize| {
        let path = path.clone();
        async move {
            for _ in 0..500 {
                if ahead_files(&path).len() == want {
                    return true;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            false
        }
    };
    assert!(filled(PER_DIR).await, "{:?}", ahead_files(&path));
    drop(dir.append_file_made_ahead("b.jsonl", 0o600).unwrap());
    assert!(filled(PER_DIR).await, "{:?}", ahead_files(&path));
    assert!(path.join("b.jsonl").is_file());
}

fn ready(dir: &Dir) -> Vec<usize> {
    let mut ready = with_shelf(dir, |shelf| shelf.ready.clone());
    ready.sort();
    ready
}

#[test]
fn what_was_put_in_a_files_place_after_it_was_made_is_not_used() {
    let (_state, path, dir) = sessions();
    let elsewhere = tempfile::tempdir().unwrap();
    refill(&dir);
    // Someone able to write the directory swaps the files made ahead
    // for a file with content, a link, a hard link, a FIFO and a
    // directory; the other three are left as made.
    let target = elsewhere.path().join("target");
    std::fs::write(&target, "").unwrap();
    let swap = |n: usize| {
        let name = path.join(format!(".ahead-{n}"));
        std::fs::remove_file(&name).unwrap();
        name
    };
    std::fs::write(swap(0), "someone's lines").unwrap();
    symlink(&target, swap(1)).unwrap();
    std::fs::hard_link(&target, swap(2)).unwrap();
    nix::unistd::mkfifo(&swap(3), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::create_dir(swap(4)).unwrap();
    // Every start gets an empty file of its own, at its name.
    for project in 0..PER_DIR {
        let name = format!("p{project}.jsonl");
        let got = dir.append_file_made_ahead(&name, 0o600);
        match std::fs::symlink_metadata(path.join(&name)) {
            Ok(meta) if meta.is_file() => {
                got.unwrap();
                assert_eq!(meta.len(), 0, "{name}");
                assert_eq!(meta.nlink(), 1, "{name}");
            }
            // The directory was renamed into place and cannot be removed
            // from it: that start fails, as if it had been made there.
            Ok(meta) => {
                assert!(meta.is_dir(), "{name}");
                assert!(got.is_err());
            }
            Err(e) => panic!("{name}: {e}"),
        }
    }
    assert_eq!(std::fs::metadata(&target).unwrap().nlink(), 1);
    assert_eq!(std::fs::read(&target).unwrap(), b"");
}

#[test]
fn a_failed_take_keeps_the_files_ready_once_each() {
    let (_state, path, dir) = sessions();
    refill(&dir);
    let all: Vec<usize> = (0..PER_DIR).collect();
    // A name in a missing directory: an error, and nothing taken.
    assert!(dir
        .append_file_made_ahead("missing/x.jsonl", 0o600)
        .is_err());
    assert_eq!(ready(&dir), all);
    // A name that appeared meanwhile, taken while a refill adopts the
    // same files again: each is ready once.
    std::fs::write(path.join("r.jsonl"), "theirs").unwrap();
    assert!(!take(&dir, "r.jsonl"));
    refill(&dir);
    assert!(!take(&dir, "r.jsonl"));
    assert_eq!(ready(&dir), all);
}
