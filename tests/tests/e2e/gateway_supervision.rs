//! End-to-end: supervision of misbehaving children — one that cannot
//! start, and one that stops answering its health pings.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use corral_e2e::gateway::{GatewaySpawn, TOKEN};
use serde_json::json;

fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

// The fake children here are shell scripts, which cannot pass the agent
// sandbox's start-up probe: their gateways run with `--sandbox off`.

#[tokio::test]
async fn a_child_that_cannot_start_is_a_clear_hello_error() {
    let dir = tempfile::tempdir().unwrap();
    let broken = script(dir.path(), "broken-agent", "echo 'no config' >&2; exit 3");
    let gateway = GatewaySpawn::default()
        .child_bin(broken)
        .arg("--sandbox")
        .arg("off")
        .spawn()
        .await;
    let (mut ws, reply) = gateway.client_with("alpha", TOKEN, None).await;
    assert_eq!(reply["success"], false, "{reply}");
    let error = reply["error"].as_str().unwrap();
    assert!(error.contains("failed to start"), "{error}");
    assert!(
        error.contains("no config"),
        "the child's own reason is included: {error}"
    );
    assert_eq!(ws.closed().await.map(|c| c.0), Some(1011));
}

#[tokio::test]
async fn a_hung_child_is_killed_and_restarted() {
    let dir = tempfile::tempdir().unwrap();
    // Answers the hello, then never answers anything (a hung agent).
    let hung = script(
        dir.path(),
        "hung-agent",
        r#"read line
echo '{"type":"response","id":"corral-hello","command":"hello","success":true,"data":{"protocol_version":1,"version":"0","provider":"fake","model":"m"}}'
while read line; do :; done"#,
    );
    let gateway = GatewaySpawn::default()
        .child_bin(hung)
        .arg("--sandbox")
        .arg("off")
        .arg("--ping-interval")
        .arg("200ms")
        .arg("--ping-timeout")
        .arg("300ms")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    let frames = ws.recv_until(|f| f["type"] == "child_started").await;
    let exited = frames.iter().find(|f| f["type"] == "child_exited").unwrap();
    assert_eq!(exited["reason"], "hung");
    assert_eq!(exited["restarting"], true);
    assert_eq!(exited["signal"], 9);
    let started = frames.last().unwrap();
    assert_eq!(started["restarts"], 1);
}

#[tokio::test]
async fn a_crash_looping_child_is_marked_failed_and_counted() {
    let dir = tempfile::tempdir().unwrap();
    // Answers the hello, then dies at once, every time.
    let crashing = script(
        dir.path(),
        "crashing-agent",
        r#"read line
echo '{"type":"response","id":"corral-hello","command":"hello","success":true,"data":{"protocol_version":1,"version":"0","provider":"fake","model":"m"}}'
exit 7"#,
    );
    let gateway = GatewaySpawn::default()
        .child_bin(crashing)
        .arg("--sandbox")
        .arg("off")
        .arg("--crash-limit")
        .arg("2")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    let frames = ws
        .recv_until(|f| f["type"] == "child_exited" && f["restarting"] == false)
        .await;
    let exits: Vec<&serde_json::Value> = frames
        .iter()
        .filter(|f| f["type"] == "child_exited")
        .collect();
    assert_eq!(exits.len(), 2, "{}", brief(&frames));
    assert_eq!(exits[0]["code"], 7);
    assert_eq!(exits[0]["restarting"], true);
    let error = ws.recv().await;
    assert_eq!(error["type"], "error");
    let admin = Some(corral_e2e::gateway::ADMIN_TOKEN);
    let (_, text) = gateway.http_get("/metrics", admin).await;
    assert!(text.contains("corral_crash_loops_total 1"), "{text}");
    assert!(
        text.contains("corral_children{state=\"failed\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("corral_child_exits_total{reason=\"crash\"} 2"),
        "{text}"
    );
    let (_, reply) = gateway.client_with("alpha", TOKEN, None).await;
    assert_eq!(reply["success"], false);
    assert!(
        reply["error"].as_str().unwrap().contains("crash loop"),
        "{reply}"
    );
}

#[tokio::test]
async fn answers_under_ids_the_gateway_never_sent_reach_no_client() {
    let dir = tempfile::tempdir().unwrap();
    // Before each real answer (to requests and health pings alike), the
    // child answers ids the gateway never gave it: its own number shapes
    // with junk, the clients' own ids, one past a u64.
    let echoing = script(
        dir.path(),
        "stray-agent",
        r#"read line
echo '{"type":"response","id":"corral-hello","command":"hello","success":true,"data":{"protocol_version":1,"version":"0","provider":"fake","model":"m"}}'
while read line; do
  id=$(printf '%s' "$line" | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  for stray in corral-01 corral-ping-x corral- corral-ask-1 corral-state-1 corral-abort-x corral-18446744073709551616 mine corral-ping-1 1; do
    echo "{\"type\":\"response\",\"id\":\"$stray\",\"command\":\"get_state\",\"success\":true,\"data\":{}}"
  done
  echo "{\"type\":\"response\",\"id\":\"$id\",\"command\":\"get_state\",\"success\":true,\"data\":{\"for\":\"$id\"}}"
done"#,
    );
    let gateway = GatewaySpawn::default()
        .child_bin(echoing)
        .arg("--sandbox")
        .arg("off")
        .arg("--ping-interval")
        .arg("100ms")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    let pid = gateway.child_pids();
    // Ids of the client's own that look like the gateway's.
    for id in [
        json!("mine"),
        json!("corral-ping-1"),
        json!("corral-1"),
        json!(1),
    ] {
        ws.send(json!({"id": id, "type": "get_state"})).await;
        let frames = ws.recv_until(|f| f["type"] == "response").await;
        let answer = frames.last().unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        let gateway_id = answer["data"]["for"].as_str().unwrap_or_default();
        assert!(
            gateway_id.starts_with("corral-") && !gateway_id.contains("ping"),
            "the first answer is the child's real one: {answer}"
        );
        assert!(
            frames.iter().all(|f| f["type"] != "child_exited"),
            "{frames:?}"
        );
    }
    assert_eq!(gateway.child_pids(), pid, "the same child throughout");
}
