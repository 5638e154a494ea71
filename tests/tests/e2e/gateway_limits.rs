//! End-to-end: resource limits and containment of the gateway's children.
//! A fork bomb and a memory hog in project A get A's child killed, counted
//! and restarted while project B keeps answering; a host without the
//! sandbox's features makes the gateway refuse to start (unless
//! `--sandbox off`); a project directory swapped for a symlink, or an alias
//! symlink, never gets an agent running outside the projects root.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corral_e2e::gateway::{serve_exit, Gateway, GatewaySpawn, Ws, WsEvent, ADMIN_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

/// Each of B's pings must be answered within this.
const PING_TIMEOUT: Duration = Duration::from_secs(1);

async fn admin_json(gateway: &Gateway, path: &str) -> Value {
    let (status, body) = gateway.http_get(path, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

/// `corral_child_exits_total{reason="REASON"}`.
async fn exits(gateway: &Gateway, reason: &str) -> f64 {
    let (status, text) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{text}");
    let name = format!("corral_child_exits_total{{reason=\"{reason}\"}}");
    text.lines()
        .find_map(|l| l.strip_prefix(&name))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing"))
}

/// Pings project B in a loop until `stop`; every ping must be answered
/// within [`PING_TIMEOUT`]. Returns how many were.
fn keep_pinging(mut ws: Ws, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let answered = Arc::new(AtomicU64::new(0));
    tokio::spawn(async move {
        let mut n = 0u64;
        while !stop.load(Ordering::SeqCst) {
            n += 1;
            let id = format!("b-{n}");
            let reply =
                tokio::time::timeout(PING_TIMEOUT, ws.request(json!({"id": id, "type": "ping"})))
                    .await
                    .unwrap_or_else(|_| {
                        panic!("B's ping {n} was not answered within {PING_TIMEOUT:?}")
                    });
            assert_eq!(reply["success"], true, "{reply}");
            answered.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        answered.load(Ordering::SeqCst)
    })
}

/// Runs `command` in A's bash tool and waits until A's child was killed
/// for `reason` and restarted; returns the `child_exited` event.
async fn run_until_killed(ws: &mut Ws, mock: &MockLlm, command: &str, reason: &str) -> Value {
    assert_eq!(mock.remaining(), 0, "the mock's script is used up");
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": command, "timeout": 120}),
    ));
    ws.send(json!({"id":"run","type":"prompt","message":"go"}))
        .await;
    let frames = ws
        .recv_until(|f| {
            f["type"] == "child_started" || f["type"] == "child_exited" && f["reason"] != reason
        })
        .await;
    let exited = frames
        .iter()
        .find(|f| f["type"] == "child_exited")
        .cloned()
        .unwrap_or_else(|| panic!("no child_exited: {}", brief(&frames)));
    assert_eq!(exited["reason"], reason, "{exited}");
    assert_eq!(exited["restarting"], true, "{exited}");
    assert!(
        frames.iter().any(|f| f["type"] == "done"),
        "the run ended for the client: {}",
        brief(&frames)
    );
    assert_eq!(frames.last().unwrap()["type"], "child_started");
    exited
}

#[tokio::test]
async fn a_fork_bomb_and_a_memory_hog_kill_only_their_own_child() {
    corral_e2e::prerequisites::PYTHON3.require();
    let mock = MockLlm::start().await;
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--child-pids-max")
        .arg("64")
        .arg("--child-memory-max")
        .arg("64MiB")
        .spawn()
        .await;
    let stats = admin_json(&gateway, "/v1/stats").await;
    let sandbox = &stats["sandbox"];
    assert_eq!(sandbox["enabled"], true, "{stats}");
    assert_eq!(sandbox["limits"]["memory_max"], 64 << 20, "{stats}");
    assert_eq!(sandbox["limits"]["pids_max"], 64, "{stats}");
    assert_ne!(sandbox["limits"]["backend"], "none", "{stats}");

    let stop = Arc::new(AtomicBool::new(false));
    let pinger = keep_pinging(gateway.client("beta").await, stop.clone());
    let mut alpha = gateway.client("alpha").await;

    // A fork bomb, bounded (2^12 processes) in case the limit were missing.
    let bomb = "bomb() { [ \"$1\" -gt 0 ] && { bomb $(($1 - 1)) & bomb $(($1 - 1)) & }; sleep 60; }; bomb 11";
    run_until_killed(&mut alpha, &mock, bomb, "pids_limit").await;
    assert_eq!(exits(&gateway, "pids_limit").await, 1.0);
    let project = admin_json(&gateway, "/v1/projects/alpha").await;
    assert_eq!(project["last_exit"]["reason"], "pids_limit", "{project}");
    assert_eq!(project["state"], "ready", "{project}");

    let hog = "python3 -c 'a = []\nwhile True: a.append(b\"x\" * (4 << 20))'";
    run_until_killed(&mut alpha, &mock, hog, "memory_limit").await;
    assert_eq!(exits(&gateway, "memory_limit").await, 1.0);
    let project = admin_json(&gateway, "/v1/projects/alpha").await;
    assert_eq!(project["last_exit"]["reason"], "memory_limit", "{project}");

    // The restarted child works.
    mock.push(Turn::text("still here"));
    alpha
        .send(json!({"id":"2","type":"prompt","message":"hi"}))
        .await;
    let frames = alpha.recv_until(|f| f["type"] == "done").await;
    assert!(frames.iter().any(|f| f.to_string().contains("still here")));

    stop.store(true, Ordering::SeqCst);
    let answered = pinger.await.unwrap();
    assert!(answered > 0);
    assert_eq!(exits(&gateway, "crash").await, 0.0);
}

/// Runs `corral serve` on a fresh root with `args` and `env`, which must
/// make it exit; returns its exit code and stderr.
async fn serve_refused(args: &[&str], env: &[(&str, &str)]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("projects"), dir.path().join("state"));
    std::fs::create_dir(&root).unwrap();
    let mut all: Vec<&std::ffi::OsStr> = vec![
        "--projects-root".as_ref(),
        root.as_os_str(),
        "--state-dir".as_ref(),
        state.as_os_str(),
    ];
    all.extend(args.iter().map(std::ffi::OsStr::new));
    serve_exit(&all, env).await
}

