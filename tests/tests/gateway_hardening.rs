//! End-to-end: the gateway against hostile or unlucky clients. Memory
//! before authentication, idle connections under a low open-file limit,
//! oversize frames, brute force from one address, and listeners
//! authenticated by their upgrade header in every dialect.

#![allow(clippy::unwrap_used)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN, TOKEN};
use futures_util::future::join_all;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpSocket, TcpStream};

const WRONG_TOKEN: &str = "not-the-client-token-0123456789";
const MIB: u64 = 1 << 20;

// ---------------------------------------------------------------------------
// A raw WebSocket client: enough to send frames a normal client library
// would refuse to (or could not stream), and to read the close.

/// An upgraded connection, split so one task can write while another reads.
struct Raw {
    read: OwnedReadHalf,
    write: OwnedWriteHalf,
}

impl Raw {
    /// Connects (from `source`, if given) and completes the handshake.
    async fn open(gateway: &Gateway, source: Option<IpAddr>, extra_headers: &str) -> Raw {
        let stream = match source {
            Some(ip) => {
                let socket = TcpSocket::new_v4().unwrap();
                socket.bind(SocketAddr::new(ip, 0)).unwrap();
                socket.connect(gateway.addr).await.unwrap()
            }
            None => TcpStream::connect(gateway.addr).await.unwrap(),
        };
        let (mut read, mut write) = stream.into_split();
        let request = format!(
            "GET /v1/projects/alpha/rpc HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\n\
             Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n{extra_headers}\r\n",
            gateway.addr
        );
        write.write_all(request.as_bytes()).await.unwrap();
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            let n = timeout(read.read(&mut byte)).await.unwrap();
            assert_eq!(n, 1, "closed during the handshake: {head:?}");
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head);
        assert!(head.starts_with("HTTP/1.1 101"), "{head}");
        Raw { read, write }
    }

    /// Sends one masked text frame.
    async fn send_text(&mut self, text: &str) {
        let mut frame = header(0x81, text.len() as u64);
        frame.extend_from_slice(text.as_bytes());
        self.write.write_all(&frame).await.unwrap();
    }

    /// The next text frame as JSON.
    async fn recv(&mut self) -> Value {
        loop {
            let (opcode, payload) = timeout(read_frame(&mut self.read)).await.expect("a frame");
            match opcode {
                1 => return serde_json::from_slice(&payload).unwrap(),
                8 => panic!("closed: {:?}", close_of(&payload)),
                _ => continue,
            }
        }
    }
}

/// The next frame: (opcode, payload); `None` when the connection ends.
async fn read_frame(read: &mut OwnedReadHalf) -> Option<(u8, Vec<u8>)> {
    let mut head = [0u8; 2];
    read.read_exact(&mut head).await.ok()?;
    let len = match head[1] & 0x7F {
        126 => u64::from(read.read_u16().await.ok()?),
        127 => read.read_u64().await.ok()?,
        n => u64::from(n),
    };
    let mut payload = vec![0u8; len as usize];
    read.read_exact(&mut payload).await.ok()?;
    Some((head[0] & 0x0F, payload))
}

/// Reads until the close frame: its code and reason (`None` if the
/// connection ended without one).
async fn read_close(read: &mut OwnedReadHalf) -> Option<(u16, String)> {
    loop {
        match timeout(read_frame(read)).await {
            Some((8, payload)) => return close_of(&payload),
            Some(_) => continue,
            None => return None,
        }
    }
}

/// Streams a frame of `len` bytes while reading: the close the gateway
/// sends for it.
async fn close_for_frame(raw: Raw, len: u64) -> (u16, String) {
    let Raw {
        mut read,
        mut write,
    } = raw;
    let writer = tokio::spawn(async move { stream_frame(&mut write, len).await });
    let close = read_close(&mut read).await.expect("a close frame");
    writer.abort();
    close
}

/// A masked frame header (mask of zeros, so the payload goes as is).
fn header(first: u8, len: u64) -> Vec<u8> {
    let mut out = vec![first];
    match len {
        0..=125 => out.push(0x80 | len as u8),
        126..=0xFFFF => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(len as u16).to_be_bytes());
        }
        _ => {
            out.push(0x80 | 127);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
    out.extend_from_slice(&[0, 0, 0, 0]);
    out
}

fn close_of(payload: &[u8]) -> Option<(u16, String)> {
    let code = u16::from_be_bytes([*payload.first()?, *payload.get(1)?]);
    Some((code, String::from_utf8_lossy(&payload[2..]).into_owned()))
}

/// Writes a text frame declaring `len` bytes, then up to `len` bytes of
/// payload in chunks, until done or the gateway stops reading.
async fn stream_frame(write: &mut OwnedWriteHalf, len: u64) {
    let chunk = vec![b'x'; 64 << 10];
    if write.write_all(&header(0x81, len)).await.is_err() {
        return;
    }
    let mut sent = 0;
    while sent < len {
        let n = chunk.len().min((len - sent) as usize);
        let write = tokio::time::timeout(Duration::from_secs(5), write.write_all(&chunk[..n]));
        match write.await {
            Ok(Ok(())) => sent += n as u64,
            _ => return,
        }
    }
}

