//! End-to-end: `--tool-network proxy`, the default. A sandboxed agent's
//! tool commands reach only what the operator allows, through the
//! gateway's egress proxy: local servers on the host stand in for the
//! internet (an allowed "registry", another host, a cloud metadata
//! service), the test resolver maps made-up names onto them, and the
//! mock LLM drives `curl` and a raw-socket script as a prompt-injected
//! model would.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::process::Stdio;

use corral_e2e::brief;
use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN};
use corral_e2e::harness::is_done;
use corral_e2e::mock_llm::{MockLlm, Turn};
use corral_e2e::prerequisites::{CURL, OPENSSL, PYTHON3};
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The variable the gateway reads its test name mapping from.
const TEST_RESOLVE: &str = "CORRAL_EGRESS_TEST_RESOLVE";

/// A plain HTTP server on 127.0.0.1 answering every request with `body`;
/// returns its port. It stands for a host on the internet.
async fn http_server(body: &'static str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match stream.read(&mut byte).await {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let first = String::from_utf8_lossy(&head);
                let first = first.lines().next().unwrap_or("").to_string();
                let text = format!("{body} saw [{first}]\n");
                let response = format!(
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
                    text.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
            });
        }
    });
    port
}

/// Runs `command` in the bash tool in one prompt; returns its output.
async fn bash(ws: &mut Ws, mock: &MockLlm, command: &str) -> String {
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": command, "timeout": 60}),
    ));
    mock.push(Turn::text("ok"));
    ws.send(json!({"id":"run","type":"prompt","message":"go"}))
        .await;
    let frames = ws.recv_until(is_done).await;
    let results: Vec<String> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| {
            f["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|block| block["text"].as_str())
                .collect::<Vec<_>>()
                .join("")
        })
        .collect();
    assert_eq!(results.len(), 1, "one tool result: {}", brief(&frames));
    results[0].clone()
}

/// The value printed as `name=VALUE` on a line of `output`.
fn field<'a>(output: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}=");
    output
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name}= in:\n{output}"))
}

/// A shell line printing `NAME=<status> <rule header>` for `curl ARGS`
/// through the proxy the sandbox sets (`--noproxy ''`: even for
/// 127.0.0.1, which `NO_PROXY` sends to the tool's own loopback).
fn probe(name: &str, args: &str) -> String {
    format!(
        "echo \"{name}=$(curl -sS -o /dev/null -D /dev/stdout -w 'status:%{{http_code}}:%{{http_connect}}' \
         --noproxy '' --max-time 60 {args} 2>/dev/null | tr -d '\\r' | grep -i -e '^x-corral-egress-rule' -e '^status:' | tr '\\n' ' ')\""
    )
}

