use std::fs::File;

use super::super::tally::Source;
use super::*;

fn spent_dir(state: &Path) -> std::path::PathBuf {
    state.join("budgets/spent")
}

fn tally(project: &str, usd: f64) -> Tally {
    let mut tally = Tally::default();
    tally.add(project, Some("alice"), Source::Broker, usd);
    tally
}

/// Makes the file at `path` look last written `ago` before its own
/// modification time.
fn age(path: &Path, ago: Duration) {
    let file = File::options().write(true).open(path).unwrap();
    let modified = file.metadata().unwrap().modified().unwrap();
    file.set_modified(modified - ago).unwrap();
}

#[test]
fn each_gateway_writes_its_own_file_and_reads_the_others() {
    let state = tempfile::tempdir().unwrap();
    let (mut one, start) = Store::open(state.path()).unwrap();
    assert_eq!(start, Tally::default());
    let (mut two, _) = Store::open(state.path()).unwrap();
    assert_ne!(one.instance(), two.instance());

    assert_eq!(one.write_own(&tally("alpha", 0.5)).unwrap(), None);
    assert_eq!(two.write_own(&tally("alpha", 0.25)).unwrap(), None);
    assert_eq!(one.read_others().unwrap(), tally("alpha", 0.25));
    assert_eq!(two.read_others().unwrap(), tally("alpha", 0.5));
    // Unchanged files are not read again, changed ones are.
    assert_eq!(two.read_others().unwrap(), tally("alpha", 0.5));
    one.write_own(&tally("alpha", 0.75)).unwrap();
    assert_eq!(two.read_others().unwrap(), tally("alpha", 0.75));

    let text =
        std::fs::read_to_string(spent_dir(state.path()).join(format!("{}.json", one.instance())))
            .unwrap();
    let file: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(file["version"], 1);
    assert_eq!(file["projects"]["alpha"]["broker"], 0.75);
    assert_eq!(file["identities"]["alice"], 0.75);
    let names: Vec<String> = std::fs::read_dir(spent_dir(state.path()))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "no temporary file is left: {names:?}");
}

#[test]
fn a_restarted_gateway_takes_over_a_dead_file_once() {
    let state = tempfile::tempdir().unwrap();
    let (mut dead, _) = Store::open(state.path()).unwrap();
    dead.write_own(&tally("alpha", 2.0)).unwrap();
    let (mut live, _) = Store::open(state.path()).unwrap();
    live.write_own(&tally("beta", 1.0)).unwrap();
    age(
        &spent_dir(state.path()).join(format!("{}.json", dead.instance())),
        STALE_AFTER + Duration::from_secs(60),
    );

    let (mut next, start) = Store::open(state.path()).unwrap();
    assert_eq!(start, tally("alpha", 2.0), "the dead gateway's spend");
    assert!(!spent_dir(state.path())
        .join(format!("{}.json", dead.instance()))
        .exists());
    // Counted once: by the new gateway's file, not twice.
    let mut both = tally("alpha", 2.0);
    both.absorb(&tally("beta", 1.0));
    let mut seen_by_other = live.read_others().unwrap();
    assert_eq!(seen_by_other, tally("alpha", 2.0));
    // The new gateway goes on from there; a live gateway's file is not taken.
    let (mut another, start) = Store::open(state.path()).unwrap();
    assert_eq!(start, Tally::default());
    assert_eq!(another.read_others().unwrap(), both);
    next.write_own(&start_plus(&tally("alpha", 2.0), 0.5))
        .unwrap();
    seen_by_other = live.read_others().unwrap();
    assert_eq!(seen_by_other.project("alpha").broker, 2.5);
}

fn start_plus(start: &Tally, usd: f64) -> Tally {
    let mut more = start.clone();
    more.add("alpha", Some("alice"), Source::Broker, usd);
    more
}

#[test]
fn a_gateway_whose_file_was_taken_keeps_only_what_it_counted_since() {
    let state = tempfile::tempdir().unwrap();
    let (mut paused, _) = Store::open(state.path()).unwrap();
    paused.write_own(&tally("alpha", 1.0)).unwrap();
    let first = paused.instance().to_string();
    age(
        &spent_dir(state.path()).join(format!("{first}.json")),
        STALE_AFTER * 2,
    );
    let (mut taker, start) = Store::open(state.path()).unwrap();
    assert_eq!(start, tally("alpha", 1.0));

    // The paused gateway wakes up having counted 0.5 more.
    let taken = paused.write_own(&tally("alpha", 1.5)).unwrap();
    assert_eq!(taken, Some(tally("alpha", 1.0)));
    assert_ne!(paused.instance(), first);
    let others = taker.read_others().unwrap();
    assert_eq!(others.project("alpha").broker, 0.5);
}

#[test]
fn unreadable_files_are_left_out_and_temporaries_swept() {
    let state = tempfile::tempdir().unwrap();
    let (mut store, _) = Store::open(state.path()).unwrap();
    let dir = spent_dir(state.path());
    std::fs::write(dir.join("0123abcd.json"), "{not json").unwrap();
    std::fs::write(dir.join("notes.txt"), "ignored").unwrap();
    std::fs::write(
        dir.join("89ab.json"),
        r#"{"projects":{"alpha":{"agent":1.5}}}"#,
    )
    .unwrap();
    let others = store.read_others().unwrap();
    assert_eq!(others.project("alpha").agent, 1.5);
    assert_eq!(others.projects.len(), 1);

    std::fs::write(dir.join("dead.json.tmp"), "x").unwrap();
    age(&dir.join("dead.json.tmp"), STALE_AFTER * 2);
    std::fs::write(dir.join("fresh.json.tmp"), "x").unwrap();
    Store::open(state.path()).unwrap();
    assert!(!dir.join("dead.json.tmp").exists());
    assert!(dir.join("fresh.json.tmp").exists());
}

#[test]
fn limits_are_kept_and_a_broken_file_refuses() {
    let state = tempfile::tempdir().unwrap();
    let (store, _) = Store::open(state.path()).unwrap();
    assert_eq!(store.read_limits().unwrap(), Limits::default());
    let mut limits = Limits::default();
    limits.projects.insert(
        "alpha".into(),
        super::super::tally::Entry {
            limit_usd: Some(Some(0.01)),
            baseline_usd: 0.5,
        },
    );
    store.write_limits(&limits).unwrap();
    let (other, _) = Store::open(state.path()).unwrap();
    assert_eq!(other.read_limits().unwrap(), limits);
    std::fs::write(
        state.path().join("budgets/limits.json"),
        "{\"projects\": 3}",
    )
    .unwrap();
    let err = other.read_limits().unwrap_err().to_string();
    assert!(err.contains("limits.json"), "{err}");
}

#[test]
fn a_link_in_place_of_the_directory_is_refused() {
    let state = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), state.path().join("budgets")).unwrap();
    let err = Store::open(state.path()).unwrap_err();
    assert!(err.to_string().contains("symbolic link"), "{err}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 0);
}
