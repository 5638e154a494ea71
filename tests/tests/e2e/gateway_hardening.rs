//! End-to-end: the gateway against hostile or unlucky clients. Memory
//! before authentication, idle connections under a low open-file limit,
//! oversize frames, and the bytes a client that never reads may hold.
//! Authentication under attack is `gateway_auth`.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corral_e2e::flood::{
    metric, metrics_text, raise_own_nofile, try_client, wait_for_metrics, zut_hello,
};
use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, WsEvent, OBSERVER_TOKEN, TOKEN};
use corral_e2e::raw_ws::{close_for_frame, read_close, stream_frame, timeout, Raw};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::net::TcpStream;

const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------
// Metrics and process helpers

/// Resident memory of the gateway, in bytes.
fn rss(gateway: &Gateway) -> u64 {
    let pid = gateway.child.id().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kib * 1024
}

// ---------------------------------------------------------------------------
// Before authentication

/// 200 sockets upgrade, never say hello and each streams a 15 MiB frame
/// (one byte short): the gateway refuses each at the frame's header, and
/// its resident memory grows by at most 64 MiB.
#[tokio::test]
async fn unauthenticated_big_frames_cost_almost_no_memory() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    // Warm up the paths a connection takes.
    let mut ws = gateway.client("alpha").await;
    ws.request(json!({"id":"1","type":"get_state"})).await;
    let before = rss(&gateway);
    let mut sockets = Vec::new();
    for _ in 0..200 {
        sockets.push(Raw::open(&gateway, None, "").await);
    }
    let attacks = sockets.iter_mut().map(|raw| async {
        tokio::time::timeout(
            Duration::from_secs(30),
            stream_frame(&mut raw.write, 15 * MIB - 1),
        )
        .await
    });
    join_all(attacks).await;
    let text = wait_for_metrics(&gateway, |m| {
        metric(m, "corral_auth_failures_total{reason=\"hello_too_large\"}") >= 200.0
    })
    .await;
    let grown = rss(&gateway).saturating_sub(before);
    assert!(grown <= 64 * MIB, "the gateway grew by {} MiB", grown / MIB);
    assert!(
        metric(
            &text,
            "corral_invalid_frames_total{reason=\"too_large\",source=\"client\"}"
        ) >= 200.0
    );
    drop(sockets);
}

/// A client that sends more than --max-hello-bytes before its hello gets
/// close 1009 with a reason; a hello just under the limit is read.
#[tokio::test]
async fn more_than_max_hello_bytes_before_auth_closes_with_1009() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--max-hello-bytes")
        .arg("4KiB")
        .spawn()
        .await;
    let raw = Raw::open(&gateway, None, "").await;
    let (code, reason) = close_for_frame(raw, MIB).await;
    assert_eq!(code, 1009, "{reason}");
    assert!(reason.contains("4096 bytes"), "{reason}");
    let text = metrics_text(&gateway).await;
    assert_eq!(
        metric(
            &text,
            "corral_auth_failures_total{reason=\"hello_too_large\"}"
        ),
        1.0
    );

    // Padding the hello to just under the limit is fine.
    let mut raw = Raw::open(&gateway, None, "").await;
    let pad = "x".repeat(3500);
    let hello = json!({"id":"h","type":"hello","token":TOKEN,"pad":pad}).to_string();
    raw.send_text(&hello).await;
    let reply = raw.recv().await;
    assert_eq!(reply["success"], true, "{reply}");
}

// ---------------------------------------------------------------------------
// After authentication

/// A 17 MiB frame from an authenticated client (over the default 16 MiB
/// --max-frame-bytes): close 1009 with a reason, counted as an invalid
/// frame; the gateway keeps serving.
#[tokio::test]
async fn a_frame_over_max_frame_bytes_after_auth_closes_with_1009() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let mut raw = Raw::open(&gateway, None, "").await;
    raw.send_text(&zut_hello(TOKEN)).await;
    let reply = raw.recv().await;
    assert_eq!(reply["success"], true, "{reply}");
    let (code, reason) = close_for_frame(raw, 17 * MIB).await;
    assert_eq!(code, 1009, "{reason}");
    assert!(reason.contains("16777216 bytes"), "{reason}");
    let text = metrics_text(&gateway).await;
    assert_eq!(
        metric(
            &text,
            "corral_invalid_frames_total{reason=\"too_large\",source=\"client\"}"
        ),
        1.0
    );
    let mut ws = gateway.client("alpha").await;
    let pong = ws.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
}

