use std::time::{Duration, Instant};

use bytes::Bytes;
use nix::sys::signal::Signal;

use super::*;
use crate::process::env::child_env;
use crate::process::test_support::{gone_within, is_gone, next, next_line, sh, PATIENCE};

fn exited(code: Option<i32>, signal: Option<i32>) -> ChildOutput {
    ChildOutput::Exited(ExitInfo { code, signal })
}

#[tokio::test]
async fn lines_flow_both_ways_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let script =
        r#"printf 'x\r\n\n  \ny\n'; while IFS= read -r line; do printf 'got:%s\n' "$line"; done"#;
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), script)).await.unwrap();
    assert_eq!(next_line(&mut output).await, "x", "CR stripped");
    assert_eq!(next_line(&mut output).await, "y", "blank lines skipped");
    for i in 0..500 {
        child
            .send(Bytes::from(format!("{{\"n\":{i}}}\n")))
            .await
            .unwrap();
    }
    for i in 0..500 {
        assert_eq!(next_line(&mut output).await, format!("got:{{\"n\":{i}}}"));
    }
    assert_eq!(child.exited(), None);
    child.close_stdin();
    assert_eq!(next(&mut output).await, exited(Some(0), None));
    assert!(output.recv().await.is_none(), "Exited is the last item");
    assert!(child.exited().is_some_and(|e| e.success()));
    assert_eq!(
        child.send(Bytes::from_static(b"{}\n")).await,
        Err(ChildGone)
    );
}

#[tokio::test]
async fn bad_lines_are_reported_and_the_next_line_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(
        dir.path(),
        r"head -c 200 /dev/zero | tr '\0' x; echo; printf '\377\n'; echo ok",
    );
    spec.max_line = 64;
    let (_child, mut output) = ChildProcess::spawn(spec).await.unwrap();
    match next(&mut output).await {
        ChildOutput::Invalid(why) => assert!(why.contains("maximum length of 64"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    match next(&mut output).await {
        ChildOutput::Invalid(why) => assert!(why.contains("UTF-8"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    assert_eq!(next_line(&mut output).await, "ok");
    assert_eq!(next(&mut output).await, exited(Some(0), None));
}

#[tokio::test]
async fn chatty_stderr_goes_to_its_file_and_does_not_block_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    // 20 000 log lines plus one 1 MB line: far beyond any pipe buffer.
    let script = r#"i=0; while [ $i -lt 20000 ]; do echo "log line $i" >&2; i=$((i+1)); done
        head -c 1000000 /dev/zero | tr '\0' e >&2; echo >&2; echo "last words" >&2; echo done"#;
    let mut spec = sh(dir.path(), script);
    spec.stderr_log = Some(crate::process::StderrLog::new(state.path(), "chatty"));
    let (child, mut output) = ChildProcess::spawn(spec).await.unwrap();
    assert_eq!(next_line(&mut output).await, "done");
    assert_eq!(next(&mut output).await, exited(Some(0), None));
    assert_eq!(child.last_stderr_line().as_deref(), Some("last words"));
    let tail = child.stderr_tail().lines();
    assert_eq!(
        tail.len(),
        crate::process::STDERR_TAIL_LINES.min(tail.len())
    );
    assert_eq!(tail.last().map(String::as_str), Some("last words"));
    // Followed at the exit and cut, since it grew past the cap.
    let file = state.path().join("logs/chatty.log");
    let kept = state.path().join("logs/chatty.log.1");
    assert_eq!(std::fs::metadata(file).unwrap().len(), 0);
    assert!(std::fs::read_to_string(kept)
        .unwrap()
        .ends_with("last words\n"));
}

#[tokio::test]
async fn the_child_reads_end_of_file_once_stdin_is_closed_and_its_stdout_still_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "cat; echo after-eof"))
        .await
        .unwrap();
    child.send(Bytes::from_static(b"echoed\n")).await.unwrap();
    assert_eq!(next_line(&mut output).await, "echoed");
    child.close_stdin();
    assert_eq!(next_line(&mut output).await, "after-eof");
    assert_eq!(next(&mut output).await, exited(Some(0), None));
}

#[tokio::test]
async fn exit_code_and_signal_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "exit 3")).await.unwrap();
    assert_eq!(next(&mut output).await, exited(Some(3), None));
    assert_eq!(child.wait().await.to_string(), "exit code 3");

    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "kill -9 $$"))
        .await
        .unwrap();
    assert_eq!(next(&mut output).await, exited(None, Some(9)));
    let exit = child.wait().await;
    assert_eq!(child.exited(), Some(exit));
    assert_eq!(exit.to_string(), "killed by signal 9 (SIGKILL)");
}

