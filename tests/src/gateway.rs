//! Starts the real `corral serve` with a temp projects root and state dir,
//! and WebSocket clients for it, with a timeout around every read. The
//! gateway's stderr goes to a file, printed only when the test fails.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::client::Request;
use tokio_tungstenite::tungstenite::http::header::AUTHORIZATION;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::captured::CapturedLog;
use crate::harness::{workspace_bin, READ_TIMEOUT};

/// The client token every test gateway accepts.
pub const TOKEN: &str = "test-client-token-0123456789";
pub const OBSERVER_TOKEN: &str = "test-observer-token-0123456789";
pub const ADMIN_TOKEN: &str = "test-admin-token-0123456789";

/// Options for a gateway under test.
pub struct GatewaySpawn {
    args: Vec<String>,
    child_args: Vec<String>,
    env: Vec<(String, String)>,
    projects: Vec<String>,
    capture_log: bool,
    child_bin: Option<PathBuf>,
    /// Shared projects root / state dir instead of fresh ones in the temp dir.
    projects_root: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    listen: String,
    /// Replaces the default `--token`/`--observer-token`/`--admin-token`
    /// flags (e.g. to take tokens from files or the environment).
    token_args: Option<Vec<String>>,
    /// Soft and hard `RLIMIT_NOFILE` of the gateway (set by `sh -c ulimit`
    /// before it execs).
    nofile: Option<u64>,
}

impl Default for GatewaySpawn {
    fn default() -> Self {
        GatewaySpawn {
            args: Vec::new(),
            child_args: Vec::new(),
            env: Vec::new(),
            projects: vec!["alpha".into(), "beta".into()],
            capture_log: false,
            child_bin: None,
            projects_root: None,
            state_dir: None,
            listen: "127.0.0.1:0".into(),
            token_args: None,
            nofile: None,
        }
    }
}

