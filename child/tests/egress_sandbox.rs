//! `--tool-network proxy` inside the real sandbox: a tool command (bash, in
//! `rpc --sandbox`) and a hosted program (`sandbox-exec`) have no route to
//! the host, loopback or not, and reach a fake gateway on the egress socket
//! (whose path the sandbox hides) through the proxy variables, behind the
//! preamble naming the secret. Skipped where the sandbox is unavailable.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use corral_protocol::egress::{preamble, SECRET_BYTES, SECRET_ENV};
use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(30);

fn secret() -> String {
    "c0".repeat(SECRET_BYTES)
}

fn agent() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_corral-agent"));
    command
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("OPENAI_API_KEY")
        .env_remove("ZUTCORE_RPC_TOKEN")
        .env_remove("CORRAL_SANDBOX_SIMULATE_MISSING")
        .env("ZUT_HOME", env!("CARGO_TARGET_TMPDIR"));
    command
}

/// A project and a state directory outside `/tmp` (which the sandbox
/// replaces); the egress socket lives in the state directory, hidden.
struct Layout {
    root: tempfile::TempDir,
}

impl Layout {
    fn new() -> Layout {
        let root = tempfile::Builder::new()
            .prefix("corral-egress-test-")
            .tempdir_in("/var/tmp")
            .unwrap();
        for dir in ["project", "state/egress"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        Layout { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }
}

/// Whether the sandbox (with tool network namespaces) works here.
fn sandbox_available(layout: &Layout) -> bool {
    let output = agent()
        .args(["sandbox-probe", "--tool-network", "off"])
        .current_dir(layout.path("project"))
        .output()
        .unwrap();
    if !output.status.success() {
        eprintln!(
            "skipped: the sandbox is unavailable here: {}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    output.status.success()
}

/// A fake gateway: for each connection, reports what it read up to the
/// end of the request head and answers 200.
fn fake_gateway(path: &Path) -> mpsc::Receiver<String> {
    let listener = UnixListener::bind(path).unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut head = String::new();
            while !head.ends_with("\r\n\r\n") {
                match reader.read_line(&mut head) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
            let _ = tx.send(head);
            let _ = (&stream).write_all(b"HTTP/1.1 200 Connection established\r\n\r\n");
        }
    });
    rx
}

/// A TCP listener on every host address, and a non-loopback address of
/// this host (where it has one).
fn host_listener() -> (TcpListener, u16, Option<Ipv4Addr>) {
    let listener = TcpListener::bind("0.0.0.0:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let outward = UdpSocket::bind("0.0.0.0:0")
        .and_then(|s| s.connect("192.0.2.1:9").map(|()| s))
        .and_then(|s| s.local_addr())
        .ok()
        .and_then(|a| match a.ip() {
            std::net::IpAddr::V4(ip) if !ip.is_loopback() && !ip.is_unspecified() => Some(ip),
            _ => None,
        });
    (listener, port, outward)
}

/// Tries the host's listener directly, ignoring the proxy variables.
fn direct_script(port: u16, outward: Option<Ipv4Addr>) -> String {
    let hosts = std::iter::once("127.0.0.1".to_string())
        .chain(outward.map(|ip| ip.to_string()))
        .collect::<Vec<_>>()
        .join(" ");
    format!(
        "for h in {hosts}; do if timeout 5 bash -c \"exec 3<>/dev/tcp/$h/{port}\" 2>/dev/null; \
         then echo \"reached $h\"; else echo \"no route to $h\"; fi; done"
    )
}

/// Asks for a tunnel through `$HTTPS_PROXY` with bash's /dev/tcp and
/// prints the status line, then whether the secret is in the environment.
const THROUGH_PROXY: &str = r#"hostport=${HTTPS_PROXY#http://}
exec 3<>"/dev/tcp/${hostport%:*}/${hostport##*:}" || exit 9
printf 'CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n' >&3
IFS= read -r status <&3
echo "status=${status%$'\r'} proxy=$HTTPS_PROXY"
echo "secret=${CORRAL_EGRESS_SECRET-unset}""#;

fn expect_direct_failed(output: &str, outward: Option<Ipv4Addr>) {
    assert!(!output.contains("reached"), "{output}");
    assert!(output.contains("no route to 127.0.0.1"), "{output}");
    if let Some(ip) = outward {
        assert!(output.contains(&format!("no route to {ip}")), "{output}");
    }
}

fn expect_tunnel(output: &str, gateway: &mpsc::Receiver<String>) {
    assert!(
        output.contains("status=HTTP/1.1 200 Connection established proxy=http://127.0.0.1:3128"),
        "{output}"
    );
    assert!(output.contains("secret=unset"), "{output}");
    let head = gateway
        .recv_timeout(WAIT)
        .expect("nothing reached the gateway");
    assert_eq!(
        head,
        format!(
            "{}CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n",
            preamble(&secret())
        )
    );
}

#[test]
fn a_sandboxed_bash_tool_gets_out_only_through_the_proxy() {
    let layout = Layout::new();
    if !sandbox_available(&layout) {
        return;
    }
    let socket = layout.path("state/egress/proxy.sock");
    let gateway = fake_gateway(&socket);
    let (host, port, outward) = host_listener();
    let model = FakeModel::start(vec![
        FakeModel::bash(&direct_script(port, outward)),
        FakeModel::bash(THROUGH_PROXY),
        FakeModel::text("all done"),
    ]);
    let mut child = agent()
        .args(["rpc", "--provider", "anthropic", "--base-url", &model])
        .args(["--sandbox", "--sandbox-hide"])
        .arg(layout.path("state"))
        .args(["--tool-network", "proxy", "--egress-socket"])
        .arg(&socket)
        .current_dir(layout.path("project"))
        .env("ANTHROPIC_API_KEY", "k")
        .env(SECRET_ENV, secret())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let frames = prompt(&mut child);
    let results: Vec<(bool, String)> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| {
            let text: Vec<&str> = f["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect();
            (f["is_error"] == true, text.join("\n"))
        })
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(results.len(), 2, "{frames:?}");
    expect_direct_failed(&results[0].1, outward);
    assert!(!results[1].0, "{}", results[1].1);
    expect_tunnel(&results[1].1, &gateway);
    assert!(host.accept().is_err(), "a tool reached the host directly");
}

#[test]
fn sandbox_exec_puts_the_whole_program_behind_the_proxy() {
    let layout = Layout::new();
    if !sandbox_available(&layout) {
        return;
    }
    let socket = layout.path("state/egress/proxy.sock");
    let gateway = fake_gateway(&socket);
    let (host, port, outward) = host_listener();
    let script = format!("{}\n{THROUGH_PROXY}\nexit 3", direct_script(port, outward));
    let output = agent()
        .args(["sandbox-exec", "--sandbox-hide"])
        .arg(layout.path("state"))
        .args(["--tool-network", "proxy", "--egress-socket"])
        .arg(&socket)
        .arg("--cwd")
        .arg(layout.path("project"))
        .args(["--", "bash", "-c", &script])
        .env(SECRET_ENV, secret())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(3), "{output:?}");
    expect_direct_failed(&stdout, outward);
    expect_tunnel(&stdout, &gateway);
    assert!(
        host.accept().is_err(),
        "the program reached the host directly"
    );

    let output = agent()
        .args(["sandbox-exec", "--tool-network", "proxy", "--egress-socket"])
        .arg(&socket)
        .arg("--cwd")
        .arg(layout.path("project"))
        .args(["--", "true"])
        .env_remove(SECRET_ENV)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(SECRET_ENV), "{stderr}");
}

/// Sends one prompt and returns the frames up to its `done`.
fn prompt(child: &mut Child) -> Vec<Value> {
    let mut stdin = child.stdin.take().unwrap();
    writeln!(
        stdin,
        "{}",
        json!({"id": "p", "type": "prompt", "message": "work"})
    )
    .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let mut frames = Vec::new();
    loop {
        let line = rx.recv_timeout(WAIT).expect("no done frame");
        let frame: Value = serde_json::from_str(&line).unwrap();
        let done = frame["type"] == "done";
        frames.push(frame);
        if done {
            // stdin stays open until here: closing it would end the agent.
            drop(stdin);
            return frames;
        }
    }
}

/// A fake Anthropic Messages API: answers each request with the next
/// scripted reply, streamed as server-sent events.
struct FakeModel;

impl FakeModel {
    /// Starts serving `replies` in order; returns the base URL.
    fn start(replies: Vec<String>) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let mut replies = replies.into_iter();
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                read_request(&mut stream);
                let body = replies.next().unwrap_or_else(|| FakeModel::text("no more"));
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                     connection: close\r\n\r\n{body}"
                );
            }
        });
        url
    }

    fn text(text: &str) -> String {
        FakeModel::reply(
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": text}),
            "end_turn",
        )
    }

    fn bash(command: &str) -> String {
        let input = json!({ "command": command }).to_string();
        FakeModel::reply(
            json!({"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}}),
            json!({"type": "input_json_delta", "partial_json": input}),
            "tool_use",
        )
    }

    fn reply(block: Value, delta: Value, stop: &str) -> String {
        let usage = json!({"input_tokens": 1, "output_tokens": 1});
        [
            (
                "message_start",
                json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
                    "role": "assistant", "model": "m", "content": [], "stop_reason": null,
                    "usage": usage}}),
            ),
            (
                "content_block_start",
                json!({"type": "content_block_start", "index": 0, "content_block": block}),
            ),
            (
                "content_block_delta",
                json!({"type": "content_block_delta", "index": 0, "delta": delta}),
            ),
            (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            ),
            (
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": stop},
                    "usage": {"output_tokens": 1}}),
            ),
            ("message_stop", json!({"type": "message_stop"})),
        ]
        .iter()
        .map(|(name, data)| format!("event: {name}\ndata: {data}\n\n"))
        .collect()
    }
}

/// Reads one request (head and a Content-Length body) and ignores it.
fn read_request(stream: &mut std::net::TcpStream) {
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0; length];
    let _ = reader.read_exact(&mut body);
}
