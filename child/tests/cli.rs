//! The binary's command line: one-shot `run` mode and flag errors. (Having
//! an integration test here also makes `cargo test` build the binary that
//! the end-to-end suites in `tests/` drive.)

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn agent() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_corral-agent"));
    command
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env("ZUT_HOME", env!("CARGO_TARGET_TMPDIR"));
    command
}

#[test]
fn run_mode_prints_the_reply() {
    let output = agent()
        .args(["run", "--provider", "echo", "hello from run mode"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        "hello from run mode\n"
    );
}

#[test]
fn missing_api_key_is_a_clear_startup_error() {
    let output = agent()
        .args(["run", "--provider", "anthropic", "hi"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
}

#[test]
fn bad_flags_are_rejected() {
    for args in [
        &["rpc", "--reasoning", "huge"][..],
        &["rpc", "--provider", "nope"][..],
        &["rpc", "--provider", "echo", "--tools", "read,teleport"][..],
        &["rpc", "--provider", "echo", "--cwd", "/definitely/not/here"][..],
    ] {
        let output = agent().args(args).output().unwrap();
        assert!(!output.status.success(), "{args:?} was accepted");
        assert!(!output.stderr.is_empty(), "{args:?} gave no error text");
        assert!(output.stdout.is_empty(), "{args:?} wrote to stdout");
    }
}
