//! End-to-end: the agent's MCP client against real MCP servers (the
//! reference `server-everything` over stdio and streamable HTTP,
//! `server-filesystem` over stdio, pinned in `tests/mcp_servers`), with the
//! mock LLM asking for their tools. Checks are on what clients and the model
//! see: tool events naming `mcp__SERVER__TOOL`, the tools offered, and the
//! tool result the model got back (the mock echoes it as its reply).

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use corral_e2e::acp_client::{npm_ci, package_dir};
use corral_e2e::harness::{text_of, AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use corral_e2e::prerequisites::NODE;
use serde_json::{json, Value};
use tempfile::TempDir;

/// The folder of the pinned servers, installed; returns node.
/// Node and the servers' folder, where sandboxed agents (which get a
/// private `/tmp`) can reach it.
pub(crate) fn servers_ready() -> (PathBuf, PathBuf) {
    let node = NODE.require();
    let dir = package_dir("mcp_servers");
    npm_ci(&dir, "@modelcontextprotocol/server-filesystem");
    let needed = "node_modules/@modelcontextprotocol/server-filesystem";
    let dir = corral_e2e::fixture::reachable_by_agents(&dir, "mcp", needed);
    (node, dir)
}

/// A stdio server entry running `script` (relative to the servers' folder)
/// with node.
pub(crate) fn node_server(script: &str, args: &[&str], env: Value) -> Value {
    let (node, dir) = servers_ready();
    let mut all = vec![dir.join(script).display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    json!({"command": node.display().to_string(), "args": all, "env": env})
}

pub(crate) fn everything() -> Value {
    node_server(
        "node_modules/@modelcontextprotocol/server-everything/dist/index.js",
        &["stdio"],
        json!({}),
    )
}

pub(crate) fn fixture(env: Value) -> Value {
    node_server("fixture.mjs", &[], env)
}

/// Writes `{"mcpServers": servers}` into a fresh directory outside /tmp.
pub(crate) fn config(servers: Value) -> (TempDir, PathBuf) {
    let dir = corral_e2e::dir_outside_tmp();
    let path = dir.path().join("mcp.json");
    std::fs::write(&path, json!({"mcpServers": servers}).to_string()).unwrap();
    (dir, path)
}

/// A zut agent on the mock with `--mcp-config path` and `extra` flags.
pub(crate) async fn zut_agent(mock: &MockLlm, path: &Path, extra: &[&str]) -> AgentProc {
    AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), extra)
        .arg("--mcp-config")
        .arg(path.display().to_string())
        .spawn()
        .await
}

/// One zut prompt whose model calls `tool` with `args` and then echoes the
/// result; returns the frames.
pub(crate) async fn zut_call(
    agent: &mut AgentProc,
    mock: &MockLlm,
    tool: &str,
    args: Value,
) -> Vec<Value> {
    mock.push(Turn::tool_call(tool, args));
    mock.push(Turn::EchoToolResult {
        prefix: "model saw: ".into(),
    });
    agent
        .send(json!({"id":"p","type":"prompt","message":"use the tool"}))
        .await;
    agent.recv_until(|f| f["type"] == "done").await
}

