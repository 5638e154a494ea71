use std::os::unix::fs::PermissionsExt;

use super::*;

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn a_new_file_is_private_and_appends_go_to_its_end() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut file = AuditFile::open(&path, 1 << 20, 2).unwrap();
    file.append(b"a\n").unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    drop(file);
    let mut again = AuditFile::open(&path, 1 << 20, 2).unwrap();
    again.append(b"b\n").unwrap();
    assert_eq!(read(&path), "a\nb\n");
}

#[test]
fn a_symbolic_link_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, "").unwrap();
    let link = dir.path().join("audit.jsonl");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let err = AuditFile::open(&link, 1 << 20, 2).unwrap_err();
    assert!(matches!(err, AuditFileError::Symlink { .. }), "{err}");
    assert!(err.to_string().contains("symbolic link"), "{err}");
    // A dangling link is not followed to create its target either.
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &dangling).unwrap();
    assert!(AuditFile::open(&dangling, 1 << 20, 2).is_err());
    assert!(!dir.path().join("nowhere").exists());
    assert_eq!(read(&target), "");
}

#[test]
fn a_fifo_or_a_directory_is_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let err = AuditFile::open(&fifo, 1 << 20, 2).unwrap_err();
    assert!(matches!(err, AuditFileError::NotAFile { .. }), "{err}");
    let err = AuditFile::open(dir.path(), 1 << 20, 2).unwrap_err();
    assert!(matches!(err, AuditFileError::NotAFile { .. }), "{err}");
}

#[test]
fn rotation_shifts_the_old_files_and_keeps_n() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut file = AuditFile::open(&path, 4, 2).unwrap();
    for line in ["1\n", "2\n", "3\n", "4\n"] {
        assert!(!file.would_overflow(0, 0));
        if file.would_overflow(0, line.len()) {
            file.rotate().unwrap();
        }
        file.append(line.as_bytes()).unwrap();
        file.append(b"").unwrap();
        if line == "1\n" {
            assert!(!file.would_overflow(0, 2), "2 + 2 bytes fit in 4");
            assert!(file.would_overflow(2, 1), "2 + 2 + 1 do not");
        }
    }
    // 1+2 filled the first file; 3+4 the second; nothing was rotated out yet.
    assert_eq!(read(&path), "3\n4\n");
    assert_eq!(read(&numbered(&path, 1)), "1\n2\n");
    file.rotate().unwrap();
    file.append(b"5\n").unwrap();
    file.rotate().unwrap();
    file.append(b"6\n").unwrap();
    assert_eq!(read(&path), "6\n");
    assert_eq!(read(&numbered(&path, 1)), "5\n");
    assert_eq!(read(&numbered(&path, 2)), "3\n4\n");
    assert!(!numbered(&path, 3).exists(), "only 2 old files are kept");
}

#[test]
fn an_empty_file_takes_a_line_larger_than_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let file = AuditFile::open(&dir.path().join("a"), 4, 1).unwrap();
    assert!(!file.would_overflow(0, 100));
    assert!(file.would_overflow(1, 100));
}

#[test]
fn a_file_moved_away_is_followed_by_a_new_one_at_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let mut file = AuditFile::open(&path, 1 << 20, 1).unwrap();
    file.append(b"a\n").unwrap();
    file.follow_name().unwrap();
    std::fs::rename(&path, dir.path().join("moved")).unwrap();
    file.follow_name().unwrap();
    file.append(b"b\n").unwrap();
    assert_eq!(read(&path), "b\n");
    assert_eq!(read(&dir.path().join("moved")), "a\n");
    // A link put in its place is not followed.
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(dir.path().join("moved"), &path).unwrap();
    assert!(matches!(
        file.follow_name(),
        Err(AuditFileError::Symlink { .. })
    ));
}
