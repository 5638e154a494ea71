//! Connection floods against a gateway and the probes a test runs while
//! they last: keep-alive `GET /healthz` repeaters that connect again as
//! soon as they are closed, a client that connects, says hello and pings
//! (reporting a refusal instead of panicking), and reading `/metrics`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::SinkExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::task::JoinSet;
use tokio_tungstenite::tungstenite::Message;

use crate::gateway::{Gateway, Ws, WsEvent, ADMIN_TOKEN};

/// Raises this process's open-file limit to `want` (a test holding many
/// sockets); false if the hard limit does not allow it.
pub fn raise_own_nofile(want: u64) -> bool {
    use nix::sys::resource::{getrlimit, setrlimit, Resource};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return false;
    };
    if soft >= want {
        return true;
    }
    hard >= want && setrlimit(Resource::RLIMIT_NOFILE, want, hard).is_ok()
}

/// `sockets` connections each sending `GET /healthz` (keep-alive) every
/// `every`, connecting again at once when the gateway closes one. Stops
/// when dropped.
pub struct HealthzFlood {
    tasks: JoinSet<()>,
    answered: Arc<AtomicU64>,
    connects: Arc<AtomicU64>,
}

impl HealthzFlood {
    pub fn start(gateway: &Gateway, sockets: usize, every: Duration) -> HealthzFlood {
        let answered = Arc::new(AtomicU64::new(0));
        let connects = Arc::new(AtomicU64::new(0));
        let mut tasks = JoinSet::new();
        for _ in 0..sockets {
            let (answered, connects) = (answered.clone(), connects.clone());
            let addr = gateway.addr;
            tasks.spawn(async move {
                loop {
                    if let Ok(stream) = TcpStream::connect(addr).await {
                        connects.fetch_add(1, Ordering::Relaxed);
                        repeat_healthz(stream, every, &answered).await;
                    }
                    // Closed to make room (or refused): at once again, but
                    // yield so one task cannot starve the others.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            });
        }
        HealthzFlood {
            tasks,
            answered,
            connects,
        }
    }

    /// `/healthz` answers received so far.
    pub fn answered(&self) -> u64 {
        self.answered.load(Ordering::Relaxed)
    }

    /// Connections opened so far.
    pub fn connects(&self) -> u64 {
        self.connects.load(Ordering::Relaxed)
    }

    /// Waits until `n` answers arrived (every socket is in play).
    pub async fn wait_answered(&self, n: u64) {
        tokio::time::timeout(Duration::from_secs(120), async {
            while self.answered() < n {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("the flood never got going");
    }

    pub fn stop(mut self) {
        self.tasks.abort_all();
    }
}

/// `sockets` connections each upgrading to a WebSocket on `project` and
/// never saying hello (each has sent its request, so none is silent),
/// connecting again at once when the gateway closes one. Counts the
/// upgrades in `upgraded`. Stops when dropped.
pub fn upgrade_flood(
    gateway: &Gateway,
    project: &str,
    sockets: usize,
    upgraded: Arc<AtomicU64>,
) -> JoinSet<()> {
    let mut tasks = JoinSet::new();
    for _ in 0..sockets {
        let (addr, upgraded) = (gateway.addr, upgraded.clone());
        let mut request = format!("GET /v1/projects/{project}/rpc HTTP/1.1\r\nHost: {addr}\r\n");
        for (name, value) in crate::http::UPGRADE {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        tasks.spawn(async move {
            loop {
                if let Ok(mut stream) = TcpStream::connect(addr).await {
                    if stream.write_all(request.as_bytes()).await.is_ok() {
                        // Whatever comes (the 101, a close frame), until
                        // the gateway closes the connection.
                        let mut buf = [0u8; 1024];
                        let mut first = true;
                        while let Ok(n @ 1..) = stream.read(&mut buf).await {
                            if first && buf[..n].starts_with(b"HTTP/1.1 101") {
                                upgraded.fetch_add(1, Ordering::Relaxed);
                            }
                            first = false;
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
    tasks
}

/// Sends `GET /healthz` on `stream` every `every` until it closes.
async fn repeat_healthz(stream: TcpStream, every: Duration, answered: &AtomicU64) {
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    loop {
        let request = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n";
        if write.write_all(request).await.is_err() {
            return;
        }
        let mut length = 0;
        loop {
            let mut line = String::new();
            match read.read_line(&mut line).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(value) = lower.strip_prefix("content-length:") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if read.read_exact(&mut body).await.is_err() {
            return;
        }
        answered.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(every).await;
    }
}

/// Connects to `project`, says hello with `token` and pings. `Ok(pong)`,
/// or `Err` saying which step was refused (the hello's answer and close
/// code when the gateway refused it).
pub async fn try_client(gateway: &Gateway, project: &str, token: &str) -> Result<Value, String> {
    let connect = tokio_tungstenite::connect_async(gateway.url(project));
    let (stream, _) = tokio::time::timeout(Duration::from_secs(5), connect)
        .await
        .map_err(|_| "connect timed out".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    let mut ws = Ws { stream };
    ws.stream
        .send(Message::text(zut_hello(token)))
        .await
        .map_err(|e| format!("send the hello: {e}"))?;
    let reply = match ws.next_event_within(Duration::from_secs(10)).await {
        Some(WsEvent::Frame(reply)) => reply,
        other => return Err(format!("no hello answer: {other:?}")),
    };
    if reply["success"] != true {
        let close = ws.closed().await;
        return Err(format!("hello refused: {reply} then {close:?}"));
    }
    match tokio::time::timeout(
        Duration::from_secs(10),
        ws.request(json!({"id":"p","type":"ping"})),
    )
    .await
    {
        Ok(pong) => Ok(pong),
        Err(_) => Err("no pong".into()),
    }
}

/// A zut hello with `token`, as a text frame's payload.
pub fn zut_hello(token: &str) -> String {
    json!({"id":"h","type":"hello","token":token}).to_string()
}

/// Polls the metrics until `done` holds for them (or the harness timeout).
pub async fn wait_for_metrics(gateway: &Gateway, done: impl Fn(&str) -> bool) -> String {
    crate::raw_ws::timeout(async {
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

/// `/metrics` read with the admin token.
pub async fn metrics_text(gateway: &Gateway) -> String {
    let (status, body) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// The value of the series `name` (exactly as rendered, labels included).
pub fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no {name} in the metrics"))
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number"))
}
