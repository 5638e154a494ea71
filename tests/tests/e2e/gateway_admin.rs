//! End-to-end: `/metrics` and the admin API of the real gateway, observed
//! through connected clients.

#![allow(clippy::unwrap_used)]

use corral_e2e::harness::is_done;
use std::collections::HashMap;
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, ADMIN_TOKEN, OBSERVER_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

/// Samples of the exposition as `name{labels}` → value.
async fn scrape(gateway: &Gateway) -> (String, HashMap<String, f64>) {
    let (status, text) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{text}");
    let samples = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect();
    (text, samples)
}

fn get(samples: &HashMap<String, f64>, name: &str) -> f64 {
    *samples
        .get(name)
        .unwrap_or_else(|| panic!("metric {name} missing"))
}

async fn admin_json(gateway: &Gateway, path: &str) -> Value {
    let (status, body) = gateway.http_get(path, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

#[tokio::test]
async fn metrics_move_with_prompts_crashes_and_reconnects() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("one answer"));
    mock.push(Turn::Slow {
        chunks: (0..200).map(|i| format!("c{i} ")).collect(),
        delay: Duration::from_millis(50),
    });
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    assert_eq!(gateway.http_get("/metrics", None).await.0, 401);
    assert_eq!(gateway.http_get("/metrics", Some(TOKEN)).await.0, 403);

    let (_, before) = scrape(&gateway).await;
    assert_eq!(get(&before, "corral_child_spawns_total"), 0.0);

    // A refused hello counts as an auth failure.
    let (_bad, reply) = gateway
        .client_with("alpha", "not-a-valid-token-at-all", None)
        .await;
    assert_eq!(reply["success"], false);

    let mut ws = gateway.client("alpha").await;
    ws.request(json!({"id":"p","type":"ping"})).await;
    // A malformed frame is answered and counted.
    ws.send_text("{not json").await;
    assert_eq!(ws.recv().await["success"], false);
    ws.send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    let frames = ws.recv_until(is_done).await;
    let first_seq = frames
        .iter()
        .filter_map(|f| f["seq"].as_u64())
        .next()
        .unwrap();

    // Kill the child mid-prompt; it restarts.
    ws.send(json!({"id":"2","type":"prompt","message":"long"}))
        .await;
    ws.recv_until(|f| f["type"] == "text_delta").await;
    let pid = admin_json(&gateway, "/v1/projects/alpha").await["pid"]
        .as_u64()
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    ws.recv_until(|f| f["type"] == "child_started").await;

    // A reconnect that replays from the first prompt.
    let (mut again, hello) = gateway.client_with("alpha", TOKEN, Some(first_seq)).await;
    assert_eq!(hello["success"], true);
    again.recv_until(|f| f["type"] == "child_started").await;

    let (text, after) = scrape(&gateway).await;
    assert_eq!(get(&after, "corral_child_spawns_total"), 2.0);
    assert_eq!(
        get(&after, "corral_child_exits_total{reason=\"crash\"}"),
        1.0
    );
    assert_eq!(get(&after, "corral_child_restarts_total"), 1.0);
    assert_eq!(get(&after, "corral_child_spawn_seconds_count"), 2.0);
    assert_eq!(get(&after, "corral_children{state=\"idle\"}"), 1.0);
    assert_eq!(get(&after, "corral_clients"), 2.0);
    assert_eq!(get(&after, "corral_client_connections_total"), 2.0);
    assert_eq!(
        get(
            &after,
            "corral_auth_failures_total{reason=\"invalid_token\"}"
        ),
        1.0
    );
    assert!(get(&after, "corral_replayed_events_total") > 5.0);
    assert_eq!(get(&after, "corral_replay_gaps_total"), 0.0);
    for direction in [
        "client_to_gateway",
        "gateway_to_child",
        "child_to_gateway",
        "gateway_to_client",
    ] {
        assert!(
            get(
                &after,
                &format!("corral_frames_total{{direction=\"{direction}\"}}")
            ) > 0.0,
            "{direction}"
        );
        assert!(
            get(
                &after,
                &format!("corral_bytes_total{{direction=\"{direction}\"}}")
            ) > 0.0,
            "{direction}"
        );
    }
    assert_eq!(
        get(
            &after,
            "corral_invalid_frames_total{reason=\"malformed\",source=\"client\"}"
        ),
        1.0
    );
    assert_eq!(
        get(
            &after,
            "corral_invalid_frames_total{reason=\"malformed\",source=\"child\"}"
        ),
        0.0
    );
    assert_eq!(get(&after, "corral_crash_loops_total"), 0.0);
    for name in [
        "corral_children{state=\"starting\"}",
        "corral_children{state=\"busy\"}",
        "corral_children{state=\"failed\"}",
        "corral_slow_client_catchups_total",
        "corral_slow_client_disconnects_total",
        "corral_child_exits_total{reason=\"health\"}",
        "corral_auth_failures_total{reason=\"origin\"}",
    ] {
        get(&after, name);
    }
    assert_eq!(
        get(
            &after,
            "corral_request_duration_seconds_count{command=\"ping\"}"
        ),
        1.0
    );
    assert_eq!(
        get(
            &after,
            "corral_request_duration_seconds_count{command=\"prompt\"}"
        ),
        2.0
    );
    assert_eq!(get(&after, "corral_prompt_duration_seconds_count"), 1.0);
    assert!(get(&after, "corral_tokens_total{kind=\"input\"}") > 0.0);
    assert!(get(&after, "corral_tokens_total{kind=\"output\"}") > 0.0);
    assert!(get(&after, "corral_cost_usd_total") > 0.0);
    assert!(get(&after, "corral_child_resident_bytes") > 1_000_000.0);
    assert!(get(&after, "corral_child_cpu_seconds_total") >= 0.0);
    assert!(
        text.contains("process_resident_memory_bytes"),
        "process metrics"
    );

    // The exposition passes promtool's checks.
    let promtool = corral_e2e::prerequisites::PROMTOOL.require();
    let (status, output) = std::process::Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .output_with_input(text.as_bytes());
    assert!(status.success(), "promtool: {output}");
}