async fn timeout<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), future)
        .await
        .expect("timed out")
}

// ---------------------------------------------------------------------------
// Metrics and process helpers

async fn metrics(gateway: &Gateway) -> String {
    let (status, body) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the series `name` (exactly as rendered, labels included).
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
        .trim()
        .parse()
        .unwrap()
}

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
            let text = metrics(gateway).await;
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
    let text = metrics(&gateway).await;
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
    let text = metrics(&gateway).await;
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

/// Raises this process's open-file limit to `want` (the test itself holds
/// many sockets); false if the hard limit does not allow it.
fn raise_own_nofile(want: u64) -> bool {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    if soft >= want {
        return true;
    }
    hard >= want && setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok()
}

/// Connects, says hello and pings; `None` if any step is refused.
async fn try_client(gateway: &Gateway) -> Option<Value> {
    let connect = tokio_tungstenite::connect_async(gateway.url("alpha"));
    let (stream, _) = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .ok()?
        .ok()?;
    let mut ws = Ws { stream };
    ws.send(serde_json::from_str(&hello(TOKEN)).unwrap()).await;
    let reply = ws.next_event_within(Duration::from_secs(10)).await?;
    let corral_e2e::gateway::WsEvent::Frame(reply) = reply else {
        return None;
    };
    assert_eq!(reply["success"], true, "{reply}");
    Some(ws.request(json!({"id":"p","type":"ping"})).await)
}

/// With the open-file limit at 1024 (soft and hard) and 1100 idle TCP
/// connections, the connections over the cap are refused at once and the
/// others closed after --header-timeout: a legitimate client connects,
/// says hello and pings within 20 s, and the refusals are counted.
#[tokio::test]
async fn idle_connections_under_a_low_fd_limit_do_not_lock_clients_out() {
    if !raise_own_nofile(4096) {
        eprintln!("skipped: this process cannot hold 1100 sockets");
        return;
    }
    let gateway = GatewaySpawn::default().echo().nofile(1024).spawn().await;
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
    let pong = timeout(async {
        loop {
            if let Some(pong) = try_client(&gateway).await {
                return pong;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    })
    .await;
    assert_eq!(pong["success"], true, "{pong}");
    let (status, body) = gateway.http_get("/healthz", None).await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    let text = metrics(&gateway).await;
    assert!(
        metric(
            &text,
            "corral_connections_refused_total{reason=\"max_connections\"}"
        ) >= 1.0
    );
    assert!(
        metric(
            &text,
            "corral_connections_refused_total{reason=\"header_timeout\"}"
        ) >= 1.0
    );
    drop(idle);
}

// ---------------------------------------------------------------------------
// Brute force

/// Eight wrong hellos from 127.0.0.2: the first five are answered at once,
/// the next three wait 100, 200 and 400 ms (counted). Meanwhile 127.0.0.1
/// is not slowed; a right token from 127.0.0.2 still works and resets it.
#[tokio::test]
async fn brute_force_from_one_address_is_slowed_and_others_are_not() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let attacker: IpAddr = "127.0.0.2".parse().unwrap();
    let other: IpAddr = "127.0.0.1".parse().unwrap();
    let attempt = |source: IpAddr, token: &'static str| {
        let gateway = &gateway;
        async move {
            let mut raw = Raw::open(gateway, Some(source), "").await;
            raw.send_text(&hello(token)).await;
            raw.recv().await["success"].as_bool().unwrap()
        }
    };
    let delayed = |text: &str| metric(text, "corral_auth_delayed_total");
    for _ in 0..8 {
        assert!(!attempt(attacker, WRONG_TOKEN).await);
    }
    let text = metrics(&gateway).await;
    assert_eq!(delayed(&text), 3.0);
    assert!(metric(&text, "corral_auth_delay_seconds_total") >= 0.69);

    assert!(!attempt(other, WRONG_TOKEN).await);
    assert!(attempt(other, TOKEN).await);
    let text = metrics(&gateway).await;
    assert_eq!(delayed(&text), 3.0, "another address is not slowed");
    assert_eq!(
        metric(
            &text,
            "corral_auth_failures_total{reason=\"invalid_token\"}"
        ),
        9.0
    );

    assert!(attempt(attacker, TOKEN).await);
    assert!(!attempt(attacker, WRONG_TOKEN).await);
    let text = metrics(&gateway).await;
    assert_eq!(delayed(&text), 4.0, "a success resets the address");
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
        "events only: {frames:#?}"
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
        "{frames:#?}"
    );
}

#[tokio::test]
async fn a_header_authenticated_zi_listener_receives_events() {
    let prompt = json!({"version":1,"id":"p1","method":"session.prompt","params":{"delivery":"prompt","text":"echo this"}});
    let is_event =
        |f: &Value, kind: &str| f["type"] == "session_event" && f["event"]["type"] == kind;
    let frames =
        header_listener_receives_events("zi", prompt, true, move |f| is_event(f, "agent_end"))
            .await;
    assert!(
        frames.iter().any(|f| is_event(f, "agent_start")),
        "{frames:#?}"
    );
}