impl GatewaySpawn {
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// Appended to every child's argv (after `--`).
    pub fn child_arg(mut self, arg: impl Into<String>) -> Self {
        self.child_args.push(arg.into());
        self
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Project directories to create under the root (default alpha, beta).
    pub fn projects(mut self, names: &[&str]) -> Self {
        self.projects = names.iter().map(|s| s.to_string()).collect();
        self
    }

    /// Runs this program as the child instead of `corral-agent`.
    pub fn child_bin(mut self, path: PathBuf) -> Self {
        self.child_bin = Some(path);
        self
    }

    /// Uses `dir` as the projects root (the project dirs are still created
    /// in it), e.g. one shared by several gateways.
    pub fn projects_root(mut self, dir: PathBuf) -> Self {
        self.projects_root = Some(dir);
        self
    }

    /// Uses `dir` as the state dir (sessions go to `dir/sessions`), e.g.
    /// one shared by several gateways.
    pub fn state_dir(mut self, dir: PathBuf) -> Self {
        self.state_dir = Some(dir);
        self
    }

    /// Listens on `addr` instead of `127.0.0.1:0`.
    pub fn listen(mut self, addr: impl Into<String>) -> Self {
        self.listen = addr.into();
        self
    }

    /// Gives the tokens with `args` instead of the three default token
    /// flags (`[]`: none at all, so a loopback gateway generates them).
    pub fn token_args(mut self, args: &[&str]) -> Self {
        self.token_args = Some(args.iter().map(|a| a.to_string()).collect());
        self
    }

    /// Starts the gateway with this open-file limit, soft and hard.
    pub fn nofile(mut self, limit: u64) -> Self {
        self.nofile = Some(limit);
        self
    }

    /// Logs at debug level (`CORRAL_LOG=debug`) instead of the default
    /// `info`. Either way the gateway's stderr goes to [`Gateway::log`],
    /// and a failing test prints it.
    pub fn capture_log(mut self) -> Self {
        self.capture_log = true;
        self
    }

    /// A `--proxy-listen` listener (on loopback, port 0) for a balancer on
    /// this host: trusted at 127.0.0.1, which the gateway allows only with
    /// tools off the host's network.
    pub fn behind_local_proxy(self) -> Self {
        self.arg("--proxy-listen")
            .arg("127.0.0.1:0")
            .arg("--trusted-proxy")
            .arg("127.0.0.1")
            .arg("--tool-network")
            .arg("off")
    }

    /// Children on the echo provider.
    pub fn echo(self) -> Self {
        self.child_arg("--provider").child_arg("echo")
    }

    /// Children on the mock LLM's Anthropic endpoint.
    pub fn mock(self, base_url: &str) -> Self {
        self.child_arg("--provider")
            .child_arg("anthropic")
            .child_arg("--base-url")
            .child_arg(base_url)
            .env("ANTHROPIC_API_KEY", "mock-key")
    }

    pub async fn spawn(self) -> Gateway {
        let temp = tempfile::tempdir().expect("temp dir");
        let root = self
            .projects_root
            .clone()
            .unwrap_or_else(|| temp.path().join("projects"));
        let state = self
            .state_dir
            .clone()
            .unwrap_or_else(|| temp.path().join("state"));
        for project in &self.projects {
            std::fs::create_dir_all(root.join(project)).expect("project dir");
        }
        let home = temp.path().join("home");
        std::fs::create_dir_all(&home).expect("home dir");
        let mut command = match self.nofile {
            Some(limit) => {
                let mut sh = Command::new("sh");
                let script = format!("ulimit -n {limit} && exec \"$0\" \"$@\"");
                sh.arg("-c").arg(script).arg(workspace_bin("corral"));
                sh
            }
            None => Command::new(workspace_bin("corral")),
        };
        command
            .arg("serve")
            .args(["--listen", &self.listen, "--projects-root"])
            .arg(&root)
            .arg("--state-dir")
            .arg(&state)
            .args(self.token_args.clone().unwrap_or_else(|| {
                [
                    "--token",
                    TOKEN,
                    "--observer-token",
                    OBSERVER_TOKEN,
                    "--admin-token",
                    ADMIN_TOKEN,
                ]
                .map(String::from)
                .to_vec()
            }))
            .arg("--child-bin")
            .arg(
                self.child_bin
                    .clone()
                    .unwrap_or_else(|| workspace_bin("corral-agent")),
            )
            .args(&self.args)
            .arg("--")
            .args(&self.child_args)
            .env_remove("CORRAL_TOKENS")
            .env_remove("ANTHROPIC_API_KEY")
            .env("ZUT_HOME", &home)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        let (captured, file) = CapturedLog::create("gateway", temp.path().join("gateway.log"));
        command.stderr(file);
        if self.capture_log {
            command.env("CORRAL_LOG", "debug");
        }
        for (key, value) in &self.env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("spawn corral");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let mut startup = Vec::new();
        let mut proxy_addr = None;
        let mut metrics_addr = None;
        let addr = loop {
            let line = tokio::time::timeout(READ_TIMEOUT, lines.next_line())
                .await
                .expect("timed out waiting for the gateway to listen")
                .expect("read gateway stdout")
                .expect("the gateway exited before listening");
            if let Some(rest) = line.strip_prefix("listening on http://") {
                break rest.trim().parse().expect("listen address");
            }
            if let Some(rest) = line.strip_prefix("proxy listening on http://") {
                proxy_addr = Some(rest.trim().parse().expect("proxy listen address"));
                continue;
            }
            if let Some(rest) = line.strip_prefix("metrics listening on http://") {
                metrics_addr = Some(rest.trim().parse().expect("metrics listen address"));
                continue;
            }
            startup.push(line);
        };
        // Keep draining stdout so the gateway never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Gateway {
            child,
            addr,
            proxy_addr,
            metrics_addr,
            root,
            state,
            log: captured.path().to_path_buf(),
            startup,
            captured,
            _temp: temp,
        }
    }
}

/// A running gateway.
pub struct Gateway {
    pub child: Child,
    pub addr: SocketAddr,
    /// The `--proxy-listen` address, if the gateway has one.
    pub proxy_addr: Option<SocketAddr>,
    /// The `--metrics-listen` address, when one was given.
    pub metrics_addr: Option<SocketAddr>,
    pub root: PathBuf,
    pub state: PathBuf,
    /// The file holding the gateway's stderr.
    pub log: PathBuf,
    /// What the gateway printed on stdout before `listening on` (the
    /// generated tokens, if any).
    pub startup: Vec<String>,
    /// Prints the gateway's stderr if the test panics (dropped before the
    /// temp dir that holds it).
    captured: CapturedLog,
    _temp: TempDir,
}