/// The sum of `corral_egress_requests_total` samples for `project` and
/// `decision`.
fn egress_count(metrics: &str, project: &str, decision: &str) -> u64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("corral_egress_requests_total{"))
        .filter(|l| l.contains(&format!("project=\"{project}\"")))
        .filter(|l| l.contains(&format!("decision=\"{decision}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn gateway(mock: &MockLlm, dir: &Path, args: &[String], resolve: &str) -> Gateway {
    let mut spawn = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.join("projects"))
        .state_dir(dir.join("state"))
        .env(TEST_RESOLVE, resolve);
    for arg in args {
        spawn = spawn.arg(arg);
    }
    spawn.spawn().await
}

#[tokio::test]
async fn tools_reach_only_what_the_operator_allows() {
    CURL.require();
    PYTHON3.require();
    let mock = MockLlm::start().await;
    let dir = corral_e2e::dir_outside_tmp();
    let registry = http_server("registry").await;
    let elsewhere = http_server("elsewhere").await;
    let metadata = http_server("metadata").await;
    let gateway = gateway(
        &mock,
        dir.path(),
        &[
            // The operator's exception standing in for an internet host.
            "--egress-allow".into(),
            format!("127.0.0.1:{registry}"),
            // A name rule: the names resolve (test mapping) onto loopback.
            "--egress-allow".into(),
            "metadata.example.com".into(),
            "--egress-deny".into(),
            "blocked.example.com".into(),
        ],
        "registry.example.com=127.0.0.1,blocked.example.com=127.0.0.1,metadata.example.com=127.0.0.1",
    )
    .await;
    let mut alpha = gateway.client("alpha").await;
    let gateway_port = gateway.addr.port();

    let script = [
        "echo \"proxy=$HTTPS_PROXY no_proxy=$NO_PROXY\"".to_string(),
        format!("echo \"allowed=$(curl -sS --noproxy '' --max-time 60 http://127.0.0.1:{registry}/pkg)\""),
        format!("echo \"by_name=$(curl -sS --max-time 60 http://registry.example.com:{registry}/pkg)\""),
        probe("elsewhere", &format!("http://127.0.0.1:{elsewhere}/")),
        probe("gateway", &format!("http://127.0.0.1:{gateway_port}/healthz")),
        probe("metadata", "http://169.254.169.254/latest/meta-data/"),
        probe("metadata_tunnel", "-p http://169.254.169.254:81/latest/meta-data/"),
        probe("private", "http://10.1.2.3/"),
        probe("rebound", &format!("http://metadata.example.com:{metadata}/")),
        probe("denied", &format!("http://blocked.example.com:{registry}/")),
        // Ignoring the proxy variables: no route out at all.
        format!(
            "echo \"direct=$(env -u HTTP_PROXY -u http_proxy curl -sS --max-time 5 http://127.0.0.1:{registry}/ 2>&1 | head -c 120)\""
        ),
        format!(
            "echo \"raw=$(python3 -c 'import socket,sys\nfor a in sys.argv[1:]:\n  h,p=a.rsplit(\":\",1)\n  try:\n    socket.create_connection((h,int(p)),timeout=5); print(\"connected\",a)\n  except OSError as e: print(\"refused\",a,e.errno)' 127.0.0.1:{registry} 127.0.0.1:{gateway_port} 169.254.169.254:80 | tr '\\n' ' ')\""
        ),
    ]
    .join("\n");
    // Host services' Unix sockets are out of reach too (connect(2) to a
    // path needs no network): their directories look empty.
    let socket_dirs: Vec<&str> = ["/run/dbus", "/run/user", "/run/postgresql"]
        .into_iter()
        .filter(|dir| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()))
        .collect();
    let script = format!(
        "{script}\necho \"sockets=$(ls -A {} 2>/dev/null | grep -v ':$' | grep -v '^$' | wc -l)\"",
        socket_dirs.join(" ")
    );
    let output = bash(&mut alpha, &mock, &script).await;

    if !socket_dirs.is_empty() {
        assert_eq!(
            field(&output, "sockets"),
            "0",
            "{socket_dirs:?} hidden: {output}"
        );
    }
    assert!(
        field(&output, "proxy").starts_with("http://127.0.0.1:3128"),
        "{output}"
    );
    assert!(
        field(&output, "allowed").contains("registry saw [GET /pkg HTTP/1.1]"),
        "plain HTTP is forwarded in origin form: {output}"
    );
    assert!(
        field(&output, "by_name").contains("registry saw"),
        "{output}"
    );
    for (name, rule) in [
        ("elsewhere", "blocked-range:loopback"),
        ("gateway", "blocked-range:loopback"),
        ("metadata", "blocked-range:link-local"),
        ("metadata_tunnel", "blocked-range:link-local"),
        ("private", "blocked-range:private"),
        ("rebound", "blocked-range:loopback"),
        ("denied", "deny:blocked.example.com"),
    ] {
        let line = field(&output, name);
        assert!(
            line.contains("status:") && line.contains("403"),
            "{name}: {output}"
        );
        assert!(
            line.to_ascii_lowercase().contains(rule),
            "{name} names {rule}: {output}"
        );
    }
    assert!(
        !field(&output, "direct").contains("registry saw"),
        "{output}"
    );
    let raw = field(&output, "raw");
    assert!(
        !raw.contains("connected"),
        "a raw connect finds no route: {output}"
    );

    // Each refusal is logged with project, host, port and rule ...
    let log = gateway.log_text();
    let refusals: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("egress refused"))
        .collect();
    assert!(refusals.len() >= 7, "{log}");
    assert!(
        refusals.iter().any(|l| l.contains("169.254.169.254")
            && l.contains("link-local")
            && l.contains("alpha")),
        "{log}"
    );
    // ... counted ...
    let (status, metrics) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    assert!(egress_count(&metrics, "alpha", "refused") >= 7, "{metrics}");
    assert!(egress_count(&metrics, "alpha", "allowed") >= 2, "{metrics}");
    // ... and in the dashboard's event tail.
    let (status, events) = gateway.http_get("/v1/events", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    let events: Value = serde_json::from_str(&events).unwrap();
    let text = events.to_string();
    assert!(
        text.contains("egress_refused") && text.contains("link-local"),
        "{text}"
    );
}

