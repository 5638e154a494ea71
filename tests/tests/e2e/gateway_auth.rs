//! End-to-end: authentication under attack. Brute force from one address
//! (and through a trusted balancer) never locks out the right token,
//! project names cannot be probed without a token, and listeners
//! authenticated by their upgrade header receive events in every dialect.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral_e2e::flood::{metric, metrics_text, raise_own_nofile, wait_for_metrics, zut_hello};
use corral_e2e::gateway::{
    serve_exit, Gateway, GatewaySpawn, Ws, ADMIN_TOKEN, OBSERVER_TOKEN, TOKEN,
};
use corral_e2e::http;
use corral_e2e::raw_ws::{read_close, read_frame, timeout, Raw};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

const WRONG_TOKEN: &str = "not-the-client-token-0123456789";

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
        raw.send_text(&zut_hello(WRONG_TOKEN)).await;
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
/// host is refused while agents' tools share its network
/// (`--tool-network on`).
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
            "--tool-network".as_ref(),
            "on".as_ref(),
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
        zut_hello(WRONG_TOKEN),
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
    raw.send_text(&zut_hello(TOKEN)).await;
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
