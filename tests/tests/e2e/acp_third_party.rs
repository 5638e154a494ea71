//! A third-party ACP agent installed from npm: `pi-acp` over the pi coding
//! agent (`tests/acp_third_party`, pinned), its model pointed at the mock
//! LLM through pi's `models.json` in a private HOME, driven by the official
//! SDK's `ClientSideConnection` (`tests/acp_client/prompt.mjs`): once
//! directly, once under `corral-agent sandbox-exec` as the gateway runs it,
//! where its tool commands reach only the project, its home and `/tmp`,
//! and once through `corral serve --child-command` and `corral attach`.
//!
//! Needs Node 20+ and npm (Debian: `nodejs npm`); `npm ci` runs here for
//! either package folder whose `node_modules` is missing.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};

use corral_e2e::acp_client::{self, package_dir};
use corral_e2e::gateway::{GatewaySpawn, TOKEN};
use corral_e2e::harness::workspace_bin;
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

const REPLY: &str = "Hi from the mock";

/// The node binary, with the SDK client and pi-acp installed.
fn node_ready() -> PathBuf {
    let node = acp_client::sdk_ready();
    acp_client::npm_ci(&package_dir("acp_third_party"), ".bin/pi-acp");
    node
}

/// The `.bin` folder holding `pi-acp` and `pi` (which pi-acp runs), where
/// a sandboxed agent can reach it. The sandbox gives the agent a private,
/// empty `/tmp`, so a checkout under `/tmp` is copied once to a folder
/// outside it (under `/var/tmp`, named by the lock file, reused by later
/// runs; copied under a file lock, so parallel test binaries copy once).
fn pi_bin_dir() -> PathBuf {
    let package = package_dir("acp_third_party");
    corral_e2e::fixture::reachable_by_agents(&package, "pi", "node_modules/.bin/pi-acp")
        .join("node_modules/.bin")
}

/// A private HOME whose pi configuration knows one model, served by `mock`
/// on the OpenAI Chat Completions wire format.
fn pi_home(home: &Path, mock: &MockLlm) {
    pi_home_at(home, &mock.openai_base_url(), "mock-key");
}

/// A private HOME whose pi configuration knows one model at `base_url`
/// (OpenAI Chat Completions) with `api_key` (a value, or the name of an
/// environment variable holding it: pi reads it from there if set).
fn pi_home_at(home: &Path, base_url: &str, api_key: &str) {
    let agent = home.join(".pi/agent");
    std::fs::create_dir_all(&agent).unwrap();
    let models = json!({"providers": {"mock": {
        "baseUrl": base_url,
        "api": "openai-completions",
        "apiKey": api_key,
        "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
        "models": [{"id": "mock-model"}],
    }}});
    std::fs::write(agent.join("models.json"), models.to_string()).unwrap();
    let settings = json!({
        "defaultProvider": "mock",
        "defaultModel": "mock-model",
        "quietStartup": true,
    });
    std::fs::write(agent.join("settings.json"), settings.to_string()).unwrap();
}

