//! Conformance with Zi's reference behaviour: the reference client's flow
//! (recreated in `zi_conformance/client.rs`) against `corral-agent` spawned
//! as the client spawns `zi`, and through `corral attach --dialect zi` to a
//! gateway serving Zi, with a model that calls a tool and with a provider
//! that is down; then one test per point where corral follows the
//! reference server (`zi_conformance/points.rs`).

#![allow(clippy::unwrap_used)]

#[path = "zi_conformance/client.rs"]
mod client;
#[path = "zi_conformance/conn.rs"]
mod conn;
#[path = "zi_conformance/peer.rs"]
mod peer;
#[path = "zi_conformance/points.rs"]
mod points;

use std::path::Path;

use corral_e2e::gateway::{Gateway, GatewaySpawn, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use peer::{Peer, Target};
use serde_json::json;

pub const FILE_TEXT: &str = "the contents of notes.txt";
pub const DOWN: &str = "provider down for maintenance";

/// A tool call that reads `notes.txt`, then an answer quoting its result.
pub fn tool_call_then_answer(mock: &MockLlm) {
    mock.push(Turn::tool_call("read", json!({"path": "notes.txt"})));
    mock.push(Turn::EchoToolResult {
        prefix: "the file says: ".into(),
    });
}

/// Every attempt of one model call fails with a 503 (retried at once).
pub fn provider_down(mock: &MockLlm) {
    for _ in 0..4 {
        mock.push(Turn::Status {
            code: 503,
            retry_after: Some(0),
            body: DOWN.into(),
        });
    }
}

/// A project directory holding `notes.txt`.
fn project(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(dir.join("notes.txt"), FILE_TEXT).unwrap();
}

/// A gateway serving Zi whose project `alpha` holds `notes.txt`.
pub async fn zi_gateway(mock: &MockLlm, root: &Path) -> (Gateway, Target) {
    project(&root.join("alpha"));
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(root.to_path_buf())
        .arg("--dialect")
        .arg("zi")
        .spawn()
        .await;
    let target = Target::Attach {
        url: gateway.url("alpha"),
        token: TOKEN.into(),
    };
    (gateway, target)
}

/// The flow with a tool call, then with the provider down, against one
/// target; `cwd` is where the client runs (and, directly, the project).
async fn reference_flow(mock: &MockLlm, target: &Target, cwd: &Path) {
    tool_call_then_answer(mock);
    let answer = client::run_prompt(Peer::spawn(target, cwd, None), "what do my notes say?").await;
    let answer = answer.unwrap();
    assert!(
        answer.starts_with("the file says: ") && answer.contains(FILE_TEXT),
        "the model's answer, after the tool's result: {answer}"
    );
    let requests = mock.requests();
    let last = requests.last().unwrap().body.to_string();
    assert!(
        last.contains(FILE_TEXT),
        "the tool result reached the model: {last}"
    );

    provider_down(mock);
    let failed = client::run_prompt(Peer::spawn(target, cwd, None), "and now?").await;
    let error = failed.unwrap_err();
    assert!(
        error.contains(DOWN),
        "the provider's error is reported: {error}"
    );
}

#[tokio::test]
async fn the_reference_client_flow_directly() {
    let mock = MockLlm::start().await;
    let temp = tempfile::tempdir().unwrap();
    let cwd = temp.path().join("project");
    project(&cwd);
    let target = Target::Direct {
        base_url: mock.anthropic_base_url(),
    };
    reference_flow(&mock, &target, &cwd).await;
}

#[tokio::test]
async fn the_reference_client_flow_through_attach() {
    let mock = MockLlm::start().await;
    let temp = tempfile::tempdir().unwrap();
    let (_gateway, target) = zi_gateway(&mock, &temp.path().join("projects")).await;
    let cwd = temp.path().join("client");
    std::fs::create_dir_all(&cwd).unwrap();
    reference_flow(&mock, &target, &cwd).await;
}
