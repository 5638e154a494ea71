//! End-to-end: the real `corral serve` with real `corral-agent` children on
//! the mock LLM. Sharing one child, replay, crashes, slow clients.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use corral_e2e::harness::is_done;
use std::collections::HashSet;
use std::time::{Duration, Instant};

use corral_e2e::gateway::{GatewaySpawn, OBSERVER_TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

fn seqs(frames: &[Value]) -> Vec<u64> {
    frames.iter().filter_map(|f| f["seq"].as_u64()).collect()
}

fn deltas(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "text_delta")
        .filter_map(|f| f["delta"].as_str())
        .collect()
}

fn strictly_increasing(seqs: &[u64]) -> bool {
    seqs.windows(2).all(|w| w[0] < w[1])
}

#[tokio::test]
async fn two_clients_share_one_child() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("shared answer"));
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    let mut a = gateway.client("alpha").await;
    let mut b = gateway.client("alpha").await;

    // The same id from two clients: each gets exactly its own response.
    a.send(json!({"id":"1","type":"ping"})).await;
    b.send(json!({"id":"1","type":"ping"})).await;
    let ra = a.recv().await;
    let rb = b.recv().await;
    for r in [&ra, &rb] {
        assert_eq!(r["type"], "response");
        assert_eq!(r["id"], "1");
        assert_eq!(r["data"]["pong"], true);
    }
    assert_eq!(gateway.child_pids().len(), 1, "one child for the project");

    a.send(json!({"id":"p","type":"prompt","message":"hi"}))
        .await;
    let fa = a.recv_until(is_done).await;
    let fb = b.recv_until(is_done).await;
    assert_eq!(fa.iter().filter(|f| f["type"] == "response").count(), 1);
    assert_eq!(fa[0]["id"], "p", "the prompt's response goes to A first");
    assert!(
        fb.iter().all(|f| f["type"] != "response"),
        "B never sees A's response: {}",
        brief(&fb)
    );
    let events_a: Vec<&Value> = fa.iter().filter(|f| f["type"] != "response").collect();
    let events_b: Vec<&Value> = fb.iter().collect();
    assert_eq!(events_a, events_b, "both clients see the same events");
    let s = seqs(&fb);
    assert_eq!(s.len(), fb.len(), "every event has a seq");
    assert!(strictly_increasing(&s), "{s:?}");
    assert_eq!(deltas(&fb), "shared answer");
}

#[tokio::test]
async fn observers_may_only_read() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let (mut observer, hello) = gateway.client_with("alpha", OBSERVER_TOKEN, None).await;
    assert_eq!(hello["data"]["gateway"]["role"], "observer");
    let denied = observer
        .request(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    assert_eq!(denied["success"], false);
    assert!(
        denied["error"].as_str().unwrap().contains("observer"),
        "{denied}"
    );
    let state = observer.request(json!({"id":"2","type":"get_state"})).await;
    assert_eq!(state["success"], true);
}

#[tokio::test]
async fn hello_reports_child_and_gateway_data() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let (_ws, hello) = gateway
        .client_with("alpha", corral_e2e::gateway::TOKEN, None)
        .await;
    assert_eq!(hello["id"], "hello");
    let data = &hello["data"];
    assert_eq!(data["protocol_version"], 1);
    assert_eq!(data["provider"], "echo");
    assert_eq!(data["model"], "echo");
    assert!(data["version"].is_string());
    let gw = &data["gateway"];
    assert_eq!(gw["project"], "alpha");
    assert_eq!(gw["role"], "client");
    assert!(gw["client_id"].is_string());
    assert!(gw["version"].is_string());
    assert!(gw["last_seq"].is_u64());
}

#[tokio::test]
async fn reconnect_with_resume_after_misses_nothing() {
    let mock = MockLlm::start().await;
    let chunks: Vec<String> = (0..30).map(|i| format!("w{i} ")).collect();
    let full: String = chunks.concat();
    mock.push(Turn::Slow {
        chunks,
        delay: Duration::from_millis(30),
    });
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    ws.send(json!({"id":"1","type":"prompt","message":"stream"}))
        .await;
    let mut seen = ws
        .recv_until(|f| f["type"] == "text_delta" && f["delta"] == "w5 ")
        .await;
    let last = *seqs(&seen).last().unwrap();
    drop(ws);
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (mut ws, hello) = gateway
        .client_with("alpha", corral_e2e::gateway::TOKEN, Some(last))
        .await;
    assert_eq!(hello["success"], true);
    assert!(hello["data"]["gateway"]["gap"] != true);
    let rest = ws.recv_until(is_done).await;
    seen.extend(rest);
    let all = seqs(&seen);
    let unique: HashSet<u64> = all.iter().copied().collect();
    assert_eq!(unique.len(), all.len(), "no duplicate seq");
    assert!(strictly_increasing(&all));
    assert_eq!(deltas(&seen), full);
}

