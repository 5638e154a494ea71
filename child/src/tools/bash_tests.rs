//! Tests of the `bash` tool against real shells: output, exit codes, progress,
//! truncation, and that timeout, abort, drop and exit kill the whole group.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::tools::test_support::{context, text};

async fn bash(dir: &Path, args: Value) -> ToolOutput {
    let (ctx, _rx) = context(dir);
    within(20, BashTool.run(args, ctx)).await
}

async fn within<T>(secs: u64, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .expect("timed out")
}

/// Whether a process exists and is not a zombie.
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

/// The pid the command wrote to `file`, once it has.
async fn pid_in(file: &Path) -> i32 {
    within(10, async {
        loop {
            if let Ok(Ok(pid)) = std::fs::read_to_string(file).map(|s| s.trim().parse::<i32>()) {
                return pid;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

async fn assert_dies(pid: i32) {
    within(5, async {
        while alive(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn returns_merged_output_and_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let out = bash(
        dir.path(),
        json!({"command": "echo out; sleep 0.1; echo err >&2; exit 3"}),
    )
    .await;
    assert!(out.is_error);
    assert_eq!(text(&out), "out\nerr\n\nexit code 3");

    let out = bash(dir.path(), json!({"command": "pwd"})).await;
    assert!(!out.is_error);
    assert_eq!(
        text(&out),
        dir.path().canonicalize().unwrap().display().to_string()
    );

    let out = bash(dir.path(), json!({"command": "true"})).await;
    assert_eq!(text(&out), "(no output)");
}

#[tokio::test]
async fn streams_lines_as_progress() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, mut rx) = context(dir.path());
    let out = within(
        20,
        BashTool.run(
            json!({"command": "echo one; sleep 0.2; printf 'two\\nthree'"}),
            ctx,
        ),
    )
    .await;
    assert_eq!(text(&out), "one\ntwo\nthree");
    let mut progress = Vec::new();
    while let Ok(batch) = rx.try_recv() {
        progress.push(batch);
    }
    assert_eq!(progress[0], "one");
    assert_eq!(progress.join("\n"), "one\ntwo\nthree");
}

#[tokio::test]
async fn huge_output_keeps_head_and_tail() {
    let dir = tempfile::tempdir().unwrap();
    let out = bash(dir.path(), json!({"command": "seq 1 100000"})).await;
    assert!(!out.is_error);
    let text = text(&out);
    assert!(text.starts_with("1\n2\n3\n"));
    assert!(text.ends_with("\n99999\n100000"));
    assert!(text.contains("lines ("), "{text}");
    assert!(text.len() <= MAX_OUTPUT_BYTES + 200);
    assert!(text.lines().count() <= MAX_OUTPUT_LINES + 4);
}

#[tokio::test]
async fn timeout_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let pidfile = dir.path().join("pid");
    let command = "sleep 100 & echo $! > pid; wait";
    let out = bash(dir.path(), json!({"command": command, "timeout": 1})).await;
    assert!(out.is_error);
    assert_eq!(text(&out), "timed out after 1s");
    assert_dies(pid_in(&pidfile).await).await;
}

#[tokio::test]
async fn cancel_kills_grandchildren() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _rx) = context(dir.path());
    let cancel = ctx.cancel.clone();
    let run = tokio::spawn(BashTool.run(
        json!({"command": "echo started; sleep 100 & echo $! > pid; wait"}),
        ctx,
    ));
    let pid = pid_in(&dir.path().join("pid")).await;
    assert!(alive(pid));
    cancel.cancel();
    let out = within(10, run).await.unwrap();
    assert!(out.is_error);
    assert_eq!(text(&out), "started\n\naborted");
    assert_dies(pid).await;
}

#[tokio::test]
async fn dropping_the_future_kills_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let (ctx, _rx) = context(dir.path());
    let run =
        tokio::spawn(BashTool.run(json!({"command": "sleep 100 & echo $! > pid; wait"}), ctx));
    let pid = pid_in(&dir.path().join("pid")).await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    assert_dies(pid).await;
}

#[tokio::test]
async fn background_jobs_do_not_outlive_the_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = bash(
        dir.path(),
        json!({"command": "sleep 100 & echo $! > pid; echo done"}),
    )
    .await;
    assert!(!out.is_error);
    assert_eq!(text(&out), "done");
    assert_dies(pid_in(&dir.path().join("pid")).await).await;
}

#[tokio::test]
async fn bad_arguments_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = bash(dir.path(), json!({})).await;
    assert_eq!(text(&out), "missing required argument `command`");
    let out = bash(dir.path(), json!({"command": "true", "timeout": 0})).await;
    assert_eq!(text(&out), "argument `timeout` must be at least 1");
    let out = bash(dir.path(), json!({"command": "true", "timeout": "soon"})).await;
    assert!(out.is_error);
    let gone = dir.path().join("gone");
    let (ctx, _rx) = context(&gone);
    let out = BashTool.run(json!({"command": "true"}), ctx).await;
    assert!(out.is_error);
    assert!(text(&out).contains("does not exist"));
}