/// A self-signed certificate for `name` (PEM files `cert.pem`, `key.pem`
/// in `dir`).
fn certificate(dir: &Path, name: &str) {
    let status = std::process::Command::new(OPENSSL.require())
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", &format!("/CN={name}")])
        .args(["-addext", &format!("subjectAltName=DNS:{name}")])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success());
}

/// An HTTPS server (python's, with `dir`'s certificate) serving the files
/// in `dir/www` on 127.0.0.1; returns it and its port.
async fn https_server(dir: &Path) -> (tokio::process::Child, u16) {
    let script = "import http.server,ssl,sys,os\n\
        os.chdir(sys.argv[1]+'/www')\n\
        s=http.server.ThreadingHTTPServer(('127.0.0.1',0),http.server.SimpleHTTPRequestHandler)\n\
        c=ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain(sys.argv[1]+'/cert.pem',sys.argv[1]+'/key.pem')\n\
        s.socket=c.wrap_socket(s.socket,server_side=True)\n\
        print(s.server_address[1],flush=True)\n\
        s.serve_forever()\n";
    let mut child = tokio::process::Command::new(PYTHON3.require())
        .arg("-c")
        .arg(script)
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = tokio::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::io::AsyncBufReadExt::read_line(&mut stdout, &mut line)
        .await
        .unwrap();
    let port = line.trim().parse().unwrap();
    (child, port)
}

#[tokio::test]
async fn https_fetches_tunnel_through_to_an_allowed_registry() {
    CURL.require();
    PYTHON3.require();
    let mock = MockLlm::start().await;
    let dir = corral_e2e::dir_outside_tmp();
    let tls = dir.path().join("tls");
    std::fs::create_dir_all(tls.join("www/simple/demo")).unwrap();
    certificate(&tls, "registry.example.com");
    std::fs::write(tls.join("www/demo-1.0.tgz"), "package bytes\n").unwrap();
    std::fs::write(
        tls.join("www/simple/demo/index.html"),
        "<a href=\"../../demo-1.0.tgz\">demo-1.0.tgz</a>\n",
    )
    .unwrap();
    let (_server, port) = https_server(&tls).await;
    let gateway = gateway(
        &mock,
        dir.path(),
        &[
            "--egress-allow".into(),
            format!("registry.example.com:{port}"),
            // The name resolves to loopback here: the operator excepts
            // exactly that address and port.
            "--egress-allow".into(),
            format!("127.0.0.1:{port}"),
            "--egress-methods".into(),
            "GET,HEAD".into(),
        ],
        "registry.example.com=127.0.0.1,other.example.com=127.0.0.1",
    )
    .await;
    let mut alpha = gateway.client("alpha").await;
    let ca = tls.join("cert.pem");
    let ca = ca.display();
    let script = [
        // What `npm pack` and `pip download` do: GET over a CONNECT tunnel.
        format!("curl -sS --max-time 60 --cacert {ca} -o demo.tgz https://registry.example.com:{port}/demo-1.0.tgz && echo \"npm_like=$(cat demo.tgz)\""),
        format!(
            "echo \"pip_like=$(SSL_CERT_FILE={ca} python3 -c 'import urllib.request,sys; print(urllib.request.urlopen(sys.argv[1]).read().decode().strip())' https://registry.example.com:{port}/simple/demo/index.html 2>&1 | tail -n 1)\""
        ),
        // Inside the tunnel the method list does not apply (it cannot be seen).
        format!("echo \"post=$(curl -sS --max-time 60 --cacert {ca} -X POST -o /dev/null -w '%{{http_code}}' https://registry.example.com:{port}/demo-1.0.tgz)\""),
        // Another name on the same address and port: still allowed by the
        // address exception; a different port is not.
        probe("other_port", &format!("--cacert {ca} https://other.example.com:{}/", port.wrapping_add(1).max(1))),
    ]
    .join("\n");
    let output = bash(&mut alpha, &mock, &script).await;
    assert_eq!(field(&output, "npm_like"), "package bytes", "{output}");
    assert!(
        field(&output, "pip_like").contains("demo-1.0.tgz"),
        "{output}"
    );
    // python's http.server answers POST with 501: the request reached it.
    assert_eq!(field(&output, "post"), "501", "{output}");
    let other = field(&output, "other_port");
    assert!(other.contains("403"), "{output}");
}

