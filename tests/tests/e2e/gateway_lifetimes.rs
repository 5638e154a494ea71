//! End-to-end: how long children and what they start live. `--max-children`
//! bounds the agent processes even under a burst of first attaches, and the
//! clients that get none are refused with 1013 before any hello succeeds;
//! a `sleep` started by a tool is gone within 2 s of its child ending,
//! whatever ended it, with the sandbox on and off; a graceful stop with a
//! tool running never needs SIGKILL; big events reach a client that keeps
//! up whatever the replay ring's size.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, WsEvent, ADMIN_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

/// Everything a child started must be gone this soon after it ended.
const LEFTOVER_LIMIT: Duration = Duration::from_secs(2);

#[tokio::test]
async fn max_children_is_a_hard_bound_and_refusals_come_before_hello() {
    let names: Vec<String> = (0..30).map(|i| format!("p{i}")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let gateway = Arc::new(
        GatewaySpawn::default()
            .echo()
            .projects(&refs)
            .arg("--max-children")
            .arg("2")
            .spawn()
            .await,
    );
    let most = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (gateway, most, done) = (gateway.clone(), most.clone(), done.clone());
        tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                most.fetch_max(gateway.child_pids().len(), Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let clients = names.iter().map(|name| {
        let gateway = gateway.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let (mut ws, reply) = gateway.client_with(&name, TOKEN, None).await;
            if reply["success"] == true {
                return (ws, None);
            }
            let close = ws.closed().await;
            (ws, Some((reply, close)))
        })
    });
    let outcomes = futures_util::future::join_all(clients).await;
    done.store(true, Ordering::SeqCst);
    sampler.await.unwrap();

    let mut attached = Vec::new();
    for outcome in outcomes {
        match outcome.unwrap() {
            (ws, None) => attached.push(ws),
            (_, Some((reply, close))) => {
                assert_eq!(reply["type"], "response", "{reply}");
                let (code, reason) = close.expect("a close frame");
                assert_eq!(code, 1013, "{reason}");
                assert!(reason.contains("--max-children"), "{reason}");
            }
        }
    }
    assert!(
        (1..=2).contains(&attached.len()),
        "{} clients got an agent",
        attached.len()
    );
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "{} agent processes at once",
        most.load(Ordering::SeqCst)
    );
    // The attached clients are served.
    for ws in &mut attached {
        let reply = ws.request(json!({"id":"p","type":"ping"})).await;
        assert_eq!(reply["success"], true, "{reply}");
    }
}

/// What ends the child in a leftover test.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Ending {
    SigkillChild,
    Hang,
    AdminStop,
    Idle,
    Evicted,
    SigkillGateway,
}

impl Ending {
    /// Whether the tool is still running when the child ends (otherwise
    /// the run finished and only what escaped the tool's group is left).
    fn tool_running(self) -> bool {
        !matches!(self, Ending::Idle | Ending::Evicted)
    }
}

/// Pids of live processes whose command line contains `needle`.
fn processes_with(needle: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let zombie = stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
            !zombie && String::from_utf8_lossy(&cmdline).contains(needle)
        })
        .collect()
}

