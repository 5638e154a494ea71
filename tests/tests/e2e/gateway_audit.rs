//! The audit log of a real gateway (`--audit-log`): one line per action —
//! sessions opened and closed (a revocation's close too), prompts, an
//! abort, a permission answer, an admin restart, a token made and
//! revoked, a budget changed, an out-of-scope hello refused — each with
//! the actor (a `[[token]]`'s name, a managed token's, the static admin
//! token's `admin-token-1`), the source address, project and outcome. The
//! file never holds a token, nor a refusal before authentication, and a
//! prompt's text only with `--audit-prompts`.
//!
//! Not covered here yet: a JWT's `sub` as the actor. The gateway does not
//! accept JWTs until their verifier is wired in (`gateway_jwt` is ignored
//! until then); the `jwt` actor kind is covered by the audit module's own
//! tests.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN, OBSERVER_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

const ALICE: &str = "alice-audit-secret-0123456789ab";
const WRONG: &str = "wrong-audit-secret-0123456789ab";

/// Bound on the wait for the audit writer (it appends what it finds
/// queued, at once): generous for a loaded machine.
const WRITE_WAIT: Duration = Duration::from_secs(30);

fn sha256(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A config file with one `[[token]]`: `alice`, a client of `a-*`.
fn config_file(dir: &Path) -> PathBuf {
    let text = format!(
        "[[token]]\nname = \"alice\"\nhash = \"sha256:{}\"\nrole = \"client\"\nprojects = [\"a-*\"]\n",
        sha256(ALICE)
    );
    let path = dir.join("corral.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn gateway(mock: &MockLlm, dir: &Path, prompts: bool) -> Gateway {
    let spawn = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .child_arg("--permission-mode")
        .child_arg("ask")
        .projects(&["a-1", "b-1"])
        .arg("--config")
        .arg(config_file(dir).display().to_string())
        .arg("--audit-log")
        .arg(dir.join("audit.jsonl").display().to_string());
    match prompts {
        true => spawn.arg("--audit-prompts").spawn().await,
        false => spawn.spawn().await,
    }
}

/// The audit file's lines once `done` holds for them (the writer runs
/// on a thread of its own).
async fn audit_lines(dir: &Path, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let path = dir.join("audit.jsonl");
    let deadline = tokio::time::Instant::now() + WRITE_WAIT;
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect();
        if done(&lines) || tokio::time::Instant::now() >= deadline {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A client of `project` with `token`, whose hello succeeded.
async fn client(gateway: &Gateway, project: &str, token: &str) -> Ws {
    let (ws, reply) = gateway.client_with(project, token, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    ws
}

/// The lines of `action` by `actor`.
fn by<'a>(lines: &'a [Value], action: &str, actor: &str) -> Vec<&'a Value> {
    lines
        .iter()
        .filter(|l| l["action"] == action && l["actor"] == actor)
        .collect()
}

/// The one line of `action` by `actor`.
fn one<'a>(lines: &'a [Value], action: &str, actor: &str) -> &'a Value {
    let found = by(lines, action, actor);
    assert_eq!(found.len(), 1, "{action} by {actor}: {lines:#?}");
    found[0]
}

/// A bash call the agent asks permission for, and (unless it is aborted)
/// an answer quoting its result.
fn bash(mock: &MockLlm, answered: bool) {
    mock.push(Turn::tool_call("bash", json!({"command": "echo ok"})));
    if answered {
        mock.push(Turn::EchoToolResult {
            prefix: "saw: ".into(),
        });
    }
}

#[tokio::test]
async fn every_action_is_one_line_with_its_actor_source_project_and_outcome() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = gateway(&mock, dir.path(), true).await;

    // A managed token, made by the static admin token.
    let body = json!({"name": "ci-bot", "role": "client", "projects": ["a-*"]});
    let (status, made) = gateway
        .http_body("POST", "/v1/tokens", Some(ADMIN_TOKEN), &body.to_string())
        .await;
    assert_eq!(status, 201, "{made}");
    let made: Value = serde_json::from_str(&made).unwrap();
    let ci_bot = made["token"].as_str().unwrap().to_string();

    // ci-bot prompts, and aborts while the agent waits for permission.
    let mut bot = client(&gateway, "a-1", &ci_bot).await;
    bash(&mock, false);
    bot.send(json!({"id": "p", "type": "prompt", "message": "build the release"}))
        .await;
    let asked = bot.recv_until(|f| f["type"] == "permission_request").await;
    let run = asked.last().unwrap()["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    bot.send(json!({"id": "a", "type": "abort"})).await;
    bot.recv_until(|f| f["type"] == "done").await;

    // alice prompts and allows the bash call once.
    let mut alice = client(&gateway, "a-1", ALICE).await;
    bash(&mock, true);
    alice
        .send(json!({"id": "p", "type": "prompt", "message": "run the tests"}))
        .await;
    let asked = alice
        .recv_until(|f| f["type"] == "permission_request")
        .await;
    let request = asked.last().unwrap().clone();
    let alice_run = request["run_id"].as_str().unwrap().to_string();
    let reply = json!({"id": "r", "type": "permission_reply",
        "request_id": request["request_id"], "option": "allow_once"});
    alice.send(reply).await;
    alice.recv_until(|f| f["type"] == "done").await;

    // Refused after authentication: recorded. Before: not.
    let (_ws, refused) = gateway.client_with("b-1", ALICE, None).await;
    assert_eq!(refused["success"], false, "{refused}");
    let (_ws, wrong) = gateway.client_with("a-1", WRONG, None).await;
    assert_eq!(wrong["success"], false, "{wrong}");

    // The admin restarts the agent and raises the budget.
    let (status, body) = gateway
        .http_post("/v1/projects/a-1/restart", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = gateway
        .http_body(
            "PUT",
            "/v1/projects/a-1/budget",
            Some(ADMIN_TOKEN),
            r#"{"limit_usd": 5}"#,
        )
        .await;
    assert_eq!(status, 200, "{body}");

    // Revoking ci-bot closes its session (4001); alice leaves.
    let (status, body) = gateway
        .http("DELETE", "/v1/tokens/ci-bot", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(bot.closed().await.map(|(code, _)| code), Some(4001));
    alice.stream.close(None).await.unwrap();

    let lines = audit_lines(dir.path(), |lines| {
        lines
            .iter()
            .filter(|l| l["action"] == "session_closed")
            .count()
            >= 2
    })
    .await;
    for line in &lines {
        if line["actor"] != "gateway" {
            assert_eq!(line["source"], "127.0.0.1", "{line}");
        }
    }

    let made = one(&lines, "token_created", "admin-token-1");
    assert_eq!(made["actor_kind"], "static");
    assert_eq!(made["outcome"], "ok");
    assert_eq!(
        made["detail"],
        json!({"name": "ci-bot", "role": "client", "projects": ["a-*"],
            "expires": null, "budget_usd": null})
    );

    let opened = one(&lines, "session_opened", "ci-bot");
    assert_eq!(
        (
            &opened["actor_kind"],
            &opened["project"],
            &opened["detail"]["role"]
        ),
        (&json!("managed"), &json!("a-1"), &json!("client"))
    );
    let prompt = one(&lines, "prompt", "ci-bot");
    assert_eq!(
        (&prompt["run"], &prompt["outcome"]),
        (&json!(run), &json!("ok"))
    );
    assert_eq!(prompt["prompt"], "build the release");
    let abort = one(&lines, "abort", "ci-bot");
    assert_eq!(
        (&abort["run"], &abort["project"]),
        (&json!(run), &json!("a-1"))
    );

    let opened = one(&lines, "session_opened", "alice");
    assert_eq!(opened["actor_kind"], "configured");
    let prompt = one(&lines, "prompt", "alice");
    assert_eq!(prompt["run"], alice_run.as_str());
    assert_eq!(prompt["prompt"], "run the tests");
    let answered = one(&lines, "permission_answered", "alice");
    assert_eq!(answered["detail"], json!({"option": "allow_once"}));
    assert_eq!(answered["run"], alice_run.as_str());

    let refusal = one(&lines, "refused", "alice");
    assert_eq!(refusal["project"], "b-1");
    assert_eq!(refusal["outcome"], "refused");
    assert_eq!(
        refusal["detail"],
        json!({"request": "session", "reason": "out_of_scope"})
    );
    assert_eq!(
        lines.iter().filter(|l| l["action"] == "refused").count(),
        1,
        "the wrong token's hello is not recorded: {lines:#?}"
    );

    let restart = one(&lines, "admin_restart", "admin-token-1");
    assert_eq!(
        (&restart["project"], &restart["outcome"]),
        (&json!("a-1"), &json!("ok"))
    );
    let budget = one(&lines, "budget_changed", "admin-token-1");
    assert_eq!(budget["project"], "a-1");
    assert_eq!(budget["detail"]["limit_usd"], 5.0);

    let revoked = one(&lines, "token_revoked", "admin-token-1");
    assert_eq!(
        revoked["detail"],
        json!({"name": "ci-bot", "sessions_closed": 1})
    );
    let closed = one(&lines, "session_closed", "ci-bot");
    assert_eq!(closed["detail"]["reason"], "revoked");
    assert_eq!(closed["detail"]["close_code"], 4001);
    let closed = one(&lines, "session_closed", "alice");
    assert_eq!(closed["detail"]["reason"], "client_closed");

    // Never a token, whoever presented it.
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    for secret in [
        ALICE,
        WRONG,
        ci_bot.as_str(),
        ADMIN_TOKEN,
        TOKEN,
        OBSERVER_TOKEN,
    ] {
        assert!(!text.contains(secret), "a token is in the audit log");
    }
}

#[tokio::test]
async fn without_audit_prompts_a_prompt_is_recorded_without_its_text() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let gateway = gateway(&mock, dir.path(), false).await;
    let mut alice = client(&gateway, "a-1", ALICE).await;
    mock.push(Turn::text("done"));
    alice
        .send(json!({"id": "p", "type": "prompt", "message": "the secret plan"}))
        .await;
    alice.recv_until(|f| f["type"] == "done").await;
    let lines = audit_lines(dir.path(), |lines| {
        lines.iter().any(|l| l["action"] == "prompt")
    })
    .await;
    let prompt = one(&lines, "prompt", "alice");
    assert!(prompt.get("prompt").is_none(), "{prompt}");
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    assert!(!text.contains("the secret plan"), "{text}");
}
