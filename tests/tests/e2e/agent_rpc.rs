//! End-to-end: the real `corral-agent rpc` binary, driven over stdin/stdout,
//! against the mock LLM server (both wire formats) or the echo provider.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use corral_e2e::harness::is_done;
use std::time::{Duration, Instant};

use corral_e2e::harness::{text_of, types, AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

#[derive(Clone, Copy, Debug)]
enum Api {
    Anthropic,
    OpenAi,
}

async fn agent_on(mock: &MockLlm, api: Api) -> AgentProc {
    let (provider, base, model) = match api {
        Api::Anthropic => ("anthropic", mock.anthropic_base_url(), "claude-sonnet-4-5"),
        Api::OpenAi => ("openai", mock.openai_base_url(), "gpt-4.1"),
    };
    AgentSpawn::rpc(&["--provider", provider, "--model", model])
        .env("ANTHROPIC_API_KEY", "test-key")
        .env("OPENAI_API_KEY", "test-key")
        .arg("--base-url")
        .arg(base)
        .spawn()
        .await
}

/// Collapses runs of streaming deltas so sequences are easy to compare.
fn collapsed(frames: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in types(frames) {
        let streaming = matches!(t.as_str(), "text_delta" | "tool_use_args" | "tool_progress");
        if streaming && out.last() == Some(&t) {
            continue;
        }
        out.push(t);
    }
    out
}

async fn tool_round_trip(api: Api) {
    let mock = MockLlm::start().await;
    mock.push(Turn::tool_call("read", json!({"path": "notes.txt"})));
    mock.push(Turn::EchoToolResult {
        prefix: "The file says: ".into(),
    });
    let mut agent = agent_on(&mock, api).await;
    std::fs::write(agent.cwd.join("notes.txt"), "the secret is 42\n").unwrap();

    agent
        .send(json!({"id":"1","type":"prompt","message":"what is in notes.txt?"}))
        .await;
    let frames = agent.recv_until(is_done).await;
    assert_eq!(
        frames[0],
        json!({"type":"response","id":"1","command":"prompt","success":true,"data":{"started":true}})
    );
    let expected = [
        "response",
        "user_message",
        "turn_start",
        "request_started",
        "cache_diagnostics",
        "assistant_start",
        "tool_use_start",
        "tool_use_args",
        "tool_use_end",
        "tool_call",
        "tool_execution_started",
        "tool_result",
        "assistant_message",
        "usage",
        "turn_end",
        "turn_start",
        "request_started",
        "cache_diagnostics",
        "assistant_start",
        "text_delta",
        "assistant_message",
        "usage",
        "turn_end",
        "done",
    ];
    assert_eq!(collapsed(&frames), expected, "{api:?}: {}", brief(&frames));
    let turn_ends: Vec<&Value> = frames.iter().filter(|f| f["type"] == "turn_end").collect();
    assert_eq!(turn_ends[0]["stop"], "tool_use");
    assert_eq!(turn_ends[1]["stop"], "end");
    let steps: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "turn_start")
        .map(|f| &f["step"])
        .collect();
    assert_eq!(steps, [&json!(1), &json!(2)]);
    let result = frames.iter().find(|f| f["type"] == "tool_result").unwrap();
    assert_eq!(result["is_error"], false);
    assert!(result["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("the secret is 42"));
    let reply = text_of(&frames);
    assert!(reply.starts_with("The file says: "), "{reply}");
    assert!(reply.contains("the secret is 42"), "{reply}");
    let usage = frames.iter().find(|f| f["type"] == "usage").unwrap();
    assert!(usage["input"].as_u64().unwrap() > 0);
    assert!(usage["cumulative"]["output"].as_u64().is_some());

    // The tool output reached the model in the second request.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].body.to_string().contains("the secret is 42"));

    let response = agent.request(json!({"id":"2","type":"get_messages"})).await;
    let messages = response["data"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "{}", brief(messages));
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(
        messages[0]["content"][0],
        json!({"type":"text","text":"what is in notes.txt?"})
    );
    assert_eq!(messages[1]["role"], "assistant");
    let call = messages[1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_call")
        .unwrap();
    assert_eq!(call["name"], "read");
    assert_eq!(call["args"], json!({"path": "notes.txt"}));
    let tool_result = &messages[2]["content"][0];
    assert_eq!(tool_result["type"], "tool_result");
    assert_eq!(tool_result["call_id"], call["id"]);
    assert_eq!(messages[3]["role"], "assistant");
    assert!(messages[3]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("the secret is 42"));
}

#[tokio::test]
async fn read_tool_round_trip_anthropic() {
    tool_round_trip(Api::Anthropic).await;
}

#[tokio::test]
async fn read_tool_round_trip_openai() {
    tool_round_trip(Api::OpenAi).await;
}

async fn retry_after_429(api: Api) {
    let mock = MockLlm::start().await;
    mock.push(Turn::Status {
        code: 429,
        retry_after: Some(1),
        body: "rate limited".into(),
    });
    mock.push(Turn::text("recovered fine"));
    let mut agent = agent_on(&mock, api).await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    let frames = agent.recv_until(is_done).await;
    let retry = frames
        .iter()
        .find(|f| f["type"] == "retry_scheduled")
        .expect("retry_scheduled");
    assert_eq!(retry["attempt"], 2);
    assert_eq!(retry["scope"], "provider");
    assert_eq!(retry["delay_ms"], 1000);
    let attempts: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "request_started")
        .map(|f| &f["attempt"])
        .collect();
    assert_eq!(attempts, [&json!(1), &json!(2)]);
    assert_eq!(text_of(&frames), "recovered fine");
    let end = frames.iter().find(|f| f["type"] == "turn_end").unwrap();
    assert_eq!(end["stop"], "end");
}

#[tokio::test]
async fn rate_limit_is_retried_anthropic() {
    retry_after_429(Api::Anthropic).await;
}

#[tokio::test]
async fn rate_limit_is_retried_openai() {
    retry_after_429(Api::OpenAi).await;
}

#[tokio::test]
async fn bad_api_key_is_a_clear_error_and_the_run_ends() {
    let mock = MockLlm::start().await;
    mock.set_api_key(Some("the-right-key".into()));
    let mut agent = agent_on(&mock, Api::Anthropic).await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    let frames = agent.recv_until(is_done).await;
    let end = frames.iter().find(|f| f["type"] == "turn_end").unwrap();
    assert_eq!(end["stop"], "error");
    let error = end["error"].as_str().unwrap();
    assert!(
        error.contains("401") && error.contains("ANTHROPIC_API_KEY"),
        "{error}"
    );
    assert!(!frames.iter().any(|f| f["type"] == "retry_scheduled"));
    assert_eq!(
        agent.request(json!({"id":"2","type":"ping"})).await["success"],
        true
    );
}

#[tokio::test]
async fn abort_mid_stream_ends_the_run_quickly() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: (0..100).map(|i| format!("chunk{i} ")).collect(),
        delay: Duration::from_millis(100),
    });
    let mut agent = agent_on(&mock, Api::Anthropic).await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"talk slowly"}))
        .await;
    agent.recv_until(|f| f["type"] == "text_delta").await;
    let start = Instant::now();
    agent.send(json!({"id":"2","type":"abort"})).await;
    let frames = agent.recv_until(is_done).await;
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_millis(500),
        "abort took {elapsed:?}"
    );
    let tail: Vec<String> = types(&frames)
        .into_iter()
        .filter(|t| t != "text_delta")
        .collect();
    assert_eq!(tail, ["response", "turn_end", "done"], "{}", brief(&frames));
    let end = frames.iter().find(|f| f["type"] == "turn_end").unwrap();
    assert_eq!(end["stop"], "aborted");
    let state = agent.request(json!({"id":"3","type":"get_state"})).await;
    assert_eq!(state["data"]["busy"], false);
}

fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie has exited; it only waits for its parent to reap it.
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[tokio::test]
async fn abort_kills_a_running_bash_process_group() {
    let mock = MockLlm::start().await;
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": "sleep 100 & echo $! > sleep.pid; echo started; wait"}),
    ));
    let mut agent = agent_on(&mock, Api::Anthropic).await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"sleep"}))
        .await;
    agent.recv_until(|f| f["type"] == "tool_progress").await;
    let pid_file = agent.cwd.join("sleep.pid");
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!process_gone(pid), "sleep should be running");
    let start = Instant::now();
    agent.send(json!({"id":"2","type":"abort"})).await;
    let frames = agent.recv_until(is_done).await;
    let elapsed = start.elapsed();
    assert!(
        elapsed < Duration::from_millis(500),
        "abort took {elapsed:?}"
    );
    let stops: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "turn_end")
        .map(|f| &f["stop"])
        .collect();
    assert_eq!(stops, [&json!("aborted")]);
    let deadline = Instant::now() + Duration::from_secs(2);
    while !process_gone(pid) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(process_gone(pid), "sleep {pid} survived the abort");
    // The transcript stays valid: the call has a result.
    let messages = agent.request(json!({"id":"3","type":"get_messages"})).await;
    let messages = messages["data"]["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3, "{}", brief(&messages));
    assert_eq!(messages[2]["content"][0]["is_error"], true);
}

#[tokio::test]
async fn abort_while_idle_succeeds_and_emits_nothing() {
    let mut agent = AgentSpawn::rpc(&["--provider", "echo"]).spawn().await;
    let response = agent.request(json!({"id":"1","type":"abort"})).await;
    assert_eq!(
        response,
        json!({"type":"response","id":"1","command":"abort","success":true})
    );
    let pong = agent.send_recv(json!({"id":"2","type":"ping"})).await;
    assert_eq!(pong["id"], "2");
}
