use super::*;

const GOOD: &str = "{\"kind\":\"clear\"}\n";
const MESSAGE: &str = "{\"kind\":\"message\",\"message\":{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}],\"time\":\"2024-01-01T00:00:00Z\"}}\n";

fn journal(content: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.jsonl");
    std::fs::write(&path, content).unwrap();
    (dir, path)
}

#[test]
fn check_accepts_whole_entries_and_names_the_first_bad_line() {
    let (_dir, path) = journal(&format!("{MESSAGE}{GOOD}"));
    let verdict = check(&path).unwrap();
    assert_eq!(verdict.entries, 2);
    assert_eq!(verdict.damage, None);

    let (_dir, path) = journal(&format!("{MESSAGE}{{\"kind\":\"mess{GOOD}{GOOD}"));
    let verdict = check(&path).unwrap();
    assert_eq!(verdict.entries, 1);
    assert_eq!(verdict.valid_len, MESSAGE.len() as u64);
    assert!(matches!(verdict.damage, Some(Damage::Bad { line: 2, .. })));

    let (_dir, path) = journal(&format!("{GOOD}{{\"kind\""));
    let verdict = check(&path).unwrap();
    assert_eq!(verdict.damage, Some(Damage::Torn { line: 2 }));
}

#[test]
fn repair_keeps_the_prefix_and_moves_every_other_byte_aside() {
    let damaged = format!("{MESSAGE}{{\"kind\":\"mess{GOOD}{MESSAGE}");
    let (dir, path) = journal(&damaged);
    let Repair::Repaired {
        kept,
        damage,
        aside,
        moved,
    } = repair(&path, 1700000000).unwrap()
    else {
        panic!("expected a repair");
    };
    assert_eq!(kept, 1);
    assert_eq!(damage.line(), 2);
    assert_eq!(aside, dir.path().join("p.jsonl.damaged-1700000000"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), MESSAGE);
    let rest = std::fs::read_to_string(&aside).unwrap();
    assert_eq!(moved, rest.len() as u64);
    assert_eq!(format!("{MESSAGE}{rest}"), damaged, "no byte lost");
    assert_eq!(check(&path).unwrap().damage, None);

    // A second repair of the same second does not overwrite the first.
    std::fs::write(&path, format!("{GOOD}junk\n")).unwrap();
    let Repair::Repaired { aside, .. } = repair(&path, 1700000000).unwrap() else {
        panic!("expected a repair");
    };
    assert_eq!(aside, dir.path().join("p.jsonl.damaged-1700000000-2"));
    assert_eq!(std::fs::read_to_string(aside).unwrap(), "junk\n");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("p.jsonl.damaged-1700000000")).unwrap(),
        rest
    );
}

#[test]
fn repair_leaves_a_whole_journal_alone() {
    let (dir, path) = journal(GOOD);
    assert_eq!(repair(&path, 1).unwrap(), Repair::Clean { entries: 1 });
    assert_eq!(std::fs::read_to_string(&path).unwrap(), GOOD);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn repair_is_refused_while_an_agent_holds_the_journal() {
    let (_dir, path) = journal("junk\n");
    let held = Flock::lock(File::open(&path).unwrap(), FlockArg::LockExclusiveNonblock).unwrap();
    let err = repair(&path, 1).unwrap_err();
    assert!(matches!(err, JournalToolError::InUse { .. }), "{err}");
    drop(held);
    assert!(matches!(repair(&path, 1).unwrap(), Repair::Repaired { .. }));
}

#[test]
fn a_missing_file_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("none.jsonl");
    let err = check(&path).unwrap_err();
    assert!(err.to_string().contains("none.jsonl"), "{err}");
    assert!(repair(&path, 1).is_err());
    assert!(!path.exists(), "repair never creates the journal");
}
