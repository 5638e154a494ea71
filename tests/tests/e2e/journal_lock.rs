//! End-to-end: one session journal, one agent. A second `corral-agent rpc`
//! on a journal that another process holds exits with code 75 (EX_TEMPFAIL) and says why;
//! the holder keeps working, and the lock goes away with the holder.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Stdio;

use corral_e2e::harness::{workspace_bin, AgentProc, AgentSpawn, READ_TIMEOUT};
use serde_json::{json, Value};
use tokio::process::Command;

async fn agent_on(journal: &Path) -> AgentProc {
    let mut agent = AgentSpawn::rpc(&["--provider", "echo"])
        .arg("--session")
        .arg(journal.to_str().unwrap())
        .spawn()
        .await;
    // Answering proves setup, and so the journal lock, is done.
    let pong = agent.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
    agent
}

/// Runs a second agent on `journal` to its exit: (exit code, stderr).
async fn contender(journal: &Path, cwd: &Path) -> (Option<i32>, String) {
    let output = Command::new(workspace_bin("corral-agent"))
        .args(["rpc", "--provider", "echo", "--cwd"])
        .arg(cwd)
        .arg("--session")
        .arg(journal)
        .env_remove("ZUTCORE_RPC_TOKEN")
        .env("ZUT_HOME", cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(READ_TIMEOUT, output)
        .await
        .expect("the second agent did not exit")
        .unwrap();
    assert!(
        output.stdout.is_empty(),
        "nothing may reach the protocol stream: {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn texts(messages: &Value) -> Vec<(String, String)> {
    messages["data"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"][0]["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_second_agent_on_a_held_journal_exits_75_and_the_first_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("sessions/p.jsonl");
    let mut first = agent_on(&journal).await;
    first
        .send(json!({"id":"1","type":"prompt","message":"before"}))
        .await;
    first.recv_until(|f| f["type"] == "done").await;
    let on_disk = std::fs::read(&journal).unwrap();

    let (code, stderr) = contender(&journal, dir.path()).await;
    assert_eq!(code, Some(75), "stderr: {stderr}");
    assert!(
        stderr.contains("is in use by another agent process"),
        "{stderr}"
    );
    assert!(stderr.contains(journal.to_str().unwrap()), "{stderr}");
    if std::fs::metadata("/proc/locks").is_ok() {
        let pid = first.child.id().unwrap();
        assert!(stderr.contains(&format!("(pid {pid})")), "{stderr}");
    }
    assert_eq!(
        std::fs::read(&journal).unwrap(),
        on_disk,
        "the refused agent must not touch the journal"
    );

    // The holder is unaffected and still journals.
    first
        .send(json!({"id":"2","type":"prompt","message":"after"}))
        .await;
    first.recv_until(|f| f["type"] == "done").await;
    let messages = first.request(json!({"id":"m","type":"get_messages"})).await;
    let expected: Vec<(String, String)> = [
        ("user", "before"),
        ("assistant", "before"),
        ("user", "after"),
        ("assistant", "after"),
    ]
    .iter()
    .map(|(r, t)| (r.to_string(), t.to_string()))
    .collect();
    assert_eq!(texts(&messages), expected);

    // A holder killed outright releases the lock: the next agent resumes.
    first.child.start_kill().unwrap();
    first.wait().await;
    let mut next = agent_on(&journal).await;
    let messages = next.request(json!({"id":"m","type":"get_messages"})).await;
    assert_eq!(texts(&messages), expected);
}
