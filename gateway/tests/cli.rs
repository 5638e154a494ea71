//! The binary's command line. (An integration test here also makes `cargo
//! test` build the `corral` binary the end-to-end suites drive.)

#![allow(clippy::unwrap_used)]

use std::process::Command;

fn corral() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_corral"));
    command
        .env_remove("CORRAL_TOKENS")
        .env_remove("CORRAL_ADMIN_TOKEN");
    command
}

#[test]
fn refuses_a_public_address_without_a_token() {
    let root = tempfile::tempdir().unwrap();
    let output = corral()
        .args(["serve", "--listen", "0.0.0.0:0", "--projects-root"])
        .arg(root.path())
        .arg("--state-dir")
        .arg(root.path().join("state"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("without a client token"), "{stderr}");
    assert!(output.stdout.is_empty());
}

#[test]
fn bad_settings_are_clear_errors() {
    let root = tempfile::tempdir().unwrap();
    for (args, needle) in [
        (
            vec![
                "--listen",
                "127.0.0.1:0",
                "--projects-root",
                "/definitely/missing",
            ],
            "projects",
        ),
        (
            vec!["--listen", "127.0.0.1:0", "--idle-timeout", "soon"],
            "soon",
        ),
        (vec!["--listen", "127.0.0.1:0", "--token", "short"], "16"),
    ] {
        let mut command = corral();
        command.arg("serve").args(&args);
        if !args.contains(&"--projects-root") {
            command.arg("--projects-root").arg(root.path());
        }
        let output = command
            .arg("--state-dir")
            .arg(root.path().join("state"))
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
