//! End-to-end: MCP in `corral-agent rpc --dialect acp`, driven over raw
//! JSON-RPC: `initialize` advertises `mcpCapabilities`, an editor's
//! `mcpServers` are used as given (an SSE one refused with a message), a
//! prompt whose model calls an MCP tool (of the editor's server and of one
//! from `--mcp-config`) gets a `tool_call` naming the tool and server with
//! the arguments, and the result reaches the model; `"default": false`
//! servers start once `_corral/mcp/select` names them, and
//! `_corral/mcp_status` notifications follow every change.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use corral_e2e::harness::{AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

use crate::agent_mcp::{config, everything};

async fn acp_agent(mock: &MockLlm, path: &Path) -> AgentProc {
    AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--dialect", "acp"])
        .arg("--mcp-config")
        .arg(path.display().to_string())
        .spawn()
        .await
}

/// Sends a request; returns the frames up to and including its answer.
async fn request(agent: &mut AgentProc, id: u64, method: &str, params: Value) -> Vec<Value> {
    agent
        .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    agent.recv_until(|f| f["id"] == id).await
}

fn answer(frames: &[Value]) -> &Value {
    frames.last().unwrap()
}

async fn initialize(agent: &mut AgentProc) -> Value {
    let frames = request(
        agent,
        1,
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {}}),
    )
    .await;
    answer(&frames).clone()
}

/// The next `_corral/mcp_status` whose servers satisfy `settled`.
async fn status_until(agent: &mut AgentProc, settled: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    loop {
        let frame = agent.recv().await;
        if frame["method"] == "_corral/mcp_status" {
            let servers = frame["params"]["servers"].as_array().unwrap().clone();
            if settled(&servers) {
                return servers;
            }
        }
    }
}

fn server<'a>(servers: &'a [Value], name: &str) -> &'a Value {
    servers
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no server {name} in {servers:?}"))
}

/// A prompt whose model calls `tool` with `args`, then echoes the result;
/// returns the `session/update`s and the answer.
async fn prompt_calling(
    agent: &mut AgentProc,
    mock: &MockLlm,
    id: u64,
    session: &str,
    tool: &str,
    args: Value,
) -> Vec<Value> {
    mock.push(Turn::tool_call(tool, args));
    mock.push(Turn::EchoToolResult {
        prefix: "model saw: ".into(),
    });
    request(
        agent,
        id,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "use the tool"}]}),
    )
    .await
}

fn updates<'a>(frames: &'a [Value], kind: &str) -> Vec<&'a Value> {
    frames
        .iter()
        .filter(|f| {
            f["method"] == "session/update" && f["params"]["update"]["sessionUpdate"] == kind
        })
        .map(|f| &f["params"]["update"])
        .collect()
}

