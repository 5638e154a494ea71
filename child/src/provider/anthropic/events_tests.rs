//! Tests for the Anthropic stream decoder: canned SSE in awkward chunks.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::provider::stream::test_support::run;
use serde_json::json;

const TOOL_TURN: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-sonnet-4-5\",\"stop_reason\":null,\"usage\":{\"input_tokens\":12,\"cache_creation_input_tokens\":300,\"cache_read_input_tokens\":2000,\"output_tokens\":1}}}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"thinking_delta\",\"thinking\":\"Let me look.\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"signature_delta\",\"signature\":\"SIG\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
    "event: ping\n",
    "data: {\"type\": \"ping\"}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"Reading ✓ \"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"text_delta\",\"text\":\"the file.\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":1}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":2,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_1\",\"name\":\"read\",\"input\":{}}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"path\\\": \\\"src/\"}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":2,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"main.rs\\\"}\"}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":2}\n\n",
    "event: content_block_start\n",
    "data: {\"type\":\"content_block_start\",\"index\":3,\"content_block\":{\"type\":\"tool_use\",\"id\":\"toolu_2\",\"name\":\"ls\",\"input\":{}}}\n\n",
    "event: content_block_stop\n",
    "data: {\"type\":\"content_block_stop\",\"index\":3}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\",\"stop_sequence\":null},\"usage\":{\"output_tokens\":87}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

fn ok(events: Vec<Result<ProviderEvent, ProviderError>>) -> Vec<ProviderEvent> {
    events.into_iter().map(Result::unwrap).collect()
}

#[tokio::test]
async fn tool_turn_streams_deltas_and_assembles_the_message() {
    for chunk in [1, 7, 64, TOOL_TURN.len()] {
        let events = ok(run(TOOL_TURN, chunk, AnthropicDecoder::default()).await);
        let expected = vec![
            ProviderEvent::ThinkingDelta("Let me look.".into()),
            ProviderEvent::TextDelta("Reading ✓ ".into()),
            ProviderEvent::TextDelta("the file.".into()),
            ProviderEvent::ToolUseStart {
                id: "toolu_1".into(),
                name: "read".into(),
            },
            ProviderEvent::ToolUseArgs {
                id: "toolu_1".into(),
                delta: "{\"path\": \"src/".into(),
            },
            ProviderEvent::ToolUseArgs {
                id: "toolu_1".into(),
                delta: "main.rs\"}".into(),
            },
            ProviderEvent::ToolUseEnd {
                id: "toolu_1".into(),
            },
            ProviderEvent::ToolUseStart {
                id: "toolu_2".into(),
                name: "ls".into(),
            },
            ProviderEvent::ToolUseEnd {
                id: "toolu_2".into(),
            },
            ProviderEvent::Completed(ModelResponse {
                content: vec![
                    Block::Thinking {
                        text: "Let me look.".into(),
                        signature: Some("SIG".into()),
                    },
                    Block::text("Reading ✓ the file."),
                    Block::ToolCall {
                        id: "toolu_1".into(),
                        name: "read".into(),
                        args: json!({"path": "src/main.rs"}),
                    },
                    Block::ToolCall {
                        id: "toolu_2".into(),
                        name: "ls".into(),
                        args: json!({}),
                    },
                ],
                stop: ModelStop::ToolUse,
                usage: TokenUsage {
                    input: 12,
                    output: 87,
                    reasoning: None,
                    cache_read: 2000,
                    cache_write: 300,
                    cache_reported: true,
                },
            }),
        ];
        assert_eq!(events, expected, "chunk size {chunk}");
    }
}

#[tokio::test]
async fn truncated_stream_is_a_transport_error() {
    let cut = TOOL_TURN.find("event: message_delta").unwrap();
    let events = run(&TOOL_TURN[..cut], 50, AnthropicDecoder::default()).await;
    let err = events.last().unwrap().as_ref().unwrap_err();
    assert!(matches!(err, ProviderError::Transport(_)), "{err:?}");
    assert!(err.is_retryable());
    assert!(events
        .iter()
        .all(|e| !matches!(e, Ok(ProviderEvent::Completed(_)))));
}

#[tokio::test]
async fn error_events_are_classified() {
    let stream = |kind: &str| {
        format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"usage\":{{\"input_tokens\":1}}}}}}\n\n\
             event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"{kind}\",\"message\":\"nope\"}}}}\n\n"
        )
    };
    let last = |events: Vec<Result<ProviderEvent, ProviderError>>| {
        events.into_iter().last().unwrap().unwrap_err()
    };

    let err = last(run(&stream("overloaded_error"), 9, AnthropicDecoder::default()).await);
    assert!(matches!(&err, ProviderError::Overloaded { message, .. } if message == "nope"));
    assert!(err.is_retryable());

    let err = last(run(&stream("api_error"), 9, AnthropicDecoder::default()).await);
    assert!(matches!(err, ProviderError::Transport(_)));

    let err = last(
        run(
            &stream("invalid_request_error"),
            9,
            AnthropicDecoder::default(),
        )
        .await,
    );
    assert_eq!(
        err.to_string(),
        "invalid response from provider: invalid_request_error: nope"
    );
    assert!(!err.is_retryable());
}

#[tokio::test]
async fn garbage_data_is_a_protocol_error() {
    let events = run(
        "event: message_start\ndata: {not json\n\n",
        4,
        AnthropicDecoder::default(),
    )
    .await;
    assert!(matches!(
        events.as_slice(),
        [Err(ProviderError::Protocol(_))]
    ));
}
