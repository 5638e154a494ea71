//! The OpenAI Chat Completions stream: chunk framing, text, tool-call
//! fragments, finish reasons, the usage chunk and request checks.

use corral_e2e::mock_llm::{MockLlm, ReportedUsage, Turn};
use serde_json::{json, Value};

use super::*;

#[tokio::test]
async fn text_turn_streams_chunks_then_usage_then_done() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("Hello, world!"));
    let chunks = openai_chunks(post_openai(&mock, &openai_body(hello())).await).await;

    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(c["model"], "gpt-test");
        assert_eq!(c["id"], chunks[0]["id"]);
    }
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(openai_text(&chunks), "Hello, world!");
    let pieces = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .filter(|t| !t.is_empty())
        .count();
    assert!(pieces >= 3, "text comes in several chunks");

    let (usage, body) = chunks.split_last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    let u = &usage["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(u["completion_tokens"].as_u64().unwrap() > 0);
    assert!(u["prompt_tokens_details"]["cached_tokens"].is_u64());
    assert!(u["completion_tokens_details"]["reasoning_tokens"].is_u64());

    let (finish, deltas) = body.split_last().unwrap();
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert!(deltas
        .iter()
        .all(|c| c["choices"][0]["finish_reason"].is_null() && c["usage"].is_null()));
}

#[tokio::test]
async fn usage_set_by_the_test_is_reported_without_cache() {
    let mock = MockLlm::start().await;
    mock.report_usage(Some(ReportedUsage {
        input: 40_000,
        output: 300,
    }));
    mock.push_all([Turn::text("one"), Turn::text("two")]);
    for _ in 0..2 {
        let chunks = openai_chunks(post_openai(&mock, &openai_body(hello())).await).await;
        let u = &chunks.last().unwrap()["usage"];
        assert_eq!(u["prompt_tokens"], 40_000);
        assert_eq!(u["completion_tokens"], 300);
        assert_eq!(u["total_tokens"], 40_300);
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], 0);
    }
}

#[tokio::test]
async fn no_usage_chunk_without_include_usage() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("hi"));
    let mut body = openai_body(hello());
    body.as_object_mut().unwrap().remove("stream_options");
    let chunks = openai_chunks(post_openai(&mock, &body).await).await;
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
}

#[tokio::test]
async fn tool_call_fragments_reassemble_by_index() {
    let mock = MockLlm::start().await;
    let read = json!({"path": "a.txt"});
    let grep = json!({"pattern": "fn main", "path": "src"});
    mock.push(Turn::ToolCalls(vec![
        ("read".into(), read.clone()),
        ("grep".into(), grep.clone()),
    ]));
    let chunks = openai_chunks(post_openai(&mock, &openai_body(hello())).await).await;

    let first = &chunks[0]["choices"][0]["delta"];
    assert_eq!(first["role"], "assistant");
    assert!(first["content"].is_null());

    // Reassemble like a client: id and name from the first fragment of each
    // index, arguments concatenated.
    let mut calls: Vec<(String, String, String)> = Vec::new();
    for c in &chunks {
        let Some(fragments) = c["choices"][0]["delta"]["tool_calls"].as_array() else {
            continue;
        };
        for f in fragments {
            let i = f["index"].as_u64().unwrap() as usize;
            if i == calls.len() {
                assert_eq!(f["type"], "function");
                let id = f["id"].as_str().unwrap();
                assert!(id.starts_with("call_"));
                let name = f["function"]["name"].as_str().unwrap();
                calls.push((id.into(), name.into(), String::new()));
            } else {
                assert!(f.get("id").is_none() && f["function"].get("name").is_none());
            }
            calls[i].2 += f["function"]["arguments"].as_str().unwrap();
        }
    }
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].0, calls[1].0);
    assert_eq!(calls[0].1, "read");
    assert_eq!(serde_json::from_str::<Value>(&calls[0].2).unwrap(), read);
    assert_eq!(calls[1].1, "grep");
    assert_eq!(serde_json::from_str::<Value>(&calls[1].2).unwrap(), grep);
    let arg_fragments = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["tool_calls"][0]["index"] == 0)
        .count();
    assert!(arg_fragments >= 3, "arguments come in several fragments");

    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
}

#[tokio::test]
async fn echo_returns_the_last_tool_message() {
    let mock = MockLlm::start().await;
    mock.push(Turn::EchoToolResult {
        prefix: "got ".into(),
    });
    let messages = json!([
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}},
        ]},
        {"role": "tool", "tool_call_id": "call_1", "content": "three lines"},
    ]);
    let chunks = openai_chunks(post_openai(&mock, &openai_body(messages)).await).await;
    assert_eq!(openai_text(&chunks), "got three lines");
}

#[tokio::test]
async fn cached_tokens_start_with_the_second_request() {
    let mock = MockLlm::start().await;
    let cached = |chunks: &[Value]| {
        let usage = &chunks.last().unwrap()["usage"];
        usage["prompt_tokens_details"]["cached_tokens"]
            .as_u64()
            .unwrap()
    };
    let first = openai_chunks(post_openai(&mock, &openai_body(hello())).await).await;
    assert_eq!(cached(&first), 0);
    let second = openai_chunks(post_openai(&mock, &openai_body(hello())).await).await;
    assert!(cached(&second) > 0);
}

#[tokio::test]
async fn non_streaming_request_is_rejected() {
    let mock = MockLlm::start().await;
    let mut body = openai_body(hello());
    body.as_object_mut().unwrap().remove("stream");
    let resp = post_openai(&mock, &body).await;
    assert_eq!(resp.status(), 400);
    let body: Value = within(resp.json()).await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("stream"));
}
