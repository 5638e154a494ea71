//! The Anthropic Messages stream: event order, text, tool-use JSON
//! fragments, usage and cache counters, request checks.

use corral_e2e::mock_llm::{MockLlm, ReportedUsage, Turn};
use serde_json::{json, Value};

use super::*;

#[tokio::test]
async fn text_turn_streams_the_real_event_sequence() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("Hello, world!"));
    let events = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;

    let names: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(names[..3], ["message_start", "content_block_start", "ping"]);
    assert_eq!(
        names[names.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    assert!(
        names
            .iter()
            .filter(|n| **n == "content_block_delta")
            .count()
            >= 2
    );

    let message = &events[0]["message"];
    assert!(message["id"].as_str().unwrap().starts_with("msg_"));
    assert_eq!(message["model"], "claude-test");
    assert_eq!(message["role"], "assistant");
    for field in [
        "input_tokens",
        "cache_read_input_tokens",
        "cache_creation_input_tokens",
        "output_tokens",
    ] {
        assert!(message["usage"][field].is_u64(), "usage.{field}");
    }
    assert_eq!(
        events[1]["content_block"],
        json!({"type": "text", "text": ""})
    );
    assert_eq!(anthropic_text(&events), "Hello, world!");

    let delta = &events[events.len() - 2];
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(mock.remaining(), 0);
}

#[tokio::test]
async fn tool_call_json_fragments_reassemble_to_the_args() {
    let mock = MockLlm::start().await;
    let args = json!({"path": "src/main.rs", "offset": 10, "limit": 200});
    mock.push(Turn::TextAndToolCalls {
        text: "Let me look.".into(),
        calls: vec![("read".into(), args.clone()), ("ls".into(), json!({}))],
    });
    let events = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;

    assert_eq!(anthropic_text(&events), "Let me look.");
    let starts: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .collect();
    assert_eq!(starts.len(), 3);
    let tool = &starts[1]["content_block"];
    assert_eq!(tool["type"], "tool_use");
    assert_eq!(tool["name"], "read");
    assert_eq!(tool["input"], json!({}));
    assert!(tool["id"].as_str().unwrap().starts_with("toolu_"));
    assert_ne!(tool["id"], starts[2]["content_block"]["id"]);

    let pieces = |index: u64| -> Vec<String> {
        events
            .iter()
            .filter(|e| e["index"] == index && e["delta"]["type"] == "input_json_delta")
            .map(|e| e["delta"]["partial_json"].as_str().unwrap().to_string())
            .collect()
    };
    let read = pieces(1);
    assert!(
        read.len() >= 3,
        "arguments come in several pieces: {read:?}"
    );
    assert_eq!(serde_json::from_str::<Value>(&read.concat()).unwrap(), args);
    // An argument-less call streams only an empty piece, as the real API does.
    assert_eq!(pieces(2).concat(), "");

    let delta = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn cache_reads_start_with_the_second_request() {
    let mock = MockLlm::start().await;
    mock.push_all([Turn::text("one"), Turn::text("two")]);
    let usage = |events: &[Value]| events[0]["message"]["usage"].clone();

    let first =
        usage(&anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await);
    assert_eq!(first["cache_read_input_tokens"], 0);
    assert!(first["cache_creation_input_tokens"].as_u64().unwrap() > 0);

    let second =
        usage(&anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await);
    assert!(second["cache_read_input_tokens"].as_u64().unwrap() > 0);
    assert!(second["input_tokens"].as_u64().unwrap() > 0);
}

#[tokio::test]
async fn usage_set_by_the_test_is_reported_without_cache() {
    let mock = MockLlm::start().await;
    mock.report_usage(Some(ReportedUsage {
        input: 1_000_000,
        output: 2_000,
    }));
    mock.push_all([Turn::text("one"), Turn::text("two")]);
    for _ in 0..2 {
        let events = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;
        let start = &events[0]["message"]["usage"];
        assert_eq!(start["input_tokens"], 1_000_000);
        assert_eq!(start["cache_read_input_tokens"], 0);
        assert_eq!(start["cache_creation_input_tokens"], 0);
        assert_eq!(events[events.len() - 2]["usage"]["output_tokens"], 2_000);
    }
    mock.report_usage(None);
    mock.push(Turn::text("three"));
    let events = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;
    assert!(
        events[0]["message"]["usage"]["input_tokens"]
            .as_u64()
            .unwrap()
            < 1_000
    );
}

#[tokio::test]
async fn echo_returns_the_last_tool_result() {
    let mock = MockLlm::start().await;
    mock.push(Turn::EchoToolResult {
        prefix: "file says: ".into(),
    });
    let messages = json!([
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.txt"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1",
             "content": [{"type": "text", "text": "42 lines"}]},
        ]},
    ]);
    let events = anthropic_events(post_anthropic(&mock, &anthropic_body(messages)).await).await;
    assert_eq!(anthropic_text(&events), "file says: 42 lines");
}

#[tokio::test]
async fn request_checks_use_the_error_shape() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("kept"));
    let url = format!("{}/v1/messages", mock.anthropic_base_url());

    let no_version = reqwest::Client::new()
        .post(&url)
        .json(&anthropic_body(hello()));
    let resp = within(no_version.send()).await.unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = within(resp.json()).await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "invalid_request_error");

    let mut not_streaming = anthropic_body(hello());
    not_streaming["stream"] = json!(false);
    let resp = post_anthropic(&mock, &not_streaming).await;
    assert_eq!(resp.status(), 400);
    let body: Value = within(resp.json()).await.unwrap();
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("stream"));

    let mut no_max_tokens = anthropic_body(hello());
    no_max_tokens.as_object_mut().unwrap().remove("max_tokens");
    assert_eq!(post_anthropic(&mock, &no_max_tokens).await.status(), 400);

    assert_eq!(mock.remaining(), 1, "rejected requests consume no turn");
    assert_eq!(mock.requests().len(), 3, "rejected requests are recorded");
}
