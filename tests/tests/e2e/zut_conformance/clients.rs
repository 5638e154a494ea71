//! The protocol flows of zut's four example clients (`examples/rpc/` in
//! bnema/zut: Python, Node, shell with jq, Go), recreated from reading
//! them: what each sends, how it reads, when it stops and what exit code
//! and output it ends with. Each runs against a [`Peer`] that stands in
//! for the `zut rpc` the client spawns.

use std::time::Duration;

use corral_e2e::harness::READ_TIMEOUT;
use serde_json::{json, Value};

use super::peer::Peer;

/// What a client left behind: its exit code and what it printed.
#[derive(Debug, Default)]
pub struct Outcome {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// The four example clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Client {
    Python,
    Node,
    Shell,
    Go,
}

impl Client {
    pub const ALL: [Client; 4] = [Client::Python, Client::Node, Client::Shell, Client::Go];

    /// Runs the client's flow: `token` is its `ZUTCORE_RPC_TOKEN`.
    pub async fn run(self, peer: &mut Peer, prompt: &str, token: Option<&str>) -> Outcome {
        match self {
            Client::Python => python(peer, prompt, token).await,
            Client::Node => node(peer, prompt, token).await,
            Client::Shell => shell(peer, prompt, token).await,
            Client::Go => go(peer, prompt, token).await,
        }
    }
}

/// Eight random hex digits, like the Python (`uuid4().hex[:8]`) and Node
/// (`randomBytes(4)`) clients' ids.
fn random_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    format!("{:08x}", hasher.finish() as u32)
}

fn str_field<'a>(event: &'a Value, key: &str) -> &'a str {
    event.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// `zut_client.py`: reads until `done` (success) or `error` (exit 1 at
/// once); skips lines that are not JSON; crashes on an event it cannot
/// format; closes stdin and gives the process 5 s to exit.
async fn python(peer: &mut Peer, prompt: &str, token: Option<&str>) -> Outcome {
    let mut out = Outcome::default();
    if let Some(token) = token {
        let hello = json!({"type":"hello","token":token,"id":random_id()});
        peer.send(&hello.to_string()).await;
    }
    let command = json!({"type":"prompt","message":prompt,"id":random_id()});
    peer.send(&command.to_string()).await;
    let mut failed = false;
    while let Some(line) = peer.line().await {
        let Ok(event) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        let Some(object) = event.as_object() else {
            panic!("Python would crash on a JSON line that is no object: {line}")
        };
        match object.get("type").and_then(Value::as_str) {
            Some("text_delta") => match object.get("delta") {
                None => {}
                Some(Value::String(delta)) => out.stdout.push_str(delta),
                Some(other) => panic!("Python's write() crashes on delta {other}"),
            },
            Some("tool_call") => out.stderr += &format!("\n[tool] {}", str_field(&event, "name")),
            Some("tool_result") if event["is_error"] == true => out.stderr += "[tool error]\n",
            Some("usage") => {
                let cost = event.get("cumulative").and_then(|c| c.get("cost_usd"));
                let cost = cost.map_or(Some(0.0), Value::as_f64);
                let cost = cost.unwrap_or_else(|| panic!("Python's :.4f crashes on {event}"));
                out.stderr += &format!("\n[usage] cost=${cost:.4}");
            }
            Some("done") => break,
            Some("error") => {
                out.stderr += &format!("\n[error] {}\n", str_field(&event, "message"));
                failed = true;
                break;
            }
            _ => {}
        }
    }
    if failed {
        out.code = 1;
    } else {
        out.stdout.push('\n');
    }
    peer.close_stdin();
    if peer.exit_within(Duration::from_secs(5)).await.is_none() {
        out.code = 1;
        out.stderr += "subprocess.TimeoutExpired: the agent did not exit within 5 s\n";
    }
    out
}