/// `PATH` with pi's `.bin` folder first.
fn path_with_pi() -> String {
    format!(
        "{}:{}",
        pi_bin_dir().display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// The prompt client's report after one prompt to `program args` in
/// `project`, with only the environment given here.
async fn prompt(node: &Path, program: &Path, args: Value, project: &Path, home: &Path) -> Value {
    let mut client = acp_client::script(node, "prompt.mjs");
    client
        .env_clear()
        .env("PATH", path_with_pi())
        .env("CORRAL_TOKEN", TOKEN)
        .env("HOME", home)
        .env("PI_OFFLINE", "1")
        .env("ACP_AGENT", program)
        .env("ACP_AGENT_ARGS", args.to_string())
        .env("ACP_CWD", project)
        .env("ACP_PROMPT", "check the sandbox");
    acp_client::report(client).await
}

/// The mock saw pi's one request on the configured model and key.
fn assert_one_request(mock: &MockLlm, count: usize) {
    let requests = mock.requests();
    assert_eq!(requests.len(), count, "{requests:?}");
    for request in requests {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(request.auth.as_deref(), Some("Bearer mock-key"));
        assert_eq!(request.body["model"], "mock-model");
    }
    assert_eq!(mock.remaining(), 0, "every scripted turn was used");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_acp_answers_a_prompt_from_the_mock_llm() {
    let node = node_ready();
    let mock = MockLlm::start().await;
    mock.push(Turn::text(REPLY));
    let root = tempfile::tempdir().unwrap();
    let (project, home) = (root.path().join("project"), root.path().join("home"));
    std::fs::create_dir_all(&project).unwrap();
    pi_home(&home, &mock);

    let pi_acp = pi_bin_dir().join("pi-acp");
    let report = prompt(&node, &pi_acp, json!([]), &project, &home).await;

    assert_eq!(report["initialize"]["agentInfo"]["name"], "pi-acp");
    assert_eq!(report["initialize"]["protocolVersion"], 1);
    assert_eq!(
        report["newSession"]["models"]["currentModelId"],
        "mock/mock-model"
    );
    assert_eq!(report["stopReason"], "end_turn");
    assert_eq!(report["text"].as_str().unwrap().trim(), REPLY, "{report}");
    assert_eq!(report["exit"], 0);
    assert_one_request(&mock, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_acp_under_sandbox_exec_answers_and_its_tools_stay_in_the_project() {
    let node = node_ready();
    let mock = MockLlm::start().await;
    // Outside /tmp (which the sandbox replaces), laid out like the
    // gateway's: the state directory and the projects root hidden, the
    // home under the state directory.
    let root = corral_e2e::dir_outside_tmp();
    let path = |rel: &str| root.path().join(rel);
    for dir in ["projects/a", "projects/b", "state/sessions", "outside"] {
        std::fs::create_dir_all(path(dir)).unwrap();
    }
    std::fs::write(path("projects/b/secret.txt"), "other-project-secret").unwrap();
    let (project, home) = (path("projects/a"), path("state/homes/a"));
    pi_home(&home, &mock);
    let escape = path("outside/escaped.txt");
    let command = format!(
        "echo in > inside.txt; echo \"home=$HOME\"; \
         (echo x > {escape} && echo escaped) 2>/dev/null || echo write-denied; \
         cat {secret} 2>/dev/null || echo secret-hidden",
        escape = escape.display(),
        secret = path("projects/b/secret.txt").display(),
    );
    mock.push(Turn::tool_call("bash", json!({ "command": command })));
    mock.push(Turn::EchoToolResult {
        prefix: "saw: ".into(),
    });

    let args = json!([
        "sandbox-exec",
        "--sandbox-hide",
        path("state"),
        "--sandbox-hide",
        path("projects"),
        "--cwd",
        project,
        "--home",
        home,
        "--",
        pi_bin_dir().join("pi-acp"),
    ]);
    let agent = workspace_bin("corral-agent");
    let report = prompt(&node, &agent, args, &project, &home).await;

    assert_eq!(report["stopReason"], "end_turn", "{report}");
    assert!(report["kinds"]
        .as_array()
        .unwrap()
        .contains(&json!("tool_call")));
    let text = report["text"].as_str().unwrap();
    let home_line = format!("home={}", home.canonicalize().unwrap().display());
    for needle in ["saw: ", &home_line, "write-denied", "secret-hidden"] {
        assert!(text.contains(needle), "{needle:?} not in {text:?}");
    }
    assert!(!text.contains("other-project-secret"), "{text}");
    assert_eq!(report["exit"], 0);
    assert_eq!(
        std::fs::read_to_string(project.join("inside.txt")).unwrap(),
        "in\n"
    );
    assert!(!escape.exists(), "a write outside the project got through");
    // pi kept its own state in the private home.
    assert!(home.join(".pi/agent/sessions").is_dir());
    assert_one_request(&mock, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_acp_under_the_gateway_answers_through_attach() {
    let node = node_ready();
    let mock = MockLlm::start().await;
    mock.push(Turn::text(REPLY));
    let state = tempfile::tempdir().unwrap();
    let home = state.path().join("homes/alpha");
    pi_home(&home, &mock);
    let gw = GatewaySpawn::default()
        .state_dir(state.path().to_path_buf())
        .arg("--dialect")
        .arg("acp")
        .arg("--child-command")
        .arg(pi_bin_dir().join("pi-acp").display().to_string())
        .arg("--child-env")
        .arg("PI_OFFLINE=1")
        // pi (Node's fetch) ignores proxy variables: the host's network
        // for its model calls (the mock LLM on loopback).
        .arg("--tool-network")
        .arg("on")
        .env("PATH", &path_with_pi())
        .spawn()
        .await;
    let project = gw.root.join("alpha");
    let args = json!(["attach", "--dialect", "acp", gw.url("alpha")]);
    let report = prompt(&node, &workspace_bin("corral"), args, &project, &home).await;

    assert_eq!(report["stopReason"], "end_turn", "{report}");
    assert_eq!(report["text"].as_str().unwrap().trim(), REPLY, "{report}");
    assert_one_request(&mock, 1);
    assert!(
        home.join(".pi/agent/sessions").is_dir(),
        "pi kept its state in the project's home"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pi_acp_under_the_gateway_reaches_its_model_through_the_broker() {
    const KEY: &str = "sk-openai-broker-e2e-51c0ffee";
    let node = node_ready();
    let mock = MockLlm::start().await;
    mock.set_api_key(Some(KEY.into()));
    mock.push(Turn::text(REPLY));
    let state = corral_e2e::dir_outside_tmp();
    let home = state.path().join("homes/alpha");
    // pi's provider points at the relay's broker port with the key the
    // gateway puts in the environment: a placeholder, never the key.
    // (corral_protocol::egress::BROKER_RELAY_URL, then the broker's
    // OpenAI prefix.)
    let base = "http://127.0.0.1:3129/openai/v1";
    pi_home_at(&home, base, "OPENAI_API_KEY");
    let gw = GatewaySpawn::default()
        .state_dir(state.path().to_path_buf())
        .arg("--dialect")
        .arg("acp")
        .arg("--child-command")
        .arg(pi_bin_dir().join("pi-acp").display().to_string())
        .arg("--child-env")
        .arg("PI_OFFLINE=1")
        .arg("--model-broker")
        .arg("on")
        .env("PATH", &path_with_pi())
        .env("OPENAI_BASE_URL", &mock.openai_base_url())
        .env("OPENAI_API_KEY", KEY)
        .spawn()
        .await;
    let project = gw.root.join("alpha");
    let args = json!(["attach", "--dialect", "acp", gw.url("alpha")]);
    let report = prompt(&node, &workspace_bin("corral"), args, &project, &home).await;

    assert_eq!(report["stopReason"], "end_turn", "{report}");
    assert_eq!(report["text"].as_str().unwrap().trim(), REPLY, "{report}");
    let requests = mock.requests();
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].auth.as_deref(),
        Some(format!("Bearer {KEY}").as_str())
    );
    let (status, metrics) = gw
        .http_get("/metrics", Some(corral_e2e::gateway::ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200);
    assert!(
        metrics
            .contains("corral_broker_requests_total{outcome=\"forwarded\",provider=\"openai\"} 1"),
        "{metrics}"
    );
}
