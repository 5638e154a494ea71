//! The gateway decides which MCP servers a hosted project may use
//! (`corral serve --mcp-servers FILE --client-mcp select`), with the real
//! agent, the pinned reference servers of `tests/mcp_servers` and the mock
//! LLM asking for their tools: servers marked default reach every
//! project's agent; an ACP editor's `mcpServers` that match an operator
//! server by its definition are selected for the project's session (its
//! tools usable, its state in the admin API), one that matches none is
//! refused and the editor told; the servers' secrets are never on a
//! command line, in the admin API or in the gateway's log; the metrics
//! count MCP calls by operator server.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use serde_json::{json, Value};
use tempfile::TempDir;

use crate::agent_mcp::{everything, servers_ready};
use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};

/// A secret in the operator's server environment, which no one but the
/// server may see.
const SECRET: &str = "mcp-env-secret-5f3a9c";

/// The operator's `{"mcpServers": servers}` in a directory of its own
/// (which the sandbox hides from agents).
fn operator_file(servers: Value) -> (TempDir, PathBuf) {
    let dir = corral_e2e::dir_outside_tmp();
    let path = dir.path().join("servers.json");
    std::fs::write(&path, json!({ "mcpServers": servers }).to_string()).unwrap();
    (dir, path)
}

/// `everything` over stdio with the secret in its environment, started
/// by default or only once selected.
fn everything_server(default: bool) -> Value {
    let mut server = everything();
    server["env"] = json!({ "EVERYTHING_TOKEN": SECRET });
    if !default {
        server["default"] = json!(false);
    }
    server
}

async fn gateway(mock: &MockLlm, servers: &Path, dialect: &str) -> Gateway {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--dialect")
        .arg(dialect)
        .arg("--mcp-servers")
        .arg(servers.display().to_string())
        .capture_log()
        .spawn()
        .await
}

/// A zut prompt on `project` whose model calls `everything`'s echo and
/// then says what it got.
async fn zut_echo(gw: &Gateway, mock: &MockLlm, project: &str) -> String {
    let mut ws = gw.client(project).await;
    mock.push(Turn::tool_call(
        "mcp__everything__echo",
        json!({"message": format!("hello {project}")}),
    ));
    mock.push(Turn::EchoToolResult {
        prefix: "model saw: ".into(),
    });
    ws.send(json!({"id": "p", "type": "prompt", "message": "use the tool"}))
        .await;
    let frames = ws.recv_until(|f| f["type"] == "done").await;
    let started = frames
        .iter()
        .find(|f| f["type"] == "tool_execution_started")
        .expect("the tool ran");
    assert_eq!(started["name"], "mcp__everything__echo", "{started}");
    corral_e2e::harness::text_of(&frames)
}

async fn admin_json(gw: &Gateway, path: &str) -> Value {
    let (status, body) = gw.http_get(path, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// Every process's command line, read from `/proc`.
fn command_lines() -> Vec<String> {
    let mut lines = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) {
            lines.push(String::from_utf8_lossy(&bytes).replace('\0', " "));
        }
    }
    lines
}

