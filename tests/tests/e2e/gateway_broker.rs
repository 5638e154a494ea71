//! End-to-end: `--model-broker on`. The gateway holds the provider key;
//! its sandboxed agent calls the mock LLM through the broker with a
//! placeholder, and neither its environment, its command line nor its
//! memory (read as root) holds the key. The agent has no network but
//! `lo`, and its tools reach neither the broker nor the host.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;

use corral_e2e::brief;
use corral_e2e::gateway::{parent_of, serve_exit, Gateway, GatewaySpawn, ADMIN_TOKEN};
use corral_e2e::harness::is_done;
use corral_e2e::mock_llm::{MockLlm, Turn};
use corral_e2e::prerequisites::CURL;
use serde_json::{json, Value};

/// The provider key only the gateway (and the mock provider) may see.
const KEY: &str = "sk-ant-broker-e2e-7f3a9c1d5e";

/// A gateway under `dir` whose environment holds the key and the mock's
/// Anthropic endpoint, as an operator's would.
fn holding_the_key(mock: &MockLlm, dir: &std::path::Path) -> GatewaySpawn {
    GatewaySpawn::default()
        .projects_root(dir.join("projects"))
        .state_dir(dir.join("state"))
        .env("ANTHROPIC_BASE_URL", &mock.anthropic_base_url())
        .env("ANTHROPIC_API_KEY", KEY)
}

/// The child's two processes: outer (the gateway's child) and the agent
/// (`corral-agent-in`, pid 1 of its pid namespace), found by its parent.
fn child_tree(outer: u32) -> [u32; 2] {
    let below = |parent: u32, comm: &str| {
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
            .find(|pid| {
                parent_of(*pid) == Some(parent)
                    && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim() == comm)
            })
            .unwrap_or_else(|| panic!("no {comm} below {parent}"))
    };
    [outer, below(outer, "corral-agent-in")]
}

/// Whether the readable memory of `pid` holds `needle` (read through
/// `/proc/PID/mem` along `/proc/PID/maps`, as root may).
fn memory_holds(pid: u32, needle: &[u8]) -> bool {
    let maps = std::fs::File::open(format!("/proc/{pid}/maps")).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut scanned = 0usize;
    for line in BufReader::new(maps).lines() {
        let line = line.unwrap();
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with('r') {
            continue;
        }
        let (start, end) = range.split_once('-').unwrap();
        let start = u64::from_str_radix(start, 16).unwrap();
        let end = u64::from_str_radix(end, 16).unwrap();
        let mut region = vec![0u8; (end - start) as usize];
        // Some regions ([vvar], guard pages) cannot be read: skip them.
        let Ok(read) = mem.read_at(&mut region, start) else {
            continue;
        };
        scanned += read;
        if region[..read].windows(needle.len()).any(|w| w == needle) {
            return true;
        }
    }
    assert!(scanned > 0, "nothing of {pid}'s memory could be read");
    false
}

/// `/proc/PID/environ` as `NAME=VALUE` entries.
fn environ(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap()
        .split(|b| *b == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .collect()
}

/// One prompt to project `alpha`, which the mock answers with `reply`:
/// the run's frames.
async fn one_run(gateway: &Gateway, mock: &MockLlm, reply: &str) -> Vec<Value> {
    let mut ws = gateway.client("alpha").await;
    mock.push(Turn::text(reply));
    ws.send(json!({"id":"run","type":"prompt","message":"go"}))
        .await;
    ws.recv_until(is_done).await
}

/// The text the agent streamed in `frames`.
fn reply_text(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "text_delta")
        .filter_map(|f| f["delta"].as_str())
        .collect()
}

/// The interfaces `pid`'s network namespace has.
fn interfaces(pid: u32) -> Vec<String> {
    std::fs::read_to_string(format!("/proc/{pid}/net/dev"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':').map(|(n, _)| n.trim().to_string()))
        .collect()
}

