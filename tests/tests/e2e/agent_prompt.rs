//! End-to-end: what the agent sends to the model — system prompt policy,
//! context files, images — and the plan tool's event, checked on the
//! requests the mock LLM recorded.

#![allow(clippy::unwrap_used)]

use corral_e2e::harness::is_done;
use corral_e2e::harness::{AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::json;

async fn anthropic(mock: &MockLlm, extra: &[&str]) -> AgentProc {
    let mut spawn = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &[]);
    for arg in extra {
        spawn = spawn.arg(*arg);
    }
    spawn.spawn().await
}

/// The system prompt text of the `n`th recorded Anthropic request.
fn system_text(mock: &MockLlm, n: usize) -> String {
    let body = &mock.requests()[n].body;
    body["system"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

#[tokio::test]
async fn system_prompt_flags_addendum_and_context_files() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("one"));
    let cwd_holder = tempfile::tempdir().unwrap();
    std::fs::write(
        cwd_holder.path().join("AGENTS.md"),
        "PROJECT-RULES: use tabs",
    )
    .unwrap();
    let mut agent = AgentSpawn::rpc(&[
        "--provider",
        "anthropic",
        "--append-system-prompt",
        "APPENDED-TEXT",
    ])
    .env("ANTHROPIC_API_KEY", "k")
    .arg("--base-url")
    .arg(mock.anthropic_base_url())
    .cwd(cwd_holder.path())
    .spawn()
    .await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    agent.recv_until(is_done).await;
    let system = system_text(&mock, 0);
    assert!(system.contains("You are corral-agent"), "{system}");
    assert!(
        system.contains("Coding guidance"),
        "ponytail is on by default: {system}"
    );
    assert!(system.contains("PROJECT-RULES: use tabs"), "{system}");
    assert!(system.trim_end().ends_with("APPENDED-TEXT"), "{system}");

    // --system-prompt replaces the identity; --no-context-files drops AGENTS.md.
    mock.push(Turn::text("two"));
    let mut agent = AgentSpawn::rpc(&[
        "--provider",
        "anthropic",
        "--system-prompt",
        "CUSTOM-IDENTITY",
    ])
    .env("ANTHROPIC_API_KEY", "k")
    .arg("--base-url")
    .arg(mock.anthropic_base_url())
    .arg("--no-context-files")
    .cwd(cwd_holder.path())
    .spawn()
    .await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    agent.recv_until(is_done).await;
    let system = system_text(&mock, 1);
    assert!(system.starts_with("CUSTOM-IDENTITY"), "{system}");
    assert!(!system.contains("You are corral-agent"), "{system}");
    assert!(
        system.contains("Coding guidance"),
        "addenda stay with --system-prompt"
    );
    assert!(!system.contains("PROJECT-RULES"), "{system}");
}

#[tokio::test]
async fn ponytail_can_be_turned_off_in_config_json() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("ok"));
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.json"),
        r#"{"ponytail_enabled": false}"#,
    )
    .unwrap();
    let mut agent = AgentSpawn::rpc(&["--provider", "anthropic"])
        .env("ANTHROPIC_API_KEY", "k")
        .env("ZUT_HOME", home.path().to_str().unwrap())
        .arg("--base-url")
        .arg(mock.anthropic_base_url())
        .spawn()
        .await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    agent.recv_until(is_done).await;
    let system = system_text(&mock, 0);
    assert!(system.contains("You are corral-agent"));
    assert!(!system.contains("Coding guidance"), "{system}");
}

#[tokio::test]
async fn prompt_images_reach_the_model_and_show_as_byte_counts() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("a red dot"));
    let mut agent = anthropic(&mock, &[]).await;
    // 12 bytes of "image" data, base64.
    let data = "iVBORw0KGgoAAAAN";
    agent
        .send(json!({"id":"1","type":"prompt","message":"what is this?",
                     "images":[{"mime_type":"image/png","data":data}]}))
        .await;
    let frames = agent.recv_until(is_done).await;
    let user = frames.iter().find(|f| f["type"] == "user_message").unwrap();
    assert_eq!(
        user["content"][1],
        json!({"type":"image","mime_type":"image/png","bytes":12})
    );
    let sent = mock.requests()[0].body.to_string();
    assert!(
        sent.contains(data),
        "the image data went to the model: {sent}"
    );

    let bad = agent
        .request(json!({"id":"2","type":"prompt","message":"x","images":[{"mime_type":"image/png","data":"%%%"}]}))
        .await;
    assert_eq!(bad["success"], false);
    assert!(bad["error"].as_str().unwrap().contains("base64"));
}

#[tokio::test]
async fn plan_tool_emits_plan_update() {
    let mock = MockLlm::start().await;
    mock.push(Turn::tool_call(
        "plan",
        json!({"explanation":"two steps","plan":[{"step":"read","status":"completed"},{"step":"fix","status":"in_progress"}]}),
    ));
    mock.push(Turn::text("planned"));
    let mut agent = anthropic(&mock, &[]).await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"plan it"}))
        .await;
    let frames = agent.recv_until(is_done).await;
    let update = frames.iter().find(|f| f["type"] == "plan_update").unwrap();
    let call = frames.iter().find(|f| f["type"] == "tool_call").unwrap();
    assert_eq!(update["id"], call["id"]);
    assert_eq!(update["explanation"], "two steps");
    assert_eq!(
        update["plan"][1],
        json!({"step":"fix","status":"in_progress"})
    );
}
