//! The proxy on real sockets: a Unix socket under a long temp path, local
//! TCP servers on 127.0.0.1 (reachable only through an operator
//! exception), and tools played by raw streams or hyper's client.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode};
use corral_protocol::egress::preamble;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::egress::{Policy, Rule};
use crate::events::EventLog;
use crate::metrics::Metrics;

/// Every read and round trip in these tests is bounded by this.
const WAIT: Duration = Duration::from_secs(10);

async fn within<F: std::future::Future>(future: F) -> F::Output {
    tokio::time::timeout(WAIT, future).await.expect("timed out")
}

/// A running proxy; stopped and joined on drop.
struct Proxy {
    _dir: tempfile::TempDir,
    path: PathBuf,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    events: Arc<EventLog>,
    stop: CancellationToken,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.cancel();
        if let Some(thread) = self.thread.take() {
            thread.join().unwrap();
        }
    }
}

fn rules(texts: &[&str]) -> Vec<Rule> {
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

fn start(policy: Policy, config: ProxyConfig) -> Proxy {
    let dir = tempfile::tempdir().unwrap();
    // Longer than sun_path (108 bytes), as a deep state directory may be.
    let sub = dir.path().join("state-directory-".repeat(8)).join("egress");
    std::fs::create_dir_all(&sub).unwrap();
    let path = sub.join("proxy.sock");
    assert!(path.as_os_str().len() > 108);
    let registry = Arc::new(Registry::new(policy));
    let metrics = Arc::new(Metrics::new().unwrap());
    let events = Arc::new(EventLog::new());
    let stop = CancellationToken::new();
    let thread = spawn(
        bind(&path).unwrap(),
        registry.clone(),
        metrics.clone(),
        events.clone(),
        config,
        stop.clone(),
    )
    .unwrap();
    Proxy {
        _dir: dir,
        path,
        registry,
        metrics,
        events,
        stop,
        thread: Some(thread),
    }
}

impl Proxy {
    /// A raw connection to the socket.
    async fn connect(&self) -> UnixStream {
        // connect(2) needs a path within sun_path: go through the
        // directory, as the agent goes through /proc/self/fd.
        let dir = std::fs::File::open(self.path.parent().unwrap()).unwrap();
        let short = format!(
            "/proc/self/fd/{}/proxy.sock",
            std::os::fd::AsRawFd::as_raw_fd(&dir)
        );
        UnixStream::connect(short).await.unwrap()
    }

    /// A raw connection that has sent `secret`'s preamble.
    async fn raw(&self, secret: &str) -> UnixStream {
        let mut stream = self.connect().await;
        stream.write_all(preamble(secret).as_bytes()).await.unwrap();
        stream
    }

    /// A hyper client connection for `secret`'s project.
    async fn client(&self, secret: &str) -> SendRequest<Body> {
        let stream = self.raw(secret).await;
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(connection.with_upgrades());
        sender
    }

    fn counted(&self, project: &str, decision: &str) -> u64 {
        self.metrics.egress_requests_of(project, decision)
    }
}

fn request(method: Method, uri: &str) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::empty())
        .unwrap()
}

async fn send(client: &mut SendRequest<Body>, req: Request<Body>) -> Response<Incoming> {
    within(client.ready()).await.unwrap();
    within(client.send_request(req)).await.unwrap()
}

async fn text(response: Response<Incoming>) -> String {
    let bytes = within(axum::body::to_bytes(
        Body::new(response.into_body()),
        1 << 20,
    ))
    .await
    .unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

/// The next frame of a response body.
async fn frame(
    body: &mut Incoming,
) -> Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>> {
    let mut body = std::pin::Pin::new(body);
    std::future::poll_fn(|cx| hyper::body::Body::poll_frame(body.as_mut(), cx)).await
}

fn rule_of<B>(response: &Response<B>) -> &str {
    response.headers()[RULE_HEADER].to_str().unwrap()
}

/// A TCP echo server on loopback.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = stream.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

/// Reads a request head (through the blank line) from `stream`.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        assert_eq!(within(stream.read(&mut byte)).await.unwrap(), 1);
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap()
}

/// An HTTP server on loopback answering each request `ok <path>` and
/// sending each request head it received on the channel.
async fn http_server() -> (SocketAddr, mpsc::UnboundedReceiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (heads, received) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let head = read_head(&mut stream).await;
            let path = head.split(' ').nth(1).unwrap_or("").to_string();
            heads.send(head).unwrap();
            let body = format!("ok {path}");
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nkeep-alive: timeout=5\r\n\r\n{body}",
                body.len()
            );
            stream.write_all(reply.as_bytes()).await.unwrap();
        }
    });
    (addr, received)
}

fn operator(allow: &[&str]) -> Policy {
    Policy::new(rules(allow), vec![], None)
}

