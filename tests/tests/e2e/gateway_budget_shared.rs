//! End-to-end: one identity's budget across two gateways on one state
//! directory, counted from the usage the agents report (no broker: the
//! weaker source, for agents that reach their model themselves). A
//! managed token made through gateway 1 with `budget_usd` $0.05 spends
//! $0.0315 on gateway 1's project; once gateway 2 has read that spend,
//! the identity's next model call, on gateway 2, crosses the budget and
//! its run is stopped (the agent reports a step's cost once the step's
//! tools ran, so before its next answer ends); gateway 1 then refuses
//! the identity's prompts. The
//! waits for the other gateway are generous; no time is asserted.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use corral_e2e::brief;
use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN};
use corral_e2e::harness::{is_done, text_of};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};
use tokio::time::Instant;

use super::gateway_budget::{long_answer, priced_mock};

/// How long a gateway may take to see what another wrote (it reads the
/// state directory every second).
const PROPAGATION: Duration = Duration::from_secs(30);
const IDENTITY_SPENT: &str = "the budget of identity ci-bot ($0.05) is spent: $";
const RAISE_IDENTITY: &str = "an admin can raise or reset it with PUT /v1/identities/ci-bot/budget";

fn gateway(mock: &MockLlm, dir: &std::path::Path) -> GatewaySpawn {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.join("projects"))
        .state_dir(dir.join("state"))
}

async fn identity_budget(gateway: &Gateway) -> Value {
    let (status, body) = gateway
        .http_get("/v1/identities/ci-bot/budget", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Waits until `gateway` shows the identity's budget as `ready` says.
async fn until_seen(gateway: &Gateway, ready: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + PROPAGATION;
    loop {
        let seen = identity_budget(gateway).await;
        if ready(&seen) {
            return seen;
        }
        assert!(Instant::now() < deadline, "never seen: {seen}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A client of `project` with `token`, once `gateway` accepts the token.
async fn client(gateway: &Gateway, project: &str, token: &str) -> Ws {
    let deadline = Instant::now() + PROPAGATION;
    loop {
        let (ws, reply) = gateway.client_with(project, token, None).await;
        if reply["success"] == true {
            return ws;
        }
        assert!(Instant::now() < deadline, "token never accepted: {reply}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_identitys_spend_on_two_gateways_counts_against_its_one_budget() {
    let mock = priced_mock().await;
    let dir = corral_e2e::dir_outside_tmp();
    let one = gateway(&mock, dir.path()).spawn().await;
    let two = gateway(&mock, dir.path()).spawn().await;
    let body = json!({"name": "ci-bot", "role": "client", "projects": ["*"], "budget_usd": 0.05});
    let (status, made) = one
        .http_body("POST", "/v1/tokens", Some(ADMIN_TOKEN), &body.to_string())
        .await;
    assert_eq!(status, 201, "{made}");
    let made: Value = serde_json::from_str(&made).unwrap();
    let secret = made["token"].as_str().unwrap().to_string();

    // $0.0315 on gateway 1, as the agent reports it.
    let mut on_one = client(&one, "alpha", &secret).await;
    mock.push(Turn::text("first"));
    on_one
        .send(json!({"id":"1","type":"prompt","message":"one"}))
        .await;
    let frames = on_one.recv_until(is_done).await;
    assert_eq!(text_of(&frames), "first", "{}", brief(&frames));
    until_seen(&two, |b| b["spent_usd"].as_f64() > Some(0.03)).await;

    // On gateway 2 the next call crosses it. The agent reports a step's
    // usage once the step's tools ran: the run is stopped before its next
    // answer ends, and its client told why.
    let mut on_two = client(&two, "beta", &secret).await;
    mock.push(Turn::tool_call("bash", json!({"command": "echo hi"})));
    mock.push(long_answer());
    on_two
        .send(json!({"id":"1","type":"prompt","message":"two"}))
        .await;
    let frames = on_two.recv_until(is_done).await;
    let notice = frames
        .iter()
        .find(|f| f["type"] == "error")
        .unwrap_or_else(|| panic!("no notice: {}", brief(&frames)));
    let text = notice["message"].as_str().unwrap();
    assert!(
        text.starts_with(&format!("the run was stopped: {IDENTITY_SPENT}"))
            && text.ends_with(RAISE_IDENTITY),
        "{notice}"
    );
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "turn_end" && f["stop"] == "aborted"),
        "{}",
        brief(&frames)
    );
    let spent = identity_budget(&two).await;
    assert_eq!(
        (
            &spent["limit_usd"],
            &spent["limit_from"],
            &spent["exhausted"]
        ),
        (&json!(0.05), &json!("credential"), &json!(true)),
        "{spent}"
    );
    assert!(!text_of(&frames).contains("last"), "{}", brief(&frames));
    let (_, beta) = two
        .http_get("/v1/projects/beta/budget", Some(ADMIN_TOKEN))
        .await;
    let beta: Value = serde_json::from_str(&beta).unwrap();
    assert_eq!(beta["source"], "agent", "{beta}");

    // Gateway 1 refuses the identity's prompts once it has read that.
    until_seen(&one, |b| b["exhausted"] == true).await;
    let refused = on_one
        .request(json!({"id":"2","type":"prompt","message":"three"}))
        .await;
    assert_eq!(refused["success"], false, "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(
        error.starts_with(IDENTITY_SPENT) && error.ends_with(RAISE_IDENTITY),
        "{error}"
    );
    let calls = mock.requests().len();
    assert!(calls <= 3, "no call after the refusal: {calls}");
}