impl Gateway {
    /// What the gateway wrote to stderr so far.
    pub fn log_text(&self) -> String {
        self.captured.read()
    }

    pub fn url(&self, project: &str) -> String {
        format!("ws://{}/v1/projects/{project}/rpc", self.addr)
    }

    /// Opens a socket without saying hello.
    pub async fn connect(&self, project: &str) -> Ws {
        let request = self
            .url(project)
            .into_client_request()
            .expect("client request");
        open(request).await
    }

    /// Opens a socket authenticated by an `Authorization: Bearer TOKEN`
    /// header on the upgrade request, with `query` (e.g. `resume_after=5`)
    /// appended to the URL; sends nothing.
    pub async fn connect_with_bearer(&self, project: &str, token: &str, query: Option<&str>) -> Ws {
        let mut url = self.url(project);
        if let Some(query) = query {
            url.push('?');
            url.push_str(query);
        }
        let mut request = url.into_client_request().expect("client request");
        let bearer = HeaderValue::from_str(&format!("Bearer {token}")).expect("header value");
        request.headers_mut().insert(AUTHORIZATION, bearer);
        open(request).await
    }

    /// Connects and says hello with `token`; returns the hello response too.
    pub async fn client_with(
        &self,
        project: &str,
        token: &str,
        resume_after: Option<u64>,
    ) -> (Ws, Value) {
        let mut ws = self.connect(project).await;
        let mut hello = json!({"id":"hello","type":"hello","token": token});
        if let Some(seq) = resume_after {
            hello["resume_after"] = json!(seq);
        }
        ws.send(hello).await;
        let reply = ws.recv().await;
        (ws, reply)
    }

    /// A client with the client token; panics unless the hello succeeds.
    pub async fn client(&self, project: &str) -> Ws {
        let (ws, reply) = self.client_with(project, TOKEN, None).await;
        assert_eq!(reply["success"], true, "hello failed: {reply}");
        ws
    }

    /// `GET path` with an optional bearer token: (status, body).
    pub async fn http_get(&self, path: &str, token: Option<&str>) -> (u16, String) {
        self.http("GET", path, token).await
    }

    /// `POST path` (empty body) with an optional bearer token.
    pub async fn http_post(&self, path: &str, token: Option<&str>) -> (u16, String) {
        self.http("POST", path, token).await
    }

    /// One HTTP/1.1 request: (status, body).
    pub async fn http(&self, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
        self.http_body(method, path, token, "").await
    }

    /// One HTTP/1.1 request with a JSON `body`: (status, body).
    pub async fn http_body(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: &str,
    ) -> (u16, String) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = TcpStream::connect(self.addr).await.expect("connect");
        let auth = token
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        let kind = match body.is_empty() {
            true => "",
            false => "Content-Type: application/json\r\n",
        };
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\n{auth}{kind}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).await.expect("write");
        let mut response = String::new();
        tokio::time::timeout(READ_TIMEOUT, stream.read_to_string(&mut response))
            .await
            .expect("read timed out")
            .expect("read");
        let status = response
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let body = response
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default();
        (status, body)
    }

    /// Pids of `corral-agent` processes whose parent is this gateway and
    /// that serve a project (a spare agent waiting for one is not a
    /// child of any project).
    pub fn child_pids(&self) -> Vec<u32> {
        self.gateway_agents(false)
    }

    /// Pids of this gateway's spare agents waiting for a project.
    pub fn spare_pids(&self) -> Vec<u32> {
        self.gateway_agents(true)
    }

    fn gateway_agents(&self, spare: bool) -> Vec<u32> {
        let Some(gateway) = self.child.id() else {
            return Vec::new();
        };
        agent_pids()
            .into_iter()
            .filter(|pid| parent_of(*pid) == Some(gateway) && is_spare(*pid) == spare)
            .collect()
    }
}

/// Whether `outer` is a spare agent waiting for its project: started as
/// `corral-agent spare`, its agent (pid 1 of its namespace) not yet named
/// `corral-agent-in` as an assigned one is.
pub fn is_spare(outer: u32) -> bool {
    let cmdline = std::fs::read(format!("/proc/{outer}/cmdline")).unwrap_or_default();
    let spare = cmdline
        .split(|&b| b == 0 || b == b' ')
        .nth(1)
        .is_some_and(|arg| arg == b"spare");
    spare
        && !std::fs::read_to_string(format!("/proc/{outer}/task/{outer}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .any(|child| {
                std::fs::read_to_string(format!("/proc/{child}/comm"))
                    .is_ok_and(|comm| comm.trim() == "corral-agent-in")
            })
}

