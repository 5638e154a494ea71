//! Conformance with zut's reference behaviour: the four example clients'
//! flows (see `zut_conformance/clients.rs`) against `corral-agent rpc` and
//! through `corral attach`, with a model that answers and with a provider
//! that is down; then one test per point where corral follows zut's server
//! (`rpc.go`): the `error` event of a failed run, auth before the hello,
//! the `set_reasoning` aliases, the empty prompt.

#![allow(clippy::unwrap_used)]

#[path = "zut_conformance/clients.rs"]
mod clients;
#[path = "zut_conformance/peer.rs"]
mod peer;

use corral_e2e::brief;
use corral_e2e::harness::is_done;
use std::time::Duration;

use clients::{Client, Outcome};
use corral_e2e::gateway::{Gateway, GatewaySpawn, TOKEN};
use corral_e2e::harness::{types, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use peer::{Peer, Target};
use serde_json::{json, Value};

const REPLY: &str = "the reply from the model";
const DOWN: &str = "provider down for maintenance";
const CLIENT_TOKEN: &str = "zut-client-secret";

/// Every attempt of one model call fails with a 503 (retried at once:
/// `retry-after: 0`).
fn provider_down(mock: &MockLlm) {
    for _ in 0..4 {
        mock.push(Turn::Status {
            code: 503,
            retry_after: Some(0),
            body: DOWN.into(),
        });
    }
}

async fn gateway_on(mock: &MockLlm) -> (Gateway, Target) {
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    let target = Target::Attach {
        url: gateway.url("alpha"),
        token: TOKEN.into(),
    };
    (gateway, target)
}

/// Runs every client once with and once without `ZUTCORE_RPC_TOKEN`,
/// `script` filling the mock for each run.
async fn run_all(mock: &MockLlm, target: &Target, script: fn(&MockLlm)) -> Vec<(Client, Outcome)> {
    let mut outcomes = Vec::new();
    for token in [None, Some(CLIENT_TOKEN)] {
        for client in Client::ALL {
            script(mock);
            let mut peer = Peer::spawn(target, token);
            let outcome = client.run(&mut peer, "say something", token).await;
            outcomes.push((client, outcome));
        }
    }
    outcomes
}

fn assert_replied(outcomes: &[(Client, Outcome)]) {
    for (client, outcome) in outcomes {
        assert_eq!(outcome.code, 0, "{client:?}: {outcome:?}");
        assert_eq!(outcome.stdout, format!("{REPLY}\n"), "{client:?}");
        assert!(
            !outcome.stderr.contains("[error]"),
            "{client:?}: {outcome:?}"
        );
    }
}

/// Python, Node and shell print the provider's error and exit 1. The Go
/// example prints it too but exits 0: it returns at `done` whatever came
/// before (zut's own client, unchanged).
fn assert_reported_down(outcomes: &[(Client, Outcome)]) {
    for (client, outcome) in outcomes {
        let expected = if *client == Client::Go { 0 } else { 1 };
        assert_eq!(outcome.code, expected, "{client:?}: {outcome:?}");
        assert!(
            outcome.stderr.contains("[error] ") && outcome.stderr.contains(DOWN),
            "{client:?}: {outcome:?}"
        );
        assert_eq!(outcome.stdout.trim(), "", "{client:?}");
    }
}

#[tokio::test]
async fn example_clients_get_the_reply_directly() {
    let mock = MockLlm::start().await;
    let target = Target::Direct {
        base_url: mock.anthropic_base_url(),
    };
    assert_replied(&run_all(&mock, &target, |m| m.push(Turn::text(REPLY))).await);
}

#[tokio::test]
async fn example_clients_report_a_provider_that_is_down_directly() {
    let mock = MockLlm::start().await;
    let target = Target::Direct {
        base_url: mock.anthropic_base_url(),
    };
    assert_reported_down(&run_all(&mock, &target, provider_down).await);
}

#[tokio::test]
async fn example_clients_get_the_reply_through_attach() {
    let mock = MockLlm::start().await;
    let (_gateway, target) = gateway_on(&mock).await;
    assert_replied(&run_all(&mock, &target, |m| m.push(Turn::text(REPLY))).await);
}

#[tokio::test]
async fn example_clients_report_a_provider_that_is_down_through_attach() {
    let mock = MockLlm::start().await;
    let (_gateway, target) = gateway_on(&mock).await;
    assert_reported_down(&run_all(&mock, &target, provider_down).await);
}

#[tokio::test]
async fn a_child_crash_mid_run_is_an_error_for_attached_clients() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Hang);
    let (gateway, target) = gateway_on(&mock).await;
    let mut peer = Peer::spawn(&target, None);
    let kill = async {
        while mock.requests().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        for pid in gateway.child_pids() {
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
        }
    };
    let (outcome, ()) = tokio::join!(Client::Python.run(&mut peer, "hang", None), kill);
    assert_eq!(outcome.code, 1, "{outcome:?}");
    assert!(outcome.stderr.contains("[error] "), "{outcome:?}");
}

