//! End-to-end: the MCP client when things go wrong or are not allowed:
//! permission modes in front of MCP calls, a server that hangs, crashes or
//! changes its tools, an abort in the middle of a call, and stdio servers
//! under the agent's sandbox (the same reach as its own tools, their
//! secrets out of the tools' reach, gone with the agent).

#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use corral_e2e::harness::{text_of, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::json;

use crate::agent_mcp::{config, everything, fixture, zut_agent, zut_call};

fn result_text(frames: &[serde_json::Value]) -> String {
    let result = frames.iter().find(|f| f["type"] == "tool_result").unwrap();
    result["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn ask_asks_before_an_mcp_call_and_a_rejection_reaches_the_model() {
    let (_dir, path) = config(json!({"everything": everything()}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &["--permission-mode", "ask"]).await;
    mock.push(Turn::tool_call(
        "mcp__everything__echo",
        json!({"message": "x"}),
    ));
    mock.push(Turn::EchoToolResult {
        prefix: "model saw: ".into(),
    });
    agent
        .send(json!({"id":"p","type":"prompt","message":"echo"}))
        .await;
    let asked = agent
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    let ask = asked.last().unwrap().clone();
    assert_eq!(ask["name"], "mcp__everything__echo", "{ask}");
    assert_eq!(ask["kind"], "other", "{ask}");
    agent
        .send(json!({"id":"r","type":"permission_reply","request_id": ask["request_id"], "option":"reject_once"}))
        .await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    assert!(
        text_of(&frames)
            .contains("model saw: refused: the user rejected this `mcp__everything__echo` call"),
        "{}",
        text_of(&frames)
    );

    // allow_always holds for that server and tool, not for another.
    mock.push(Turn::tool_call(
        "mcp__everything__echo",
        json!({"message": "y"}),
    ));
    mock.push(Turn::tool_call(
        "mcp__everything__echo",
        json!({"message": "z"}),
    ));
    mock.push(Turn::tool_call(
        "mcp__everything__get-sum",
        json!({"a": 1, "b": 2}),
    ));
    mock.push(Turn::text("done"));
    agent
        .send(json!({"id":"p2","type":"prompt","message":"again"}))
        .await;
    let asked = agent
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    let ask = asked.last().unwrap().clone();
    agent
        .send(json!({"id":"r2","type":"permission_reply","request_id": ask["request_id"], "option":"allow_always"}))
        .await;
    let asked = agent
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    let second = asked.last().unwrap().clone();
    assert_eq!(
        second["name"], "mcp__everything__get-sum",
        "echo was not asked again: {second}"
    );
    let echoes = asked.iter().filter(|f| f["type"] == "tool_result").count();
    assert_eq!(echoes, 2, "{asked:?}");
    agent
        .send(json!({"id":"r3","type":"permission_reply","request_id": second["request_id"], "option":"allow_once"}))
        .await;
    agent.recv_until(|f| f["type"] == "done").await;
}

#[tokio::test]
async fn read_only_lets_only_tools_marked_read_only_through() {
    let (_dir, path) = config(json!({"everything": everything()}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &["--permission-mode", "read-only"]).await;
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__everything__echo",
        json!({"message": "ro"}),
    )
    .await;
    assert!(
        text_of(&frames).contains("model saw: Echo: ro"),
        "{}",
        text_of(&frames)
    );
    // Marked readOnlyHint: false by the server.
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__everything__toggle-simulated-logging",
        json!({}),
    )
    .await;
    let text = result_text(&frames);
    assert!(
        text.contains("read-only") && text.contains("readOnlyHint"),
        "{text}"
    );
}

#[tokio::test]
async fn a_hanging_call_times_out_and_the_server_is_told_to_cancel() {
    let dir = corral_e2e::dir_outside_tmp();
    let log = dir.path().join("cancelled.log");
    let (_cfg, path) =
        config(json!({"fx": fixture(json!({"CANCEL_LOG": log.display().to_string()}))}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &["--mcp-timeout", "1"]).await;
    let frames = zut_call(&mut agent, &mock, "mcp__fx__hang", json!({})).await;
    let text = result_text(&frames);
    assert!(text.contains("timed out after 1s"), "{text}");
    wait_for_file(&log).await;
    // The server still works afterwards.
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__fx__env",
        json!({"name": "CANCEL_LOG"}),
    )
    .await;
    assert!(
        text_of(&frames).contains("cancelled.log"),
        "{}",
        text_of(&frames)
    );
}

#[tokio::test]
async fn abort_cancels_a_call_in_flight_and_the_run_ends() {
    let dir = corral_e2e::dir_outside_tmp();
    let log = dir.path().join("cancelled.log");
    let (_cfg, path) =
        config(json!({"fx": fixture(json!({"CANCEL_LOG": log.display().to_string()}))}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    mock.push(Turn::tool_call("mcp__fx__hang", json!({})));
    agent
        .send(json!({"id":"p","type":"prompt","message":"hang"}))
        .await;
    agent
        .recv_until(|f| f["type"] == "tool_execution_started")
        .await;
    agent.send(json!({"id":"a","type":"abort"})).await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    let end = frames
        .iter()
        .rev()
        .find(|f| f["type"] == "turn_end")
        .unwrap();
    assert_eq!(end["stop"], "aborted", "{end}");
    wait_for_file(&log).await;
}

#[tokio::test]
async fn a_crashed_server_is_reported_and_restarted_on_its_next_use() {
    let (_cfg, path) = config(json!({"fx": fixture(json!({}))}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    let frames = zut_call(&mut agent, &mock, "mcp__fx__pid", json!({})).await;
    let first_pid = result_text(&frames);
    let frames = zut_call(&mut agent, &mock, "mcp__fx__crash", json!({})).await;
    let text = result_text(&frames);
    assert!(
        text.contains("`fx` exited during the call") && text.contains("restarted on its next use"),
        "{text}"
    );
    let frames = zut_call(&mut agent, &mock, "mcp__fx__pid", json!({})).await;
    let second_pid = result_text(&frames);
    assert!(second_pid.parse::<u32>().is_ok(), "{second_pid}");
    assert_ne!(first_pid, second_pid);
}

#[tokio::test]
async fn a_server_that_changes_its_tools_is_followed() {
    let (_cfg, path) = config(json!({"fx": fixture(json!({}))}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    zut_call(&mut agent, &mock, "mcp__fx__grow", json!({})).await;
    // The listing follows the notification; the next prompt offers it.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let frames = zut_call(&mut agent, &mock, "mcp__fx__grown", json!({})).await;
        if text_of(&frames).contains("model saw: I was added later") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the new tool never came: {}",
            text_of(&frames)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let last = mock.requests().last().unwrap().body["tools"].to_string();
    assert!(last.contains("mcp__fx__grown"), "{last}");
}

#[tokio::test]
async fn a_sandboxed_server_reaches_only_what_tools_reach_keeps_its_secret_and_dies_with_the_agent()
{
    let root = corral_e2e::dir_outside_tmp();
    for dir in ["projects/a", "projects/b", "state/sessions"] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    let secret_file = root.path().join("projects/b/secret.txt");
    std::fs::write(&secret_file, "project b's secret").unwrap();
    std::fs::write(root.path().join("projects/a/mine.txt"), "project a's file").unwrap();
    let journal = root.path().join("state/sessions/a.jsonl");
    let (_cfg, path) = config(json!({"fx": fixture(json!({"TEAM_TOKEN": "team-token-9931"}))}));
    let mock = MockLlm::start().await;
    let mut agent = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--sandbox"])
        .arg("--sandbox-hide")
        .arg(root.path().join("projects").display().to_string())
        .arg("--session")
        .arg(journal.display().to_string())
        .arg("--mcp-config")
        .arg(path.display().to_string())
        .cwd(&root.path().join("projects/a"))
        .spawn()
        .await;

    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__fx__read_path",
        json!({"path": "mine.txt"}),
    )
    .await;
    assert!(
        text_of(&frames).contains("model saw: project a's file"),
        "{}",
        text_of(&frames)
    );
    for other in [secret_file.clone(), journal.clone()] {
        let frames = zut_call(
            &mut agent,
            &mock,
            "mcp__fx__read_path",
            json!({"path": other.display().to_string()}),
        )
        .await;
        let text = result_text(&frames);
        assert!(
            text.starts_with("cannot read"),
            "{}: {text}",
            other.display()
        );
    }
    // The server has its secret; no tool command can read it from /proc.
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__fx__env",
        json!({"name": "TEAM_TOKEN"}),
    )
    .await;
    assert!(
        text_of(&frames).contains("team-token-9931"),
        "{}",
        text_of(&frames)
    );
    let frames = zut_call(&mut agent, &mock, "mcp__fx__pid", json!({})).await;
    let inner_pid = result_text(&frames);
    let snoop = format!(
        "cat /proc/{inner_pid}/environ; for p in /proc/[0-9]*; do cat $p/environ; done 2>/dev/null | tr '\\0' '\\n' | grep -c team-token-9931"
    );
    let frames = zut_call(&mut agent, &mock, "bash", json!({"command": snoop})).await;
    let text = result_text(&frames);
    assert!(!text.contains("team-token-9931"), "{text}");
    assert!(
        text.contains("Permission denied") || text.contains("Operation not permitted"),
        "{text}"
    );

    // The server's process (seen from the host) dies with the agent.
    let outer = agent.child.id().unwrap();
    let server = host_pids()
        .into_iter()
        .find(|p| cmdline(*p).contains("fixture.mjs") && is_below(*p, outer))
        .expect("the server runs below the agent");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(outer as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gone(server) {
        assert!(Instant::now() < deadline, "the server outlived the agent");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn wait_for_file(path: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn host_pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

fn cmdline(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .replace('\0', " ")
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn is_below(mut pid: u32, ancestor: u32) -> bool {
    while let Some(up) = parent(pid) {
        if up == ancestor {
            return true;
        }
        if up <= 1 {
            return false;
        }
        pid = up;
    }
    false
}

/// Gone, or a zombie.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|r| r.trim_start().starts_with('Z')),
    }
}