/// Polls until `count` processes match `needle` (or panics after a while).
async fn wait_for_processes(needle: &str, count: usize) {
    for _ in 0..400 {
        if processes_with(needle).len() >= count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!(
        "the tool's sleeps never started: {:?}",
        processes_with(needle)
    );
}

/// Waits at most [`LEFTOVER_LIMIT`] for every process matching `needle`
/// to be gone.
async fn assert_gone(needle: &str, what: &str) {
    let deadline = tokio::time::Instant::now() + LEFTOVER_LIMIT;
    loop {
        let left = processes_with(needle);
        if left.is_empty() {
            return;
        }
        if tokio::time::Instant::now() >= deadline {
            for pid in &left {
                let _ = std::process::Command::new("kill")
                    .args(["-9", &pid.to_string()])
                    .status();
            }
            panic!("{what}: processes {left:?} ({needle}) outlived their child by 2 s");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// The process that answers the protocol: the gateway's child itself, or
/// the agent inside the sandbox's pid namespace.
fn agent_process(gateway: &Gateway, sandbox: bool) -> u32 {
    let child = gateway.child_pids()[0];
    if !sandbox {
        return child;
    }
    // Sandboxed, the agent is outer's only child (pid 1 of its pid
    // namespace).
    children_of(child)[0]
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

async fn leftovers_die(ending: Ending, sandbox: bool) {
    let mock = MockLlm::start().await;
    let mut spawn = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--stop-grace")
        .arg("1s");
    if !sandbox {
        spawn = spawn.arg("--sandbox").arg("off");
    }
    spawn = match ending {
        Ending::Hang => spawn
            .arg("--ping-interval")
            .arg("200ms")
            .arg("--ping-timeout")
            .arg("1s"),
        Ending::Idle => spawn.arg("--idle-timeout").arg("1s"),
        Ending::Evicted => spawn.arg("--max-children").arg("1"),
        _ => spawn,
    };
    let mut gateway = spawn.spawn().await;
    let tag = format!(
        "1000.{}{}{}",
        std::process::id(),
        ending as u8,
        u8::from(sandbox)
    );
    let what = format!("{ending:?}, sandbox {}", if sandbox { "on" } else { "off" });
    // A sleep in the tool's group, one that left it for a session of its
    // own (setsid, not when the gateway is killed: without the sandbox
    // only the agent is left to clean up then, and it knows its tools'
    // groups), and the shell waiting for a third one or not.
    let escape = if ending == Ending::SigkillGateway && !sandbox {
        format!("sleep {tag}1 &")
    } else {
        format!("setsid sleep {tag}1 &")
    };
    let (command, expected) = match ending.tool_running() {
        true => (format!("{escape} sleep {tag}2 & sleep {tag}3"), 3),
        // The pause lets `setsid` leave the group before the group is killed.
        false => (
            format!("{escape} sleep {tag}2 & sleep 0.5; echo started"),
            1,
        ),
    };
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": command, "timeout": 600}),
    ));
    mock.push(Turn::text("ok"));
    let mut ws = gateway.client("alpha").await;
    ws.send(json!({"id":"run","type":"prompt","message":"go"}))
        .await;
    if ending.tool_running() {
        wait_for_processes(&tag, expected).await;
    } else {
        // What left the tool's group may already be gone without the
        // sandbox (an orphan reparented to the gateway dies at its next
        // sweep); with it, it lives until its pid namespace ends.
        ws.recv_until(|f| f["type"] == "done").await;
        if sandbox {
            wait_for_processes(&tag, expected).await;
        }
    }

    match ending {
        Ending::SigkillChild => {
            signal(gateway.child_pids()[0], "-KILL");
            assert_gone(&tag, &what).await;
        }
        Ending::Hang => {
            signal(agent_process(&gateway, sandbox), "-STOP");
            let exited = ws.recv_until(|f| f["type"] == "child_exited").await;
            assert_eq!(exited.last().unwrap()["reason"], "hung", "{exited:?}");
            assert_gone(&tag, &what).await;
        }
        Ending::AdminStop => {
            let (status, body) = gateway
                .http_post("/v1/projects/alpha/stop", Some(ADMIN_TOKEN))
                .await;
            assert_eq!(status, 202, "{body}");
            let frames = ws.recv_until(|f| f["type"] == "child_exited").await;
            let exited = frames.last().unwrap();
            assert_eq!(exited["reason"], "admin", "{exited}");
            // Ended after SIGTERM, before the SIGKILL that follows it by
            // at most a second: within --stop-grace + 1 s.
            assert_ne!(exited["signal"], 9, "the stop needed SIGKILL: {exited}");
            assert_gone(&tag, &what).await;
            assert!(matches!(ws.closed().await, Some((1001, _))));
        }
        Ending::Idle => {
            drop(ws);
            wait_until_not_running(&gateway, "alpha").await;
            assert_gone(&tag, &what).await;
        }
        Ending::Evicted => {
            drop(ws);
            // Only one child may exist: beta's hello succeeds once alpha's
            // child has exited.
            let _beta = gateway.client("beta").await;
            assert_gone(&tag, &what).await;
        }
        Ending::SigkillGateway => {
            gateway.child.start_kill().unwrap();
            gateway.child.wait().await.unwrap();
            assert_gone(&tag, &what).await;
        }
    }
}

/// Polls the admin API until `project` has no running agent.
async fn wait_until_not_running(gateway: &Gateway, project: &str) {
    for _ in 0..400 {
        let (status, _) = gateway
            .http_get(&format!("/v1/projects/{project}"), Some(ADMIN_TOKEN))
            .await;
        if status == 404 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{project} was never reaped");
}

macro_rules! leftover_tests {
    ($($name:ident: $ending:expr, $sandbox:expr;)*) => {$(
        #[tokio::test]
        async fn $name() {
            leftovers_die($ending, $sandbox).await;
        }
    )*};
}

leftover_tests! {
    tool_sleeps_die_with_a_sigkilled_child_sandboxed: Ending::SigkillChild, true;
    tool_sleeps_die_with_a_sigkilled_child_unsandboxed: Ending::SigkillChild, false;
    tool_sleeps_die_with_a_hung_child_sandboxed: Ending::Hang, true;
    tool_sleeps_die_with_a_hung_child_unsandboxed: Ending::Hang, false;
    graceful_stop_with_a_tool_running_sandboxed: Ending::AdminStop, true;
    graceful_stop_with_a_tool_running_unsandboxed: Ending::AdminStop, false;
    tool_sleeps_die_with_an_idle_child_sandboxed: Ending::Idle, true;
    tool_sleeps_die_with_an_idle_child_unsandboxed: Ending::Idle, false;
    tool_sleeps_die_with_an_evicted_child_sandboxed: Ending::Evicted, true;
    tool_sleeps_die_with_an_evicted_child_unsandboxed: Ending::Evicted, false;
    tool_sleeps_die_with_a_sigkilled_gateway_sandboxed: Ending::SigkillGateway, true;
    tool_sleeps_die_with_a_sigkilled_gateway_unsandboxed: Ending::SigkillGateway, false;
}

/// Reads frames until `done`; returns the texts of the `user_message` and
/// `assistant_message` events.
async fn echoed(ws: &mut Ws) -> (String, String) {
    let text = |frame: &Value| -> String {
        frame["content"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|b| b["text"].as_str())
            .collect()
    };
    let (mut user, mut assistant) = (String::new(), String::new());
    loop {
        let frame = match ws.next_event_within(Duration::from_secs(60)).await {
            Some(WsEvent::Frame(frame)) => frame,
            other => panic!("the stream ended: {other:?}"),
        };
        match frame["type"].as_str() {
            Some("user_message") => user = text(&frame),
            Some("assistant_message") => assistant = text(&frame),
            Some("done") => return (user, assistant),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_single_reader_receives_big_echoes_whole() {
    let gateway = GatewaySpawn::default()
        .echo()
        .arg("--sandbox")
        .arg("off")
        .spawn()
        .await;
    let mut ws = gateway.client("alpha").await;
    for mib in [9usize, 12, 15] {
        let message: String = (0..mib << 20)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        ws.send(json!({"id": format!("p{mib}"), "type":"prompt","message": message}))
            .await;
        let (user, assistant) = echoed(&mut ws).await;
        assert_eq!(user.len(), message.len(), "{mib} MiB user_message");
        assert!(user == message, "{mib} MiB user_message intact");
        assert!(assistant == message, "{mib} MiB reply intact");
    }
}
