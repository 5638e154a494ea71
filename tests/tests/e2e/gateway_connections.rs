//! End-to-end: who keeps a connection under `--max-connections`. Floods of
//! keep-alive `GET /healthz` (from project A's own tool, and from outside
//! under a low open-file limit) do not lock out a client with a token or
//! the health probe; when every place is authenticated, the ops reserve
//! still answers `/healthz`, `/readyz` and `/metrics`; one token holds at
//! most `--max-connections-per-token` sessions.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::time::Duration;

use corral_e2e::flood::{metric, metrics_text, raise_own_nofile, try_client, HealthzFlood};
use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN, OBSERVER_TOKEN, TOKEN};
use corral_e2e::http;
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const EVICTED: &str = "corral_connections_refused_total{reason=\"evicted\"}";
const OVER_CAP: &str = "corral_connections_refused_total{reason=\"max_connections\"}";
const PER_TOKEN: &str = "corral_connections_refused_total{reason=\"per_token\"}";

/// Polls `probe` until it succeeds; panics with its last error after
/// `limit` (a failure guard, not a measurement).
async fn eventually<T>(limit: Duration, mut probe: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(e) if tokio::time::Instant::now() >= deadline => panic!("never succeeded: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A client with the token connects, says hello and pings, and
/// `/healthz` answers, while a flood runs.
async fn client_and_probe_get_through(gateway: &Gateway) {
    let pong = eventually(Duration::from_secs(60), async || {
        try_client(gateway, "alpha", TOKEN).await
    })
    .await;
    assert_eq!(pong["success"], true, "{pong}");
    let body = eventually(Duration::from_secs(60), async || {
        match gateway.http_get("/healthz", None).await {
            (200, body) => Ok(body),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(body, "ok\n");
}

// ---------------------------------------------------------------------------
// Floods of keep-alive /healthz

/// What A's tool runs: `N` sockets each sending `GET /healthz` every 3 s
/// and connecting again at once when closed; `flood.ready` once `2 N`
/// answers came back (the sockets are repeating), until `flood.stop`
/// appears.
const FLOOD_PY: &str = r#"
import asyncio, os, resource, sys

host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
answered = connects = 0

async def repeater():
    global answered, connects
    while not os.path.exists("flood.stop"):
        writer = None
        try:
            reader, writer = await asyncio.open_connection(host, port)
            connects += 1
            while not os.path.exists("flood.stop"):
                writer.write(b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n")
                await writer.drain()
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                await reader.readexactly(length)
                answered += 1
                await asyncio.sleep(3)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            pass
        finally:
            if writer is not None:
                writer.close()
        await asyncio.sleep(0.01)

async def main():
    tasks = [asyncio.create_task(repeater()) for _ in range(n)]
    while answered < 2 * n:
        await asyncio.sleep(0.05)
    with open("flood.ready", "w") as f:
        f.write(str(answered))
    await asyncio.gather(*tasks)
    print(f"answered={answered}")
    print(f"connects={connects}")

asyncio.run(main())
"#;

/// 700 sockets repeating `GET /healthz` from project A's bash tool (the
/// sandbox on, tools on the host's network, the gateway on loopback)
/// against a cap of 300: a client
/// with the token connects, says hello and pings, and `/healthz` answers,
/// while they run; the flood's connections were closed to make room.
#[tokio::test]
async fn a_healthz_flood_from_a_tool_does_not_lock_clients_out() {
    corral_e2e::prerequisites::PYTHON3.require();
    let mock = MockLlm::start().await;
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--tool-network")
        .arg("on")
        .arg("--max-connections")
        .arg("300")
        .spawn()
        .await;
    let dir = gateway.root.join("alpha");
    std::fs::write(dir.join("flood.py"), FLOOD_PY).unwrap();
    let mut alpha = gateway.client("alpha").await;
    let command = format!("python3 flood.py 127.0.0.1 {} 700", gateway.addr.port());
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": command, "timeout": 600}),
    ));
    mock.push(Turn::text("ok"));
    alpha
        .send(json!({"id":"run","type":"prompt","message":"flood"}))
        .await;
    let ready = dir.join("flood.ready");
    let guard = tokio::time::timeout(Duration::from_secs(120), async {
        while !ready.exists() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    if guard.await.is_err() {
        let frames = alpha.recv_until(|f| f["type"] == "done").await;
        panic!("the flood never got going: {}", brief(&frames));
    }

    client_and_probe_get_through(&gateway).await;
    let text = metrics_text(&gateway).await;
    assert!(
        metric(&text, EVICTED) > 0.0,
        "the flood filled the cap: {text}"
    );

    std::fs::write(dir.join("flood.stop"), "").unwrap();
    let frames = alpha.recv_until(|f| f["type"] == "done").await;
    let output = frames
        .iter()
        .find(|f| f["type"] == "tool_result")
        .map(|f| f["content"].to_string())
        .unwrap_or_default();
    assert!(output.contains("answered="), "{}", brief(&frames));
    eprintln!("the flood: {output}");
    // A's own session, authenticated, was never closed to make room.
    let pong = alpha.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
}

/// 150 sockets that each upgrade to a WebSocket and never say hello,
/// reconnecting as soon as they are closed, against a cap of 50: a client
/// with the token connects, says hello and pings 30 times out of 30. (Its
/// new connection, not yet read when the next flood connection arrives,
/// must not be taken for a silent one and closed first.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_upgrades_without_hello_does_not_lock_clients_out() {
    use std::sync::atomic::{AtomicU64, Ordering};
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--max-connections")
        .arg("50")
        .spawn()
        .await;
    let upgraded = std::sync::Arc::new(AtomicU64::new(0));
    let flood = corral_e2e::flood::upgrade_flood(&gateway, "alpha", 150, upgraded.clone());
    tokio::time::timeout(Duration::from_secs(120), async {
        while upgraded.load(Ordering::Relaxed) < 500 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the flood never got going");
    let mut failures = Vec::new();
    for attempt in 0..30 {
        if let Err(e) = try_client(&gateway, "alpha", TOKEN).await {
            failures.push(format!("attempt {attempt}: {e}"));
        }
    }
    let during = upgraded.load(Ordering::Relaxed);
    drop(flood);
    assert!(failures.is_empty(), "{}", brief(&failures));
    let text = metrics_text(&gateway).await;
    assert!(metric(&text, EVICTED) > 0.0, "the flood filled the cap");
    eprintln!("{during} upgrades by the flood");
}

/// The same from outside under a soft and hard open-file limit of 1024
/// (a cap of 640): 1100 keep-alive `/healthz` repeaters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthz_flood_under_a_low_fd_limit_does_not_lock_clients_out() {
    if !raise_own_nofile(4096) {
        eprintln!("skipped: this process cannot hold 1100 sockets");
        return;
    }
    let gateway = GatewaySpawn::default().echo().nofile(1024).spawn().await;
    let flood = HealthzFlood::start(&gateway, 1100, Duration::from_secs(3));
    // Every socket is repeating.
    flood.wait_answered(2200).await;

    client_and_probe_get_through(&gateway).await;
    let text = metrics_text(&gateway).await;
    // 1100 sockets against 640 places.
    assert!(
        metric(&text, EVICTED) > 0.0,
        "the flood filled the cap: {text}"
    );
    assert!(flood.connects() >= 1100);
    flood.stop();
}

// ---------------------------------------------------------------------------
// The ops reserve

/// One request on a fresh connection, read until the gateway closes it:
/// the whole answer (a second request on it gets nothing).
async fn raw_exchange(gateway: &Gateway, requests: &str) -> String {
    let mut stream = TcpStream::connect(gateway.addr).await.unwrap();
    stream.write_all(requests.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_string(&mut answer))
        .await
        .expect("the connection was not closed")
        .unwrap();
    answer
}

/// Every place under a cap of 2 is held by an authenticated client:
/// `/healthz`, `/readyz` and `/metrics` are still answered (once per
/// connection, which is then closed), anything else gets 503, and idle
/// sockets cannot take the reserve.
#[tokio::test]
async fn with_every_place_authenticated_the_ops_paths_still_answer() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--max-connections")
        .arg("2")
        .spawn()
        .await;
    let _one = gateway.client("alpha").await;
    let _two = gateway.client("beta").await;
    // Sockets that say nothing churn the reserve but never hold it.
    let mut idle = Vec::new();
    for _ in 0..50 {
        idle.push(TcpStream::connect(gateway.addr).await.unwrap());
    }

    let two_healthz =
        "GET /healthz HTTP/1.1\r\nHost: g\r\n\r\nGET /healthz HTTP/1.1\r\nHost: g\r\n\r\n";
    let answer = raw_exchange(&gateway, two_healthz).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(
        answer.matches("HTTP/1.1").count(),
        1,
        "one answer: {answer}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    let (status, body) = gateway.http_get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (200, "ready\n"));
    let text = metrics_text(&gateway).await;
    assert!(metric(&text, OVER_CAP) >= 3.0, "{text}");

    let (status, _) = gateway.http_get("/v1/stats", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 503, "the admin API needs a regular place");
    let upgrade = "GET /v1/projects/alpha/rpc HTTP/1.1\r\nHost: g\r\nConnection: Upgrade\r\n\
        Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
        Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let answer = raw_exchange(&gateway, upgrade).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("Retry-After: 1") || answer.contains("retry-after: 1"));
    drop(idle);
}

/// `--metrics-listen` answers `/metrics` without a token, and nothing
/// else; sockets that hold its places (more than it keeps) neither lock
/// out a scraper nor pile up descriptors in the gateway.
#[tokio::test]
async fn the_metrics_listener_is_bounded_too() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--metrics-listen")
        .arg("127.0.0.1:0")
        .spawn()
        .await;
    let at = gateway
        .metrics_addr
        .expect("the metrics address is announced");
    let scrape = http::exchange(at, "GET", "/metrics", &[]).await;
    assert_eq!(scrape.status, 200);
    assert!(
        scrape.text().contains("corral_connections"),
        "{}",
        scrape.text()
    );
    let elsewhere = http::exchange(at, "GET", "/v1/stats", &[]).await;
    assert_eq!(elsewhere.status, 404);

    let fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", gateway.child.id().unwrap()))
            .unwrap()
            .count()
    };
    let before = fds();
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(TcpStream::connect(at).await.unwrap());
    }
    let scrape = http::exchange(at, "GET", "/metrics", &[]).await;
    assert_eq!(scrape.status, 200);
    // 16 places, 1 reserved, 64 closing: far fewer than the 200 sockets.
    let held = fds().saturating_sub(before);
    assert!(
        held <= 16 + 1 + 64 + 2,
        "{held} descriptors held for 200 idle sockets"
    );
    drop(idle);
}

/// A plain request without a valid token, kept alive, does not keep its
/// place: at the cap it is closed for a newcomer. One the admin token was
/// accepted for does.
#[tokio::test]
async fn only_a_request_with_the_admin_token_keeps_its_connection() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--max-connections")
        .arg("2")
        .spawn()
        .await;
    let keep_alive = |token: Option<&str>| {
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        format!("GET /v1/stats HTTP/1.1\r\nHost: g\r\n{auth}\r\n")
    };
    let mut admin = TcpStream::connect(gateway.addr).await.unwrap();
    admin
        .write_all(keep_alive(Some(ADMIN_TOKEN)).as_bytes())
        .await
        .unwrap();
    let mut wrong = TcpStream::connect(gateway.addr).await.unwrap();
    wrong
        .write_all(keep_alive(Some("not-the-admin-token-0123456789")).as_bytes())
        .await
        .unwrap();
    for stream in [&mut admin, &mut wrong] {
        let mut buf = [0u8; 4096];
        let n = tokio::time::timeout(Duration::from_secs(20), stream.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
    }
    // The cap is full: a newcomer takes the place of the refused one.
    let (status, _) = gateway.http_get("/healthz", None).await;
    assert_eq!(status, 200);
    let mut rest = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(20), wrong.read_to_end(&mut rest)).await;
    assert!(
        closed.is_ok(),
        "the connection of the refused token was closed"
    );
    admin
        .write_all(keep_alive(Some(ADMIN_TOKEN)).as_bytes())
        .await
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(20), admin.read(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

// ---------------------------------------------------------------------------
// Sessions per token

/// The hello answer and close of a refused session.
async fn refused(mut ws: Ws) -> (Value, Option<(u16, String)>) {
    let reply = ws.recv().await;
    (reply, ws.closed().await)
}

/// `--max-connections-per-token 2`: a third session of the same token is
/// refused with close 1013 and a message naming the flag (by hello or by
/// header, before any agent is spawned for it); another token is not
/// affected; closing one session frees a place.
#[tokio::test]
async fn a_token_holds_at_most_max_connections_per_token_sessions() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--max-connections-per-token")
        .arg("2")
        .spawn()
        .await;
    let first = gateway.client("alpha").await;
    let _second = gateway.client("beta").await;

    let mut ws = gateway.connect("alpha").await;
    ws.send(json!({"id":"h3","type":"hello","token":TOKEN}))
        .await;
    let (reply, close) = refused(ws).await;
    assert_eq!(reply["success"], false, "{reply}");
    assert_eq!(reply["id"], "h3", "{reply}");
    let (code, reason) = close.unwrap();
    assert_eq!(code, 1013, "{reason}");
    assert!(reason.contains("--max-connections-per-token"), "{reason}");
    let message = reply.to_string();
    assert!(message.contains("--max-connections-per-token"), "{message}");

    let mut header = gateway.connect_with_bearer("alpha", TOKEN, None).await;
    let close = header.closed().await.unwrap();
    assert_eq!(close.0, 1013, "{close:?}");

    let (_observer, hello) = gateway.client_with("alpha", OBSERVER_TOKEN, None).await;
    assert_eq!(hello["success"], true, "another token: {hello}");

    drop(first);
    let pong = eventually(Duration::from_secs(20), async || {
        try_client(&gateway, "alpha", TOKEN).await
    })
    .await;
    assert_eq!(pong["success"], true, "{pong}");
    let text = metrics_text(&gateway).await;
    assert!(metric(&text, PER_TOKEN) >= 2.0, "{text}");
}