/// `zut-client.js`: an `error` sets the exit code to 1 and reading goes on
/// until `done`, which ends stdin and exits at once. At stdout EOF it ends
/// when the child does, with 0.
async fn node(peer: &mut Peer, prompt: &str, token: Option<&str>) -> Outcome {
    let mut out = Outcome::default();
    if let Some(token) = token {
        peer.send(&json!({"type":"hello","token":token,"id":random_id()}).to_string())
            .await;
    }
    peer.send(&json!({"type":"prompt","message":prompt,"id":random_id()}).to_string())
        .await;
    let mut code = 0;
    while let Some(line) = peer.line().await {
        let Ok(event) = serde_json::from_str::<Value>(line.trim()) else {
            continue;
        };
        assert!(!event.is_null(), "`null.type` throws in Node: {line}");
        match event.get("type").and_then(Value::as_str) {
            Some("text_delta") => out.stdout += str_field(&event, "delta"),
            Some("tool_call") => out.stderr += &format!("\n[tool] {}", str_field(&event, "name")),
            Some("error") => {
                out.stderr += &format!("\n[error] {}\n", str_field(&event, "message"));
                code = 1;
            }
            Some("done") => {
                out.stdout.push('\n');
                peer.close_stdin();
                out.code = code;
                return out;
            }
            _ => {}
        }
    }
    peer.close_stdin();
    peer.exit_within(READ_TIMEOUT)
        .await
        .expect("Node would wait for the child to exit");
    out
}

/// `prompt.sh`: `{ hello; prompt; cat; } | zut rpc | while read …`, run
/// with stdin at EOF, so the agent sees EOF right after the prompt. Every
/// line goes through `jq` under `set -e`; `error` exits the reader with 1,
/// `done` with 0; under `pipefail` the script's status is the reader's,
/// else the agent's, which bash waits for.
async fn shell(peer: &mut Peer, prompt: &str, token: Option<&str>) -> Outcome {
    let mut out = Outcome::default();
    if let Some(token) = token {
        peer.send(&json!({"id":"0","type":"hello","token":token}).to_string())
            .await;
    }
    peer.send(&json!({"id":"1","type":"prompt","message":prompt}).to_string())
        .await;
    peer.close_stdin();
    let mut reader = 0;
    while let Some(line) = peer.line().await {
        if line.is_empty() {
            continue;
        }
        let event: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("jq fails under set -e on a non-JSON line ({e}): {line}"));
        assert!(
            event.is_object() || event.is_null(),
            "jq's `.type` fails on {line}"
        );
        match event.get("type").and_then(Value::as_str) {
            Some("text_delta") => out.stdout += str_field(&event, "delta"),
            Some("tool_call") => out.stderr += &format!("\n[tool] {}\n", str_field(&event, "name")),
            Some("error") => {
                out.stderr += &format!("[error] {}\n", str_field(&event, "message"));
                reader = 1;
                break;
            }
            Some("done") => {
                out.stdout.push('\n');
                break;
            }
            _ => {}
        }
    }
    peer.close_stdout();
    let agent = peer
        .exit_within(READ_TIMEOUT)
        .await
        .expect("bash waits for `zut rpc` to exit");
    out.code = if reader != 0 { reader } else { agent };
    out
}

/// `main.go`: an `error` is printed and reading goes on; `done` closes
/// stdin, waits for the process and returns, so the exit code is 0 either
/// way. A line over 16 MiB ends the scanner silently.
async fn go(peer: &mut Peer, prompt: &str, token: Option<&str>) -> Outcome {
    const MAX_LINE: usize = 16 * 1024 * 1024;
    let mut out = Outcome::default();
    if let Some(token) = token {
        peer.send(&json!({"id":"0","token":token,"type":"hello"}).to_string())
            .await;
    }
    peer.send(&json!({"id":"1","message":prompt,"type":"prompt"}).to_string())
        .await;
    while let Some(line) = peer.line().await {
        if line.len() > MAX_LINE {
            break;
        }
        let Ok(Value::Object(event)) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        let text = |key: &str| match event.get(key) {
            None | Some(Value::Null) => "<nil>".to_string(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        };
        match event.get("type").and_then(Value::as_str) {
            Some("text_delta") => out.stdout += &text("delta"),
            Some("tool_call") => out.stderr += &format!("\n[tool] {}\n", text("name")),
            Some("error") => out.stderr += &format!("\n[error] {}\n", text("message")),
            Some("done") => {
                out.stdout.push('\n');
                peer.close_stdin();
                peer.exit_within(READ_TIMEOUT)
                    .await
                    .expect("cmd.Wait() would hang");
                return out;
            }
            _ => {}
        }
    }
    out
}
