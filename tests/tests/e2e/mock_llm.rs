//! Tests of the mock LLM server over real HTTP: SSE framing of both wire
//! formats, tool-call fragments, echoing tool results, scripted errors,
//! authentication, pacing, and the `mock-llm` binary.

#![allow(clippy::unwrap_used)]

mod anthropic;
mod behaviour;
mod openai;

use std::time::Duration;

use corral_e2e::mock_llm::MockLlm;
use serde_json::{json, Value};

/// Bound on every network wait in these tests.
const WAIT: Duration = Duration::from_secs(10);

const KEY: &str = "test-key";

async fn within<F: std::future::Future>(f: F) -> F::Output {
    tokio::time::timeout(WAIT, f).await.expect("timed out")
}

fn anthropic_body(messages: Value) -> Value {
    json!({"model": "claude-test", "max_tokens": 1024, "stream": true, "messages": messages})
}

fn openai_body(messages: Value) -> Value {
    json!({
        "model": "gpt-test",
        "stream": true,
        "stream_options": {"include_usage": true},
        "messages": messages,
    })
}

fn hello() -> Value {
    json!([{"role": "user", "content": "hello"}])
}

async fn post_anthropic(mock: &MockLlm, body: &Value) -> reqwest::Response {
    let url = format!("{}/v1/messages", mock.anthropic_base_url());
    let req = reqwest::Client::new()
        .post(url)
        .header("x-api-key", KEY)
        .header("anthropic-version", "2023-06-01")
        .json(body);
    within(req.send()).await.unwrap()
}

async fn post_openai(mock: &MockLlm, body: &Value) -> reqwest::Response {
    let url = format!("{}/chat/completions", mock.openai_base_url());
    let req = reqwest::Client::new().post(url).bearer_auth(KEY).json(body);
    within(req.send()).await.unwrap()
}

/// Reads an Anthropic stream, checks every event is exactly
/// `event: NAME\ndata: JSON\n\n` with `data.type == NAME`, and returns the
/// data objects.
async fn anthropic_events(resp: reqwest::Response) -> Vec<Value> {
    assert_eq!(resp.status(), 200);
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let text = within(resp.text()).await.unwrap();
    let blocks = text
        .strip_suffix("\n\n")
        .expect("stream ends with a blank line");
    blocks
        .split("\n\n")
        .map(|block| {
            let (event, data) = block.split_once('\n').expect("two lines");
            let name = event.strip_prefix("event: ").expect("event line");
            let data: Value = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
            assert_eq!(data["type"], name, "event name matches data.type");
            data
        })
        .collect()
}

/// Reads an OpenAI stream, checks every event is exactly `data: JSON\n\n`
/// and the last is `data: [DONE]`, and returns the chunks before it.
async fn openai_chunks(resp: reqwest::Response) -> Vec<Value> {
    assert_eq!(resp.status(), 200);
    let ctype = resp.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ctype.starts_with("text/event-stream"), "{ctype}");
    let text = within(resp.text()).await.unwrap();
    let blocks = text
        .strip_suffix("data: [DONE]\n\n")
        .expect("ends with [DONE]");
    let blocks = blocks.strip_suffix("\n\n").unwrap();
    blocks
        .split("\n\n")
        .map(|block| {
            let data = block.strip_prefix("data: ").expect("data line");
            assert!(!data.contains('\n'), "one line per event");
            serde_json::from_str(data).unwrap()
        })
        .collect()
}

/// Concatenated text of an Anthropic stream's `text_delta`s.
fn anthropic_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["delta"]["type"] == "text_delta")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect()
}

/// Concatenated `delta.content` of an OpenAI stream.
fn openai_text(chunks: &[Value]) -> String {
    chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect()
}
