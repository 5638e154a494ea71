//! End-to-end: the real `corral serve` — refusals, idle reaping, shutdown,
//! the admin listing, and that the child's secret never leaks.

#![allow(clippy::unwrap_used)]

use corral_e2e::harness::is_done;
use std::time::{Duration, Instant};

use corral_e2e::gateway::{agent_pids, GatewaySpawn, ADMIN_TOKEN, TOKEN};
use serde_json::{json, Value};

#[tokio::test]
async fn refusals_spawn_nothing() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--hello-timeout")
        .arg("1s")
        .spawn()
        .await;
    // A symlink that leaves the root.
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), gateway.root.join("escape")).unwrap();

    // Wrong token: success:false, then close 1008.
    let (mut ws, reply) = gateway
        .client_with("alpha", "wrong-token-wrong-token", None)
        .await;
    assert_eq!(reply["success"], false);
    assert!(reply["error"]
        .as_str()
        .unwrap()
        .contains("authentication failed"));
    assert_eq!(ws.closed().await.map(|c| c.0), Some(1008));

    // A first frame that is not a hello.
    let mut ws = gateway.connect("alpha").await;
    ws.send(json!({"id":"1","type":"ping"})).await;
    assert_eq!(ws.recv().await["success"], false);
    assert_eq!(ws.closed().await.map(|c| c.0), Some(1008));

    // No hello at all within the (shortened) deadline.
    let mut ws = gateway.connect("alpha").await;
    let start = Instant::now();
    let reply = ws.recv().await;
    assert_eq!(reply["success"], false);
    assert!(
        reply["error"].as_str().unwrap().contains("no hello"),
        "{reply}"
    );
    assert_eq!(ws.closed().await.map(|c| c.0), Some(1008));
    assert!(start.elapsed() < Duration::from_secs(5));

    // Bad project names: said only to a valid token, before any upgrade;
    // without one every name gets the same 401.
    let long = "a".repeat(65);
    for (path, status) in [
        ("/v1/projects/../rpc".to_string(), 400),
        ("/v1/projects/%2E%2E/rpc".to_string(), 400),
        ("/v1/projects/a%2Fb/rpc".to_string(), 400),
        ("/v1/projects/escape/rpc".to_string(), 404),
        (format!("/v1/projects/{long}/rpc"), 400),
        ("/v1/projects/missing/rpc".to_string(), 404),
    ] {
        let (got, body) = gateway.http_get(&path, Some(TOKEN)).await;
        assert_eq!(got, status, "{path}: {body}");
        let (got, body) = gateway.http_get(&path, None).await;
        assert_eq!(got, 401, "{path}: {body}");
    }
    assert!(gateway.child_pids().is_empty(), "no child was started");
}

#[tokio::test]
async fn idle_children_are_reaped_and_respawn_with_their_conversation() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--idle-timeout")
        .arg("1s")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    ws.send(json!({"id":"1","type":"prompt","message":"remember me"}))
        .await;
    ws.recv_until(is_done).await;
    assert_eq!(gateway.child_pids().len(), 1);
    drop(ws);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !gateway.child_pids().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        gateway.child_pids().is_empty(),
        "the idle child was not reaped"
    );

    let mut ws = gateway.client("alpha").await;
    let messages = ws.request(json!({"id":"m","type":"get_messages"})).await;
    let first = &messages["data"]["messages"][0]["content"][0]["text"];
    assert_eq!(first, "remember me");
}

#[tokio::test]
async fn sigterm_stops_every_child_and_exits_zero() {
    let mut gateway = GatewaySpawn::default()
        .echo()
        .projects(&["one", "two", "three"])
        .spawn()
        .await;
    let mut clients = Vec::new();
    for project in ["one", "two", "three"] {
        let mut ws = gateway.client(project).await;
        assert_eq!(
            ws.request(json!({"id":"p","type":"ping"})).await["success"],
            true
        );
        clients.push(ws);
    }
    let children = gateway.child_pids();
    assert_eq!(children.len(), 3);
    let pid = gateway.child.id().unwrap() as i32;
    let start = Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    for ws in &mut clients {
        assert_eq!(ws.closed().await.map(|c| c.0), Some(1001));
    }
    let status = tokio::time::timeout(Duration::from_secs(20), gateway.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "{:?}",
        start.elapsed()
    );
    let alive: Vec<u32> = agent_pids()
        .into_iter()
        .filter(|p| children.contains(p))
        .collect();
    assert!(alive.is_empty(), "children left running: {alive:?}");
}