/// `curl` through the proxy to `url`: the HTTP status and the rule header,
/// as [`probe`] prints them.
async fn fetch(ws: &mut Ws, mock: &MockLlm, url: &str) -> String {
    let output = bash(ws, mock, &probe("result", url)).await;
    field(&output, "result").to_string()
}

#[tokio::test]
async fn an_admin_override_narrows_or_widens_a_project_but_never_unlocks_a_blocked_range() {
    CURL.require();
    let mock = MockLlm::start().await;
    let dir = corral_e2e::dir_outside_tmp();
    let registry = http_server("registry").await;
    let args = [
        "--egress-allow".to_string(),
        format!("127.0.0.1:{registry}"),
    ];
    let gateway = gateway(&mock, dir.path(), &args, "").await;
    let mut alpha = gateway.client("alpha").await;
    let mut beta = gateway.client("beta").await;
    let url = format!("http://127.0.0.1:{registry}/");
    assert!(fetch(&mut alpha, &mock, &url).await.contains("status:200"));

    // Narrower for alpha: the operator's allowlist replaced by nothing.
    let path = "/v1/projects/alpha/egress";
    let (status, body) = gateway
        .http_body("PUT", path, Some(ADMIN_TOKEN), r#"{"allow": []}"#)
        .await;
    assert_eq!(status, 200, "{body}");
    let narrowed = fetch(&mut alpha, &mock, &url).await;
    assert!(
        narrowed.contains("403") && narrowed.contains("not-allowed"),
        "{narrowed}"
    );
    assert!(
        fetch(&mut beta, &mock, &url).await.contains("status:200"),
        "beta keeps the operator's policy"
    );

    // Wider for alpha, with rules reaching for the always-refused ranges:
    // the metadata address and private networks stay refused.
    let (status, body) = gateway
        .http_body(
            "PUT",
            path,
            Some(ADMIN_TOKEN),
            r#"{"allow": ["169.254.169.254", "10.0.0.0/8", "127.0.0.1"], "deny": ["203.0.113.9"]}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["effective"]["deny"], json!(["203.0.113.9"]), "{view}");
    let metadata = fetch(
        &mut alpha,
        &mock,
        "http://169.254.169.254/latest/meta-data/",
    )
    .await;
    assert!(metadata.contains("blocked-range:link-local"), "{metadata}");
    let private = fetch(&mut alpha, &mock, "http://10.1.2.3/").await;
    assert!(private.contains("blocked-range:private"), "{private}");

    // Bad overrides are refused with the reason and change nothing.
    for bad in [
        r#"{"allow": ["https://x.example.com"]}"#,
        r#"{"allw": []}"#,
        "not json",
    ] {
        let (status, body) = gateway.http_body("PUT", path, Some(ADMIN_TOKEN), bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    let (status, _) = gateway
        .http_body("PUT", path, None, r#"{"allow": []}"#)
        .await;
    assert_eq!(status, 401);
    let (status, _) = gateway
        .http_body("PUT", "/v1/projects/..%2Fx/egress", Some(ADMIN_TOKEN), "{}")
        .await;
    assert_eq!(status, 400);

    // Kept across a restart of the gateway.
    let (status, before) = gateway.http_get(path, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    drop((alpha, beta));
    drop(gateway);
    let gateway = self::gateway(&mock, dir.path(), &args, "").await;
    let (status, after) = gateway.http_get(path, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    let (before, after): (Value, Value) = (
        serde_json::from_str(&before).unwrap(),
        serde_json::from_str(&after).unwrap(),
    );
    assert_eq!(before["override"], after["override"]);
    assert!(after["override"]["allow"].is_array(), "{after}");

    // Removed: back to the operator's policy.
    let (status, body) = gateway.http("DELETE", path, Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["override"], Value::Null);
    let mut alpha = gateway.client("alpha").await;
    assert!(fetch(&mut alpha, &mock, &url).await.contains("status:200"));
}
