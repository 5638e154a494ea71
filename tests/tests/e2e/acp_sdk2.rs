//! The official ACP SDK 2.x client app (Node, `tests/acp_client/sdk2.mjs`,
//! the 2.x release pinned beside 1.x) driving corral-agent directly:
//! initialize, session/list, session/new, a prompt, a bash call the
//! client allows when asked, a model change, a cancel during a slow
//! reply, session/close, session/resume, and a second process loading the
//! session with its history replayed; and the same core flow through
//! `corral serve` + `corral attach --dialect acp`.
//!
//! Needs Node 20+ and npm, like `acp_agent.rs`.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::Duration;

use corral_e2e::acp_client;
use corral_e2e::gateway::{GatewaySpawn, TOKEN};
use corral_e2e::harness::workspace_bin;
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

/// The model's side: a reply, an allowed bash call and its reply, a
/// slow reply the client cancels, and (full flow) a reply after resume.
fn script(mock: &MockLlm, full: bool) {
    mock.push(Turn::text("Hi there"));
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": "echo allowed > out.txt"}),
    ));
    mock.push(Turn::text("Ran it."));
    mock.push(Turn::Slow {
        chunks: vec!["once upon a time ".into(); 100],
        delay: Duration::from_millis(100),
    });
    if full {
        mock.push(Turn::text("Still here."));
    }
}

fn of_kind<'a>(updates: &'a Value, kind: &str) -> Vec<&'a Value> {
    updates
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

fn run_script(
    node: &Path,
    program: &Path,
    args: Value,
    project: &Path,
    full: bool,
) -> tokio::process::Command {
    let mut client = acp_client::script(node, "sdk2.mjs");
    client
        .env("ACP_AGENT", program)
        .env("ACP_AGENT_ARGS", args.to_string())
        .env("ACP_CWD", project)
        .env("ACP_STEPS", if full { "full" } else { "core" })
        .env("CORRAL_TOKEN", TOKEN)
        .env("ANTHROPIC_API_KEY", "k")
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("ZUTCORE_RPC_TOKEN");
    client
}

/// What both flows share: the prompt, the permission, the cancel and
/// the replay on load (with the user's messages when `users_replayed`).
fn check_core(report: &Value, project: &Path, users_replayed: bool) {
    let session_id = report["newSession"]["sessionId"].as_str().unwrap();
    assert_eq!(report["hello"]["stopReason"], "end_turn");
    assert_eq!(report["hello"]["text"], "Hi there");
    assert_eq!(report["allowed"]["text"], "Ran it.");
    assert_eq!(
        std::fs::read_to_string(project.join("out.txt")).unwrap(),
        "allowed\n"
    );
    let asked = report["permissions"].as_array().unwrap();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["toolCall"]["kind"], "execute");
    assert_eq!(asked[0]["sessionId"], session_id);
    assert_eq!(report["cancelled"]["stopReason"], "cancelled");
    assert_eq!(report["firstExit"], 0);

    let replayed = &report["replayed"];
    assert!(replayed
        .as_array()
        .unwrap()
        .iter()
        .all(|u| u["sessionId"] == session_id));
    let users: Vec<&Value> = of_kind(replayed, "user_message_chunk")
        .iter()
        .map(|u| &u["content"]["text"])
        .collect();
    if users_replayed {
        assert!(
            users.starts_with(&[
                &json!("hello"),
                &json!("run the allowed command"),
                &json!("tell me a long story")
            ]),
            "{users:?}"
        );
    }
    let text: String = of_kind(replayed, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        text.starts_with("Hi thereRan it.once upon a time "),
        "{text}"
    );
    assert_eq!(of_kind(replayed, "tool_call").len(), 1);
    assert_eq!(report["secondExit"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk2_client_drives_the_agent_directly() {
    let node = acp_client::sdk_ready();
    let mock = MockLlm::start().await;
    script(&mock, true);
    let root = tempfile::tempdir().unwrap();
    let project = root.path().join("project");
    let home = root.path().join("home");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    let args = json!([
        "rpc",
        "--dialect",
        "acp",
        "--permission-mode",
        "ask",
        "--provider",
        "anthropic",
        "--base-url",
        mock.anthropic_base_url(),
        "--session",
        root.path().join("session.jsonl"),
        "--cwd",
        project,
        "--no-context-files",
    ]);
    let mut client = run_script(&node, &workspace_bin("corral-agent"), args, &project, true);
    client.env("ZUT_HOME", &home);
    let report = acp_client::report(client).await;

    let init = &report["initialize"];
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        init["agentCapabilities"]["sessionCapabilities"],
        json!({"list": {}, "resume": {}, "close": {}})
    );
    assert_eq!(report["listBefore"]["sessions"], json!([]));
    let session_id = report["newSession"]["sessionId"].as_str().unwrap();
    let options = report["newSession"]["configOptions"].as_array().unwrap();
    let ids: Vec<&Value> = options.iter().map(|o| &o["id"]).collect();
    assert_eq!(ids, ["mode", "model", "reasoning"]);
    check_core(&report, &project, true);

    let names: Vec<&Value> = report["commands"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect();
    assert_eq!(names, ["compact", "clear"]);
    let usage = report["usage"].as_array().unwrap();
    assert!(usage.len() >= 3, "one per model call: {usage:?}");
    assert!(usage.iter().all(|u| u["cost"]["currency"] == "USD"));
    let model = report["setModel"]["configOptions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == "model")
        .unwrap();
    assert_eq!(model["currentValue"], "claude-haiku-4-5");
    assert_eq!(
        mock.requests().last().unwrap().body["model"],
        "claude-haiku-4-5",
        "the model after the change"
    );

    let listed = report["listAfter"]["sessions"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0]["sessionId"], session_id);
    assert_eq!(listed[0]["title"], "hello");
    assert_eq!(report["close"], json!({}));
    assert_eq!(
        report["closedPrompt"]["code"], -32002,
        "{}",
        report["closedPrompt"]
    );
    assert_eq!(report["resume"]["modes"]["currentModeId"], "ask");
    assert_eq!(report["resumeReplayed"], 0, "resume replays nothing");
    assert_eq!(report["afterResume"]["text"], "Still here.");
    let users = of_kind(&report["replayed"], "user_message_chunk");
    assert_eq!(users.last().unwrap()["content"]["text"], "still there?");
    assert_eq!(mock.remaining(), 0, "every scripted turn was used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk2_client_works_through_corral_attach() {
    let node = acp_client::sdk_ready();
    let mock = MockLlm::start().await;
    script(&mock, false);
    let root = tempfile::tempdir().unwrap();
    let projects = root.path().join("projects");
    let project = projects.join("alpha");
    std::fs::create_dir_all(&project).unwrap();
    let gw = GatewaySpawn::default()
        .projects_root(projects)
        .mock(&mock.anthropic_base_url())
        .child_arg("--permission-mode")
        .child_arg("ask")
        .arg("--dialect")
        .arg("acp")
        .spawn()
        .await;
    let args = json!(["attach", "--dialect", "acp", gw.url("alpha")]);
    let client = run_script(&node, &workspace_bin("corral"), args, &project, false);
    let report = acp_client::report(client).await;

    assert_eq!(report["initialize"]["protocolVersion"], 1);
    assert_eq!(report["initialize"]["_meta"]["corral"]["project"], "alpha");
    // The gateway's load replays the updates it holds, which have no
    // user messages (the agent sends none while it runs).
    check_core(&report, &project, false);
}