trait OutputWithInput {
    fn output_with_input(&mut self, input: &[u8]) -> (std::process::ExitStatus, String);
}

impl OutputWithInput for std::process::Command {
    fn output_with_input(&mut self, input: &[u8]) -> (std::process::ExitStatus, String) {
        use std::io::Write;
        let mut child = self
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        let output = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned()
            + &String::from_utf8_lossy(&output.stderr);
        (output.status, text)
    }
}

#[tokio::test]
async fn admin_api_reports_and_acts() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("hello there"));
    mock.push(Turn::Slow {
        chunks: (0..400).map(|i| format!("s{i} ")).collect(),
        delay: Duration::from_millis(25),
    });
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    for (path, token, status) in [
        ("/v1/projects", None, 401),
        ("/v1/projects", Some(TOKEN), 403),
        ("/v1/projects/alpha", Some(OBSERVER_TOKEN), 403),
        ("/v1/stats", Some("wrong-wrong-wrong-wrong"), 401),
    ] {
        assert_eq!(gateway.http_get(path, token).await.0, status, "{path}");
    }
    assert_eq!(
        gateway
            .http_post("/v1/projects/alpha/restart", Some(TOKEN))
            .await
            .0,
        403
    );
    assert_eq!(
        gateway
            .http_post("/v1/projects/nobody/restart", Some(ADMIN_TOKEN))
            .await
            .0,
        404
    );

    let mut ws = gateway.client("alpha").await;
    let (_observer, _) = gateway.client_with("alpha", OBSERVER_TOKEN, None).await;
    ws.send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    ws.recv_until(is_done).await;

    let detail = admin_json(&gateway, "/v1/projects/alpha").await;
    assert_eq!(detail["state"], "ready");
    assert_eq!(detail["model"], "claude-sonnet-4-5");
    assert_eq!(detail["busy"], false);
    assert_eq!(detail["clients"], 2);
    assert!(detail["usage"]["output"].as_u64().unwrap() > 0);
    assert!(detail["cost_usd"].as_f64().unwrap() > 0.0);
    assert!(detail["rss_bytes"].as_u64().unwrap() > 1_000_000);
    assert!(detail["cpu_seconds"].as_f64().is_some());
    assert!(detail["uptime_secs"].as_u64().is_some());
    let roles: Vec<&str> = detail["clients_detail"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles.len(), 2);
    assert!(roles.contains(&"client") && roles.contains(&"observer"));
    assert!(detail["stderr_tail"].is_array());
    let list = admin_json(&gateway, "/v1/projects").await;
    assert_eq!(list["projects"][0]["project"], "alpha");
    let stats = admin_json(&gateway, "/v1/stats").await;
    assert!(stats["frames_total"]["child_to_gateway"].as_u64().unwrap() > 0);
    assert_eq!(stats["children"]["idle"], 1);
    let openapi = gateway.http_get("/v1/openapi.json", None).await;
    assert_eq!(openapi.0, 200);
    let doc: Value = serde_json::from_str(&openapi.1).unwrap();
    assert!(doc["paths"]["/v1/projects/{project}/abort"]["post"].is_object());

    // Abort: the running prompt ends as aborted.
    ws.send(json!({"id":"2","type":"prompt","message":"long"}))
        .await;
    ws.recv_until(|f| f["type"] == "text_delta").await;
    let busy = admin_json(&gateway, "/v1/projects/alpha").await;
    assert_eq!(busy["busy"], true);
    let stats = admin_json(&gateway, "/v1/stats").await;
    assert_eq!(stats["children"]["busy"], 1);
    assert!(busy["busy_since_secs"].as_u64().is_some());
    assert_eq!(
        gateway
            .http_post("/v1/projects/alpha/abort", Some(ADMIN_TOKEN))
            .await
            .0,
        202
    );
    let frames = ws.recv_until(is_done).await;
    let end = frames.iter().find(|f| f["type"] == "turn_end").unwrap();
    assert_eq!(end["stop"], "aborted");

    // Restart: the client stays attached and sees the child go and come back.
    let old_pid = admin_json(&gateway, "/v1/projects/alpha").await["pid"].clone();
    assert_eq!(
        gateway
            .http_post("/v1/projects/alpha/restart", Some(ADMIN_TOKEN))
            .await
            .0,
        202
    );
    let frames = ws.recv_until(|f| f["type"] == "child_started").await;
    let exited = frames.iter().find(|f| f["type"] == "child_exited").unwrap();
    assert_eq!(exited["reason"], "restart");
    let after = admin_json(&gateway, "/v1/projects/alpha").await;
    assert_ne!(after["pid"], old_pid);
    assert_eq!(after["last_exit"]["reason"], "restart");
    let messages = ws.request(json!({"id":"m","type":"get_messages"})).await;
    assert!(
        !messages["data"]["messages"].as_array().unwrap().is_empty(),
        "conversation kept"
    );

    // An unknown action: refused like any admin route without the admin
    // token, named only to it, and nothing happens to the child.
    let post = |path: &'static str, token: Option<&'static str>| gateway.http_post(path, token);
    assert_eq!(post("/v1/projects/alpha/kill", None).await.0, 401);
    let (status, body) = post("/v1/projects/alpha/kill", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("unknown action"), "{body}");
    assert_eq!(
        admin_json(&gateway, "/v1/projects/alpha").await["pid"],
        after["pid"]
    );

    // Stop: the client is closed with 1001 and the project disappears.
    assert_eq!(
        gateway
            .http_post("/v1/projects/alpha/stop", Some(ADMIN_TOKEN))
            .await
            .0,
        202
    );
    assert_eq!(ws.closed().await.map(|c| c.0), Some(1001));
    let list = admin_json(&gateway, "/v1/projects").await;
    assert_eq!(list["projects"], json!([]));
}