#[tokio::test]
async fn a_host_without_the_sandbox_refuses_to_start_unless_sandbox_off() {
    for missing in ["landlock", "userns"] {
        let (code, stderr) =
            serve_refused(&[], &[("CORRAL_SANDBOX_SIMULATE_MISSING", missing)]).await;
        assert_eq!(code, 1, "{stderr}");
        assert!(
            stderr.contains("corral: the agent sandbox is unavailable: "),
            "{stderr}"
        );
        assert!(stderr.contains("start with --sandbox off"), "{stderr}");
    }

    // A child that finds no sandbox (the probe passed) is a start failure
    // whose hello error is the agent's own reason.
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--child-env")
        .arg("CORRAL_SANDBOX_SIMULATE_MISSING=landlock")
        .spawn()
        .await;
    let (_ws, reply) = gateway.client_with("alpha", TOKEN, None).await;
    assert_eq!(reply["success"], false, "{reply}");
    let error = reply["error"].as_str().unwrap();
    assert!(
        error.contains("the agent failed to start: the agent sandbox is unavailable: ")
            && error.to_lowercase().contains("landlock"),
        "{error}"
    );
    drop(gateway);

    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--sandbox")
        .arg("off")
        .env("CORRAL_SANDBOX_SIMULATE_MISSING", "landlock")
        .capture_log()
        .spawn()
        .await;
    let stats = admin_json(&gateway, "/v1/stats").await;
    assert_eq!(stats["sandbox"]["enabled"], false, "{stats}");
    assert_eq!(stats["sandbox"]["limits"]["backend"], "none", "{stats}");
    let log = std::fs::read_to_string(&gateway.log).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("WARN") && l.contains("sandbox is OFF")),
        "{log}"
    );
    // Children run (unconfined) and answer.
    let mut ws = gateway.client("alpha").await;
    let pong = ws.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
}

/// Every process of an agent (outer, init, agent) whose working directory
/// lies under `dir`.
fn agents_in(dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            comm.starts_with("corral-")
                && std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .is_ok_and(|cwd| cwd.starts_with(dir))
        })
        .collect()
}

#[tokio::test]
async fn symlinked_projects_never_run_outside_the_root() {
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha", "beta"])
        .spawn()
        .await;
    let outside = tempfile::tempdir().unwrap();
    let outside = outside.path().canonicalize().unwrap();

    // An alias of a real project is refused, like any symlink.
    std::os::unix::fs::symlink(gateway.root.join("beta"), gateway.root.join("alias")).unwrap();
    let (status, body) = gateway
        .http_get("/v1/projects/alias/rpc", Some(TOKEN))
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("\"alias\" is a symbolic link"), "{body}");

    // A running project whose directory is swapped for a link leaving the
    // root does not restart there.
    let mut alpha = gateway.client("alpha").await;
    assert_eq!(
        alpha.request(json!({"id":"1","type":"ping"})).await["success"],
        true
    );
    std::fs::rename(gateway.root.join("alpha"), outside.join("alpha")).unwrap();
    std::os::unix::fs::symlink(outside.join("alpha"), gateway.root.join("alpha")).unwrap();
    let (status, body) = gateway
        .http_post("/v1/projects/alpha/restart", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202, "{body}");
    let close = loop {
        match alpha.next_event().await {
            WsEvent::Closed(close) => break close,
            WsEvent::Frame(_) => continue,
        }
    };
    let (_, reason) = close.expect("a close frame with a reason");
    assert!(reason.contains("\"alpha\" is a symbolic link"), "{reason}");
    let (status, body) = gateway
        .http_get("/v1/projects/alpha/rpc", Some(TOKEN))
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("symbolic link"), "{body}");
    let (status, _) = gateway
        .http_get("/v1/projects/alpha", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 404, "the project has no running agent");

    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(agents_in(&outside), Vec::<u32>::new());
    // B still runs, inside the root.
    let mut beta = gateway.client("beta").await;
    assert_eq!(
        beta.request(json!({"id":"1","type":"ping"})).await["success"],
        true
    );
    assert!(!agents_in(&gateway.root.join("beta")).is_empty());
}