#[tokio::test]
async fn a_brokered_agent_calls_its_model_without_ever_holding_the_key() {
    CURL.require();
    let mock = MockLlm::start().await;
    mock.set_api_key(Some(KEY.into()));
    let dir = corral_e2e::dir_outside_tmp();
    // Executed, not forked from the template: the agent's environment
    // block is then its own, and shows its placeholder key (a forked
    // child's shows nothing; see the next test).
    let gateway = holding_the_key(&mock, dir.path())
        .arg("--model-broker")
        .arg("on")
        .arg("--child-template")
        .arg("off")
        .spawn()
        .await;
    // The gateway's own broker socket (named apart from other gateways').
    let socket = std::fs::read_dir(gateway.state.join("egress"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.starts_with("broker-") && name.ends_with(".sock")
        })
        .expect("the broker's socket");
    let mut ws = gateway.client("alpha").await;

    // A tool tries the broker's socket, the gateway on the host's
    // loopback, and the placeholder in its environment.
    let command = format!(
        "curl -sS --max-time 5 --unix-socket {socket} -X POST \
         http://corral-broker/anthropic/v1/messages >/dev/null 2>&1 \
         && echo broker=reached || echo broker=unreachable; \
         curl -sS --max-time 5 http://{gateway}/healthz >/dev/null 2>&1 \
         && echo host=reached || echo host=unreachable",
        socket = socket.display(),
        gateway = gateway.addr,
    );
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": command, "timeout": 30}),
    ));
    mock.push(Turn::text("all done"));
    ws.send(json!({"id":"run","type":"prompt","message":"go"}))
        .await;
    let frames = ws.recv_until(is_done).await;
    let results: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 1, "{}", brief(&frames));
    let output = results[0]["content"][0]["text"]
        .as_str()
        .unwrap_or_default();
    assert!(output.contains("broker=unreachable"), "{output}");
    assert!(output.contains("host=unreachable"), "{output}");
    let text = reply_text(&frames);
    assert!(text.contains("all done"), "{}", brief(&frames));

    // The mock saw the real key on every call.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    for request in &requests {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.auth.as_deref(), Some(KEY), "{:?}", request.headers);
    }

    let outer = gateway.child_pids();
    assert_eq!(outer.len(), 1, "one child");
    let [outer, agent] = child_tree(outer[0]);
    let env = environ(agent);
    assert!(
        env.iter()
            .any(|e| e == "ANTHROPIC_BASE_URL=http://corral-broker/anthropic"),
        "{env:?}"
    );
    let placeholder = env
        .iter()
        .find_map(|e| e.strip_prefix("ANTHROPIC_API_KEY="))
        .unwrap()
        .to_string();
    assert_eq!(placeholder.len(), 64);
    for pid in [outer, agent] {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        assert!(
            !cmdline.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
            "{pid}"
        );
        assert!(!environ(pid).iter().any(|e| e.contains(KEY)), "{pid}");
        assert!(
            !memory_holds(pid, KEY.as_bytes()),
            "the key in {pid}'s memory"
        );
    }
    // The scan does find what is there: the placeholder the agent uses.
    assert!(memory_holds(agent, placeholder.as_bytes()));
    // The agent itself has no network but its own loopback.
    assert_eq!(interfaces(agent), ["lo"]);

    let (status, metrics) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    assert!(
        metrics.contains(
            "corral_broker_requests_total{outcome=\"forwarded\",provider=\"anthropic\"} 2"
        ),
        "{metrics}"
    );

    // Once the project's agent is gone, its placeholder gets nothing.
    let broker = reqwest::Client::builder()
        .unix_socket(socket.as_path())
        .build()
        .unwrap();
    let call = || {
        broker
            .post("http://corral-broker/anthropic/v1/messages")
            .header("x-api-key", &placeholder)
            .body("{}")
            .send()
    };
    drop(ws);
    let (status, _) = gateway
        .http_post("/v1/projects/alpha/stop", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202);
    // The stop takes the stop grace; the admin API says when it is done.
    let gone = async {
        while gateway
            .http_get("/v1/projects/alpha", Some(ADMIN_TOKEN))
            .await
            .0
            != 404
        {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), gone)
        .await
        .expect("the project stopped");
    let answered = call().await.unwrap().status().as_u16();
    assert_eq!(answered, 401, "the placeholder of a stopped project");
}

