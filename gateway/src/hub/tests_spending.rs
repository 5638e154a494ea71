//! Budgets in the hub, with a fake zut child and paused time: a prompt
//! pays as its identity, a run whose budget is crossed is stopped with
//! the reason, the next prompt is refused, and the agent's reports are
//! counted only when no broker sees its model calls.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::timeout;

use super::tests::{harness, join, received, request, settings, FakeChild, Harness};
use super::{Attached, HubSettings, Join};
use crate::access::{Identity, Kind, ProjectScope};
use crate::admission::Admission;
use crate::auth::Role;
use crate::metrics::Metrics;
use crate::spend::{Ledger, Scope, Source};

fn alice(budget_usd: Option<f64>) -> Identity {
    Identity {
        name: "alice".into(),
        kind: Kind::Managed,
        role: Role::Client,
        scope: ProjectScope::All,
        expires: None,
        budget_usd,
    }
}

fn budgeted(project_limit: Option<f64>, brokered: bool) -> (HubSettings, Arc<Ledger>) {
    let ledger = Arc::new(Ledger::detached(
        project_limit,
        Arc::new(Metrics::new().unwrap()),
    ));
    let settings = HubSettings {
        gate: Arc::new(Admission::new(0, ledger.clone())),
        spend: Some(ledger.clone()),
        model_broker: brokered.then(|| Arc::new(crate::broker::Registry::default())),
        ..settings()
    };
    (settings, ledger)
}

/// A started hub with `who` attached.
async fn attached(settings: HubSettings, who: Identity) -> (Harness, FakeChild, Attached) {
    let mut h = harness(settings);
    let start = h.next_start().await;
    let hub = h.hub.clone();
    let join = Join {
        who: Arc::new(who),
        ..join()
    };
    let attaching = tokio::spawn(async move { hub.attach(join).await });
    let child = FakeChild::start(start, true);
    let client = attaching.await.unwrap().unwrap();
    (h, child, client)
}

/// Sends a prompt and starts its run; returns the child's copy.
async fn run(h: &Harness, child: &mut FakeChild, client: &Attached, id: &str) -> Value {
    h.hub
        .request(
            client.client,
            request(json!({"type": "prompt", "id": id, "message": "hi"})),
        )
        .await;
    let prompt = child.next_request().await;
    assert_eq!(prompt["type"], "prompt");
    child
        .say(json!({"type": "response", "id": prompt["id"], "command": "prompt", "success": true, "data": {"started": true}}))
        .await;
    prompt
}

fn usage(cost_usd: f64) -> Value {
    json!({"type": "usage", "input": 10, "output": 1, "cost_usd": cost_usd, "cumulative": {"cost_usd": cost_usd}})
}

fn messages(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["type"] == "error" || f["success"] == false)
        .map(|f| {
            f["message"]
                .as_str()
                .or(f["error"].as_str())
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_reported_cost_that_crosses_the_budget_stops_the_run_and_refuses_the_next_prompt() {
    let (settings, ledger) = budgeted(Some(0.01), false);
    let (h, mut child, mut client) = attached(settings, alice(None)).await;
    run(&h, &mut child, &client, "1").await;
    assert_eq!(ledger.payer_of("alpha").unwrap().name, "alice");

    child.say(usage(0.02)).await;
    let abort = child.next_request().await;
    assert_eq!(abort["type"], "abort");
    let (frames, _) = received(&mut client).await;
    let stopped = "the run was stopped: the budget of project alpha ($0.01) is spent: $0.02 so far; an admin can raise or reset it with PUT /v1/projects/alpha/budget";
    assert_eq!(messages(&frames), [stopped], "{frames:?}");
    let notice = frames.iter().find(|f| f["type"] == "error").unwrap();
    assert_eq!(notice["budget"]["scope"], "project");
    assert!(notice["run_id"].is_string(), "part of the run: {notice}");
    let spent = ledger.view(Scope::Project, "alpha");
    assert_eq!((spent.spent_usd, spent.source), (0.02, Some("agent")));
    assert_eq!(ledger.view(Scope::Identity, "alice").spent_usd, 0.02);

    // Another change does not abort the run again.
    ledger.charge("alpha", None, Source::Agent, 0.01);
    child
        .say(json!({"type": "turn_end", "stop": "aborted"}))
        .await;
    child.say(json!({"type": "done"})).await;
    child
        .say(json!({"type": "response", "id": abort["id"], "command": "abort", "success": true}))
        .await;
    received(&mut client).await;
    assert!(!h.hub.status().busy);
    assert_eq!(ledger.payer_of("alpha"), None, "nobody pays once idle");

    h.hub
        .request(
            client.client,
            request(json!({"type": "prompt", "id": "2", "message": "again"})),
        )
        .await;
    let (frames, _) = received(&mut client).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], "2");
    assert!(
        messages(&frames)[0].starts_with("the budget of project alpha ($0.01) is spent: $0.03"),
        "{frames:?}"
    );
    let nothing = timeout(Duration::from_secs(5), child.next_request()).await;
    assert!(nothing.is_err(), "the child never saw it: {nothing:?}");
}

#[tokio::test(start_paused = true)]
async fn with_the_broker_only_its_charges_count_and_stop_the_payers_run() {
    let (settings, ledger) = budgeted(None, true);
    let (h, mut child, mut client) = attached(settings, alice(Some(0.05))).await;
    run(&h, &mut child, &client, "1").await;

    // The agent's own report is not counted: the broker saw the call.
    child.say(usage(0.5)).await;
    received(&mut client).await;
    assert_eq!(ledger.view(Scope::Project, "alpha").total_usd, 0.0);

    // The broker charges the project and whoever pays for its run.
    let payer = ledger.payer_of("alpha");
    ledger.charge("alpha", payer.as_ref(), Source::Broker, 0.06);
    let abort = child.next_request().await;
    assert_eq!(abort["type"], "abort");
    let (frames, _) = received(&mut client).await;
    let said = messages(&frames);
    assert_eq!(said.len(), 1, "{frames:?}");
    assert!(
        said[0].starts_with(
            "the run was stopped: the budget of identity alice ($0.05) is spent: $0.06"
        ),
        "{said:?}"
    );
}
