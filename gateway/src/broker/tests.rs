//! The broker on a real socket, in front of a local stand-in provider.

#![allow(clippy::unwrap_used)]

use std::path::PathBuf;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot};

use super::*;

/// What the stand-in provider saw of one request: its head, its body.
type Seen = (String, String);

/// A provider on 127.0.0.1 that answers one request with an event stream
/// in two chunks: the first at once, the second only once `go` fires.
/// Returns its base URL, what it saw, and `go`.
async fn provider() -> (String, mpsc::Receiver<Seen>, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (seen_tx, seen) = mpsc::channel(1);
    let (go, go_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let head_end = loop {
            let n = socket.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        while buf.len() < head_end + length {
            let n = socket.read(&mut chunk).await.unwrap();
            buf.extend_from_slice(&chunk[..n]);
        }
        let body = String::from_utf8_lossy(&buf[head_end..]).into_owned();
        seen_tx.send((head, body)).await.unwrap();
        let first = "event: one\ndata: {}\n\n";
        socket
            .write_all(
                format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nrequest-id: req_1\r\n\
                     transfer-encoding: chunked\r\n\r\n{:x}\r\n{first}\r\n",
                    first.len()
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        let _ = go_rx.await;
        let last = "event: two\ndata: {}\n\n";
        socket
            .write_all(format!("{:x}\r\n{last}\r\n0\r\n\r\n", last.len()).as_bytes())
            .await
            .unwrap();
    });
    (base, seen, go)
}

/// A broker in front of `anthropic` (base URL, key) on a socket in a
/// temp dir; returns the socket's path, the registry, the metrics and the
/// dir (keep it).
fn broker(
    anthropic: &str,
    key: Option<&str>,
) -> (PathBuf, Arc<Registry>, Arc<Metrics>, tempfile::TempDir) {
    broker_with(anthropic, key, BODY_TIMEOUT)
}

fn broker_with(
    anthropic: &str,
    key: Option<&str>,
    body_timeout: Duration,
) -> (PathBuf, Arc<Registry>, Arc<Metrics>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broker.sock");
    let (anthropic, key) = (anthropic.to_string(), key.map(str::to_string));
    let env = move |name: &str| match name {
        "ANTHROPIC_BASE_URL" => Some(anthropic.clone()),
        "ANTHROPIC_API_KEY" => key.clone(),
        "OPENAI_API_KEY" => Some("sk-openai".into()),
        // Nothing listens on port 9 of loopback.
        "OPENAI_BASE_URL" => Some("http://127.0.0.1:9/v1".into()),
        _ => None,
    };
    let upstreams = Upstreams::from_env(&env).unwrap();
    let registry = Arc::new(Registry::default());
    let metrics = Arc::new(Metrics::new().unwrap());
    let ledger = Arc::new(crate::spend::Ledger::detached(None, metrics.clone()));
    let broker = Broker::new(registry.clone(), upstreams, metrics.clone(), ledger)
        .unwrap()
        .with_body_timeout(body_timeout);
    spawn(bind(&path).unwrap(), broker, CancellationToken::new()).unwrap();
    (path, registry, metrics, dir)
}

/// A client that connects through the broker's socket, as the agent's does.
fn client(socket: &std::path::Path) -> reqwest::Client {
    reqwest::Client::builder()
        .unix_socket(socket)
        .build()
        .unwrap()
}

fn count(metrics: &Metrics, provider: &str, outcome: &str) -> u64 {
    metrics
        .broker_requests
        .with_label_values(&[provider, outcome])
        .get()
}

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_model_call_goes_upstream_with_the_real_key_and_streams_back() {
    let (base, mut seen, go) = provider().await;
    let (socket, registry, metrics, _dir) = broker(&base, Some("sk-ant-real"));
    let secret = registry.register("demo").unwrap();

    let response = within(
        client(&socket)
            .post(format!(
                "{BROKER_SOCKET_URL}{ANTHROPIC_PREFIX}/v1/messages?beta=true"
            ))
            .header("x-api-key", &secret)
            .header("anthropic-version", "2023-06-01")
            .header("connection", "keep-alive, x-hop")
            .header("x-hop", "1")
            .header("openai-organization", "org-chosen-by-the-agent")
            .body(r#"{"model":"m","stream":true}"#)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    assert_eq!(response.headers()["request-id"], "req_1");

    let (head, body) = within(seen.recv()).await.unwrap();
    assert!(
        head.starts_with("post /v1/messages?beta=true http/1.1"),
        "{head}"
    );
    assert!(head.contains("x-api-key: sk-ant-real\r\n"), "{head}");
    assert!(!head.contains(&secret), "{head}");
    assert!(head.contains("anthropic-version: 2023-06-01"), "{head}");
    assert!(!head.contains("x-hop"), "{head}");
    assert!(!head.contains("org-chosen-by-the-agent"), "{head}");
    assert_eq!(body, r#"{"model":"m","stream":true}"#);

    // The first chunk arrives while the provider still holds the second.
    let mut response = response;
    let first = within(response.chunk()).await.unwrap().unwrap();
    assert_eq!(&first[..], b"event: one\ndata: {}\n\n");
    go.send(()).unwrap();
    let mut rest = Vec::new();
    while let Some(chunk) = within(response.chunk()).await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, b"event: two\ndata: {}\n\n");
    assert_eq!(count(&metrics, "anthropic", "forwarded"), 1);
}

#[tokio::test]
async fn wrong_keys_and_other_paths_get_nothing_from_upstream() {
    let (base, mut seen, _go) = provider().await;
    let (socket, registry, metrics, _dir) = broker(&base, Some("sk-ant-real"));
    let old = registry.register("demo").unwrap();
    let live = registry.register("demo").unwrap();
    let client = client(&socket);
    let url = |path: &str| format!("{BROKER_SOCKET_URL}{path}");

    for key in [None, Some("wrong"), Some(old.as_str())] {
        let mut request = client.post(url("/anthropic/v1/messages")).body("{}");
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        let response = within(request.send()).await.unwrap();
        assert_eq!(response.status(), 401, "{key:?}");
        let body: serde_json::Value = within(response.json()).await.unwrap();
        assert_eq!(body["error"]["type"], "authentication_error");
    }
    // The OpenAI path wants the key as a bearer token.
    let response = within(
        client
            .post(url("/openai/v1/chat/completions"))
            .header("x-api-key", &live)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 401);

    let response = within(
        client
            .post(url("/anthropic/v1/files"))
            .header("x-api-key", &live)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 404);
    let response = within(
        client
            .get(url("/anthropic/v1/messages"))
            .header("x-api-key", &live)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 405);
    let response = within(client.get(url("/metrics")).send()).await.unwrap();
    assert_eq!(response.status(), 404);

    assert!(seen.try_recv().is_err(), "nothing reached the provider");
    assert_eq!(count(&metrics, "anthropic", "unauthorized"), 3);
    assert_eq!(count(&metrics, "openai", "unauthorized"), 1);
    assert_eq!(count(&metrics, "anthropic", "refused"), 2);
    assert_eq!(count(&metrics, "none", "refused"), 1);
}

#[tokio::test]
async fn a_provider_without_a_key_or_out_of_reach_is_a_clear_error() {
    let (socket, registry, metrics, _dir) = broker("http://127.0.0.1:9", None);
    let secret = registry.register("demo").unwrap();
    let client = client(&socket);
    let response = within(
        client
            .post(format!("{BROKER_SOCKET_URL}/anthropic/v1/messages"))
            .header("x-api-key", &secret)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 403);
    let body: serde_json::Value = within(response.json()).await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("ANTHROPIC_API_KEY"), "{message}");

    let response = within(
        client
            .post(format!("{BROKER_SOCKET_URL}/openai/v1/chat/completions"))
            .bearer_auth(&secret)
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 502);
    let body: serde_json::Value = within(response.json()).await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("cannot reach OpenAI"), "{message}");
    assert!(!message.contains("sk-openai"), "{message}");
    assert_eq!(count(&metrics, "anthropic", "no_key"), 1);
    assert_eq!(count(&metrics, "openai", "upstream_error"), 1);
}

#[tokio::test]
async fn a_providers_redirect_is_passed_back_without_the_key_following_it() {
    // Elsewhere: what it is sent would be the key, leaked.
    let elsewhere = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let elsewhere_port = elsewhere.local_addr().unwrap().port();
    let (reached_tx, mut reached) = mpsc::channel::<String>(1);
    tokio::spawn(async move {
        let (mut socket, _) = elsewhere.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let n = socket.read(&mut buf).await.unwrap();
        let _ = reached_tx
            .send(String::from_utf8_lossy(&buf[..n]).into_owned())
            .await;
        let _ = socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
            .await;
    });
    // The provider redirects to another host (a name, not the address).
    let provider = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", provider.local_addr().unwrap());
    let location = format!("http://localhost:{elsewhere_port}/v1/messages");
    let sent = location.clone();
    tokio::spawn(async move {
        let (mut socket, _) = provider.accept().await.unwrap();
        let mut buf = vec![0u8; 8192];
        let _ = socket.read(&mut buf).await.unwrap();
        let answer = format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {sent}\r\ncontent-length: 0\r\n\r\n"
        );
        socket.write_all(answer.as_bytes()).await.unwrap();
        // Held open until the test ends.
        let _ = socket.read(&mut buf).await;
    });
    let (socket, registry, metrics, _dir) = broker(&base, Some("sk-ant-real"));
    let secret = registry.register("demo").unwrap();
    // The child's client follows no redirect either, to see the broker's answer.
    let client = reqwest::Client::builder()
        .unix_socket(socket)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let response = within(
        client
            .post(format!("{BROKER_SOCKET_URL}/anthropic/v1/messages"))
            .header("x-api-key", &secret)
            .body("{}")
            .send(),
    )
    .await
    .unwrap();
    assert_eq!(response.status(), 307);
    assert_eq!(response.headers()["location"], location.as_str());
    assert!(
        reached.try_recv().is_err(),
        "the broker followed the redirect"
    );
    assert_eq!(count(&metrics, "anthropic", "forwarded"), 1);
}

