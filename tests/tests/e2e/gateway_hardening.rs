//! End-to-end: the gateway against hostile or unlucky clients. Memory
//! before authentication, idle connections under a low open-file limit,
//! oversize frames, brute force from one address (and through a trusted
//! balancer), probing project names without a token, listeners
//! authenticated by their upgrade header in every dialect, and the bytes
//! a client that never reads may hold.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_e2e::flood::{metric, metrics_text, raise_own_nofile, try_client};
use corral_e2e::gateway::{
    serve_exit, Gateway, GatewaySpawn, Ws, WsEvent, ADMIN_TOKEN, OBSERVER_TOKEN, TOKEN,
};
use corral_e2e::http;
use corral_e2e::raw_ws::{close_for_frame, read_close, read_frame, stream_frame, timeout, Raw};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WRONG_TOKEN: &str = "not-the-client-token-0123456789";
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

/// Polls the metrics until `done` holds for them (or the timeout).
async fn wait_for_metrics(gateway: &Gateway, done: impl Fn(&str) -> bool) -> String {
    timeout(async {
        loop {
            let text = metrics_text(gateway).await;
            if done(&text) {
                return text;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
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

fn hello(token: &str) -> String {
    json!({"id":"h","type":"hello","token":token}).to_string()
}

/// A 17 MiB frame from an authenticated client (over the default 16 MiB
/// --max-frame-bytes): close 1009 with a reason, counted as an invalid
/// frame; the gateway keeps serving.
#[tokio::test]
async fn a_frame_over_max_frame_bytes_after_auth_closes_with_1009() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let mut raw = Raw::open(&gateway, None, "").await;
    raw.send_text(&hello(TOKEN)).await;
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
// Brute force

/// Wrong-token attempts over many kept-alive sockets from 127.0.0.1: the
/// admin API, `/metrics`, the WebSocket endpoint's bearer header, and now
/// and then the guesser's own valid observer token. Each socket records
/// the answers it got: (path, status, Retry-After).
async fn guess_over_one_socket(
    addr: std::net::SocketAddr,
    n: usize,
    stop: Arc<AtomicBool>,
) -> Vec<(String, u16, Option<String>)> {
    let mut conn = http::Conn::connect(addr).await;
    let mut seen = Vec::new();
    let mut round = n;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let (path, token) = match round % 10 {
            0 => ("/v1/projects/alpha/rpc", OBSERVER_TOKEN),
            1..=3 => ("/v1/stats", WRONG_TOKEN),
            4..=6 => ("/metrics", WRONG_TOKEN),
            _ => ("/v1/projects/alpha/rpc", WRONG_TOKEN),
        };
        let bearer = format!("Bearer {token}");
        let Some(answer) = conn
            .request("GET", path, &[("Authorization", &bearer)])
            .await
        else {
            conn = http::Conn::connect(addr).await;
            continue;
        };
        let retry_after = answer.header("retry-after").map(str::to_string);
        seen.push((path.to_string(), answer.status, retry_after));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    seen
}

/// Wrong hellos over fresh WebSocket connections from 127.0.0.1: the
/// close codes received.
async fn guess_hellos(gateway: &Gateway, stop: Arc<AtomicBool>) -> Vec<u16> {
    let mut codes = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut raw = Raw::open(gateway, None, "").await;
        raw.send_text(&hello(WRONG_TOKEN)).await;
        if let Some((code, _)) = read_close(&mut raw.read).await {
            codes.push(code);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    codes
}

/// A tool guessing tokens over 500 parallel sockets on loopback, with a
/// low failure budget (5, then 2 per second): a client with the right
/// token, which worked from this address before, connects, says hello
/// and pings 30 of 30 times (by hello and by bearer header), and the
/// admin token keeps working for the admin API and `/metrics`; the
/// guesses get 401 while the budget lasts, then 429 with `Retry-After`
/// (close 1013 for a hello), and the wrong tokens the gateway actually
/// checked stay within 5 + 2 per second of the flood, although the
/// guesser interleaves a valid observer token of its own.
#[tokio::test]
async fn a_flood_of_wrong_tokens_never_locks_out_the_right_one() {
    raise_own_nofile(2048);
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--auth-failure-rate")
        .arg("2")
        .arg("--auth-failure-burst")
        .arg("5")
        .spawn()
        .await;
    // A client that was working before the flood started.
    let mut first = gateway.client("beta").await;
    let pong = first.request(json!({"id":"p","type":"ping"})).await;
    assert_eq!(pong["success"], true);
    drop(first);
    let checked = |text: &str| metric(text, "corral_auth_failures_total{reason=\"invalid_token\"}");
    let before = checked(&metrics_text(&gateway).await);
    assert_eq!(before, 0.0);

    let started = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let sockets: Vec<_> = (0..500)
        .map(|n| tokio::spawn(guess_over_one_socket(gateway.addr, n, stop.clone())))
        .collect();
    let gateway = Arc::new(gateway);
    let hellos: Vec<_> = (0..10)
        .map(|_| {
            let (gateway, stop) = (gateway.clone(), stop.clone());
            tokio::spawn(async move { guess_hellos(&gateway, stop).await })
        })
        .collect();
    // Let the flood empty the budget first.
    wait_for_metrics(&gateway, |text| {
        metric(text, "corral_auth_failures_total{reason=\"throttled\"}") >= 100.0
    })
    .await;

    for attempt in 0..30 {
        let mut ws = if attempt % 3 == 0 {
            let mut ws = gateway.connect_with_bearer("beta", TOKEN, None).await;
            ws.send(json!({"id":"p","type":"ping"})).await;
            ws
        } else {
            let (mut ws, reply) = gateway.client_with("beta", TOKEN, None).await;
            assert_eq!(reply["success"], true, "attempt {attempt}: {reply}");
            ws.send(json!({"id":"p","type":"ping"})).await;
            ws
        };
        let pong = ws.recv_until(|f| f["id"] == "p").await;
        assert_eq!(pong.last().unwrap()["success"], true, "attempt {attempt}");
        let (status, body) = gateway.http_get("/v1/stats", Some(ADMIN_TOKEN)).await;
        assert_eq!(status, 200, "attempt {attempt}: {body}");
    }
    let during = metrics_text(&gateway).await;
    stop.store(true, Ordering::Relaxed);
    let mut answers = Vec::new();
    for socket in sockets {
        answers.extend(socket.await.unwrap());
    }
    let mut closes = Vec::new();
    for task in hellos {
        closes.extend(task.await.unwrap());
    }
    let text = metrics_text(&gateway).await;
    let elapsed = started.elapsed().as_secs_f64();

    // Checked failures: at most the burst plus the rate over the flood
    // (+1 for the unit refilled while the last answer was on its way).
    let wrong = checked(&text) - before;
    let throttled = metric(&text, "corral_auth_failures_total{reason=\"throttled\"}");
    eprintln!(
        "{wrong} wrong tokens checked and {throttled} refused unchecked in {elapsed:.1} s; {} answers on kept-alive sockets, {} hello closes",
        answers.len(),
        closes.len()
    );
    assert!(
        wrong <= 5.0 + 2.0 * elapsed + 1.0,
        "{wrong} wrong tokens checked in {elapsed:.1} s"
    );
    assert!(wrong >= 5.0, "{wrong}");
    assert!(metric(&during, "corral_auth_throttled_sources") >= 1.0);
    assert!(metric(&text, "corral_auth_remembered_total") > 0.0);
    // Both kinds of answer on every guessed endpoint; 429 says when.
    for path in ["/v1/stats", "/metrics", "/v1/projects/alpha/rpc"] {
        let of_path = |status| {
            answers
                .iter()
                .filter(|(p, s, _)| p == path && *s == status)
                .count()
        };
        assert!(of_path(429) > 0, "{path} was never throttled");
        assert!(of_path(401) > 0, "{path} never refused a checked token");
    }
    assert!(answers
        .iter()
        .filter(|(_, status, _)| *status == 429)
        .all(|(_, _, retry)| retry.as_deref().is_some_and(|r| r.parse::<u64>().is_ok())));
    assert!(
        answers.len() as f64 > 2.0 * wrong,
        "{} answers",
        answers.len()
    );
    // The guesser's own observer token passed (the project exists, the
    // request is no upgrade) without raising the count above.
    assert!(answers
        .iter()
        .any(|(p, s, _)| p == "/v1/projects/alpha/rpc" && *s == 400));
    assert!(closes.contains(&1013), "{closes:?}");
}

/// A tool on the gateway's host may connect from any address of
/// `127.0.0.0/8` (and from `::1`): all of them are one source with one
/// failure budget, so twenty addresses get no more wrong tokens checked
/// than one, and the admin token still works from a fresh one.
#[tokio::test]
async fn every_loopback_address_shares_one_budget() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--auth-failure-rate")
        .arg("0.01")
        .arg("--auth-failure-burst")
        .arg("3")
        .spawn()
        .await;
    // The operator's scrape, before: its admin token is now known here.
    metrics_text(&gateway).await;
    let bearer = format!("Bearer {WRONG_TOKEN}");
    let mut statuses = Vec::new();
    for last in 2..=21u8 {
        let from = std::net::IpAddr::from([127, 0, 0, last]);
        let mut conn = http::Conn::connect_from(from, gateway.addr).await;
        let answer = conn
            .request("GET", "/v1/stats", &[("Authorization", &bearer)])
            .await
            .expect("an answer");
        statuses.push(answer.status);
    }
    let checked = statuses.iter().filter(|s| **s == 401).count();
    assert_eq!(checked, 3, "{statuses:?}");
    assert!(statuses[3..].iter().all(|s| *s == 429), "{statuses:?}");
    let text = metrics_text(&gateway).await;
    assert_eq!(
        metric(
            &text,
            "corral_auth_failures_total{reason=\"invalid_token\"}"
        ),
        3.0
    );
    // The admin token (remembered from the scrape before) works from any
    // loopback address.
    let from = std::net::IpAddr::from([127, 0, 0, 99]);
    let admin = format!("Bearer {ADMIN_TOKEN}");
    let answer = http::Conn::connect_from(from, gateway.addr)
        .await
        .request("GET", "/v1/stats", &[("Authorization", &admin)])
        .await
        .expect("an answer");
    assert_eq!(answer.status, 200);
}

/// `--proxy-listen`: only connections on it from a `--trusted-proxy` take
/// the client address from `X-Forwarded-For` (its right-most entry); on
/// the main listener the header changes nothing. Both serve the same
/// routes.
#[tokio::test]
async fn forwarded_addresses_count_only_on_the_proxy_listener() {
    let gateway = GatewaySpawn::default()
        .echo()
        .behind_local_proxy()
        .arg("--auth-failure-rate")
        .arg("0.01")
        .arg("--auth-failure-burst")
        .arg("3")
        .spawn()
        .await;
    let proxy = gateway.proxy_addr.expect("the proxy listener's address");
    let status = |addr, token: &'static str, forwarded: &'static str| async move {
        let bearer = format!("Bearer {token}");
        let mut headers = vec![("Authorization", bearer.as_str())];
        if !forwarded.is_empty() {
            headers.push(("X-Forwarded-For", forwarded));
        }
        http::exchange(addr, "GET", "/v1/stats", &headers)
            .await
            .status
    };
    // Main listener: a different X-Forwarded-For each time, one budget.
    let main = gateway.addr;
    assert_eq!(status(main, WRONG_TOKEN, "198.51.100.1").await, 401);
    assert_eq!(status(main, WRONG_TOKEN, "198.51.100.2").await, 401);
    assert_eq!(status(main, WRONG_TOKEN, "198.51.100.3").await, 401);
    assert_eq!(status(main, WRONG_TOKEN, "198.51.100.4").await, 429);

    // Proxy listener: each forwarded address has its own budget, though
    // the TCP peer (127.0.0.1) has none left.
    for _ in 0..3 {
        assert_eq!(status(proxy, WRONG_TOKEN, "198.51.100.7").await, 401);
    }
    assert_eq!(status(proxy, WRONG_TOKEN, "198.51.100.7").await, 429);
    // The right-most entry counts; what the client wrote to its left not.
    assert_eq!(
        status(proxy, WRONG_TOKEN, "203.0.113.1, 198.51.100.7").await,
        429
    );
    assert_eq!(
        status(proxy, WRONG_TOKEN, "198.51.100.7, 203.0.113.1").await,
        401
    );
    // Without the header: the balancer's own address.
    assert_eq!(status(proxy, WRONG_TOKEN, "").await, 429);
    // Another client behind the balancer is not affected at all.
    assert_eq!(status(proxy, ADMIN_TOKEN, "192.0.2.1").await, 200);
    let health = http::exchange(proxy, "GET", "/healthz", &[]).await;
    assert_eq!((health.status, health.text().as_str()), (200, "ok\n"));
    let mut request = format!("ws://{proxy}/v1/projects/alpha/rpc")
        .into_client_request()
        .unwrap();
    request
        .headers_mut()
        .insert("x-forwarded-for", "192.0.2.2".parse().unwrap());
    let (stream, _) = timeout(tokio_tungstenite::connect_async(request))
        .await
        .unwrap();
    let mut ws = Ws { stream };
    ws.send(json!({"id":"h","type":"hello","token": TOKEN}))
        .await;
    assert_eq!(ws.recv().await["success"], true);
    assert_eq!(
        ws.request(json!({"id":"p","type":"ping"})).await["success"],
        true
    );
}

/// A peer outside `--trusted-proxy` that reaches the proxy listener (a
/// tool on the balancer's network, say) is a client like any other: its
/// `X-Forwarded-For` changes nothing. And a trusted range covering this
/// host is refused while agents' tools share its network.
#[tokio::test]
async fn only_a_trusted_proxy_names_the_client() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--proxy-listen")
        .arg("127.0.0.1:0")
        .arg("--trusted-proxy")
        .arg("198.18.0.1")
        .arg("--tool-network")
        .arg("off")
        .arg("--auth-failure-rate")
        .arg("0.01")
        .arg("--auth-failure-burst")
        .arg("2")
        .spawn()
        .await;
    let proxy = gateway.proxy_addr.expect("the proxy listener's address");
    let mut statuses = Vec::new();
    for forwarded in [
        "198.51.100.1",
        "198.51.100.2",
        "198.51.100.3",
        "198.51.100.4",
    ] {
        let bearer = format!("Bearer {WRONG_TOKEN}");
        let headers = [
            ("Authorization", bearer.as_str()),
            ("X-Forwarded-For", forwarded),
        ];
        statuses.push(
            http::exchange(proxy, "GET", "/v1/stats", &headers)
                .await
                .status,
        );
    }
    assert_eq!(
        statuses,
        [401, 401, 429, 429],
        "one budget for the untrusted peer"
    );

    let (code, stderr) = serve_exit(
        &[
            "--projects-root".as_ref(),
            gateway.root.as_os_str(),
            "--proxy-listen".as_ref(),
            "127.0.0.1:0".as_ref(),
            "--trusted-proxy".as_ref(),
            "127.0.0.0/8".as_ref(),
        ],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--tool-network off"), "{stderr}");
}

// ---------------------------------------------------------------------------
// Project names

/// Request headers as (name, value).
type Headers<'a> = Vec<(&'a str, &'a str)>;

/// Every frame up to and including the close.
async fn frames_until_close(raw: &mut Raw) -> Vec<(u8, Vec<u8>)> {
    let mut frames = Vec::new();
    loop {
        let Some((opcode, payload)) = timeout(read_frame(&mut raw.read)).await else {
            return frames;
        };
        frames.push((opcode, payload));
        if opcode == 8 {
            return frames;
        }
    }
}

/// Opens `/v1/projects/{project}/rpc` as a WebSocket: the upgrade answer,
/// and the connection.
async fn upgrade(gateway: &Gateway, project: &str) -> (http::Response, Raw) {
    let mut conn = http::Conn::connect(gateway.addr).await;
    let path = format!("/v1/projects/{project}/rpc");
    let answer = conn.request("GET", &path, &http::UPGRADE).await.unwrap();
    assert_eq!(answer.status, 101, "{answer:?}");
    let (read, write) = conn.into_stream().into_split();
    (answer, Raw { read, write })
}

/// Without a valid token, an existing project, a missing one and an
/// impossible name get the same answer, byte for byte apart from `Date`:
/// plain HTTP (no token, a wrong one, the admin routes under the name)
/// and WebSocket upgrades (the same `101`, then the same refusal and
/// close for a wrong hello, a hello without a token and a first frame
/// that is no hello). With the right token the difference shows.
#[tokio::test]
async fn project_names_cannot_be_probed_without_a_token() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--auth-failure-burst")
        .arg("1000")
        .spawn()
        .await;
    let names = ["alpha", "no-such-project", "a%20b"];
    let wrong = format!("Bearer {WRONG_TOKEN}");
    let wrong = wrong.as_str();
    let requests: [(&str, &str, Headers); 6] = [
        ("GET", "/v1/projects/{}/rpc", vec![]),
        ("GET", "/v1/projects/{}/rpc", vec![("Authorization", wrong)]),
        ("GET", "/v1/projects/{}/rpc?resume_after=3", vec![]),
        ("GET", "/v1/projects/{}", vec![]),
        ("GET", "/v1/projects/{}", vec![("Authorization", wrong)]),
        ("POST", "/v1/projects/{}/start", vec![]),
    ];
    for (method, template, headers) in &requests {
        let answers: Vec<http::Response> = join_all(names.map(|name| {
            let path = template.replace("{}", name);
            async move { http::exchange(gateway.addr, method, &path, headers).await }
        }))
        .await;
        assert_eq!(answers[0].status, 401, "{method} {template}: {answers:?}");
        for other in &answers[1..] {
            assert_eq!(other.status, answers[0].status, "{method} {template}");
            assert_eq!(other.headers_but_date(), answers[0].headers_but_date());
            assert_eq!(other.body, answers[0].body, "{method} {template}");
        }
    }
    // An upgrade with a wrong bearer header is refused before the upgrade.
    let mut headers = http::UPGRADE.to_vec();
    headers.push(("Authorization", wrong));
    let answers = join_all(names.map(|name| {
        let path = format!("/v1/projects/{name}/rpc");
        let headers = &headers;
        async move { http::exchange(gateway.addr, "GET", &path, headers).await }
    }))
    .await;
    for answer in &answers {
        assert_eq!(answer.status, 401);
        assert_eq!(answer.headers_but_date(), answers[0].headers_but_date());
        assert_eq!(answer.body, answers[0].body);
    }

    // WebSocket: the same upgrade, then the same refusal and close.
    for first in [
        hello(WRONG_TOKEN),
        json!({"id":"0","type":"hello"}).to_string(),
        json!({"id":"0","type":"ping"}).to_string(),
    ] {
        let mut seen = Vec::new();
        for name in names {
            let (answer, mut raw) = upgrade(&gateway, name).await;
            raw.send_text(&first).await;
            let frames = frames_until_close(&mut raw).await;
            assert_eq!(frames.last().map(|f| f.0), Some(8), "{name}: {frames:?}");
            seen.push((answer.status, answer.headers_but_date(), frames));
        }
        assert!(seen.iter().all(|s| *s == seen[0]), "{first}: {seen:?}");
    }
    assert!(gateway.child_pids().is_empty(), "no agent was started");

    // With the right token: the missing project is named.
    let (status, body) = gateway
        .http_get("/v1/projects/no-such-project/rpc", Some(TOKEN))
        .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("not found"), "{body}");
    let (status, body) = gateway
        .http_get("/v1/projects/alpha/rpc", Some(TOKEN))
        .await;
    assert_eq!(status, 400, "no upgrade, but a project: {body}");
    let (answer, mut raw) = upgrade(&gateway, "no-such-project").await;
    assert_eq!(answer.status, 101);
    raw.send_text(&hello(TOKEN)).await;
    let reply = raw.recv().await;
    assert_eq!(reply["success"], false, "{reply}");
    assert!(
        reply["error"].as_str().unwrap().contains("not found"),
        "{reply}"
    );
    let (code, reason) = read_close(&mut raw.read).await.unwrap();
    assert_eq!(code, 4004, "{reason}");
}

// ---------------------------------------------------------------------------
// Listeners authenticated by header

/// A listener whose upgrade carries `Authorization: Bearer` and which
/// sends nothing receives the events of another client's prompt.
async fn header_listener_receives_events(
    dialect: &str,
    prompt: Value,
    greets: bool,
    end: impl Fn(&Value) -> bool,
) -> Vec<Value> {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--dialect")
        .arg(dialect)
        .spawn()
        .await;
    // zut says nothing first: the listener resumes from the start so it
    // cannot miss an event sent before it is attached.
    let query = (!greets).then_some("resume_after=0");
    let mut listener = gateway.connect_with_bearer("alpha", TOKEN, query).await;
    if greets {
        let ready = listener.recv().await;
        assert!(ready["type"] == "ready", "{ready}");
    }
    let mut prompter = gateway.connect_with_bearer("alpha", TOKEN, None).await;
    if greets {
        prompter.recv().await;
    }
    prompter.send(prompt).await;
    listener.recv_until(end).await
}

#[tokio::test]
async fn a_header_authenticated_zut_listener_receives_events() {
    let prompt = json!({"id":"p","type":"prompt","message":"echo this"});
    let frames =
        header_listener_receives_events("zut", prompt, false, |f| f["type"] == "done").await;
    assert!(
        frames.iter().all(|f| f.get("id").is_none()),
        "events only: {}",
        brief(&frames)
    );
}

#[tokio::test]
async fn a_header_authenticated_letscode_listener_receives_events() {
    let prompt = json!({"cmd":"prompt","id":"r1","text":"echo this"});
    let frames =
        header_listener_receives_events("letscode", prompt, true, |f| f["type"] == "agent_end")
            .await;
    assert!(
        frames.iter().any(|f| f["type"] == "agent_start"),
        "{}",
        brief(&frames)
    );
}

#[tokio::test]
async fn a_header_authenticated_zi_listener_receives_events() {
    let prompt = json!({"version":1,"id":"p1","method":"session.prompt","params":{"delivery":"direct","text":"echo this"}});
    let is_event =
        |f: &Value, kind: &str| f["type"] == "session_event" && f["event"]["type"] == kind;
    let frames =
        header_listener_receives_events("zi", prompt, true, move |f| is_event(f, "agent_end"))
            .await;
    assert!(
        frames.iter().any(|f| is_event(f, "agent_start")),
        "{}",
        brief(&frames)
    );
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