#[tokio::test]
async fn a_tunnel_to_an_excepted_loopback_port_carries_bytes_both_ways() {
    let echo = echo_server().await;
    let proxy = start(operator(&[&echo.to_string()]), ProxyConfig::default());
    let secret = proxy.registry.register("p").unwrap();
    let mut client = proxy.client(&secret).await;
    let response = send(&mut client, request(Method::CONNECT, &echo.to_string())).await;
    assert_eq!(response.status(), StatusCode::OK);
    let mut tunnel = TokioIo::new(within(hyper::upgrade::on(response)).await.unwrap());
    tunnel.write_all(b"ping through the proxy").await.unwrap();
    let mut got = [0u8; 22];
    within(tunnel.read_exact(&mut got)).await.unwrap();
    assert_eq!(&got, b"ping through the proxy");
    assert_eq!(proxy.counted("p", "allowed"), 1);
    assert_eq!(proxy.metrics.egress_connections.get(), 1);
    assert!(proxy
        .metrics
        .render()
        .contains("corral_egress_connections 1"));
}

#[tokio::test]
async fn a_host_not_allowed_gets_403_with_the_rule_and_an_event() {
    let proxy = start(operator(&["**.example.com"]), ProxyConfig::default());
    let secret = proxy.registry.register("p").unwrap();
    let mut client = proxy.client(&secret).await;
    let response = send(&mut client, request(Method::CONNECT, "93.184.215.14:443")).await;
    assert_eq!(response.status(), StatusCode::FORBIDDEN);
    assert_eq!(rule_of(&response), "not-allowed");
    assert_eq!(
        text(response).await,
        "corral egress proxy: refused CONNECT 93.184.215.14:443 for project p (rule not-allowed)\n"
    );
    // A second, at once: counted, but the event tail shows it once.
    let again = send(&mut client, request(Method::CONNECT, "93.184.215.14:443")).await;
    assert_eq!(again.status(), StatusCode::FORBIDDEN);
    assert_eq!(proxy.counted("p", "refused"), 2);
    let (events, _) = proxy.events.after(0);
    assert_eq!(events.len(), 1, "{events:?}");
    let event = &events[0];
    assert_eq!(
        (event.kind, event.project.as_str()),
        ("egress_refused", "p")
    );
    assert_eq!(event.target.as_deref(), Some("93.184.215.14:443"));
    assert_eq!(event.rule.as_deref(), Some("not-allowed"));
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form_and_streamed_back() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream = listener.local_addr().unwrap();
    let (head_tx, head_rx) = oneshot::channel();
    let (more_tx, more_rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        head_tx.send(read_head(&mut stream).await).unwrap();
        let first =
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nx-up: 1\r\n\r\n5\r\nfirst\r\n";
        stream.write_all(first.as_bytes()).await.unwrap();
        // The rest only once the tool has seen the first part: a proxy
        // that buffered the response would never deliver it.
        more_rx.await.unwrap();
        stream.write_all(b"6\r\nsecond\r\n0\r\n\r\n").await.unwrap();
    });
    let proxy = start(operator(&[&upstream.to_string()]), ProxyConfig::default());
    let secret = proxy.registry.register("p").unwrap();
    let mut client = proxy.client(&secret).await;
    let mut req = request(Method::GET, &format!("http://{upstream}/x?y=1"));
    for (name, value) in [
        ("proxy-authorization", "Basic dTpw"),
        ("proxy-connection", "keep-alive"),
        ("connection", "keep-alive, x-hop"),
        ("x-hop", "1"),
        ("x-end", "2"),
    ] {
        req.headers_mut().insert(name, value.parse().unwrap());
    }
    let response = send(&mut client, req).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["x-up"], "1");
    let head = within(head_rx).await.unwrap().to_ascii_lowercase();
    assert!(head.starts_with("get /x?y=1 http/1.1\r\n"), "{head}");
    assert!(
        head.contains(&format!("\r\nhost: {upstream}\r\n")),
        "{head}"
    );
    assert!(head.contains("\r\nx-end: 2\r\n"), "{head}");
    for gone in [
        "proxy-authorization",
        "proxy-connection",
        "x-hop",
        "connection:",
    ] {
        assert!(!head.contains(gone), "{gone} forwarded: {head}");
    }
    let mut body = response.into_body();
    let first = within(frame(&mut body)).await.unwrap().unwrap();
    assert_eq!(first.into_data().unwrap(), "first");
    more_tx.send(()).unwrap();
    let second = within(frame(&mut body)).await.unwrap().unwrap();
    assert_eq!(second.into_data().unwrap(), "second");
}