/// Runs `corral serve` with exactly `args` (plus `--listen 127.0.0.1:0`
/// unless they name one, and the agent beside it) and `env`, which must
/// make it exit before serving; returns its exit code and stderr.
pub async fn serve_exit(args: &[&std::ffi::OsStr], env: &[(&str, &str)]) -> (i32, String) {
    let mut command = Command::new(workspace_bin("corral"));
    command
        .arg("serve")
        .args(if args.iter().any(|a| *a == "--listen") {
            &[][..]
        } else {
            &["--listen", "127.0.0.1:0"][..]
        })
        .arg("--child-bin")
        .arg(workspace_bin("corral-agent"))
        .args(args)
        .env_remove("CORRAL_TOKENS")
        .env_remove("CORRAL_ADMIN_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .envs(env.iter().copied());
    let output = tokio::time::timeout(READ_TIMEOUT, command.output())
        .await
        .expect("corral serve neither exited nor ran")
        .expect("run corral serve");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Completes a WebSocket handshake, within the read timeout.
async fn open(request: Request) -> Ws {
    let (stream, _) = tokio::time::timeout(READ_TIMEOUT, tokio_tungstenite::connect_async(request))
        .await
        .expect("connect timed out")
        .expect("connect");
    Ws { stream }
}

/// Pids of every running (non-zombie) `corral-agent` process.
pub fn agent_pids() -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            comm.trim() == "corral-agent" && !is_zombie(*pid)
        })
        .collect()
}

fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

fn is_zombie(pid: u32) -> bool {
    stat_fields(pid).is_none_or(|f| f.first().map(String::as_str) == Some("Z"))
}

pub fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// A WebSocket client speaking JSON text frames.
pub struct Ws {
    pub stream: WebSocketStream<MaybeTlsStream<TcpStream>>,
}

/// What a read saw.
#[derive(Debug, PartialEq)]
pub enum WsEvent {
    Frame(Value),
    Closed(Option<(u16, String)>),
}

impl Ws {
    pub async fn send(&mut self, value: Value) {
        self.stream
            .send(Message::text(value.to_string()))
            .await
            .expect("send frame");
    }

    pub async fn send_text(&mut self, text: &str) {
        self.stream
            .send(Message::text(text.to_string()))
            .await
            .expect("send text");
    }

    /// The next frame or the close.
    pub async fn next_event(&mut self) -> WsEvent {
        self.next_event_within(READ_TIMEOUT)
            .await
            .expect("timed out waiting for a frame")
    }

    pub async fn next_event_within(&mut self, limit: Duration) -> Option<WsEvent> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let next = tokio::time::timeout_at(deadline, self.stream.next())
                .await
                .ok()?;
            return Some(match next {
                Some(Ok(Message::Text(text))) => {
                    WsEvent::Frame(serde_json::from_str(text.as_str()).expect("frame is JSON"))
                }
                Some(Ok(Message::Close(frame))) => WsEvent::Closed(
                    frame.map(|f: CloseFrame| (u16::from(f.code), f.reason.to_string())),
                ),
                Some(Ok(_)) => continue,
                Some(Err(_)) | None => WsEvent::Closed(None),
            });
        }
    }

    pub async fn recv(&mut self) -> Value {
        match self.next_event().await {
            WsEvent::Frame(value) => value,
            WsEvent::Closed(close) => panic!("socket closed: {close:?}"),
        }
    }

    /// Frames until (and including) the first matching `stop`.
    pub async fn recv_until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Sends a request and returns its response, skipping events.
    pub async fn request(&mut self, value: Value) -> Value {
        let id = value.get("id").cloned();
        self.send(value).await;
        let frames = self
            .recv_until(|f| f["type"] == "response" && f.get("id").cloned() == id)
            .await;
        frames.into_iter().last().expect("a response")
    }

    /// Waits for the server's close and returns its code and reason.
    pub async fn closed(&mut self) -> Option<(u16, String)> {
        loop {
            match self.next_event().await {
                WsEvent::Closed(close) => return close,
                WsEvent::Frame(_) => continue,
            }
        }
    }
}