#[test]
fn children_see_the_broker_where_the_providers_were() {
    let env = vec![
        ("PATH".into(), "/bin".into()),
        ("ANTHROPIC_API_KEY".into(), "sk-real".into()),
    ];
    let secret = "ab".repeat(32);
    let agent = child_env(env.clone(), &secret, Seat::Agent);
    let value = |env: &[(OsString, OsString)], name: &str| {
        let found: Vec<_> = env.iter().filter(|(n, _)| n == name).collect();
        assert_eq!(found.len(), 1, "{name}");
        found[0].1.to_str().unwrap().to_string()
    };
    assert_eq!(value(&agent, "ANTHROPIC_API_KEY"), secret);
    assert_eq!(value(&agent, "OPENAI_API_KEY"), secret);
    assert_eq!(
        value(&agent, "ANTHROPIC_BASE_URL"),
        "http://corral-broker/anthropic"
    );
    assert_eq!(
        value(&agent, "OPENAI_BASE_URL"),
        "http://corral-broker/openai/v1"
    );
    assert_eq!(value(&agent, "PATH"), "/bin");
    let third = child_env(env, &secret, Seat::ThirdParty);
    assert_eq!(
        value(&third, "OPENAI_BASE_URL"),
        "http://127.0.0.1:3129/openai/v1"
    );
}