fn message_text(frames: &[Value]) -> String {
    updates(frames, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect()
}

#[tokio::test]
async fn an_editors_server_and_a_configured_one_serve_tools_in_acp() {
    let (_dir, path) = config(json!({"everything": everything()}));
    let mock = MockLlm::start().await;
    let mut agent = acp_agent(&mock, &path).await;
    let init = initialize(&mut agent).await;
    assert_eq!(
        init["result"]["agentCapabilities"]["mcpCapabilities"],
        json!({"http": true, "sse": false}),
        "{init}"
    );
    let started = status_until(&mut agent, |s| !s.is_empty()).await;
    assert_eq!(server(&started, "everything")["state"], "connected");

    let stdio = everything();
    let editor_server = json!({
        "name": "editor tools",
        "command": stdio["command"],
        "args": stdio["args"],
        "env": [{"name": "EDITOR_SET", "value": "1"}],
    });
    let old =
        json!({"type": "sse", "name": "legacy", "url": "http://127.0.0.1:9/sse", "headers": []});
    let cwd = agent.cwd.clone();
    let frames = request(
        &mut agent,
        2,
        "session/new",
        json!({"cwd": cwd, "mcpServers": [editor_server, old]}),
    )
    .await;
    let session = answer(&frames)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();
    let notice = agent
        .recv_until(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .await
        .pop()
        .unwrap();
    let text = notice["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(
        text.contains("`legacy`") && text.contains("SSE"),
        "{notice}"
    );
    let both = status_until(&mut agent, |s| {
        s.len() == 2 && s.iter().all(|s| s["state"] == "connected")
    })
    .await;
    assert!(server(&both, "editor_tools")["tools"].as_u64().unwrap() > 0);

    let frames = prompt_calling(
        &mut agent,
        &mock,
        3,
        &session,
        "mcp__editor_tools__echo",
        json!({"message": "from the editor"}),
    )
    .await;
    let call = updates(&frames, "tool_call")[0];
    assert_eq!(call["title"], "echo (MCP server `editor_tools`)", "{call}");
    assert_eq!(call["kind"], "other", "{call}");
    assert_eq!(call["rawInput"], json!({"message": "from the editor"}));
    let done = updates(&frames, "tool_call_update")
        .into_iter()
        .find(|u| u["status"] == "completed")
        .unwrap_or_else(|| panic!("no completed call in {frames:?}"));
    assert_eq!(done["toolCallId"], call["toolCallId"]);
    assert!(
        message_text(&frames).contains("model saw: Echo: from the editor"),
        "{frames:?}"
    );
    assert_eq!(answer(&frames)["result"]["stopReason"], "end_turn");

    let frames = prompt_calling(
        &mut agent,
        &mock,
        4,
        &session,
        "mcp__everything__echo",
        json!({"message": "from the config"}),
    )
    .await;
    assert_eq!(
        updates(&frames, "tool_call")[0]["title"],
        "echo (MCP server `everything`)"
    );
    assert!(
        message_text(&frames).contains("model saw: Echo: from the config"),
        "{frames:?}"
    );
    let offered = &mock.requests()[0].body["tools"];
    let names: Vec<&str> = offered
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert!(
        names.contains(&"mcp__everything__echo") && names.contains(&"mcp__editor_tools__echo"),
        "{names:?}"
    );
}

#[tokio::test]
async fn a_server_not_started_by_default_starts_once_selected() {
    let mut entry = everything();
    entry["default"] = json!(false);
    let (_dir, path) = config(json!({"later": entry}));
    let mock = MockLlm::start().await;
    let mut agent = acp_agent(&mock, &path).await;
    initialize(&mut agent).await;
    let first = status_until(&mut agent, |s| !s.is_empty()).await;
    assert_eq!(
        first,
        vec![json!({"name": "later", "state": "disabled", "tools": 0})]
    );
    let cwd = agent.cwd.clone();
    let frames = request(
        &mut agent,
        2,
        "session/new",
        json!({"cwd": cwd, "mcpServers": []}),
    )
    .await;
    let session = answer(&frames)["result"]["sessionId"]
        .as_str()
        .unwrap()
        .to_string();

    // A disabled server's tools are not offered.
    mock.push(Turn::text("nothing to call"));
    request(
        &mut agent,
        3,
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}]}),
    )
    .await;
    let offered = mock.requests()[0].body["tools"].to_string();
    assert!(!offered.contains("mcp__later__"), "{offered}");

    let frames = request(
        &mut agent,
        4,
        "_corral/mcp/select",
        json!({"servers": ["later", "nope"]}),
    )
    .await;
    let error = &answer(&frames)["error"];
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"].as_str().unwrap().contains("nope"),
        "{error}"
    );

    let frames = request(
        &mut agent,
        5,
        "_corral/mcp/select",
        json!({"servers": ["later"]}),
    )
    .await;
    let selected = &answer(&frames)["result"]["servers"];
    assert_eq!(selected[0]["name"], "later", "{selected}");
    assert_ne!(selected[0]["state"], "disabled", "{selected}");
    let connected = status_until(&mut agent, |s| s[0]["state"] == "connected").await;
    assert!(connected[0]["tools"].as_u64().unwrap() > 0, "{connected:?}");
    // Selecting it again changes nothing.
    let frames = request(
        &mut agent,
        6,
        "_corral/mcp/select",
        json!({"servers": ["later"]}),
    )
    .await;
    assert_eq!(
        answer(&frames)["result"]["servers"][0]["state"],
        "connected"
    );

    let frames = prompt_calling(
        &mut agent,
        &mock,
        7,
        &session,
        "mcp__later__echo",
        json!({"message": "selected"}),
    )
    .await;
    assert!(
        message_text(&frames).contains("model saw: Echo: selected"),
        "{frames:?}"
    );
}
