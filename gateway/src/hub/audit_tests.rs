//! The audit log as a hub writes it: what a client does through the hub,
//! with its identity, address, project and run, read back from the file.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use prometheus::{IntCounterVec, Opts};
use serde_json::{json, Value};

use super::{harness, received, request, settings, FakeChild, Harness};
use crate::access::{Identity, Kind, ProjectScope};
use crate::audit::{Audit, AuditSettings};
use crate::auth::Role;
use crate::dialect::OwnRuns;
use crate::hub::gate::{Gate, Refusal};
use crate::hub::{Attached, HubSettings, Join};

/// An audit log in `dir` (prompts kept when `prompts`).
fn audit(dir: &Path, prompts: bool) -> Audit {
    let settings = AuditSettings {
        path: dir.join("audit.jsonl"),
        max_bytes: 1 << 20,
        keep: 1,
        prompts,
    };
    let counter = IntCounterVec::new(Opts::new("audit", "test"), &["outcome"]).unwrap();
    Audit::start(&settings, counter, None).unwrap()
}

/// The lines written once `audit` is closed.
fn lines(audit: &Audit, dir: &Path) -> Vec<Value> {
    assert!(audit.close(Duration::from_secs(30)));
    std::fs::read_to_string(dir.join("audit.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn alice() -> Join {
    Join {
        who: Arc::new(Identity {
            name: "alice".into(),
            kind: Kind::Managed,
            role: Role::Client,
            scope: ProjectScope::All,
            expires: None,
            budget_usd: None,
        }),
        peer: Some("127.0.0.1".parse::<IpAddr>().unwrap()),
        role: Role::Client,
        resume_after: None,
        hello: None,
        own_runs: OwnRuns::default(),
    }
}

/// A hub with `settings`, its ready child and alice attached.
async fn with_alice(settings: HubSettings) -> (Harness, FakeChild, Attached) {
    let mut h = harness(settings);
    let start = h.next_start().await;
    let hub = h.hub.clone();
    let attach = tokio::spawn(async move { hub.attach(alice()).await });
    let child = FakeChild::start(start, true);
    let attached = attach.await.unwrap().unwrap();
    (h, child, attached)
}

#[tokio::test(start_paused = true)]
async fn a_prompt_is_recorded_with_its_run_and_an_abort_with_the_run_it_stops() {
    let dir = tempfile::tempdir().unwrap();
    let audit = audit(dir.path(), true);
    let (h, mut child, mut attached) = with_alice(HubSettings {
        audit: audit.clone(),
        ..settings()
    })
    .await;
    let client = attached.client;
    let prompt = json!({"id": 1, "type": "prompt", "message": "delete the tests"});
    h.hub.request(client, request(prompt)).await;
    let sent = child.next_request().await;
    child
        .say(json!({"type": "response", "id": sent["id"], "command": "prompt", "success": true, "data": {"started": true}}))
        .await;
    let (frames, _) = received(&mut attached).await;
    let answer = frames.iter().find(|f| f["id"] == 1).unwrap();
    let run = answer["data"]["run_id"].as_str().unwrap().to_string();
    h.hub
        .request(client, request(json!({"id": 2, "type": "abort"})))
        .await;
    let abort = child.next_request().await;
    assert_eq!(abort["type"], "abort");
    // Reads are not recorded.
    h.hub
        .request(client, request(json!({"id": 3, "type": "get_state"})))
        .await;
    tokio::time::sleep(Duration::from_millis(10)).await;

    let got = lines(&audit, dir.path());
    let actions: Vec<&str> = got.iter().filter_map(|l| l["action"].as_str()).collect();
    assert_eq!(actions, ["prompt", "abort"], "{got:?}");
    for line in &got {
        assert_eq!(line["actor"], "alice");
        assert_eq!(line["actor_kind"], "managed");
        assert_eq!(line["source"], "127.0.0.1");
        assert_eq!(line["project"], "alpha");
        assert_eq!(line["outcome"], "ok");
        assert_eq!(line["run"], run.as_str(), "{line}");
    }
    assert_eq!(got[0]["prompt"], "delete the tests");
    assert!(got[1].get("prompt").is_none());
}

/// A gate that refuses every prompt for its budget.
#[derive(Debug)]
struct Spent;

impl Gate for Spent {
    fn prompt(&self, _: &str, _: &Identity) -> Result<(), Refusal> {
        Err(Refusal {
            reason: "budget",
            message: "the budget is spent".into(),
        })
    }
}

#[tokio::test(start_paused = true)]
async fn a_prompt_refused_at_the_gate_is_recorded_with_its_reason_and_no_text_unless_asked() {
    let dir = tempfile::tempdir().unwrap();
    let audit = audit(dir.path(), false);
    let (h, mut child, mut attached) = with_alice(HubSettings {
        audit: audit.clone(),
        gate: Arc::new(Spent),
        ..settings()
    })
    .await;
    let prompt = json!({"id": 1, "type": "prompt", "message": "secret plans"});
    h.hub.request(attached.client, request(prompt)).await;
    let (frames, _) = received(&mut attached).await;
    assert!(frames.iter().any(|f| f["success"] == false), "{frames:?}");
    assert!(child.requests.try_recv().is_err(), "the agent saw nothing");

    let got = lines(&audit, dir.path());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["action"], "refused");
    assert_eq!(got[0]["outcome"], "refused");
    assert_eq!(
        got[0]["detail"],
        json!({"request": "prompt", "reason": "budget"})
    );
    assert!(!got[0].to_string().contains("secret plans"));
}

#[tokio::test(start_paused = true)]
async fn a_prompt_the_agent_never_answers_is_recorded_as_an_error_when_it_dies() {
    let dir = tempfile::tempdir().unwrap();
    let audit = audit(dir.path(), false);
    let (h, mut child, attached) = with_alice(HubSettings {
        audit: audit.clone(),
        ..settings()
    })
    .await;
    let prompt = json!({"id": 1, "type": "prompt", "message": "hi"});
    h.hub.request(attached.client, request(prompt)).await;
    child.next_request().await;
    child.crash();
    tokio::time::sleep(Duration::from_millis(10)).await;

    let got = lines(&audit, dir.path());
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0]["action"], "prompt");
    assert_eq!(got[0]["outcome"], "error");
    let error = got[0]["detail"]["error"].as_str().unwrap();
    assert!(error.contains("exited"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn an_acp_permission_answer_and_cancel_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let audit = audit(dir.path(), false);
    let (h, mut child, mut attached) = with_alice(HubSettings {
        dialect: crate::dialect::Dialect::named("acp").unwrap(),
        audit: audit.clone(),
        ..settings()
    })
    .await;
    // An ACP client is asked once it follows the session.
    let open = json!({"jsonrpc": "2.0", "id": "o", "method": "session/new", "params": {}});
    h.hub.request(attached.client, request(open)).await;
    let ask = json!({"jsonrpc": "2.0", "id": "p0",
        "method": "session/request_permission", "params": {}});
    child.say(ask).await;
    let (frames, _) = received(&mut attached).await;
    let asked = frames
        .iter()
        .find(|f| f["method"] == "session/request_permission")
        .unwrap();
    let answer = json!({"jsonrpc": "2.0", "id": asked["id"],
        "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}});
    h.hub.request(attached.client, request(answer)).await;
    assert_eq!(child.next_request().await["id"], "p0");
    let cancel =
        json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}});
    h.hub.request(attached.client, request(cancel)).await;
    assert_eq!(child.next_request().await["method"], "session/cancel");

    let got = lines(&audit, dir.path());
    let actions: Vec<&str> = got.iter().filter_map(|l| l["action"].as_str()).collect();
    assert_eq!(actions, ["permission_answered", "abort"], "{got:?}");
    assert_eq!(got[0]["detail"], json!({"option": "allow-once"}));
    assert!(got
        .iter()
        .all(|l| l["actor"] == "alice" && l["outcome"] == "ok"));
}