/// A request head for `/anthropic/v1/messages` with `key`, announcing a
/// body of `length` bytes, of which it sends `sent`.
async fn stalled(
    socket: &std::path::Path,
    key: &str,
    length: usize,
    sent: &str,
) -> tokio::net::UnixStream {
    let mut stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let head = format!(
        "POST {ANTHROPIC_PREFIX}/v1/messages HTTP/1.1\r\nhost: b\r\nx-api-key: {key}\r\n\
         content-length: {length}\r\n\r\n{sent}"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

/// The status line of what `stream` gets back.
async fn status_of(stream: &mut tokio::net::UnixStream) -> String {
    let mut got = vec![0u8; 512];
    let n = within(stream.read(&mut got)).await.unwrap();
    String::from_utf8_lossy(&got[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

#[tokio::test]
async fn a_stalled_body_is_answered_408_and_a_project_holds_a_bounded_number_of_calls() {
    let (socket, registry, metrics, _dir) = broker_with(
        "http://127.0.0.1:9",
        Some("sk-ant-real"),
        Duration::from_millis(200),
    );
    let secret = registry.register("demo").unwrap();
    let mut slow = stalled(&socket, &secret, 1000, "abc").await;
    assert!(status_of(&mut slow).await.contains(" 408 "));
    assert_eq!(count(&metrics, "anthropic", "slow"), 1);

    // Bodies that never finish hold the project's places (a long timeout
    // here): one more call is refused at once, another project's is not.
    let (socket, registry, metrics, _dir) = broker_with(
        "http://127.0.0.1:9",
        Some("sk-ant-real"),
        Duration::from_secs(600),
    );
    let secret = registry.register("demo").unwrap();
    let mut held = Vec::new();
    for _ in 0..MAX_IN_FLIGHT_PER_PROJECT {
        held.push(stalled(&socket, &secret, 1000, "abc").await);
    }
    // Once the broker has taken them all (a call that gets in first goes
    // upstream and is answered 502), the next is refused 429.
    let mut refused = false;
    for _ in 0..2000 {
        let mut probe = stalled(&socket, &secret, 2, "{}").await;
        if status_of(&mut probe).await.contains(" 429 ") {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(refused, "a project's calls beyond the limit are refused");
    assert_eq!(count(&metrics, "anthropic", "busy"), 1);
    let other = registry.register("other").unwrap();
    let mut theirs = stalled(&socket, &other, 2, "{}").await;
    // Port 9 refuses: the call went upstream, so it was not refused here.
    assert!(status_of(&mut theirs).await.contains(" 502 "));
    drop(held);
}

#[tokio::test]
async fn an_account_children_do_not_run_as_gets_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broker.sock");
    let env = |name: &str| (name == "ANTHROPIC_API_KEY").then(|| "sk-ant-real".to_string());
    let registry = Arc::new(Registry::default());
    let metrics = Arc::new(Metrics::new().unwrap());
    let me = nix::unistd::getuid().as_raw();
    let ledger = Arc::new(crate::spend::Ledger::detached(None, metrics.clone()));
    let broker = Broker::new(
        registry.clone(),
        Upstreams::from_env(&env).unwrap(),
        metrics,
        ledger,
    )
    .unwrap()
    .with_peers(crate::child_socket::Peers::only([me.wrapping_add(1)]));
    spawn(bind(&path).unwrap(), broker, CancellationToken::new()).unwrap();
    let secret = registry.register("demo").unwrap();
    // The broker may close before the request is even written: a broken
    // pipe on the write is nothing got, too.
    let mut stream = tokio::net::UnixStream::connect(&path).await.unwrap();
    let head = format!(
        "POST {ANTHROPIC_PREFIX}/v1/messages HTTP/1.1\r\nhost: b\r\nx-api-key: {secret}\r\n\
         content-length: 2\r\n\r\n{{}}"
    );
    if let Err(e) = stream.write_all(head.as_bytes()).await {
        assert_eq!(e.kind(), std::io::ErrorKind::BrokenPipe, "{e}");
        return;
    }
    let mut got = Vec::new();
    match within(stream.read_to_end(&mut got)).await {
        Ok(_) => assert!(got.is_empty(), "{got:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
}
