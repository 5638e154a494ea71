//! Tests for the Chat Completions stream decoder: canned SSE in awkward chunks.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::provider::stream::test_support::run;
use serde_json::json;

const TOOL_TURN: &str = concat!(
    "data: {\"id\":\"c1\",\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"finish_reason\":null}],\"usage\":null}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"reasoning_content\":\"think \"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Looking ✓\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"read\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"path\\\":\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":\"function\",\"function\":{\"name\":\"ls\",\"arguments\":\"\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"a.rs\\\"}\"}}]},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n",
    ": OPENROUTER PROCESSING\n\n",
    "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":1200,\"completion_tokens\":40,\"total_tokens\":1240,\"prompt_tokens_details\":{\"cached_tokens\":1024},\"completion_tokens_details\":{\"reasoning_tokens\":16}}}\n\n",
    "data: [DONE]\n\n",
);

fn ok(events: Vec<Result<ProviderEvent, ProviderError>>) -> Vec<ProviderEvent> {
    events.into_iter().map(Result::unwrap).collect()
}

fn completed(events: &[ProviderEvent]) -> &ModelResponse {
    match events.last() {
        Some(ProviderEvent::Completed(response)) => response,
        other => panic!("stream did not complete: {other:?}"),
    }
}

#[tokio::test]
async fn tool_turn_streams_deltas_and_assembles_the_message() {
    for chunk in [1, 5, 100, TOOL_TURN.len()] {
        let events = ok(run(TOOL_TURN, chunk, OpenAiDecoder::default()).await);
        let expected = vec![
            ProviderEvent::ThinkingDelta("think ".into()),
            ProviderEvent::TextDelta("Looking ✓".into()),
            ProviderEvent::ToolUseStart {
                id: "call_a".into(),
                name: "read".into(),
            },
            ProviderEvent::ToolUseArgs {
                id: "call_a".into(),
                delta: "{\"path\":".into(),
            },
            ProviderEvent::ToolUseStart {
                id: "call_b".into(),
                name: "ls".into(),
            },
            ProviderEvent::ToolUseArgs {
                id: "call_a".into(),
                delta: "\"a.rs\"}".into(),
            },
            ProviderEvent::ToolUseEnd {
                id: "call_a".into(),
            },
            ProviderEvent::ToolUseEnd {
                id: "call_b".into(),
            },
            ProviderEvent::Completed(ModelResponse {
                content: vec![
                    Block::Thinking {
                        text: "think ".into(),
                        signature: None,
                    },
                    Block::text("Looking ✓"),
                    Block::ToolCall {
                        id: "call_a".into(),
                        name: "read".into(),
                        args: json!({"path": "a.rs"}),
                    },
                    Block::ToolCall {
                        id: "call_b".into(),
                        name: "ls".into(),
                        args: json!({}),
                    },
                ],
                stop: ModelStop::ToolUse,
                usage: TokenUsage {
                    input: 176,
                    output: 40,
                    reasoning: Some(16),
                    cache_read: 1024,
                    cache_write: 0,
                    cache_reported: true,
                },
            }),
        ];
        assert_eq!(events, expected, "chunk size {chunk}");
    }
}

#[tokio::test]
async fn plain_answer_from_a_local_server() {
    // No usage details, `reasoning` instead of `reasoning_content`, no [DONE].
    let sse = "data: {\"choices\":[{\"delta\":{\"reasoning\":\"hm\"}}]}\n\n\
               data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\n\
               data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":2}}\n\n";
    let events = ok(run(sse, 3, OpenAiDecoder::default()).await);
    let response = completed(&events);
    assert_eq!(response.stop, ModelStop::MaxTokens);
    assert_eq!(
        response.content,
        vec![
            Block::Thinking {
                text: "hm".into(),
                signature: None
            },
            Block::text("Hi")
        ]
    );
    assert_eq!(
        response.usage,
        TokenUsage {
            input: 9,
            output: 2,
            ..TokenUsage::default()
        }
    );
}

#[tokio::test]
async fn fragments_without_index_are_matched_by_id() {
    // No `index`: a new id opens a call, a fragment without id continues the
    // latest. This server also reports `stop` although it made tool calls.
    let sse = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x1\",\"function\":{\"name\":\"ls\",\"arguments\":\"{}\"}}]}}]}\n\n\
               data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"id\":\"x2\",\"function\":{\"name\":\"read\",\"arguments\":\"{\\\"pa\"}}]}}]}\n\n\
               data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"function\":{\"arguments\":\"th\\\":1\"}}]}}]}\n\n\
               data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";
    let events = ok(run(sse, 16, OpenAiDecoder::default()).await);
    let response = completed(&events);
    assert_eq!(response.stop, ModelStop::ToolUse);
    assert_eq!(
        response.content,
        vec![
            Block::ToolCall {
                id: "x1".into(),
                name: "ls".into(),
                args: json!({})
            },
            // Invalid JSON is kept verbatim as a string.
            Block::ToolCall {
                id: "x2".into(),
                name: "read".into(),
                args: json!("{\"path\":1")
            },
        ]
    );
}

#[tokio::test]
async fn a_call_without_id_gets_one() {
    let sse = "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{}\"}}]}}]}\n\n\
               data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":\"ls\"}}]}}]}\n\n\
               data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n";
    let events = ok(run(sse, 10, OpenAiDecoder::default()).await);
    assert_eq!(
        events[..3],
        [
            ProviderEvent::ToolUseStart {
                id: "call_0".into(),
                name: "ls".into()
            },
            ProviderEvent::ToolUseArgs {
                id: "call_0".into(),
                delta: "{}".into()
            },
            ProviderEvent::ToolUseEnd {
                id: "call_0".into()
            },
        ]
    );
}

#[tokio::test]
async fn truncated_stream_is_a_transport_error() {
    let cut = TOOL_TURN
        .find("data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{},")
        .unwrap();
    let events = run(&TOOL_TURN[..cut], 64, OpenAiDecoder::default()).await;
    let err = events.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(err, ProviderError::Transport(_)), "{err:?}");

    // With finish_reason but without usage and [DONE]: still a complete answer.
    let cut = TOOL_TURN.find(": OPENROUTER").unwrap();
    let events = ok(run(&TOOL_TURN[..cut], 64, OpenAiDecoder::default()).await);
    assert_eq!(completed(&events).stop, ModelStop::ToolUse);
    assert!(!completed(&events).usage.cache_reported);
}

#[tokio::test]
async fn error_chunks_are_classified() {
    let first = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n";
    let last = |events: Vec<Result<ProviderEvent, ProviderError>>| {
        events.into_iter().last().unwrap().unwrap_err()
    };

    let sse = format!("{first}data: {{\"error\":{{\"message\":\"boom\",\"type\":\"server_error\",\"code\":null}}}}\n\n");
    assert!(matches!(
        last(run(&sse, 7, OpenAiDecoder::default()).await),
        ProviderError::Transport(_)
    ));

    let sse = format!("{first}data: {{\"error\":{{\"message\":\"slow\",\"type\":\"tokens\",\"code\":\"rate_limit_exceeded\"}}}}\n\n");
    let err = last(run(&sse, 7, OpenAiDecoder::default()).await);
    assert!(matches!(err, ProviderError::Overloaded { .. }), "{err:?}");
    assert!(err.is_retryable());

    let sse = format!("{first}data: {{\"error\":\"model crashed\"}}\n\n");
    let err = last(run(&sse, 7, OpenAiDecoder::default()).await);
    assert_eq!(
        err.to_string(),
        "invalid response from provider: model crashed"
    );
}