#[tokio::test]
async fn each_request_on_a_kept_alive_connection_is_decided() {
    let (upstream, mut heads) = http_server().await;
    let proxy = start(operator(&[&upstream.to_string()]), ProxyConfig::default());
    let secret = proxy.registry.register("p").unwrap();
    let mut client = proxy.client(&secret).await;
    let ok = send(
        &mut client,
        request(Method::GET, &format!("http://{upstream}/a")),
    )
    .await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(text(ok).await, "ok /a");
    assert!(within(heads.recv()).await.unwrap().starts_with("GET /a "));
    let metadata = send(
        &mut client,
        request(Method::GET, "http://169.254.169.254/latest/"),
    )
    .await;
    assert_eq!(metadata.status(), StatusCode::FORBIDDEN);
    assert_eq!(rule_of(&metadata), "blocked-range:link-local");
    assert_eq!(
        (proxy.counted("p", "allowed"), proxy.counted("p", "refused")),
        (1, 1)
    );
}

#[tokio::test]
async fn a_method_list_limits_plain_http_but_not_tunnels() {
    let echo = echo_server().await;
    let policy = Policy::new(rules(&[&echo.to_string()]), vec![], Some(vec![Method::GET]));
    let proxy = start(policy, ProxyConfig::default());
    let secret = proxy.registry.register("p").unwrap();
    let mut client = proxy.client(&secret).await;
    let post = send(
        &mut client,
        request(Method::POST, &format!("http://{echo}/upload")),
    )
    .await;
    assert_eq!(post.status(), StatusCode::FORBIDDEN);
    assert_eq!(rule_of(&post), "method:POST");
    let tunnel = send(&mut client, request(Method::CONNECT, &echo.to_string())).await;
    assert_eq!(tunnel.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_name_resolving_to_loopback_needs_an_operator_exception() {
    let echo = echo_server().await;
    let config = || ProxyConfig {
        resolver: Resolver::with_mapping("pkg.test=127.0.0.1").unwrap(),
        ..ProxyConfig::default()
    };
    let target = format!("pkg.test:{}", echo.port());
    let named = start(operator(&["**.pkg.test"]), config());
    let secret = named.registry.register("p").unwrap();
    let mut client = named.client(&secret).await;
    let refused = send(&mut client, request(Method::CONNECT, &target)).await;
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    assert_eq!(rule_of(&refused), "blocked-range:loopback");
    let excepted = start(operator(&["**.pkg.test", &echo.to_string()]), config());
    let secret = excepted.registry.register("p").unwrap();
    let mut client = excepted.client(&secret).await;
    let allowed = send(&mut client, request(Method::CONNECT, &target)).await;
    assert_eq!(allowed.status(), StatusCode::OK);
    // A project's override naming the address does not lift the block.
    excepted.registry.set_override(
        "p",
        Some(crate::egress::Override {
            allow: Some(rules(&["**.pkg.test", "127.0.0.0/8"])),
            ..Default::default()
        }),
    );
    let mut client = excepted.client(&secret).await;
    let other_port = send(&mut client, request(Method::CONNECT, "pkg.test:1")).await;
    assert_eq!(rule_of(&other_port), "blocked-range:loopback");
}

#[tokio::test]
async fn a_connection_without_a_live_secret_is_closed_without_a_word() {
    let proxy = start(operator(&["0.0.0.0/0"]), ProxyConfig::default());
    let replaced = proxy.registry.register("p").unwrap();
    proxy.registry.register("p").unwrap();
    for secret in [replaced.as_str(), "not-hex", &"0".repeat(64)] {
        let mut stream = proxy.connect().await;
        let line = format!(
            "{}CONNECT 93.184.215.14:443 HTTP/1.1\r\n\r\n",
            preamble(secret)
        );
        // The proxy may close before reading it all.
        let _ = stream.write_all(line.as_bytes()).await;
        // A close with unread bytes may reach the tool as a reset.
        let mut got = Vec::new();
        let _ = within(stream.read_to_end(&mut got)).await;
        assert!(got.is_empty(), "{secret}: {got:?}");
    }
    assert_eq!(
        proxy.counted(crate::metrics::EGRESS_UNKNOWN_PROJECT, "refused"),
        3
    );
    assert!(proxy.events.after(0).0.is_empty());
}

#[tokio::test]
async fn a_head_over_the_limit_is_refused() {
    let proxy = start(operator(&["0.0.0.0/0"]), ProxyConfig::default());
    let secret = proxy.registry.register("p").unwrap();
    let mut stream = proxy.raw(&secret).await;
    let big = format!(
        "GET http://93.184.215.14/ HTTP/1.1\r\nx-big: {}\r\n\r\n",
        "a".repeat(MAX_HEAD)
    );
    // The proxy may close before reading it all.
    let _ = stream.write_all(big.as_bytes()).await;
    let mut got = Vec::new();
    let _ = within(stream.read_to_end(&mut got)).await;
    let got = String::from_utf8_lossy(&got);
    assert!(got.is_empty() || got.starts_with("HTTP/1.1 431 "), "{got}");
    assert_eq!(proxy.counted("p", "allowed"), 0);
}

#[tokio::test]
async fn a_project_over_its_connection_limit_gets_503_at_once() {
    let echo = echo_server().await;
    let config = ProxyConfig {
        max_per_project: 1,
        ..ProxyConfig::default()
    };
    let proxy = start(operator(&[&echo.to_string()]), config);
    let p = proxy.registry.register("p").unwrap();
    let q = proxy.registry.register("q").unwrap();
    // One tunnel of p's, open: p's place is taken.
    let mut first = proxy.client(&p).await;
    let open = send(&mut first, request(Method::CONNECT, &echo.to_string())).await;
    let _tunnel = within(hyper::upgrade::on(open)).await.unwrap();
    // The next is answered at once, before its request is read, and
    // holds no place under the total limit meanwhile.
    let mut second = proxy.raw(&p).await;
    let mut got = Vec::new();
    within(second.read_to_end(&mut got)).await.unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
    assert!(got.contains("over-limit:per-project"), "{got}");
    assert_eq!(proxy.metrics.egress_connections.get(), 1);
    let (events, _) = proxy.events.after(0);
    assert_eq!(events[0].rule.as_deref(), Some("over-limit:per-project"));
    assert_eq!(proxy.counted("p", "refused"), 1);
    // Another project has places of its own.
    let mut other = proxy.client(&q).await;
    let q_open = send(&mut other, request(Method::CONNECT, &echo.to_string())).await;
    assert_eq!(q_open.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_connection_over_the_total_gets_503_before_anything_is_read() {
    let echo = echo_server().await;
    let config = ProxyConfig {
        max_connections: 1,
        ..ProxyConfig::default()
    };
    let proxy = start(operator(&[&echo.to_string()]), config);
    let p = proxy.registry.register("p").unwrap();
    let mut first = proxy.client(&p).await;
    let open = send(&mut first, request(Method::CONNECT, &echo.to_string())).await;
    let _tunnel = within(hyper::upgrade::on(open)).await.unwrap();
    let mut raw = proxy.connect().await;
    let mut got = Vec::new();
    within(raw.read_to_end(&mut got)).await.unwrap();
    let got = String::from_utf8_lossy(&got);
    assert!(got.starts_with("HTTP/1.1 503 "), "{got}");
    assert!(got.contains("over-limit:total"), "{got}");
    let unknown = crate::metrics::EGRESS_UNKNOWN_PROJECT;
    assert_eq!(proxy.counted(unknown, "refused"), 1);
    assert_eq!(proxy.metrics.egress_connections.get(), 1);
}

#[tokio::test]
async fn a_silent_connection_is_closed_after_the_head_timeout() {
    let config = ProxyConfig {
        head_timeout: Duration::from_millis(50),
        ..ProxyConfig::default()
    };
    let proxy = start(operator(&["0.0.0.0/0"]), config);
    let secret = proxy.registry.register("p").unwrap();
    // Neither a preamble, nor a request head after one: both closed.
    for mut stream in [proxy.connect().await, proxy.raw(&secret).await] {
        let mut got = Vec::new();
        within(stream.read_to_end(&mut got)).await.unwrap();
        assert!(got.is_empty(), "{got:?}");
    }
    let unknown = crate::metrics::EGRESS_UNKNOWN_PROJECT;
    assert_eq!(proxy.counted(unknown, "refused"), 1);
}

#[tokio::test]
async fn an_account_children_do_not_run_as_is_closed_unanswered() {
    let me = nix::unistd::getuid().as_raw();
    let config = ProxyConfig {
        peers: crate::child_socket::Peers::only([me.wrapping_add(1)]),
        ..ProxyConfig::default()
    };
    let proxy = start(operator(&["0.0.0.0/0"]), config);
    let secret = proxy.registry.register("p").unwrap();
    // The gateway may close before anything is written: writes may fail.
    let mut stream = proxy.connect().await;
    let _ = stream.write_all(preamble(&secret).as_bytes()).await;
    let _ = stream
        .write_all(b"CONNECT example.com:443 HTTP/1.1\r\n\r\n")
        .await;
    // Closed (or reset, with the request unread) with nothing written.
    let mut got = Vec::new();
    match within(stream.read_to_end(&mut got)).await {
        Ok(_) => assert!(got.is_empty(), "{got:?}"),
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}"),
    }
    assert!(got.is_empty(), "{got:?}");
    let unknown = crate::metrics::EGRESS_UNKNOWN_PROJECT;
    assert_eq!(proxy.counted(unknown, "refused"), 1);
    assert_eq!(proxy.metrics.egress_connections.get(), 0);
}