#[tokio::test]
async fn stop_closes_stdin_first() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "cat >/dev/null; echo bye"))
        .await
        .unwrap();
    let started = Instant::now();
    let exit = child.stop(Duration::from_secs(5)).await;
    assert_eq!(
        exit,
        ExitInfo {
            code: Some(0),
            signal: None
        }
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        next_line(&mut output).await,
        "bye",
        "output written before exit still arrives"
    );
    assert_eq!(next(&mut output).await, ChildOutput::Exited(exit));
}

#[tokio::test]
async fn stop_escalates_to_sigkill_and_kills_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"trap '' TERM; sleep 100 & echo "$!"; while :; do sleep 0.1; done"#;
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), script)).await.unwrap();
    let grandchild: u32 = next_line(&mut output).await.parse().unwrap();
    assert!(!is_gone(grandchild));
    let grace = Duration::from_millis(300);
    let started = Instant::now();
    let exit = child.stop(grace).await;
    let took = started.elapsed();
    assert_eq!(exit.signal, Some(9), "{exit}");
    assert!(took >= 2 * grace, "escalated too early: {took:?}");
    assert!(
        took < 2 * grace + Duration::from_secs(2),
        "escalated too late: {took:?}"
    );
    assert!(is_gone(child.pid()));
    assert!(
        gone_within(grandchild, Duration::from_secs(2)).await,
        "grandchild {grandchild} survived"
    );
}

#[tokio::test]
async fn dropping_the_handle_kills_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "echo up; exec sleep 100"))
        .await
        .unwrap();
    assert_eq!(next_line(&mut output).await, "up");
    let pid = child.pid();
    drop(child);
    assert_eq!(next(&mut output).await, exited(None, Some(9)));
    assert!(gone_within(pid, PATIENCE).await);
}

#[tokio::test]
async fn environment_is_scrubbed_and_cwd_set() {
    let dir = tempfile::tempdir().unwrap();
    let set = vec![("CORRAL_TEST_SET".to_string(), "yes".to_string())];
    let mut spec = sh(
        dir.path(),
        r#"echo "manifest=${CARGO_MANIFEST_DIR-unset}"; echo "set=$CORRAL_TEST_SET"; echo "path=${PATH:+yes}"; pwd -P"#,
    );
    spec.env = child_env(&[], &set, std::env::vars_os());
    let (_child, mut output) = ChildProcess::spawn(spec).await.unwrap();
    // Cargo sets CARGO_MANIFEST_DIR for test runs; it is not allowlisted.
    assert_eq!(next_line(&mut output).await, "manifest=unset");
    assert_eq!(next_line(&mut output).await, "set=yes");
    assert_eq!(next_line(&mut output).await, "path=yes");
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(next_line(&mut output).await, cwd.to_str().unwrap());
}

#[tokio::test]
async fn spawn_errors_name_the_program_and_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let mut spec = sh(dir.path(), "true");
    spec.program = dir.path().join("no-such-program");
    let err = ChildProcess::spawn(spec.clone()).await.err().unwrap();
    assert!(matches!(err, SpawnError::NotFound { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("no-such-program: program not found"),
        "{err}"
    );

    let not_executable = dir.path().join("data.txt");
    std::fs::write(&not_executable, "#!/bin/sh\n").unwrap();
    spec.program = not_executable;
    let err = ChildProcess::spawn(spec.clone()).await.err().unwrap();
    assert!(
        matches!(err, SpawnError::PermissionDenied { .. }),
        "{err:?}"
    );

    let mut spec = sh(dir.path(), "true");
    spec.cwd = dir.path().join("missing");
    let err = ChildProcess::spawn(spec).await.err().unwrap();
    assert!(matches!(err, SpawnError::CwdMissing { .. }), "{err:?}");
    assert!(err.to_string().contains("missing does not exist"), "{err}");
}

#[tokio::test]
async fn signal_group_reaches_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "echo up; exec sleep 100"))
        .await
        .unwrap();
    assert_eq!(next_line(&mut output).await, "up");
    child.signal_group(Signal::SIGTERM);
    assert_eq!(next(&mut output).await, exited(None, Some(15)));
    // After exit the group is never signalled again (its pid may be reused).
    child.signal_group(Signal::SIGKILL);
}
