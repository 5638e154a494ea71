//! The Node ACP clients of the suites (`tests/acp_client`: the official
//! SDK 1.x's `ClientSideConnection`, and the 2.x client app installed as
//! `acp-sdk-2`) and the third-party agent package
//! (`tests/acp_third_party`): installed with `npm ci` on first use, run
//! with a bounded wait, their one-line JSON report parsed.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::mock_llm::{MockLlm, Turn};
use crate::prerequisites::{NODE, NPM};

/// How long one client run may take (pi takes seconds to start).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(120);

/// A Node package folder of the suite (`acp_client`, `acp_third_party`).
pub fn package_dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// The SDK client's folder.
pub fn client_dir() -> PathBuf {
    package_dir("acp_client")
}

/// Runs `npm ci` in `dir` unless `installed` (a path under node_modules)
/// is there, under a lock so that parallel tests install once.
pub fn npm_ci(dir: &Path, installed: &str) {
    // Checked only under the lock: mid-install, `installed` may already
    // exist while other packages do not yet.
    crate::fixture::prepare_locked(&dir.join(".npm-ci.lock"), || {
        if dir.join("node_modules").join(installed).exists() {
            return;
        }
        let status = std::process::Command::new(NPM.require())
            .args(["ci", "--no-audit", "--no-fund"])
            .current_dir(dir)
            .status()
            .expect("run npm ci");
        assert!(status.success(), "npm ci in {} failed", dir.display());
    });
}

/// The node binary, with both SDK releases installed (a missing node or
/// npm fails the test, naming what to install). One lock file pins both,
/// so the 2.x alias being there means the install is current.
pub fn sdk_ready() -> PathBuf {
    let node = NODE.require();
    npm_ci(&client_dir(), "acp-sdk-2/package.json");
    node
}

/// `node SCRIPT` from the client folder, to be completed by the caller
/// (its environment) and passed to [`report`].
pub fn script(node: &Path, script: &str) -> Command {
    let mut command = Command::new(node);
    command
        .arg(client_dir().join(script))
        .current_dir(client_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    command
}

/// Runs a client script and returns its JSON report; fails the test with
/// its output when it fails or takes longer than [`CLIENT_TIMEOUT`].
pub async fn report(mut command: Command) -> Value {
    let child = command.spawn().expect("spawn node");
    let output = tokio::time::timeout(CLIENT_TIMEOUT, child.wait_with_output())
        .await
        .expect("the ACP client timed out")
        .expect("the ACP client ran");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the ACP client failed; stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("no report ({e}): {stdout}"))
}

/// The model's side of `client.mjs`'s conversation, in its order: a
/// reply, an edit of `notes.txt` replacing `old_text`, a reply, an allowed
/// and a rejected bash call (each followed by a reply, the second echoing
/// the tool's result), and a slow reply the client cancels.
pub fn script_conversation(mock: &MockLlm, old_text: &str) {
    mock.push(Turn::text("Hi there"));
    mock.push(Turn::tool_call(
        "edit",
        serde_json::json!({"path": "notes.txt", "old_text": old_text, "new_text": "edited"}),
    ));
    mock.push(Turn::text("Edited."));
    mock.push(Turn::tool_call(
        "bash",
        serde_json::json!({"command": "echo allowed > out.txt"}),
    ));
    mock.push(Turn::text("Ran it."));
    mock.push(Turn::tool_call(
        "bash",
        serde_json::json!({"command": "echo nope > no.txt"}),
    ));
    mock.push(Turn::EchoToolResult {
        prefix: "saw: ".into(),
    });
    mock.push(Turn::Slow {
        chunks: vec!["once upon a time ".into(); 100],
        delay: Duration::from_millis(100),
    });
}