// ---------------------------------------------------------------------------
// Connections

/// With the open-file limit at 1024 (soft and hard) and 1100 idle TCP
/// connections, the oldest unauthenticated ones are closed to make room
/// (the header timeout is long, so it is not what frees the slots):
/// `/healthz` answers and a legitimate client connects, says hello and
/// pings while the idle sockets are still open, and the evictions are
/// counted.
#[tokio::test]
async fn idle_connections_under_a_low_fd_limit_do_not_lock_clients_out() {
    if !raise_own_nofile(4096) {
        eprintln!("skipped: this process cannot hold 1100 sockets");
        return;
    }
    let gateway = GatewaySpawn::default()
        .echo()
        .nofile(1024)
        .arg("--header-timeout")
        .arg("120s")
        .spawn()
        .await;
    let pid = gateway.child.id().unwrap();
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let open_files = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    assert!(
        open_files
            .split_whitespace()
            .filter(|w| *w == "1024")
            .count()
            == 2,
        "{open_files}"
    );
    let mut idle = Vec::new();
    for _ in 0..1100 {
        idle.push(TcpStream::connect(gateway.addr).await.unwrap());
    }
    let (status, body) = gateway.http_get("/healthz", None).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"), "under attack");
    let pong = timeout(async {
        loop {
            if let Ok(pong) = try_client(&gateway, "alpha", TOKEN).await {
                return pong;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    assert_eq!(pong["success"], true, "{pong}");
    let (status, body) = gateway.http_get("/healthz", None).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let text = metrics_text(&gateway).await;
    // 1100 idle sockets against a cap of 640 (1024 less the headroom).
    assert!(
        metric(
            &text,
            "corral_connections_refused_total{reason=\"evicted\"}"
        ) >= 400.0,
        "{text}"
    );
    drop(idle);
}

// ---------------------------------------------------------------------------
// Bytes waiting for clients

/// The text blocks of a message or event.
fn text_of(value: &Value) -> String {
    value["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|b| b["text"].as_str())
        .collect()
}

/// The first frame matching `until`, waiting up to `limit` for each.
async fn frame_within(ws: &mut Ws, limit: Duration, until: impl Fn(&Value) -> bool) -> Value {
    loop {
        match ws.next_event_within(limit).await {
            Some(WsEvent::Frame(frame)) if until(&frame) => return frame,
            Some(WsEvent::Frame(_)) => {}
            other => panic!("the stream ended: {other:?}"),
        }
    }
}

/// Sends a request; its response, however long the agent takes.
async fn slow_request(ws: &mut Ws, request: Value) -> Value {
    let id = request["id"].clone();
    ws.send(request).await;
    frame_within(ws, Duration::from_secs(300), |f| {
        f["type"] == "response" && f["id"] == id
    })
    .await
}

/// Samples the gateway's resident memory until `stop`; returns the peak.
fn peak_rss(gateway: &Gateway, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<u64> {
    let pid = gateway.child.id().unwrap();
    tokio::spawn(async move {
        let mut peak = 0;
        while !stop.load(Ordering::SeqCst) {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let kib: u64 = status
                .lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .unwrap_or(0);
            peak = peak.max(kib * 1024);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        peak
    })
}

/// A 12 MiB conversation; an observer that never reads sends 270
/// `get_messages`. The gateway's memory stays within 64 MiB of its
/// configured bound on what waits for clients, the observer is closed with
/// 4000, a client that reads gets its own 12 MiB reply whole meanwhile, and
/// the observer, reconnecting with `resume_after`, gets every event.
#[tokio::test]
async fn a_client_that_never_reads_is_bounded_in_bytes_and_closed_with_4000() {
    const TOTAL: u64 = 64 * MIB;
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--sandbox")
        .arg("off")
        .arg("--client-buffer-bytes")
        .arg("32MiB")
        .arg("--total-client-buffer-bytes")
        .arg(TOTAL.to_string())
        .spawn()
        .await;
    let (mut reader, hello) = gateway.client_with("alpha", TOKEN, None).await;
    assert_eq!(hello["success"], true, "{hello}");
    let start = hello["data"]["gateway"]["last_seq"].as_u64().unwrap();
    // 6 MiB said, 6 MiB echoed: a 12 MiB conversation.
    let message: String = (0..6 * MIB)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    reader
        .send(json!({"id":"p","type":"prompt","message": message}))
        .await;
    frame_within(&mut reader, Duration::from_secs(120), |f| {
        f["type"] == "done"
    })
    .await;
    let whole = |reply: &Value| {
        let messages = reply["data"]["messages"].as_array().unwrap();
        messages.len() == 2 && text_of(&messages[0]) == message && text_of(&messages[1]) == message
    };
    let first = slow_request(&mut reader, json!({"id":"warm","type":"get_messages"})).await;
    assert!(whole(&first), "the conversation is 12 MiB");
    let before = rss(&gateway);

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = peak_rss(&gateway, stop.clone());
    let bearer = format!("Authorization: Bearer {OBSERVER_TOKEN}\r\n");
    let mut observer = Raw::open(&gateway, None, &bearer).await;
    for i in 0..270 {
        let request = json!({"id": format!("m{i}"), "type": "get_messages"});
        observer.send_text(&request.to_string()).await;
    }
    // A client that reads is served meanwhile, its 12 MiB reply whole.
    let reply = slow_request(&mut reader, json!({"id":"mine","type":"get_messages"})).await;
    assert!(whole(&reply), "the reader's reply is whole");
    let text = tokio::time::timeout(Duration::from_secs(300), async {
        loop {
            let text = metrics_text(&gateway).await;
            if metric(
                &text,
                "corral_client_buffer_closes_total{reason=\"client_buffer\"}",
            ) >= 1.0
            {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("the observer is closed for its bytes");
    assert!(metric(&text, "corral_client_buffer_bytes") <= TOTAL as f64);
    let (code, reason) = read_close(&mut observer.read).await.expect("a close frame");
    assert_eq!(code, 4000, "{reason}");
    assert!(reason.contains("--client-buffer-bytes"), "{reason}");
    // The agent's remaining answers pass through and are dropped.
    let pong = slow_request(&mut reader, json!({"id":"ping","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
    stop.store(true, Ordering::SeqCst);
    let peak = sampler.await.unwrap();
    let grown = peak.saturating_sub(before);
    eprintln!(
        "gateway RSS {} MiB before, {} MiB at most during the flood",
        before / MIB,
        peak / MIB
    );
    assert!(
        grown <= TOTAL + 64 * MIB,
        "the gateway grew by {} MiB",
        grown / MIB
    );

    // Reconnecting with resume_after, it gets every event since.
    let (mut again, hello) = gateway
        .client_with("alpha", OBSERVER_TOKEN, Some(start))
        .await;
    assert_eq!(hello["success"], true, "{hello}");
    assert_eq!(hello["data"]["gateway"]["gap"], false, "{hello}");
    let last = hello["data"]["gateway"]["last_seq"].as_u64().unwrap();
    let mut seqs = Vec::new();
    let (mut said, mut echoed) = (String::new(), String::new());
    while seqs.last() != Some(&last) {
        let frame = match again.next_event_within(Duration::from_secs(60)).await {
            Some(WsEvent::Frame(frame)) => frame,
            other => panic!("the replay ended: {other:?}"),
        };
        match frame["type"].as_str() {
            Some("user_message") => said = text_of(&frame),
            Some("assistant_message") => echoed = text_of(&frame),
            _ => {}
        }
        if let Some(seq) = frame["seq"].as_u64() {
            seqs.push(seq);
        }
    }
    assert_eq!(seqs, ((start + 1)..=last).collect::<Vec<_>>());
    assert!(
        said == message && echoed == message,
        "the 12 MiB events whole"
    );
}
