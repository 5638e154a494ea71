//! A minimal Chrome DevTools Protocol client for browser tests: launches
//! headless Chromium ([`Browser`]), opens a page ([`Page`]) and drives it —
//! navigate, evaluate, real mouse clicks and typing, screenshots — over one
//! WebSocket (flattened target sessions), with a timeout around every call.

mod page;

pub use page::Page;

use std::collections::HashMap;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::stream::SplitSink;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

/// Where Debian's `chromium` package installs the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one protocol call or a [`Page::wait_for`] may take.
pub const CDP_TIMEOUT: Duration = Duration::from_secs(20);

/// How long the browser may take to start listening: longer than a call,
/// as a first start in a new profile on a busy machine has been seen to
/// take over 20 s.
pub const LAUNCH_TIMEOUT: Duration = Duration::from_secs(90);

/// Page errors kept for [`Page::errors`]; later ones are dropped.
const MAX_ERRORS: usize = 100;

/// Why a browser operation failed.
#[derive(Debug)]
pub enum CdpError {
    /// Chromium is missing or did not start.
    Launch(String),
    /// The DevTools socket failed or closed.
    Socket(String),
    /// The browser answered a command with an error.
    Command { method: String, message: String },
    /// A script threw or its promise rejected.
    Script(String),
    /// A call or wait did not finish in time.
    Timeout(String),
}

impl std::fmt::Display for CdpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CdpError::Launch(m) => write!(f, "chromium launch failed: {m}"),
            CdpError::Socket(m) => write!(f, "DevTools socket: {m}"),
            CdpError::Command { method, message } => write!(f, "{method} failed: {message}"),
            CdpError::Script(m) => write!(f, "script error: {m}"),
            CdpError::Timeout(m) => write!(f, "timed out: {m}"),
        }
    }
}

impl std::error::Error for CdpError {}

type Sink = SplitSink<WebSocketStream<MaybeTlsStream<TcpStream>>, Message>;
type Reply = Result<Value, CdpError>;

/// State shared by the connection handle and its reader task.
#[derive(Default)]
struct Shared {
    /// Calls waiting for their reply, by command id.
    pending: Mutex<HashMap<u64, oneshot::Sender<Reply>>>,
    /// Uncaught exceptions and error log entries, per session id.
    errors: Mutex<HashMap<String, Vec<String>>>,
}

/// A headless Chromium with its own fresh profile, killed (with its whole
/// process group) on drop.
pub struct Browser {
    child: Child,
    sink: tokio::sync::Mutex<Sink>,
    shared: Arc<Shared>,
    next_id: AtomicU64,
    reader: JoinHandle<()>,
    _profile: TempDir,
}