fn direct(mock: &MockLlm) -> AgentSpawn {
    AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &[])
}

/// Issue 12, point 2: a failed run ends `turn_end{stop:"error"}`, `error`,
/// `done`, with one message; an aborted run has no `error`.
#[tokio::test]
async fn a_failed_run_sends_error_before_done_and_an_aborted_one_does_not() {
    let mock = MockLlm::start().await;
    provider_down(&mock);
    let mut agent = direct(&mock).spawn().await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    let frames = agent.recv_until(is_done).await;
    let tail = &frames[frames.len() - 3..];
    assert_eq!(
        types(tail),
        ["turn_end", "error", "done"],
        "{}",
        brief(&frames)
    );
    assert_eq!(tail[0]["stop"], "error");
    assert_eq!(tail[1], json!({"type":"error","message":tail[0]["error"]}));
    assert!(tail[1]["message"].as_str().unwrap().contains(DOWN));
    assert_eq!(types(&frames).iter().filter(|t| *t == "error").count(), 1);

    mock.push(Turn::Hang);
    agent
        .send(json!({"id":"2","type":"prompt","message":"wait"}))
        .await;
    agent.recv_until(|f| f["type"] == "assistant_start").await;
    agent.send(json!({"id":"3","type":"abort"})).await;
    let frames = agent.recv_until(is_done).await;
    assert!(
        frames.iter().any(|f| f["stop"] == "aborted"),
        "{}",
        brief(&frames)
    );
    assert!(
        !types(&frames).contains(&"error".to_string()),
        "{}",
        brief(&frames)
    );

    // A failed compaction: `error`, then `done` (kept after compactions).
    provider_down(&mock);
    agent.send(json!({"id":"4","type":"compact"})).await;
    let frames = agent.recv_until(is_done).await;
    let tail = &frames[frames.len() - 2..];
    assert_eq!(types(tail), ["error", "done"], "{}", brief(&frames));
}

/// An empty prompt is a run that fails (`started`, `error`, `done`), as in
/// zut, so clients that wait for `done` do not hang.
#[tokio::test]
async fn an_empty_prompt_fails_as_a_run() {
    let mock = MockLlm::start().await;
    let mut agent = direct(&mock).spawn().await;
    agent
        .send(json!({"id":"1","type":"prompt","message":""}))
        .await;
    let frames = agent.recv_until(is_done).await;
    assert_eq!(
        frames,
        [
            json!({"type":"response","id":"1","command":"prompt","success":true,"data":{"started":true}}),
            json!({"type":"error","message":"prompt is empty"}),
            json!({"type":"done"}),
        ]
    );
    let state = agent.request(json!({"id":"2","type":"get_state"})).await;
    assert_eq!(state["data"]["message_count"], 0);
    assert!(mock.requests().is_empty());

    let target = Target::Direct {
        base_url: mock.anthropic_base_url(),
    };
    for client in [Client::Python, Client::Shell, Client::Go] {
        let mut peer = Peer::spawn(&target, None);
        let outcome = client.run(&mut peer, "", None).await;
        assert!(outcome.stderr.contains("prompt is empty"), "{outcome:?}");
    }
}