/// The tool names the model was offered in its first request.
fn offered(mock: &MockLlm) -> Vec<String> {
    let requests = mock.requests();
    requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

fn tool_result(frames: &[Value]) -> &Value {
    frames.iter().find(|f| f["type"] == "tool_result").unwrap()
}

#[tokio::test]
async fn zut_calls_an_mcp_tool_over_stdio_and_the_result_reaches_the_model() {
    let (_dir, path) = config(json!({"everything": everything()}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__everything__echo",
        json!({"message": "hello mcp"}),
    )
    .await;
    let start = frames
        .iter()
        .find(|f| f["type"] == "tool_execution_started")
        .unwrap();
    assert_eq!(start["name"], "mcp__everything__echo", "{start}");
    let result = tool_result(&frames);
    assert_eq!(result["is_error"], false, "{result}");
    assert!(
        text_of(&frames).contains("model saw: Echo: hello mcp"),
        "{}",
        text_of(&frames)
    );
    let tools = offered(&mock);
    assert!(tools.contains(&"read".to_string()), "{tools:?}");
    assert!(
        tools.contains(&"mcp__everything__get-sum".to_string()),
        "{tools:?}"
    );
    let echo = mock.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "mcp__everything__echo")
        .cloned()
        .unwrap();
    assert_eq!(echo["input_schema"]["type"], "object", "{echo}");
    assert!(
        echo["input_schema"]["properties"]["message"].is_object(),
        "{echo}"
    );
    assert!(echo["input_schema"].get("$schema").is_none(), "{echo}");
}

#[tokio::test]
async fn letscode_and_zi_name_the_mcp_tool_and_complete_the_prompt() {
    let (_dir, path) = config(json!({"everything": everything()}));
    for dialect in ["letscode", "zi"] {
        let mock = MockLlm::start().await;
        mock.push(Turn::tool_call(
            "mcp__everything__echo",
            json!({"message": dialect}),
        ));
        mock.push(Turn::EchoToolResult {
            prefix: "model saw: ".into(),
        });
        let mut agent =
            AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--dialect", dialect])
                .arg("--mcp-config")
                .arg(path.display().to_string())
                .spawn()
                .await;
        let ready = agent.recv().await;
        assert_eq!(ready["type"], "ready", "{dialect}: {ready}");
        let frames = match dialect {
            "letscode" => {
                agent
                    .send(json!({"cmd":"prompt","id":"r1","text":"echo"}))
                    .await;
                agent
                    .recv_until(|f| f["type"] == "done" && f["id"] == "r1")
                    .await
            }
            _ => {
                agent
                    .send(json!({"version": 1, "id": "p1", "method": "session.prompt",
                        "params": {"delivery": "direct", "text": "echo", "completionId": "c"}}))
                    .await;
                agent
                    .recv_until(|f| f["id"] == "p1" && f["type"] != "session_event")
                    .await;
                agent
                    .send(json!({"version": 1, "id": "idle", "method": "session.await_idle", "params": {"completionId": "c"}}))
                    .await;
                agent
                    .recv_until(|f| f["id"] == "idle" && f["type"] != "session_event")
                    .await
            }
        };
        let all = serde_json::to_string(&frames).unwrap();
        let start = frames
            .iter()
            .map(|f| f.to_string())
            .find(|f| f.contains("tool_execution_start"))
            .unwrap_or_else(|| panic!("{dialect}: no tool_execution_start in {all}"));
        assert!(
            start.contains("mcp__everything__echo"),
            "{dialect}: {start}"
        );
        assert!(
            all.contains(&format!("model saw: Echo: {dialect}")),
            "{dialect}: {all}"
        );
    }
}

/// server-everything over streamable HTTP on a free loopback port, once
/// it listens; returns the process and its URL.
async fn http_everything() -> (tokio::process::Child, String) {
    let (node, dir) = servers_ready();
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let server = tokio::process::Command::new(node)
        .arg(dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js"))
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the HTTP server did not start"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    (server, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test]
async fn a_streamable_http_server_with_headers_serves_its_tools() {
    let (mut server, url) = http_everything().await;
    let (_dir, path) =
        config(json!({"web": {"type": "http", "url": url, "headers": {"X-Team-Token": "t0ken"}}}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__web__get-sum",
        json!({"a": 2, "b": 40}),
    )
    .await;
    assert_eq!(tool_result(&frames)["is_error"], false, "{frames:?}");
    assert!(text_of(&frames).contains("42"), "{}", text_of(&frames));
    let _ = server.kill().await;
}

#[tokio::test]
async fn the_filesystem_server_reads_a_file_for_the_model() {
    let (_, dir) = servers_ready();
    let shared = corral_e2e::dir_outside_tmp();
    std::fs::write(
        shared.path().join("notes.txt"),
        "the filesystem server was here",
    )
    .unwrap();
    let fs = node_server(
        "node_modules/@modelcontextprotocol/server-filesystem/dist/index.js",
        &[&shared.path().display().to_string()],
        json!({}),
    );
    let _ = dir;
    let (_cfg, path) = config(json!({"fs": fs}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    let file = shared.path().join("notes.txt").display().to_string();
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__fs__read_text_file",
        json!({"path": file}),
    )
    .await;
    assert!(
        text_of(&frames).contains("model saw: the filesystem server was here"),
        "{}",
        text_of(&frames)
    );
}

#[tokio::test]
async fn images_reach_the_model_as_images() {
    let (_dir, path) = config(json!({"everything": everything()}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__everything__get-tiny-image",
        json!({}),
    )
    .await;
    assert_eq!(tool_result(&frames)["is_error"], false);
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("\"type\":\"image\"") && last.contains("image/png"),
        "{last}"
    );
}

#[tokio::test]
async fn a_server_gets_its_env_but_never_the_agents_keys() {
    let (_dir, path) = config(json!({"fx": fixture(json!({"TEAM_TOKEN": "s3cret-team-token"}))}));
    let mock = MockLlm::start().await;
    let mut agent = zut_agent(&mock, &path, &[]).await;
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__fx__env",
        json!({"name": "TEAM_TOKEN"}),
    )
    .await;
    assert!(
        text_of(&frames).contains("model saw: s3cret-team-token"),
        "{}",
        text_of(&frames)
    );
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__fx__env",
        json!({"name": "ANTHROPIC_API_KEY"}),
    )
    .await;
    assert_eq!(
        tool_result(&frames)["content"][0]["text"],
        "(no output)",
        "{frames:?}"
    );
}

#[tokio::test]
async fn the_tools_flag_selects_servers_and_unknown_ones_are_refused() {
    let (_dir, path) = config(json!({"everything": everything(), "fx": fixture(json!({}))}));
    let mock = MockLlm::start().await;
    mock.push(Turn::text("ok"));
    let mut agent = zut_agent(&mock, &path, &["--tools", "read,mcp__fx"]).await;
    agent
        .send(json!({"id":"p","type":"prompt","message":"hi"}))
        .await;
    agent.recv_until(|f| f["type"] == "done").await;
    let tools = offered(&mock);
    assert!(
        tools.contains(&"read".to_string()) && tools.contains(&"mcp__fx__pid".to_string()),
        "{tools:?}"
    );
    assert!(
        !tools.iter().any(|t| t.starts_with("mcp__everything")),
        "{tools:?}"
    );
    assert!(!tools.contains(&"bash".to_string()), "{tools:?}");

    let mut bad = zut_agent(&mock, &path, &["--tools", "read,mcp__nope"]).await;
    assert_eq!(bad.wait().await, Some(2));
    assert!(
        bad.stderr().contains("mcp__nope") && bad.stderr().contains("everything, fx"),
        "{}",
        bad.stderr()
    );
}

#[tokio::test]
async fn a_projects_mcp_json_is_used_only_when_allowed() {
    let mock = MockLlm::start().await;
    let project = corral_e2e::dir_outside_tmp();
    std::fs::write(
        project.path().join(".mcp.json"),
        json!({"mcpServers": {"fx": fixture(json!({}))}}).to_string(),
    )
    .unwrap();
    for (flag, expected) in [("off", false), ("on", true)] {
        mock.push(Turn::text("ok"));
        let mut agent =
            AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--mcp-project-config", flag])
                .cwd(project.path())
                .spawn()
                .await;
        agent
            .send(json!({"id":"p","type":"prompt","message":"hi"}))
            .await;
        agent.recv_until(|f| f["type"] == "done").await;
        let last = mock.requests().last().unwrap().body["tools"].to_string();
        assert_eq!(last.contains("mcp__fx__pid"), expected, "{flag}: {last}");
    }
}

/// The servers of a dialect's `mcp_status` event, if `frame` is one.
fn status_of<'a>(dialect: &str, frame: &'a Value) -> Option<&'a Value> {
    match dialect {
        "zi" if frame["event"]["type"] == "mcp_status" => Some(&frame["event"]["servers"]),
        "zut" | "letscode" if frame["type"] == "mcp_status" => Some(&frame["servers"]),
        _ => None,
    }
}

/// The servers of the first `mcp_status` event that satisfies `settled`.
async fn status_until(
    agent: &mut AgentProc,
    dialect: &str,
    settled: impl Fn(&Value) -> bool,
) -> Value {
    loop {
        let frame = agent.recv().await;
        if let Some(servers) = status_of(dialect, &frame) {
            if settled(servers) {
                return servers.clone();
            }
        }
    }
}

#[tokio::test]
async fn zut_letscode_and_zi_select_a_server_and_report_statuses() {
    let mut later = everything();
    later["default"] = json!(false);
    let (_dir, path) = config(json!({"everything": everything(), "later": later}));
    let state = |servers: &Value, name: &str| {
        servers
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .map(|s| s["state"].as_str().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    for dialect in ["zut", "letscode", "zi"] {
        let mock = MockLlm::start().await;
        let mut agent =
            AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--dialect", dialect])
                .arg("--mcp-config")
                .arg(path.display().to_string())
                .spawn()
                .await;
        let first = status_until(&mut agent, dialect, |_| true).await;
        assert_eq!(
            state(&first, "everything"),
            "connected",
            "{dialect}: {first}"
        );
        assert_eq!(state(&first, "later"), "disabled", "{dialect}: {first}");

        let (select, unknown) = match dialect {
            "zut" => (
                json!({"id": "s", "type": "mcp_select", "servers": ["later"]}),
                json!({"id": "u", "type": "mcp_select", "servers": ["nope"]}),
            ),
            "letscode" => (
                json!({"id": "s", "cmd": "mcp_select", "servers": ["later"]}),
                json!({"id": "u", "cmd": "mcp_select", "servers": ["nope"]}),
            ),
            _ => (
                json!({"version": 1, "id": "s", "method": "mcp.select", "params": {"servers": ["later"]}}),
                json!({"version": 1, "id": "u", "method": "mcp.select", "params": {"servers": ["nope"]}}),
            ),
        };
        let answered = |id: &'static str| {
            move |f: &Value| {
                f["id"] == id && matches!(f["type"].as_str(), Some("response" | "done" | "error"))
            }
        };
        agent.send(unknown).await;
        let refusal = agent.recv_until(answered("u")).await.pop().unwrap();
        assert!(refusal.to_string().contains("nope"), "{dialect}: {refusal}");
        assert!(
            refusal["success"] == false || refusal["type"] == "error" || refusal["ok"] == false,
            "{dialect}: {refusal}"
        );
        agent.send(select).await;
        let answer = agent.recv_until(answered("s")).await.pop().unwrap();
        let servers = match dialect {
            "zut" => &answer["data"]["servers"],
            "letscode" => &answer["servers"],
            _ => &answer["result"]["servers"],
        };
        assert_ne!(state(servers, "later"), "disabled", "{dialect}: {answer}");
        let now = status_until(&mut agent, dialect, |s| state(s, "later") == "connected").await;
        assert_eq!(state(&now, "everything"), "connected", "{dialect}: {now}");
    }
}

/// A stand-in for the gateway's egress proxy on a Unix socket: each
/// connection must start with the preamble naming `secret`, then carries
/// one absolute-form HTTP request to its loopback origin (sent on in
/// origin form, `Connection: close`). Returns the request lines seen.
fn egress_stand_in(socket: &Path, secret: &str) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let listener = tokio::net::UnixListener::bind(socket).unwrap();
    let preamble = format!("CORRAL-EGRESS {secret}\n");
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let preamble = preamble.clone();
            let record = record.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 64 * 1024 {
                    match client.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let text = String::from_utf8_lossy(&head).to_string();
                let Some(rest) = text.strip_prefix(&preamble) else {
                    let _ = client.write_all(b"HTTP/1.1 407 No\r\n\r\n").await;
                    return;
                };
                let mut lines = rest.split("\r\n");
                let first = lines.next().unwrap_or_default().to_string();
                record.lock().unwrap().push(first.clone());
                let parts: Vec<&str> = first.split(' ').collect();
                let Some(target) = parts.get(1).and_then(|u| u.strip_prefix("http://")) else {
                    let _ = client.write_all(b"HTTP/1.1 405 No\r\n\r\n").await;
                    return;
                };
                let (authority, path) = target.split_once('/').unwrap_or((target, ""));
                let mut upstream = tokio::net::TcpStream::connect(authority).await.unwrap();
                let mut out = format!("{} /{path} {}\r\n", parts[0], parts[2]);
                for line in lines.filter(|l| !l.is_empty()) {
                    let name = line
                        .split(':')
                        .next()
                        .unwrap_or_default()
                        .to_ascii_lowercase();
                    if name != "connection" && name != "proxy-connection" {
                        out.push_str(line);
                        out.push_str("\r\n");
                    }
                }
                out.push_str("Connection: close\r\n\r\n");
                upstream.write_all(out.as_bytes()).await.unwrap();
                let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
            });
        }
    });
    seen
}