/// Polls `/v1/events` until one matches `wanted` (bounded by the read
/// timeout of every admin call, times the 100 ms between polls).
async fn wait_for_event(gateway: &Gateway, wanted: impl Fn(&Value) -> bool) -> Value {
    for _ in 0..200 {
        let events = admin_json(gateway, "/v1/events").await;
        if let Some(found) = events["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| wanted(e))
        {
            return found.clone();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "no such event in {}",
        admin_json(gateway, "/v1/events").await
    );
}

/// Project directories that never ran are listed with `?all=true` and
/// started by an admin without a client, under the same name rules as an
/// attach and the same `--max-children` bound; what happens to children
/// shows in `/v1/events`.
#[tokio::test]
async fn admin_lists_directories_that_never_ran_and_starts_them() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--max-children")
        .arg("1")
        .spawn()
        .await;
    std::fs::create_dir(gateway.root.join("gamma")).unwrap();
    std::fs::write(gateway.root.join("notes.txt"), "not a project").unwrap();
    std::os::unix::fs::symlink(gateway.root.join("alpha"), gateway.root.join("alias")).unwrap();

    let list = admin_json(&gateway, "/v1/projects?all=true").await;
    let names: Vec<&str> = list["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["project"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["alpha", "beta", "gamma"], "{list}");
    for project in list["projects"].as_array().unwrap() {
        assert_eq!(project["running"], false, "{project}");
        assert_eq!(project["state"], "stopped", "{project}");
    }
    assert_eq!(list["truncated"], false);
    let running = admin_json(&gateway, "/v1/projects").await;
    assert_eq!(
        running["projects"],
        json!([]),
        "without ?all only running ones"
    );

    // Refusals: the token, then the name exactly as an attach checks it.
    let post = |path: &'static str, token: Option<&'static str>| gateway.http_post(path, token);
    assert_eq!(post("/v1/projects/gamma/start", None).await.0, 401);
    assert_eq!(post("/v1/projects/gamma/start", Some(TOKEN)).await.0, 403);
    for (path, status) in [
        ("/v1/projects/missing/start", 404),
        ("/v1/projects/alias/start", 404),
        ("/v1/projects/notes.txt/start", 404),
        ("/v1/projects/..%2Falpha/start", 400),
        ("/v1/projects/a%20b/start", 400),
    ] {
        let (got, body) = post(path, Some(ADMIN_TOKEN)).await;
        assert_eq!(got, status, "{path}: {body}");
        let error: Value = serde_json::from_str(&body).unwrap();
        assert!(error["error"].is_string(), "{path}: {body}");
    }
    assert!(gateway.child_pids().is_empty(), "no refused start spawns");

    // Start: answered once the child is ready; a second start is a no-op.
    let (status, body) = post("/v1/projects/gamma/start", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let gamma = admin_json(&gateway, "/v1/projects/gamma").await;
    assert_eq!(gamma["state"], "ready", "{gamma}");
    assert_eq!(gamma["clients"], 0, "the start leaves no client behind");
    let pid = gamma["pid"].as_u64().unwrap();
    assert_eq!(
        post("/v1/projects/gamma/start", Some(ADMIN_TOKEN)).await.0,
        200
    );
    assert_eq!(admin_json(&gateway, "/v1/projects/gamma").await["pid"], pid);
    let list = admin_json(&gateway, "/v1/projects?all=true").await;
    let gamma = list["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["project"] == "gamma")
        .unwrap();
    assert_eq!(gamma["running"], true, "{list}");
    let started = wait_for_event(&gateway, |e| {
        e["kind"] == "child_started" && e["project"] == "gamma"
    })
    .await;
    assert_eq!(started["pid"], pid);

    // --max-children 1 and gamma has a client: no slot for beta.
    let mut ws = gateway.client("gamma").await;
    ws.request(json!({"id":"1","type":"ping"})).await;
    let (status, body) = post("/v1/projects/beta/start", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("--max-children"), "{body}");

    // A stop shows in the events with its reason.
    assert_eq!(
        post("/v1/projects/gamma/stop", Some(ADMIN_TOKEN)).await.0,
        202
    );
    assert_eq!(ws.closed().await.map(|c| c.0), Some(1001));
    let exited = wait_for_event(&gateway, |e| {
        e["kind"] == "child_exited" && e["project"] == "gamma"
    })
    .await;
    assert_eq!(exited["reason"], "admin", "{exited}");
    assert_eq!(exited["pid"], pid);
    let (_, last) = {
        let events = admin_json(&gateway, "/v1/events").await;
        (events.clone(), events["last_seq"].as_u64().unwrap())
    };
    let newer = admin_json(&gateway, &format!("/v1/events?after={last}")).await;
    assert_eq!(newer["events"], json!([]));

    // The slot is free again: beta starts.
    assert_eq!(
        post("/v1/projects/beta/start", Some(ADMIN_TOKEN)).await.0,
        200
    );
}
