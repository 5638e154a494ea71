//! The zut permission extension on the real agent: with `--permission-mode
//! ask` a bash call waits for `permission_reply`, every request ends with
//! `permission_resolved`, `set_permission_mode` switches modes at run time,
//! and `read-only` refuses with a tool error the model reads.

#![allow(clippy::unwrap_used)]

use corral_e2e::harness::{AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

async fn ask_agent(mock: &MockLlm) -> AgentProc {
    AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--permission-mode", "ask"])
        .spawn()
        .await
}

/// A bash call, then an answer quoting the tool's result.
fn bash_then_echo(mock: &MockLlm, command: &str) {
    mock.push(Turn::tool_call("bash", json!({"command": command})));
    mock.push(Turn::EchoToolResult {
        prefix: "saw: ".into(),
    });
}

fn of_type<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames.iter().filter(|f| f["type"] == kind).collect()
}

#[tokio::test]
async fn ask_waits_for_the_reply_and_tells_every_client_the_outcome() {
    let mock = MockLlm::start().await;
    let mut agent = ask_agent(&mock).await;
    bash_then_echo(&mock, "echo yes > made.txt");
    agent
        .send(json!({"id": "1", "type": "prompt", "message": "make it"}))
        .await;
    let before = agent
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    assert!(of_type(&before, "tool_execution_started").is_empty());
    let request = before.last().unwrap().clone();
    let call_id = of_type(&before, "tool_call")[0]["id"].clone();
    assert_eq!(request["request_id"], "perm-1");
    assert_eq!(request["id"], call_id);
    assert_eq!(request["name"], "bash");
    assert_eq!(request["args"], json!({"command": "echo yes > made.txt"}));
    assert_eq!(request["kind"], "execute");
    assert_eq!(
        request["options"],
        json!(["allow_once", "allow_always", "reject_once", "reject_always"])
    );
    assert!(!agent.cwd.join("made.txt").exists(), "nothing ran yet");

    let wrong = agent
        .request(json!({"id": "2", "type": "permission_reply", "request_id": "perm-9", "option": "allow_once"}))
        .await;
    assert_eq!(wrong["success"], false, "{wrong}");
    let bad = agent
        .request(json!({"id": "3", "type": "permission_reply", "request_id": "perm-1", "option": "sure"}))
        .await;
    assert_eq!(bad["success"], false, "{bad}");

    agent
        .send(json!({"id": "4", "type": "permission_reply", "request_id": "perm-1", "option": "allow_once"}))
        .await;
    let after = agent.recv_until(|f| f["type"] == "done").await;
    let reply = after
        .iter()
        .find(|f| f["type"] == "response" && f["id"] == "4")
        .unwrap();
    assert_eq!(reply["success"], true);
    let resolved = of_type(&after, "permission_resolved");
    assert_eq!(
        resolved[0],
        &json!({"type": "permission_resolved", "request_id": "perm-1", "id": call_id, "outcome": "allow_once"})
    );
    let result = of_type(&after, "tool_result")[0];
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        std::fs::read_to_string(agent.cwd.join("made.txt")).unwrap(),
        "yes\n"
    );

    // Rejected always: this call and the next bash call are refused.
    bash_then_echo(&mock, "echo no > never.txt");
    bash_then_echo(&mock, "echo no > never2.txt");
    agent
        .send(json!({"id": "5", "type": "prompt", "message": "again"}))
        .await;
    let request = agent
        .recv_until(|f| f["type"] == "permission_request")
        .await
        .pop()
        .unwrap();
    agent
        .send(json!({"id": "6", "type": "permission_reply", "request_id": request["request_id"], "option": "reject_always"}))
        .await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    let text: String = of_type(&frames, "text_delta")
        .iter()
        .filter_map(|f| f["delta"].as_str())
        .collect();
    assert!(
        text.contains("rejected"),
        "the model saw the refusal: {text}"
    );
    agent
        .send(json!({"id": "7", "type": "prompt", "message": "and again"}))
        .await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    assert!(
        of_type(&frames, "permission_request").is_empty(),
        "remembered"
    );
    let result = of_type(&frames, "tool_result")[0];
    assert_eq!(result["is_error"], true);
    assert!(!agent.cwd.join("never.txt").exists() && !agent.cwd.join("never2.txt").exists());
}

#[tokio::test]
async fn modes_change_at_run_time_and_read_only_refuses() {
    let mock = MockLlm::start().await;
    let mut agent = ask_agent(&mock).await;
    let state = agent.request(json!({"id": "1", "type": "get_state"})).await;
    assert_eq!(state["data"]["permission_mode"], "ask");
    let set = agent
        .request(json!({"id": "2", "type": "set_permission_mode", "mode": "read-only"}))
        .await;
    assert_eq!(set["data"], json!({"permission_mode": "read-only"}));
    let bad = agent
        .request(json!({"id": "3", "type": "set_permission_mode", "mode": "yolo"}))
        .await;
    assert_eq!(bad["success"], false);

    bash_then_echo(&mock, "touch nope.txt");
    agent
        .send(json!({"id": "4", "type": "prompt", "message": "touch it"}))
        .await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    assert!(of_type(&frames, "permission_request").is_empty());
    assert!(of_type(&frames, "tool_execution_started").is_empty());
    let result = of_type(&frames, "tool_result")[0];
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("read-only"),
        "{result}"
    );
    assert!(!agent.cwd.join("nope.txt").exists());

    // A request waiting when the mode switches to auto is allowed.
    agent
        .request(json!({"id": "5", "type": "set_permission_mode", "mode": "ask"}))
        .await;
    bash_then_echo(&mock, "touch yes.txt");
    agent
        .send(json!({"id": "6", "type": "prompt", "message": "touch another"}))
        .await;
    agent
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    agent
        .send(json!({"id": "7", "type": "set_permission_mode", "mode": "auto"}))
        .await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    assert_eq!(
        of_type(&frames, "permission_resolved")[0]["outcome"],
        "allow_once"
    );
    assert!(agent.cwd.join("yes.txt").exists());
}

#[tokio::test]
async fn abort_while_waiting_ends_the_request_cancelled() {
    let mock = MockLlm::start().await;
    let mut agent = ask_agent(&mock).await;
    bash_then_echo(&mock, "touch late.txt");
    agent
        .send(json!({"id": "1", "type": "prompt", "message": "go"}))
        .await;
    agent
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    agent.send(json!({"id": "2", "type": "abort"})).await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    assert_eq!(
        of_type(&frames, "permission_resolved")[0]["outcome"],
        "cancelled"
    );
    let ends: Vec<&Value> = of_type(&frames, "turn_end");
    assert_eq!(ends.last().unwrap()["stop"], "aborted");
    let late = agent
        .request(json!({"id": "3", "type": "permission_reply", "request_id": "perm-1", "option": "allow_once"}))
        .await;
    assert_eq!(
        late["success"], false,
        "a late answer finds nothing waiting"
    );
    assert!(!agent.cwd.join("late.txt").exists());
}