/// Forked from the template, the child and the template itself hold
/// neither the key nor (in the block `/proc/PID/environ` shows) any
/// environment, and the brokered call still works.
#[tokio::test]
async fn a_child_forked_from_the_template_holds_no_key_and_shows_no_environment() {
    let mock = MockLlm::start().await;
    mock.set_api_key(Some(KEY.into()));
    let dir = corral_e2e::dir_outside_tmp();
    let gateway = holding_the_key(&mock, dir.path())
        .arg("--model-broker")
        .arg("on")
        .spawn()
        .await;
    let frames = one_run(&gateway, &mock, "all done").await;
    let text = reply_text(&frames);
    assert!(text.contains("all done"), "{}", brief(&frames));
    assert_eq!(mock.requests().len(), 1);

    let gateway_pid = gateway.child.id().unwrap();
    let template = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .find(|pid| {
            parent_of(*pid) == Some(gateway_pid)
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "corral-template")
        })
        .expect("the agent template, a child of the gateway");
    let outer = gateway.child_pids();
    assert_eq!(outer.len(), 1, "one child");
    let [outer, agent] = child_tree(outer[0]);
    for pid in [template, outer, agent] {
        let block = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
        assert!(
            block.is_empty(),
            "{pid}: {}",
            String::from_utf8_lossy(&block)
        );
        assert!(
            !memory_holds(pid, KEY.as_bytes()),
            "the key in {pid}'s memory"
        );
    }
    // The forked child's argv is its own, not the template's.
    let cmdline = std::fs::read(format!("/proc/{outer}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(cmdline.contains(" rpc "), "{cmdline}");
    assert!(cmdline.contains("--model-socket"), "{cmdline}");
}

#[tokio::test]
async fn the_broker_is_refused_without_the_sandbox_tools_apart_or_a_key() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("projects");
    std::fs::create_dir(&root).unwrap();
    let base = |extra: &[&str]| -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = vec![
            "--projects-root".into(),
            root.clone().into(),
            "--state-dir".into(),
            dir.path().join("state").into(),
            "--model-broker".into(),
            "on".into(),
        ];
        args.extend(extra.iter().map(Into::into));
        args
    };
    let run = |extra: &'static [&'static str], env: &'static [(&str, &str)]| {
        let args = base(extra);
        async move {
            let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
            serve_exit(&args, env).await
        }
    };
    let key = &[("ANTHROPIC_API_KEY", KEY)][..];
    let (code, stderr) = run(&["--sandbox", "off"], key).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--model-broker on"), "{stderr}");
    let (code, stderr) = run(&["--tool-network", "on"], key).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("--tool-network on"), "{stderr}");
    let (code, stderr) = run(&["--tool-network", "off"], &[("ANTHROPIC_API_KEY", "")]).await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("ANTHROPIC_API_KEY"), "{stderr}");
    assert!(!stderr.contains(KEY), "{stderr}");
}

/// `--model-broker auto`, the default: on for `corral-agent` children when
/// the gateway holds a key and CHILD_ARGS name no endpoint; off (and said
/// why) when they do.
#[tokio::test]
async fn the_default_keeps_the_key_in_the_gateway_unless_child_args_name_the_endpoint() {
    let mock = MockLlm::start().await;
    mock.set_api_key(Some(KEY.into()));
    let dir = corral_e2e::dir_outside_tmp();
    let gateway = holding_the_key(&mock, dir.path())
        .child_arg("--provider")
        .child_arg("anthropic")
        .spawn()
        .await;
    let frames = one_run(&gateway, &mock, "brokered by default").await;
    assert!(
        frames
            .iter()
            .any(|f| f.to_string().contains("brokered by default")),
        "{}",
        brief(&frames)
    );
    let requests = mock.requests();
    assert!(!requests.is_empty());
    assert!(
        requests.iter().all(|r| r.auth.as_deref() == Some(KEY)),
        "{requests:?}"
    );
    let [_, agent] = child_tree(gateway.child_pids()[0]);
    assert!(!environ(agent).iter().any(|e| e.contains(KEY)));
    assert!(
        gateway.log_text().contains("model broker on"),
        "{}",
        gateway.log_text()
    );

    // An endpoint in CHILD_ARGS: the operator chose it, the broker stays off.
    let mock = MockLlm::start().await;
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    // Said once the gateway is up (right after it listens).
    let said = async {
        loop {
            let log = gateway.log_text();
            if log.contains("model broker") {
                return log;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let log = tokio::time::timeout(std::time::Duration::from_secs(120), said)
        .await
        .expect("the gateway says whether its broker is on");
    assert!(
        log.contains("model broker off") && log.contains("--base-url"),
        "{log}"
    );
}
