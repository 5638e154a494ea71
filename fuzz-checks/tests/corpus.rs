//! Replays every committed corpus input (`fuzz/corpus/TARGET/*`) through
//! its target's check: what libFuzzer once found interesting is checked on
//! every test run, and a target without a corpus, or a corpus without a
//! target, fails the test.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use corral_fuzz_checks::TARGETS;

#[test]
fn every_corpus_input_passes_its_check() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut folders: Vec<String> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .collect();
    folders.sort();
    let mut names: Vec<&str> = TARGETS.iter().map(|(name, _)| *name).collect();
    names.sort_unstable();
    assert_eq!(folders, names, "one corpus folder per target");
    for (name, check) in TARGETS {
        let mut inputs = 0;
        for entry in std::fs::read_dir(corpus.join(name)).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let result = std::panic::catch_unwind(|| check(&data));
            assert!(result.is_ok(), "{name}: {} fails its check", path.display());
            inputs += 1;
        }
        assert!(inputs > 0, "{name} has an empty corpus");
    }
}
