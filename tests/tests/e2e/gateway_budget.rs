//! End-to-end: budgets counted at the model broker. The mock LLM reports
//! 10 000 input and 100 output tokens per call, which the catalogue prices
//! at $0.0315 for the agent's default model (claude-sonnet-4-5); the
//! input alone ($0.03, read from the answer's first event) crosses a
//! $0.01 project budget. The prompt that crosses it is stopped as an
//! abort stops it, with an event naming the budget; the next prompt is
//! refused with the budget's message and never reaches the agent; the
//! admin API shows the budget spent, raises it, and the project goes on;
//! the spend survives a restart of the gateway. The other dialects are in
//! `gateway_budget_dialects`, several gateways in `gateway_budget_shared`.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use corral_e2e::brief;
use corral_e2e::gateway::{Gateway, GatewaySpawn, ADMIN_TOKEN};
use corral_e2e::harness::{is_done, text_of};
use corral_e2e::mock_llm::{MockLlm, ReportedUsage, Turn};
use serde_json::{json, Value};

/// What one whole call costs: 10 000 × $3 + 100 × $15 per million tokens.
pub(crate) const CALL_USD: f64 = 0.0315;
/// What a project over its $0.01 budget is told, up to the amount spent.
pub(crate) const PROJECT_SPENT: &str = "the budget of project alpha ($0.01) is spent: $";
/// How every budget message ends for project alpha.
pub(crate) const RAISE_ALPHA: &str =
    "an admin can raise or reset it with PUT /v1/projects/alpha/budget";