#[tokio::test]
async fn a_crashed_child_ends_the_run_and_restarts_with_its_conversation() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("first reply"));
    mock.push(Turn::Slow {
        chunks: (0..200).map(|i| format!("c{i} ")).collect(),
        delay: Duration::from_millis(50),
    });
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    ws.send(json!({"id":"1","type":"prompt","message":"one"}))
        .await;
    ws.recv_until(is_done).await;
    let mut other = gateway.client("beta").await;

    ws.send(json!({"id":"2","type":"prompt","message":"two"}))
        .await;
    ws.recv_until(|f| f["type"] == "text_delta").await;
    let pids = gateway.child_pids();
    let alpha_pid = ws.request(json!({"id":"s","type":"get_state"})).await;
    assert_eq!(alpha_pid["success"], true);
    assert_eq!(pids.len(), 2);
    // Kill alpha's child: the one that is not beta's.
    let status = gateway
        .http_get("/v1/projects", Some(corral_e2e::gateway::ADMIN_TOKEN))
        .await;
    let list: Value = serde_json::from_str(&status.1).unwrap();
    let alpha = list["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["project"] == "alpha")
        .unwrap();
    let pid = alpha["pid"].as_u64().unwrap() as i32;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    let frames = ws.recv_until(|f| f["type"] == "child_started").await;
    let kinds: Vec<&str> = frames
        .iter()
        .map(|f| f["type"].as_str().unwrap())
        .filter(|t| *t != "text_delta")
        .collect();
    let exited = kinds
        .iter()
        .position(|t| *t == "child_exited")
        .expect("child_exited");
    let done = kinds.iter().position(|t| *t == "done").expect("done");
    assert!(exited < done, "{kinds:?}");
    assert_eq!(kinds.last(), Some(&"child_started"));
    let exit = frames.iter().find(|f| f["type"] == "child_exited").unwrap();
    assert_eq!(exit["signal"], 9);
    assert_eq!(exit["restarting"], true);
    let end = frames.iter().find(|f| f["type"] == "turn_end").unwrap();
    assert_eq!(end["stop"], "error");
    assert!(strictly_increasing(&seqs(&frames)));

    // The other project kept working throughout.
    assert_eq!(
        other.request(json!({"id":"b","type":"ping"})).await["success"],
        true
    );
    // The restarted child has the completed exchange from its journal.
    let messages = ws.request(json!({"id":"m","type":"get_messages"})).await;
    let texts: Vec<String> = messages["data"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"][0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert!(
        texts.starts_with(&["one".to_string(), "first reply".to_string()]),
        "{texts:?}"
    );
}

#[tokio::test]
async fn a_client_that_stops_reading_does_not_slow_the_others() {
    let mock = MockLlm::start().await;
    // A long, fast stream: 2000 deltas of 2 KiB, far more than socket
    // buffers and the 500-event ring hold.
    let pad = "x".repeat(2048);
    let chunks: Vec<String> = (0..2000).map(|i| format!("t{i}{pad} ")).collect();
    let full: String = chunks.concat();
    mock.push(Turn::Slow {
        chunks,
        delay: Duration::from_millis(0),
    });
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--replay-events")
        .arg("500")
        .spawn()
        .await;
    let mut reader = gateway.client("alpha").await;
    let stalled = gateway.client("alpha").await;
    let start = Instant::now();
    reader
        .send(json!({"id":"1","type":"prompt","message":"go"}))
        .await;
    let mut frames = Vec::new();
    loop {
        match reader.next_event_within(Duration::from_secs(20)).await {
            Some(corral_e2e::gateway::WsEvent::Frame(f)) => {
                let done = is_done(&f);
                frames.push(f);
                if done {
                    break;
                }
            }
            other => panic!(
                "after {} frames ({:?}): {other:?}",
                frames.len(),
                start.elapsed()
            ),
        }
    }
    let elapsed = start.elapsed();
    assert_eq!(deltas(&frames), full, "the reading client got every event");
    assert!(elapsed < Duration::from_secs(20), "stream took {elapsed:?}");
    // The stalled client either caught up with everything (socket buffers
    // held it all) or was told it fell behind: never a silent gap.
    let mut stalled = stalled;
    let mut last = None;
    loop {
        match stalled.next_event().await {
            corral_e2e::gateway::WsEvent::Frame(frame) => {
                if let Some(seq) = frame["seq"].as_u64() {
                    if let Some(prev) = last {
                        assert_eq!(seq, prev + 1, "the stalled client saw a gap");
                    }
                    last = Some(seq);
                }
                if is_done(&frame) {
                    break;
                }
            }
            corral_e2e::gateway::WsEvent::Closed(close) => {
                let (code, reason) = close.expect("a close frame with a reason");
                assert_eq!(code, 4000, "{reason}");
                assert!(reason.contains("fell behind"), "{reason}");
                let admin = Some(corral_e2e::gateway::ADMIN_TOKEN);
                let (_, text) = gateway.http_get("/metrics", admin).await;
                assert!(
                    text.contains("corral_slow_client_disconnects_total 1"),
                    "{text}"
                );
                assert!(
                    !text.contains("corral_slow_client_catchups_total 0"),
                    "{text}"
                );
                break;
            }
        }
    }
}