#[tokio::test]
async fn with_tool_network_proxy_an_http_server_is_reached_through_the_egress_proxy() {
    let (mut server, url) = http_everything().await;
    let (dir, path) = config(json!({"web": {"type": "http", "url": url}}));
    let socket = dir.path().join("egress.sock");
    let secret = "5e".repeat(32);
    let seen = egress_stand_in(&socket, &secret);
    let mock = MockLlm::start().await;
    let mut agent = AgentSpawn::anthropic_mock(
        &mock.anthropic_base_url(),
        &["--sandbox", "--tool-network", "proxy"],
    )
    .arg("--egress-socket")
    .arg(socket.display().to_string())
    .arg("--sandbox-hide")
    .arg(dir.path().display().to_string())
    .env("CORRAL_EGRESS_SECRET", &secret)
    .arg("--mcp-config")
    .arg(path.display().to_string())
    .spawn()
    .await;
    let frames = zut_call(
        &mut agent,
        &mock,
        "mcp__web__get-sum",
        json!({"a": 20, "b": 22}),
    )
    .await;
    assert_eq!(tool_result(&frames)["is_error"], false, "{frames:?}");
    assert!(text_of(&frames).contains("42"), "{}", text_of(&frames));
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter().any(|l| l.starts_with(&format!("POST {url} "))),
        "the proxy saw {seen:?}"
    );
    let _ = server.kill().await;
}