/// A gateway under `dir` holding the provider key, its agents calling the
/// mock through the broker, each project's budget $0.01.
pub(crate) fn brokered(mock: &MockLlm, dir: &std::path::Path) -> GatewaySpawn {
    GatewaySpawn::default()
        .projects_root(dir.join("projects"))
        .state_dir(dir.join("state"))
        .env("ANTHROPIC_BASE_URL", &mock.anthropic_base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-budget-e2e")
        .arg("--model-broker")
        .arg("on")
        .arg("--project-budget-usd")
        .arg("0.01")
}

/// A mock LLM whose every call costs [`CALL_USD`].
pub(crate) async fn priced_mock() -> MockLlm {
    let mock = MockLlm::start().await;
    mock.report_usage(Some(ReportedUsage {
        input: 10_000,
        output: 100,
    }));
    mock
}

/// A long answer, streamed slowly: a run still going when its first
/// event has crossed the budget. Its last chunk is `"last"`.
pub(crate) fn long_answer() -> Turn {
    let mut chunks: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    chunks.push("last".into());
    Turn::Slow {
        chunks,
        delay: Duration::from_millis(250),
    }
}

/// Whether `text` is the notice of a run stopped for alpha's budget.
pub(crate) fn is_stop_notice(text: &str) -> bool {
    text.starts_with(&format!("the run was stopped: {PROJECT_SPENT}"))
        && text.ends_with(RAISE_ALPHA)
}

/// Whether `text` is the refusal of a prompt for alpha's budget.
pub(crate) fn is_refusal(text: &str) -> bool {
    text.starts_with(PROJECT_SPENT) && text.ends_with(RAISE_ALPHA)
}

pub(crate) async fn budget(gateway: &Gateway) -> Value {
    let (status, body) = gateway
        .http_get("/v1/projects/alpha/budget", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).unwrap()
}

/// Raises alpha's budget to $1 through the admin API.
pub(crate) async fn raise(gateway: &Gateway) {
    let (status, body) = gateway
        .http_body(
            "PUT",
            "/v1/projects/alpha/budget",
            Some(ADMIN_TOKEN),
            r#"{"limit_usd": 1}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let raised: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        (raised["limit_usd"].clone(), raised["exhausted"].clone()),
        (json!(1.0), json!(false))
    );
}

fn close(a: &Value, b: f64) -> bool {
    a.as_f64().is_some_and(|a| (a - b).abs() < 1e-9)
}

#[tokio::test]
async fn the_prompt_that_crosses_a_project_budget_is_stopped_and_the_next_refused_until_an_admin_raises_it(
) {
    let mock = priced_mock().await;
    let dir = corral_e2e::dir_outside_tmp();
    std::fs::create_dir_all(dir.path().join("projects/alpha")).unwrap();
    let gateway = brokered(&mock, dir.path()).spawn().await;
    let mut ws = gateway.client("alpha").await;

    // The first event of the answer crosses the budget: the run is
    // stopped, and its clients are told why.
    mock.push(long_answer());
    ws.send(json!({"id":"1","type":"prompt","message":"one"}))
        .await;
    let frames = ws.recv_until(is_done).await;
    let notice = frames
        .iter()
        .find(|f| f["type"] == "error")
        .unwrap_or_else(|| panic!("no notice: {}", brief(&frames)));
    assert!(
        is_stop_notice(notice["message"].as_str().unwrap()),
        "{notice}"
    );
    assert_eq!(notice["budget"]["scope"], "project", "{notice}");
    assert_eq!(notice["run_id"], frames[0]["data"]["run_id"], "{notice}");
    assert!(
        frames
            .iter()
            .any(|f| f["type"] == "turn_end" && f["stop"] == "aborted"),
        "the run ended as an abort ends it: {}",
        brief(&frames)
    );
    assert!(!text_of(&frames).contains("last"), "{}", brief(&frames));
    let spent = budget(&gateway).await;
    assert!(spent["spent_usd"].as_f64().unwrap() >= 0.03, "{spent}");
    assert_eq!(spent["limit_usd"], 0.01);
    assert_eq!(spent["limit_from"], "default");
    assert_eq!(spent["source"], "broker");
    assert_eq!(spent["exhausted"], true);
    let spent_usd = spent["spent_usd"].as_f64().unwrap();

    // The next prompt is refused with the budget's message and never
    // reaches the agent (nor the provider).
    mock.push(Turn::text("served after the raise"));
    let refused = ws
        .request(json!({"id":"2","type":"prompt","message":"two"}))
        .await;
    assert_eq!(refused["success"], false, "{refused}");
    assert!(is_refusal(refused["error"].as_str().unwrap()), "{refused}");
    assert_eq!(mock.requests().len(), 1);

    let (status, metrics) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    for line in [
        "corral_budget_exhausted_total{scope=\"project\"} 1",
        "corral_requests_refused_total{reason=\"budget\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} in {metrics}");
    }

    // Raised, the project goes on.
    raise(&gateway).await;
    ws.send(json!({"id":"3","type":"prompt","message":"three"}))
        .await;
    let frames = ws.recv_until(is_done).await;
    assert_eq!(
        text_of(&frames),
        "served after the raise",
        "{}",
        brief(&frames)
    );
    let listing = gateway.http_get("/v1/budgets", Some(ADMIN_TOKEN)).await;
    let listing: Value = serde_json::from_str(&listing.1).unwrap();
    assert_eq!(listing["default_project_limit_usd"], 0.01);
    assert_eq!(listing["projects"][0]["project"], "alpha");
    let total = spent_usd + CALL_USD;
    assert!(
        close(&listing["projects"][0]["spent_usd"], total),
        "{listing}"
    );

    // The spend and the raised limit survive a restart.
    drop(ws);
    let pid = nix::unistd::Pid::from_raw(gateway.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut gateway = gateway;
    tokio::time::timeout(Duration::from_secs(60), gateway.child.wait())
        .await
        .unwrap()
        .unwrap();
    let again = brokered(&mock, dir.path()).spawn().await;
    let kept = budget(&again).await;
    assert!(close(&kept["total_usd"], total), "{kept}");
    assert_eq!(kept["limit_usd"], 1.0);
    assert_eq!(kept["limit_from"], "admin");

    // A reset counts from zero; DELETE goes back to the default.
    let (status, body) = again
        .http_body(
            "PUT",
            "/v1/projects/alpha/budget",
            Some(ADMIN_TOKEN),
            r#"{"reset": true}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = again
        .http("DELETE", "/v1/projects/alpha/budget", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    let reset: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(reset["spent_usd"], 0.0);
    assert_eq!(reset["limit_usd"], 0.01);
    assert_eq!(reset["exhausted"], false);
}

#[tokio::test]
async fn budget_admin_requests_need_the_admin_token_and_a_valid_change() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    for (method, path) in [
        ("GET", "/v1/budgets"),
        ("GET", "/v1/projects/alpha/budget"),
        ("DELETE", "/v1/identities/alice/budget"),
    ] {
        assert_eq!(gateway.http(method, path, None).await.0, 401, "{path}");
        let (status, _) = gateway
            .http(method, path, Some(corral_e2e::gateway::TOKEN))
            .await;
        assert_eq!(status, 403, "{path}");
    }
    let (status, body) = gateway
        .http_body(
            "PUT",
            "/v1/projects/alpha/budget",
            Some(ADMIN_TOKEN),
            r#"{"limit_usd": -2}"#,
        )
        .await;
    assert_eq!(status, 400, "{body}");
    let (status, _) = gateway
        .http_body(
            "PUT",
            "/v1/projects/..%2Fx/budget",
            Some(ADMIN_TOKEN),
            r#"{"reset": true}"#,
        )
        .await;
    assert_eq!(status, 400);
    let (status, body) = gateway
        .http_body(
            "PUT",
            "/v1/identities/ci%20bot/budget",
            Some(ADMIN_TOKEN),
            r#"{"limit_usd": 2.5}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let view: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(view["identity"], "ci bot");
    assert_eq!(view["limit_from"], "admin");
    let listing = gateway.http_get("/v1/budgets", Some(ADMIN_TOKEN)).await;
    let listing: Value = serde_json::from_str(&listing.1).unwrap();
    assert_eq!(listing["default_project_limit_usd"], Value::Null);
    assert_eq!(listing["identities"][0]["identity"], "ci bot");
}