#[tokio::test]
async fn admin_listing_health_and_readiness() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    assert_eq!(gateway.http_get("/healthz", None).await.0, 200);
    assert_eq!(gateway.http_get("/readyz", None).await.0, 200);
    assert_eq!(gateway.http_get("/v1/projects", None).await.0, 401);
    assert_eq!(gateway.http_get("/v1/projects", Some(TOKEN)).await.0, 403);
    let mut ws = gateway.client("alpha").await;
    ws.request(json!({"id":"1","type":"ping"})).await;
    let (status, body) = gateway.http_get("/v1/projects", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let alpha = &list["projects"][0];
    assert_eq!(alpha["project"], "alpha");
    assert_eq!(alpha["state"], "ready");
    assert_eq!(alpha["clients"], 1);
    assert_eq!(alpha["busy"], false);
    assert_eq!(alpha["restarts"], 0);
    assert!(alpha["pid"].as_u64().is_some());
    assert!(alpha["uptime_secs"].as_u64().is_some());
}

/// `GET path` on a raw socket: the response head, lowercased.
async fn response_head(gateway: &corral_e2e::gateway::Gateway, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(gateway.addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: corral\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .unwrap()
        .unwrap();
    let response = String::from_utf8_lossy(&response).to_ascii_lowercase();
    response.split("\r\n\r\n").next().unwrap().to_string()
}

#[tokio::test]
async fn plain_http_answers_carry_the_layers_headers() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    for path in ["/healthz", "/readyz", "/v1/projects", "/"] {
        let head = response_head(&gateway, path).await;
        assert!(
            head.contains("x-content-type-options: nosniff"),
            "{path}: {head}"
        );
    }
    let dashboard = response_head(&gateway, "/").await;
    assert!(dashboard.contains("content-security-policy: default-src 'none'"));
    assert!(dashboard.contains("cache-control: no-cache"));
    assert!(!response_head(&gateway, "/healthz")
        .await
        .contains("content-security-policy"));
}

#[tokio::test]
async fn the_child_token_never_leaves_the_gateway() {
    // Executed, so the token can be read from the child's environment
    // block (a child forked from the template shows an empty one).
    let gateway = GatewaySpawn::default()
        .echo()
        .capture_log()
        .arg("--child-template")
        .arg("off")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    let mut frames = vec![ws.request(json!({"id":"1","type":"get_state"})).await];
    ws.send(json!({"id":"2","type":"prompt","message":"hello"}))
        .await;
    frames.extend(ws.recv_until(is_done).await);
    let pid = gateway.child_pids()[0];
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let token = environ
        .split(|b| *b == 0)
        .filter_map(|var| std::str::from_utf8(var).ok())
        .find_map(|var| var.strip_prefix("ZUTCORE_RPC_TOKEN="))
        .expect("the child got a token")
        .to_string();
    assert!(token.len() >= 32);
    let (_, listing) = gateway.http_get("/v1/projects", Some(ADMIN_TOKEN)).await;
    let log = std::fs::read_to_string(&gateway.log).unwrap();
    assert!(!log.is_empty(), "the debug log was captured");
    for frame in &frames {
        assert!(!frame.to_string().contains(&token));
    }
    assert!(!listing.contains(&token));
    assert!(!log.contains(&token));
    assert!(!log.contains(TOKEN), "client tokens are not logged either");
}

#[tokio::test]
async fn json_logs_carry_the_project_and_pid() {
    let gateway = GatewaySpawn::default()
        .echo()
        .capture_log()
        .arg("--log-format")
        .arg("json")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    ws.request(json!({"id":"1","type":"ping"})).await;
    let log = std::fs::read_to_string(&gateway.log).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(!lines.is_empty());
    let started = lines
        .iter()
        .find(|l| l["fields"]["message"] == "child started")
        .expect("a child started line");
    assert_eq!(started["fields"]["project"], "alpha");
    assert!(started["fields"]["pid"].as_u64().is_some());
}

/// A child line over `--max-frame-bytes` is not delivered, and clients are
/// told so by an `error` event instead of silently missing it.
#[tokio::test]
async fn an_agent_line_over_the_frame_limit_becomes_an_error_event() {
    let mock = corral_e2e::mock_llm::MockLlm::start().await;
    mock.push(corral_e2e::mock_llm::Turn::text("x".repeat(100 * 1024)));
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--max-frame-bytes")
        .arg("64KiB")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    ws.send(json!({"id":"1","type":"prompt","message":"big"}))
        .await;
    let frames = ws.recv_until(is_done).await;
    let errors: Vec<&Value> = frames.iter().filter(|f| f["type"] == "error").collect();
    assert!(!errors.is_empty(), "{frames:?}");
    for error in errors {
        let message = error["message"].as_str().unwrap();
        assert!(message.contains("not delivered"), "{message}");
        assert!(error["seq"].is_u64());
    }
    assert!(
        frames.iter().all(|f| f.to_string().len() < 64 * 1024),
        "nothing over the limit reaches the client"
    );
    // The child is fine and still answers.
    let pong = ws.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true);
}