/// Point 9: with `ZUTCORE_RPC_TOKEN` set, every command before the hello
/// is refused under its own id and name and reading goes on; a hello
/// with a wrong or missing token is refused and the process exits 1.
#[tokio::test]
async fn auth_refuses_commands_until_the_hello_and_exits_on_a_wrong_token() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text(REPLY));
    let mut agent = direct(&mock).env("ZUTCORE_RPC_TOKEN", "t0k").spawn().await;
    let refused = agent
        .send_recv(json!({"id":"a","type":"prompt","message":"hi"}))
        .await;
    assert_eq!(
        refused,
        json!({"type":"response","id":"a","command":"prompt","success":false,
               "error":"auth required: send hello with token first"})
    );
    let refused = agent.send_recv(json!({"type":"get_state"})).await;
    assert_eq!(refused["command"], "get_state");
    assert!(refused.get("id").is_none());
    let hello = agent
        .send_recv(json!({"id":"0","type":"hello","token":"t0k"}))
        .await;
    assert_eq!(hello["success"], true);
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    assert_eq!(
        corral_e2e::harness::text_of(&agent.recv_until(is_done).await),
        REPLY
    );

    for hello in [
        json!({"id":"0","type":"hello","token":"nope"}),
        json!({"id":"0","type":"hello"}),
    ] {
        let mut agent = direct(&mock).env("ZUTCORE_RPC_TOKEN", "t0k").spawn().await;
        let reply = agent.send_recv(hello).await;
        assert_eq!(
            reply,
            json!({"type":"response","id":"0","command":"hello","success":false,"error":"invalid token"})
        );
        assert_eq!(agent.wait().await, Some(1));
    }
}

/// Point 10: `set_reasoning` reads zut's aliases, reports off as `""` (in
/// `get_state` too) and refuses anything else with zut's text, leaving
/// the level as it was.
#[tokio::test]
async fn set_reasoning_takes_zut_aliases_and_reports_off_as_empty() {
    let mock = MockLlm::start().await;
    let mut agent = direct(&mock).spawn().await;
    let cases = [
        (json!("MAXIMUM"), "xhigh"),
        (json!("max"), "max"),
        (json!(" med "), "medium"),
        (json!("minimal"), "minimum"),
        (json!("hi"), "high"),
        (json!("none"), ""),
        (json!("off"), ""),
        (json!("low"), "low"),
        (Value::Null, ""),
    ];
    for (i, (value, reported)) in cases.into_iter().enumerate() {
        let reply = agent
            .request(json!({"id":i,"type":"set_reasoning","reasoning":value}))
            .await;
        assert_eq!(reply["data"], json!({"reasoning": reported}), "{value}");
        let state = agent.request(json!({"id":"s","type":"get_state"})).await;
        assert_eq!(state["data"]["reasoning"], reported, "{value}");
    }
    agent
        .request(json!({"id":"h","type":"set_reasoning","reasoning":"high"}))
        .await;
    let missing = agent
        .request(json!({"id":"m","type":"set_reasoning"}))
        .await;
    assert_eq!(missing["data"], json!({"reasoning": ""}));
    agent
        .request(json!({"id":"h","type":"set_reasoning","reasoning":"high"}))
        .await;
    let bad = agent
        .request(json!({"id":"x","type":"set_reasoning","reasoning":"extreme"}))
        .await;
    assert_eq!(bad["success"], false);
    assert_eq!(bad["command"], "set_reasoning");
    assert!(bad["error"]
        .as_str()
        .unwrap()
        .contains("reasoning must be off|minimum|low|medium|high|xhigh|max"));
    let state = agent.request(json!({"id":"s","type":"get_state"})).await;
    assert_eq!(state["data"]["reasoning"], "high");
}