impl Browser {
    /// Starts [`CHROMIUM`] headless and connects to its DevTools socket.
    pub async fn launch() -> Result<Browser, CdpError> {
        if !Path::new(CHROMIUM).exists() {
            return Err(CdpError::Launch(format!(
                "{CHROMIUM} not found. {}",
                crate::prerequisites::CHROMIUM.missing_message()
            )));
        }
        let profile = tempfile::tempdir().map_err(|e| CdpError::Launch(e.to_string()))?;
        let mut child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--disable-extensions",
                "--mute-audio",
                "--hide-scrollbars",
                "--remote-debugging-port=0",
                "--window-size=1280,800",
            ])
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| CdpError::Launch(format!("{CHROMIUM}: {e}")))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| CdpError::Launch("no stderr pipe".into()))?;
        let mut lines = BufReader::new(stderr).lines();
        let mut seen = Vec::new();
        let endpoint = tokio::time::timeout(LAUNCH_TIMEOUT, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(at) = line.find("ws://") {
                    if line.contains("DevTools listening on") {
                        return Some(line[at..].trim().to_string());
                    }
                }
                seen.push(line);
            }
            None
        })
        .await;
        let endpoint = match endpoint {
            Ok(Some(url)) => url,
            Ok(None) => {
                return Err(CdpError::Launch(format!(
                    "chromium exited before DevTools listened; stderr:\n{}",
                    seen.join("\n")
                )))
            }
            Err(_) => {
                return Err(CdpError::Launch(format!(
                    "no `DevTools listening on` line within {} s",
                    LAUNCH_TIMEOUT.as_secs()
                )))
            }
        };
        // Keep draining stderr so chromium never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

        let (socket, _) = tokio::time::timeout(
            CDP_TIMEOUT,
            tokio_tungstenite::connect_async(endpoint.as_str()),
        )
        .await
        .map_err(|_| CdpError::Timeout(format!("connecting to {endpoint}")))?
        .map_err(|e| CdpError::Socket(e.to_string()))?;
        let (sink, stream) = socket.split();
        let shared = Arc::new(Shared::default());
        let reader = tokio::spawn(read_loop(stream, shared.clone()));
        Ok(Browser {
            child,
            sink: tokio::sync::Mutex::new(sink),
            shared,
            next_id: AtomicU64::new(1),
            reader,
            _profile: profile,
        })
    }

    /// Sends one command (to the browser, or to a page's `session`) and
    /// waits for its result.
    pub async fn call(
        &self,
        method: &str,
        params: Value,
        session: Option<&str>,
    ) -> Result<Value, CdpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = json!({"id": id, "method": method, "params": params});
        if let Some(session) = session {
            frame["sessionId"] = json!(session);
        }
        let (tx, rx) = oneshot::channel();
        lock(&self.shared.pending).insert(id, tx);
        let sent = self
            .sink
            .lock()
            .await
            .send(Message::text(frame.to_string()))
            .await;
        if let Err(e) = sent {
            lock(&self.shared.pending).remove(&id);
            return Err(CdpError::Socket(e.to_string()));
        }
        match tokio::time::timeout(CDP_TIMEOUT, rx).await {
            Ok(Ok(Err(CdpError::Command { message, .. }))) => Err(CdpError::Command {
                method: method.to_string(),
                message,
            }),
            Ok(Ok(reply)) => reply,
            Ok(Err(_)) => Err(CdpError::Socket(format!(
                "closed while waiting for {method}"
            ))),
            Err(_) => {
                lock(&self.shared.pending).remove(&id);
                Err(CdpError::Timeout(method.to_string()))
            }
        }
    }

    /// Opens a new tab with a `width`×`height` viewport, attached with its
    /// own session; its exceptions and error logs are recorded.
    pub async fn new_page(&self, width: u32, height: u32) -> Result<Page<'_>, CdpError> {
        let target = self
            .call("Target.createTarget", json!({"url": "about:blank"}), None)
            .await?;
        let target_id = target["targetId"].clone();
        let attached = self
            .call(
                "Target.attachToTarget",
                json!({"targetId": target_id, "flatten": true}),
                None,
            )
            .await?;
        let session = attached["sessionId"]
            .as_str()
            .ok_or_else(|| CdpError::Command {
                method: "Target.attachToTarget".into(),
                message: format!("no sessionId in {attached}"),
            })?
            .to_string();
        let page = Page::new(self, session);
        for domain in ["Page.enable", "Runtime.enable", "Log.enable"] {
            page.call(domain, json!({})).await?;
        }
        page.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        )
        .await?;
        Ok(page)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.reader.abort();
        // Chromium's renderer and helper processes share its process group.
        if let Some(pid) = self.child.id().and_then(|p| i32::try_from(p).ok()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.start_kill();
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Routes replies to their callers and records page errors, until the
/// socket closes (which fails every pending call).
async fn read_loop(
    mut stream: futures_util::stream::SplitStream<WebSocketStream<MaybeTlsStream<TcpStream>>>,
    shared: Arc<Shared>,
) {
    while let Some(Ok(message)) = stream.next().await {
        let Message::Text(text) = message else {
            continue;
        };
        let Ok(frame) = serde_json::from_str::<Value>(text.as_str()) else {
            continue;
        };
        if let Some(id) = frame.get("id").and_then(Value::as_u64) {
            let Some(tx) = lock(&shared.pending).remove(&id) else {
                continue;
            };
            let reply = match frame.get("error") {
                // `call` fills in the method, which only it knows.
                Some(error) => Err(CdpError::Command {
                    method: String::new(),
                    message: error["message"].as_str().unwrap_or("error").to_string(),
                }),
                None => Ok(frame.get("result").cloned().unwrap_or(Value::Null)),
            };
            let _ = tx.send(reply);
        } else if let Some(error) = page_error(&frame) {
            let session = frame["sessionId"].as_str().unwrap_or_default().to_string();
            let mut errors = lock(&shared.errors);
            let list = errors.entry(session).or_default();
            if list.len() < MAX_ERRORS {
                list.push(error);
            }
        }
    }
    lock(&shared.pending).clear();
}

/// The text of an event that reports a page error: an uncaught exception,
/// or an error-level log entry (CSP violations, failed scripts). Failed
/// HTTP responses (source `network`) are left out: a 401 or 404 can be the
/// behaviour under test, which the test sees in the page itself.
fn page_error(frame: &Value) -> Option<String> {
    let params = &frame["params"];
    match frame["method"].as_str()? {
        "Runtime.exceptionThrown" => {
            let details = &params["exceptionDetails"];
            let description = details["exception"]["description"]
                .as_str()
                .or_else(|| details["text"].as_str())
                .unwrap_or("exception");
            Some(format!("uncaught: {description}"))
        }
        "Log.entryAdded"
            if params["entry"]["level"] == "error" && params["entry"]["source"] != "network" =>
        {
            Some(format!(
                "{} ({}): {}",
                params["entry"]["source"].as_str().unwrap_or("log"),
                params["entry"]["url"].as_str().unwrap_or(""),
                params["entry"]["text"].as_str().unwrap_or("")
            ))
        }
        _ => None,
    }
}