#[tokio::test]
async fn default_servers_reach_every_project_and_their_secrets_stay_put() {
    servers_ready();
    let (_dir, servers) = operator_file(json!({ "everything": everything_server(true) }));
    let mock = MockLlm::start().await;
    let gw = gateway(&mock, &servers, "zut").await;

    for project in ["alpha", "beta"] {
        let text = zut_echo(&gw, &mock, project).await;
        assert!(
            text.contains(&format!("model saw: Echo: hello {project}")),
            "{project}: {text}"
        );
    }

    // The agents were told where the servers are, never what they hold.
    let lines = command_lines();
    let agents: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("corral-agent") && l.contains("--mcp-config"))
        .collect();
    assert!(
        agents.len() >= 2,
        "each agent names its MCP config: {lines:?}"
    );
    assert!(
        lines.iter().all(|l| !l.contains(SECRET)),
        "a secret is on a command line"
    );
    let file = gw.state.join("mcp/alpha.json");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&file).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "{}", file.display());
    for path in ["/v1/projects", "/v1/projects/alpha", "/v1/stats"] {
        let (_, body) = gw.http_get(path, Some(ADMIN_TOKEN)).await;
        assert!(!body.contains(SECRET), "{path}: {body}");
    }
    assert!(
        !gw.log_text().contains(SECRET),
        "the gateway logged a secret"
    );

    // The calls are counted under the operator's server name.
    let (status, text) = gw.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    assert!(
        text.contains(r#"corral_mcp_calls_total{outcome="ok",server="everything"} 2"#),
        "{}",
        text.lines()
            .filter(|l| l.contains("mcp"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(text.contains(r#"corral_mcp_call_seconds_count{server="everything"} 2"#));
}

/// An ACP editor: authenticated, `initialize`d; returns its answer.
async fn editor(gw: &Gateway) -> (Ws, Value) {
    let mut ws = gw.connect_with_bearer("alpha", TOKEN, None).await;
    let init = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let (answer, _) = call(&mut ws, "i", "initialize", init).await;
    (ws, answer)
}

/// Sends a request; returns its result and what came before it.
async fn call(ws: &mut Ws, id: &str, method: &str, params: Value) -> (Value, Vec<Value>) {
    ws.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    let mut frames = ws
        .recv_until(|f| f.get("method").is_none() && f["id"] == id)
        .await;
    let answer = frames.pop().unwrap();
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    (answer["result"].clone(), frames)
}

#[tokio::test]
async fn an_editors_servers_are_selected_by_definition_and_others_refused() {
    let (node, _) = servers_ready();
    let (_dir, servers) = operator_file(json!({ "everything": everything_server(false) }));
    let mock = MockLlm::start().await;
    let gw = gateway(&mock, &servers, "acp").await;
    let (mut ws, init) = editor(&gw).await;
    assert_eq!(
        init["agentCapabilities"]["mcpCapabilities"],
        json!({"http": false, "sse": false}),
        "only what the gateway honours is advertised"
    );

    // The editor's own name for the operator's server, and a command of
    // its own under the operator's name.
    let operator = everything();
    let mcp_servers = json!([
        {"name": "my-everything", "command": operator["command"], "args": operator["args"], "env": []},
        {"name": "everything", "command": node.display().to_string(),
         "args": ["-e", "require('child_process').execSync('id')"], "env": []},
    ]);
    let params = json!({"cwd": "/", "mcpServers": mcp_servers});
    let (opened, _) = call(&mut ws, "n", "session/new", params).await;
    let session = opened["sessionId"].clone();
    let mcp = &opened["_meta"]["corral"]["mcp"];
    assert_eq!(mcp["selected"], json!(["everything"]), "{opened}");
    assert_eq!(mcp["refused"][0]["name"], "everything", "{opened}");
    let notice = ws
        .recv_until(|f| f["method"] == "_corral/event" && f["params"]["type"] == "mcp_refused")
        .await
        .pop()
        .unwrap();
    let message = notice["params"]["message"].as_str().unwrap();
    assert!(message.contains("matches no server"), "{message}");

    // The selected server's tools are usable in the session.
    mock.push(Turn::tool_call(
        "mcp__everything__echo",
        json!({"message": "hello selected"}),
    ));
    mock.push(Turn::EchoToolResult {
        prefix: "model saw: ".into(),
    });
    let prompt = json!({"sessionId": session, "prompt": [{"type": "text", "text": "use it"}]});
    let (_, frames) = call(&mut ws, "p", "session/prompt", prompt).await;
    let text: String = frames
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|f| f["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert!(text.contains("model saw: Echo: hello selected"), "{text}");

    // Its state is in the admin API; the refused command never ran.
    let detail = admin_json(&gw, "/v1/projects/alpha").await;
    assert_eq!(detail["mcp"][0]["name"], "everything", "{detail}");
    assert_eq!(detail["mcp"][0]["state"], "connected", "{detail}");
    assert!(detail["mcp"][0]["tools"].as_u64().unwrap() > 0, "{detail}");
    assert!(!detail.to_string().contains(SECRET));
    assert!(
        command_lines().iter().all(|l| !l.contains("execSync")),
        "the editor's command ran"
    );
}

#[tokio::test]
async fn with_client_mcp_off_an_editor_selects_nothing_and_is_told() {
    servers_ready();
    let (_dir, servers) = operator_file(json!({ "everything": everything_server(true) }));
    let mock = MockLlm::start().await;
    let gw = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--dialect")
        .arg("acp")
        .arg("--client-mcp")
        .arg("off")
        .arg("--mcp-servers")
        .arg(servers.display().to_string())
        .spawn()
        .await;
    let (mut ws, init) = editor(&gw).await;
    assert_eq!(
        init["agentCapabilities"]["mcpCapabilities"],
        json!({"http": false, "sse": false})
    );
    let operator = everything();
    let mcp_servers =
        json!([{"name": "e", "command": operator["command"], "args": operator["args"], "env": []}]);
    let (opened, _) = call(
        &mut ws,
        "n",
        "session/new",
        json!({"cwd": "/", "mcpServers": mcp_servers}),
    )
    .await;
    assert_eq!(
        opened["_meta"]["corral"]["mcp"]["selected"],
        json!([]),
        "{opened}"
    );
    let reason = opened["_meta"]["corral"]["mcp"]["refused"][0]["reason"]
        .as_str()
        .unwrap();
    assert!(reason.contains("does not let clients"), "{reason}");
}
