//! `corral-agent rpc --dialect acp` driven by the official ACP SDK's
//! `ClientSideConnection` (Node, `tests/acp_client`): initialize, a new
//! session, a prompt answered by the mock LLM, an edit that reads and
//! writes the editor's buffer (`fs/*`), a bash call in `ask` mode
//! that the client allows and one it rejects, a cancel during a slow
//! reply, and the session loaded by a second process with its history
//! replayed.
//!
//! Needs Node 20+ and npm (Debian: `nodejs npm`); `npm ci` runs here when
//! `tests/acp_client/node_modules` is missing. Without node the test fails
//! when `CI` is set and is skipped with a note otherwise.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use corral_e2e::acp_client;
use corral_e2e::harness::workspace_bin;
use corral_e2e::mock_llm::MockLlm;
use serde_json::{json, Value};

async fn run_client(mock: &MockLlm, root: &Path) -> Value {
    let project = root.join("project");
    let home = root.join("home");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    std::fs::write(project.join("notes.txt"), "the disk text\n").unwrap();
    let journal = root.join("session.jsonl");
    let base_url = mock.anthropic_base_url();
    let args = json!([
        "rpc",
        "--dialect",
        "acp",
        "--permission-mode",
        "ask",
        "--provider",
        "anthropic",
        "--base-url",
        base_url,
        "--session",
        journal,
        "--cwd",
        project,
        "--no-context-files",
    ]);
    let mut client = acp_client::script(&acp_client::sdk_ready(), "client.mjs");
    client
        .env("ACP_AGENT", workspace_bin("corral-agent"))
        .env("ACP_AGENT_ARGS", args.to_string())
        .env("ACP_CWD", &project)
        .env("ANTHROPIC_API_KEY", "k")
        .env("ZUT_HOME", &home)
        .env_remove("ANTHROPIC_BASE_URL")
        .env_remove("ZUTCORE_RPC_TOKEN");
    acp_client::report(client).await
}

fn kinds(updates: &Value) -> Vec<&str> {
    updates
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|u| u["sessionUpdate"].as_str())
        .collect()
}

/// The updates of one kind.
fn of_kind<'a>(updates: &'a Value, kind: &str) -> Vec<&'a Value> {
    updates
        .as_array()
        .unwrap()
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_prompts_approves_cancels_and_loads() {
    let mock = MockLlm::start().await;
    acp_client::script_conversation(&mock, "buffer");
    let root = tempfile::tempdir().unwrap();
    let report = run_client(&mock, root.path()).await;
    let project = root.path().join("project");

    let init = &report["initialize"];
    assert_eq!(
        init["protocolVersion"], 1,
        "a higher version is answered with 1"
    );
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["image"],
        true
    );
    assert_eq!(
        init["agentCapabilities"]["promptCapabilities"]["embeddedContext"],
        true
    );
    assert_eq!(init["authMethods"], json!([]));

    let session = &report["newSession"];
    let session_id = session["sessionId"].as_str().unwrap();
    assert!(session_id.starts_with("corral-"), "{session_id}");
    assert_eq!(session["modes"]["currentModeId"], "ask");
    let modes: Vec<&Value> = session["modes"]["availableModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["id"])
        .collect();
    assert_eq!(modes, ["auto", "ask", "read-only"]);

    assert_eq!(report["hello"]["stopReason"], "end_turn");
    assert_eq!(report["hello"]["text"], "Hi there");

    // The edit read the editor's buffer and wrote through the editor.
    let edited = &report["edited"];
    assert_eq!(edited["stopReason"], "end_turn");
    let notes = project.join("notes.txt").canonicalize().unwrap();
    let notes = notes.to_str().unwrap();
    assert_eq!(report["reads"][0]["path"], notes);
    assert_eq!(report["reads"][0]["sessionId"], session_id);
    assert_eq!(report["writes"][0]["path"], notes);
    assert_eq!(report["writes"][0]["content"], "the edited text\n");
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).unwrap(),
        "the disk text\n",
        "the disk is the editor's business"
    );
    let edit = of_kind(&edited["updates"], "tool_call")[0];
    assert_eq!(edit["kind"], "edit");
    assert_eq!(
        edit["content"][0],
        json!({"type": "diff", "path": notes, "oldText": "buffer", "newText": "edited"})
    );
    assert_eq!(edit["locations"][0]["path"], notes);

    let allowed = &report["allowed"];
    assert_eq!(allowed["stopReason"], "end_turn");
    assert_eq!(allowed["text"], "Ran it.");
    let call = of_kind(&allowed["updates"], "tool_call")[0];
    assert_eq!(call["kind"], "execute");
    assert_eq!(call["status"], "pending");
    assert_eq!(call["title"], "Run `echo allowed > out.txt`");
    let statuses: Vec<&Value> = of_kind(&allowed["updates"], "tool_call_update")
        .iter()
        .filter_map(|u| u.get("status"))
        .collect();
    assert_eq!(statuses, ["in_progress", "completed"]);
    assert_eq!(
        std::fs::read_to_string(project.join("out.txt")).unwrap(),
        "allowed\n"
    );

    let rejected = &report["rejected"];
    assert_eq!(rejected["stopReason"], "end_turn");
    let failed = of_kind(&rejected["updates"], "tool_call_update");
    assert_eq!(failed.last().unwrap()["status"], "failed");
    assert!(
        !project.join("no.txt").exists(),
        "the rejected command never ran"
    );
    let text = rejected["text"].as_str().unwrap();
    assert!(
        text.starts_with("saw: ") && text.contains("rejected"),
        "the model saw the refusal: {text}"
    );

    let permissions = report["permissions"].as_array().unwrap();
    let kinds_asked: Vec<&Value> = permissions.iter().map(|p| &p["toolCall"]["kind"]).collect();
    assert_eq!(kinds_asked, ["edit", "execute", "execute"]);
    for request in permissions {
        assert_eq!(request["sessionId"], session_id);
        let options: Vec<&Value> = request["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| &o["kind"])
            .collect();
        assert_eq!(
            options,
            ["allow_once", "allow_always", "reject_once", "reject_always"]
        );
    }

    assert_eq!(report["cancelled"]["stopReason"], "cancelled");
    assert_eq!(report["firstExit"], 0);

    // The second process replays the journal.
    assert_eq!(report["load"]["modes"]["currentModeId"], "ask");
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
    assert_eq!(
        users,
        [
            "hello",
            "edit the notes",
            "run the allowed command",
            "run the other command",
            "tell me a long story"
        ]
    );
    let agent_text: String = of_kind(replayed, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        agent_text.starts_with("Hi thereEdited.Ran it.saw: ")
            && agent_text.ends_with("once upon a time "),
        "{agent_text}"
    );
    assert_eq!(
        of_kind(replayed, "tool_call").len(),
        3,
        "{:?}",
        kinds(replayed)
    );
    let results: Vec<&Value> = of_kind(replayed, "tool_call_update")
        .iter()
        .map(|u| &u["status"])
        .collect();
    assert_eq!(results, ["completed", "completed", "failed"]);
    assert_eq!(report["secondExit"], 0);
    assert_eq!(mock.remaining(), 0, "every scripted turn was used");
}
