//! End-to-end: `corral-agent run`, one prompt from the command line or,
//! with `-`, from stdin (bounded), the reply text on stdout.

#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

use corral_e2e::harness::workspace_bin;

/// `corral-agent run --provider echo PROMPT` with `stdin` written to it.
fn run(prompt: &str, stdin: &[u8]) -> Output {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(workspace_bin("corral-agent"))
        .args(["run", "--provider", "echo", "--cwd"])
        .arg(dir.path())
        .arg(prompt)
        .env("ZUT_HOME", dir.path())
        .env_remove("ZUTCORE_RPC_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    let bytes = stdin.to_vec();
    // The agent may stop reading early (a prompt too long): a broken pipe
    // is expected then.
    let writer = std::thread::spawn(move || {
        let _ = input.write_all(&bytes);
    });
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    output
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn the_prompt_comes_from_the_argument_or_from_stdin() {
    let output = run("say this back", b"ignored");
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim_end(), "say this back");

    let prompt = "first line of the prompt\nsecond line, from a pipe\n";
    let output = run("-", prompt.as_bytes());
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
    assert_eq!(text(&output.stdout).trim_end(), prompt.trim_end());
}

#[test]
fn a_prompt_on_stdin_over_16_mib_is_refused_with_exit_code_2() {
    let limit = 16 << 20;
    let output = run("-", &vec![b'x'; limit + 1]);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("the prompt on stdin is longer than {limit} bytes")),
        "{stderr}"
    );
    assert!(output.stdout.is_empty());

    // Exactly at the limit it is a prompt like any other.
    let output = run("-", &vec![b'x'; limit]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output.stderr));
}

#[test]
fn a_prompt_on_stdin_that_is_not_utf8_is_refused() {
    let output = run("-", &[b'h', 0xff, b'\n']);
    let stderr = text(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not UTF-8"), "{stderr}");
}
