//! The benchmark programs still run: each, with tiny counts, against the
//! binaries of this build, exits 0 and prints its tables. (A benchmark
//! that rots unnoticed measures nothing the next time it matters; the
//! numbers themselves are the README's, from release builds.)

#![allow(clippy::unwrap_used)]

use std::process::Command;

use corral_e2e::harness::workspace_bin;

fn run(bench: &str, args: &[&str]) -> String {
    let bin = workspace_bin(bench);
    let dir = bin.parent().unwrap().to_path_buf();
    let output = Command::new(&bin)
        .args(args)
        .arg("--bin-dir")
        .arg(&dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{bench} {args:?} failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn bench_gateway_measures_every_path_and_dialect() {
    let out = run(
        "bench-gateway",
        &["--pings", "20", "--events", "40", "--clients", "2"],
    );
    assert!(out.contains("| stdio → corral-agent |"), "{out}");
    assert!(
        out.contains("| WebSocket → corral → corral-agent |"),
        "{out}"
    );
    for dialect in ["zut", "letscode", "zi"] {
        let section = format!("## Event fan-out, {dialect} ");
        let table = out
            .split(&section)
            .nth(1)
            .unwrap_or_else(|| panic!("no {dialect}: {out}"));
        assert!(table.contains("\n| 2 | "), "{dialect}: {out}");
    }
}

#[test]
fn bench_scale_runs_its_sections() {
    let out = run(
        "bench-scale",
        &[
            "--projects",
            "4",
            "--burst",
            "3",
            "--min-pings",
            "20",
            "--idle-clients",
            "10",
            "--fanout",
            "5",
            "--only",
            "idle,burst,pings,clients",
        ],
    );
    assert!(out.contains("| projects | ready | failed |"), "{out}");
    // Four idle projects, each a descriptor and two processes, all ready
    // and answering afterwards.
    assert!(out.contains("| 4 | 4 | 1.00 | 2.00 | "), "{out}");
    assert!(
        out.trim_end().lines().any(|l| l.ends_with("| 4 |")),
        "{out}"
    );
    assert!(out.contains("| idle clients |"), "{out}");
    // The burst against the plain loop of the same run, and the pings
    // pooled over bursts.
    assert!(out.contains("| plain loop: "), "{out}");
    assert!(out.contains("× the loop) |"), "{out}");
    assert!(out.contains(" bursts, pooled ("), "{out}");
}

#[test]
fn bench_scale_runs_only_the_cold_rows_asked_for() {
    let out = run(
        "bench-scale",
        &["--only", "cold", "--cold", "2", "--cold-rows", "spare"],
    );
    assert!(
        out.contains("| a spare agent assigned (the default): cold start (cold − warm) | "),
        "{out}"
    );
    assert!(!out.contains("forked from the template"), "{out}");
    assert!(!out.contains("standalone"), "{out}");
}

#[test]
fn bench_scale_times_creating_a_file_against_renaming_one() {
    let out = run("bench-scale", &["--only", "disk"]);
    assert!(out.contains("| file, in a new directory | p50 |"), "{out}");
    assert!(out.contains("\n| created | "), "{out}");
    assert!(
        out.contains("\n| made ahead, renamed into place | "),
        "{out}"
    );
    assert!(!out.contains("cold − warm"), "{out}");
}

#[test]
fn bench_broker_compares_both_model_paths() {
    let out = run(
        "bench-broker",
        &["--prompts", "2", "--deltas", "50", "--delta-bytes", "8"],
    );
    for row in ["| direct |", "| broker |", "| broker − direct |"] {
        assert!(out.contains(row), "{row}: {out}");
    }
}

#[test]
fn every_benchmark_lists_its_options_and_refuses_a_bad_argument_in_one_line() {
    for (bench, option) in [
        ("bench-startup", "--runs N"),
        ("bench-gateway", "--pings N"),
        ("bench-broker", "--prompts N"),
        ("bench-scale", "--connected N"),
    ] {
        let bin = workspace_bin(bench);
        let help = Command::new(&bin).arg("--help").output().unwrap();
        let text = String::from_utf8_lossy(&help.stdout);
        assert!(help.status.success(), "{bench} --help: {}", help.status);
        assert!(text.starts_with(&format!("usage: {bench}")), "{text}");
        assert!(text.contains(&format!("\n  {option}")), "{bench}: {text}");

        let bad = Command::new(&bin)
            .arg("--no-such-option")
            .env("RUST_BACKTRACE", "1")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&bad.stderr);
        assert_eq!(bad.status.code(), Some(2), "{bench}: {stderr}");
        assert!(
            stderr.starts_with(&format!("{bench}: unknown argument \"--no-such-option\"")),
            "{stderr}"
        );
        assert!(!stderr.contains("backtrace"), "{stderr}");
        assert!(bad.stdout.is_empty(), "{bench}");
    }
}
