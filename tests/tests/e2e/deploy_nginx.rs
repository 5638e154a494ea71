//! End-to-end: several gateways sharing one state directory, with and
//! without nginx in front (consistent hash by project, as in
//! `deploy/nginx.conf`). A project's connections stick to one gateway; when
//! that gateway dies its project moves and the conversation resumes from
//! the shared journal; two gateways never run one project's child at once.
//! nginx talks to the gateways' `--proxy-listen` listeners, so a client
//! behind it keeps its own address (and failure budget).
//!
//! Needs `nginx` (Debian: `apt-get install nginx`); `.ci/install-deps`
//! installs it.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use corral_e2e::gateway::{agent_pids, Gateway, GatewaySpawn, Ws, ADMIN_TOKEN, TOKEN};
use corral_e2e::harness::READ_TIMEOUT;
use corral_e2e::http;
use corral_e2e::prerequisites;
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::process::{Child, Command};

const PROJECTS: &[&str] = &["alpha", "beta", "gamma", "delta", "epsilon"];

/// The nginx binary; a missing one fails the test, saying what to install.
fn nginx_bin() -> PathBuf {
    prerequisites::NGINX.require()
}

/// nginx in the foreground, as one process, with everything in a temp dir.
pub(crate) struct Nginx {
    /// Killed when the test ends.
    _process: Child,
    pub(crate) addr: SocketAddr,
    dir: TempDir,
}

impl Nginx {
    /// Starts nginx hashing `/v1/projects/NAME/` over `upstreams`.
    pub(crate) async fn start(upstreams: &[SocketAddr]) -> Nginx {
        let bin = nginx_bin();
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let servers: String = upstreams
            .iter()
            .map(|a| format!("        server {a} max_fails=1 fail_timeout=30s;\n"))
            .collect();
        let d = dir.path().display();
        let config = format!(
            r#"daemon off;
master_process off;
worker_processes 1;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {d}/access.log;
    client_body_temp_path {d}/client_body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    map $uri $corral_project {{
        ~^/v1/projects/(?<name>[^/]+)/ $name;
        default "";
    }}
    map $http_upgrade $connection_upgrade {{
        default upgrade;
        "" close;
    }}
    upstream corral {{
        hash $corral_project consistent;
{servers}    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://corral;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_connect_timeout 2s;
            proxy_next_upstream error timeout;
            proxy_read_timeout 1h;
            proxy_send_timeout 1h;
            proxy_buffering off;
        }}
    }}
}}
"#
        );
        let conf = dir.path().join("nginx.conf");
        std::fs::write(&conf, config).unwrap();
        let process = Command::new(bin)
            .arg("-p")
            .arg(dir.path())
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn nginx");
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        let nginx = Nginx {
            _process: process,
            addr,
            dir,
        };
        nginx.wait_listening().await;
        nginx
    }

    async fn wait_listening(&self) {
        let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
        while tokio::net::TcpStream::connect(self.addr).await.is_err() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "nginx did not start listening; its log:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("error.log")).unwrap_or_default()
    }

    /// Connects to `project` through nginx and says hello.
    async fn client_with(&self, project: &str) -> (Ws, Value) {
        let url = format!("ws://{}/v1/projects/{project}/rpc", self.addr);
        let (stream, _) = tokio::time::timeout(READ_TIMEOUT, tokio_tungstenite::connect_async(url))
            .await
            .expect("connect through nginx timed out")
            .unwrap_or_else(|e| panic!("connect through nginx: {e}\n{}", self.log()));
        let mut ws = Ws { stream };
        ws.send(json!({"id":"hello","type":"hello","token": TOKEN}))
            .await;
        let reply = ws.recv().await;
        (ws, reply)
    }

    async fn client(&self, project: &str) -> Ws {
        let (ws, reply) = self.client_with(project).await;
        assert_eq!(reply["success"], true, "hello through nginx: {reply}");
        ws
    }
}

/// A loopback port nobody listens on right now.
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Gateways sharing one projects root and one state dir.
struct Fleet {
    dir: TempDir,
}

impl Fleet {
    fn new() -> Fleet {
        Fleet {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn journal(&self, project: &str) -> PathBuf {
        self.dir
            .path()
            .join("state/sessions")
            .join(format!("{project}.jsonl"))
    }

    async fn gateway(&self) -> Gateway {
        GatewaySpawn::default()
            .echo()
            .projects(PROJECTS)
            .projects_root(self.dir.path().join("projects"))
            .state_dir(self.dir.path().join("state"))
            .behind_local_proxy()
            .capture_log()
            .spawn()
            .await
    }
}

/// The gateway's listener for the balancer.
fn proxy_of(gateway: &Gateway) -> SocketAddr {
    gateway.proxy_addr.expect("a --proxy-listen address")
}

/// The projects with a hub on `gateway`, and their child pids (admin API).
async fn hosted(gateway: &Gateway) -> Vec<(String, Value)> {
    let (status, body) = gateway.http_get("/v1/projects", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    list["projects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["project"].as_str().unwrap().to_string(), p["pid"].clone()))
        .collect()
}

fn pid_on(hosted: &[(String, Value)], project: &str) -> Option<Value> {
    hosted
        .iter()
        .find(|(name, _)| name == project)
        .map(|(_, pid)| pid.clone())
}

/// (role, text) of every message.
async fn conversation(ws: &mut Ws) -> Vec<(String, String)> {
    let reply = ws.request(json!({"id":"m","type":"get_messages"})).await;
    assert_eq!(reply["success"], true, "{reply}");
    reply["data"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap().to_string(),
                m["content"][0]["text"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

async fn prompt(ws: &mut Ws, text: &str) {
    ws.send(json!({"id":"p","type":"prompt","message": text}))
        .await;
    ws.recv_until(|f| f["type"] == "done").await;
}

fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
    items
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

/// Every line of the journal is a whole JSON object.
fn assert_journal_intact(path: &Path) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'), "torn journal: {text:?}");
    for line in text.lines() {
        let entry: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("corrupt journal line ({e}): {line}"));
        assert!(entry["kind"].is_string(), "{line}");
    }
}

async fn wait_gone(pids: &[u32]) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while agent_pids().iter().any(|pid| pids.contains(pid)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "children {pids:?} outlived their gateway"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn nginx_hashes_projects_to_one_gateway_and_fails_over_with_the_journal() {
    let fleet = Fleet::new();
    let mut gateways = [fleet.gateway().await, fleet.gateway().await];
    let nginx = Nginx::start(&[proxy_of(&gateways[0]), proxy_of(&gateways[1])]).await;

    // Every connection for a project lands on the same gateway: exactly one
    // gateway hosts it, and its child is never replaced.
    let mut owner_pid: Vec<Option<(usize, Value)>> = vec![None; PROJECTS.len()];
    // (Five projects, visited in a different order each round, so that not
    // even round-robin would send a project to the same gateway each time.)
    for round in 0..3 {
        for k in 0..PROJECTS.len() {
            let i = (k * (round + 1)) % PROJECTS.len();
            let project = PROJECTS[i];
            let (mut ws, reply) = nginx.client_with(project).await;
            assert_eq!(reply["success"], true, "{project}, round {round}: {reply}");
            let pong = ws.request(json!({"id":"1","type":"ping"})).await;
            assert_eq!(pong["success"], true, "{pong}");
            drop(ws);
            let on = [
                pid_on(&hosted(&gateways[0]).await, project),
                pid_on(&hosted(&gateways[1]).await, project),
            ];
            let owners: Vec<usize> = (0..2).filter(|g| on[*g].is_some()).collect();
            assert_eq!(owners.len(), 1, "{project} is hosted by {owners:?}");
            let now = (owners[0], on[owners[0]].clone().unwrap());
            assert!(now.1.is_u64(), "{project} has no running child: {now:?}");
            match &owner_pid[i] {
                None => owner_pid[i] = Some(now),
                Some(before) => assert_eq!(before, &now, "{project} moved in round {round}"),
            }
        }
    }

    // A conversation on the first project, then its gateway dies.
    let project = PROJECTS[0];
    let (owner, _) = owner_pid[0].clone().unwrap();
    let survivor = 1 - owner;
    let mut ws = nginx.client(project).await;
    prompt(&mut ws, "remember the llama").await;
    let before = conversation(&mut ws).await;
    assert_eq!(
        before,
        pairs(&[
            ("user", "remember the llama"),
            ("assistant", "remember the llama")
        ])
    );
    let orphans = gateways[owner].child_pids();
    assert!(!orphans.is_empty());
    gateways[owner].child.start_kill().unwrap();
    gateways[owner].child.wait().await.unwrap();
    // Its children die with it (parent-death signal), releasing their
    // journal locks.
    wait_gone(&orphans).await;
    drop(ws);

    // Reconnecting through nginx lands on the survivor, which resumes the
    // conversation from the shared journal.
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let mut ws = loop {
        let (ws, reply) = nginx.client_with(project).await;
        if reply["success"] == true {
            break ws;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no gateway took over {project}: {reply}\nnginx: {}",
            nginx.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(
        pid_on(&hosted(&gateways[survivor]).await, project).is_some(),
        "{project} is not on the surviving gateway"
    );
    assert_eq!(conversation(&mut ws).await, before);
    prompt(&mut ws, "and the alpaca").await;
    assert_eq!(conversation(&mut ws).await.len(), 4);
    assert_journal_intact(&fleet.journal(project));

    // The survivor's own projects never moved.
    for (i, other) in PROJECTS.iter().enumerate() {
        let (g, pid) = owner_pid[i].clone().unwrap();
        if g == survivor {
            let hosted = hosted(&gateways[survivor]).await;
            assert_eq!(pid_on(&hosted, other), Some(pid), "{other} restarted");
        }
    }
}

#[tokio::test]
async fn two_gateways_on_one_journal_run_one_child_and_the_other_gets_an_error() {
    let fleet = Fleet::new();
    let first = fleet.gateway().await;
    let second = fleet.gateway().await;

    let mut ws = first.client("alpha").await;
    prompt(&mut ws, "first gateway").await;

    // The second gateway's child finds the journal locked and exits.
    let (mut refused, reply) = second.client_with("alpha", TOKEN, None).await;
    assert_eq!(reply["success"], false, "{reply}");
    let error = reply["error"].as_str().unwrap();
    assert!(error.contains("the agent failed to start"), "{error}");
    // Try again later: the project may move back here (deploy/README.md).
    assert!(matches!(refused.closed().await, Some((1013, _))));
    // The operator sees why in the second gateway's log.
    let log = std::fs::read_to_string(&second.log).unwrap();
    assert!(
        log.contains("is in use by another agent process"),
        "the lock conflict is not in the log:\n{log}"
    );

    // One child runs, the first gateway's, and its conversation is intact.
    assert_eq!(first.child_pids().len(), 1);
    // (A restart attempt of the second gateway exits as quickly.)
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    while !second.child_pids().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a second child runs"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    prompt(&mut ws, "still here").await;
    assert_eq!(
        conversation(&mut ws).await,
        pairs(&[
            ("user", "first gateway"),
            ("assistant", "first gateway"),
            ("user", "still here"),
            ("assistant", "still here"),
        ])
    );
    assert_journal_intact(&fleet.journal("alpha"));
}

/// `deploy/nginx.conf` as shipped passes `nginx -t` (log paths moved into a
/// temp dir so the check needs no root).
#[tokio::test]
async fn the_shipped_nginx_conf_passes_nginx_t() {
    let bin = nginx_bin();
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/nginx.conf");
    let text = std::fs::read_to_string(&shipped).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display().to_string();
    let conf = dir.path().join("nginx.conf");
    std::fs::write(&conf, text.replace("/var/log/nginx/", &format!("{d}/"))).unwrap();
    let output = Command::new(bin)
        .arg("-t")
        .arg("-p")
        .arg(dir.path())
        .arg("-e")
        .arg(dir.path().join("error.log"))
        .arg("-g")
        .arg(format!("pid {d}/nginx.pid;"))
        .arg("-c")
        .arg(&conf)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "nginx -t failed:\n{stderr}");
    assert!(stderr.contains("test is successful"), "{stderr}");
}

/// Through nginx, what a client writes in `X-Forwarded-For` itself does
/// not change its address: nginx appends the address it saw and the
/// gateway takes the right-most entry, so a client guessing tokens with a
/// new made-up address each time still spends one failure budget. A
/// right token that worked through nginx before keeps working.
#[tokio::test]
async fn clients_behind_nginx_cannot_choose_their_address() {
    let fleet = Fleet::new();
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(PROJECTS)
        .projects_root(fleet.dir.path().join("projects"))
        .state_dir(fleet.dir.path().join("state"))
        .behind_local_proxy()
        .arg("--auth-failure-rate")
        .arg("0.01")
        .arg("--auth-failure-burst")
        .arg("3")
        .spawn()
        .await;
    let nginx = Nginx::start(&[proxy_of(&gateway)]).await;
    let mut ws = nginx.client("alpha").await;
    assert_eq!(
        ws.request(json!({"id":"1","type":"ping"})).await["success"],
        true
    );
    let mut statuses = Vec::new();
    for n in 1..=5 {
        let spoofed = format!("198.51.100.{n}");
        let answer = http::exchange(
            nginx.addr,
            "GET",
            "/v1/stats",
            &[
                ("Authorization", "Bearer not-the-admin-token-0123456789"),
                ("X-Forwarded-For", &spoofed),
            ],
        )
        .await;
        statuses.push(answer.status);
    }
    assert_eq!(statuses, [401, 401, 401, 429, 429], "{}", nginx.log());
    let (_ws, reply) = nginx.client_with("beta").await;
    assert_eq!(
        reply["success"], true,
        "the right token still works: {reply}"
    );
}
