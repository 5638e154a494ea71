use serde_json::json;

use super::*;

/// Feeds `text` in pieces of `size` bytes, then finishes.
fn read(api: Api, framing: Framing, text: &str, size: usize) -> Tap {
    let mut tap = Tap::new(api, framing);
    for piece in text.as_bytes().chunks(size) {
        tap.feed(piece);
    }
    tap.finish();
    tap
}

fn sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| {
            format!(
                "event: {}\ndata: {e}\n\n",
                e["type"].as_str().unwrap_or("x")
            )
        })
        .collect()
}

fn anthropic_stream() -> String {
    sse(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "model": "claude-sonnet-4-5-20250929",
            "usage": {"input_tokens": 1200, "cache_creation_input_tokens": 300,
                      "cache_read_input_tokens": 5000, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi \"usage\": {\"input_tokens\": 9}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 420}}),
        json!({"type": "message_stop"}),
    ])
}

#[test]
fn anthropic_counters_are_cumulative_whatever_the_chunking() {
    for size in [1, 7, 64, 100_000] {
        let tap = read(
            Api::Messages,
            Framing::EventStream,
            &anthropic_stream(),
            size,
        );
        let usage = tap.usage().unwrap();
        assert_eq!(
            (
                usage.input,
                usage.output,
                usage.cache_read,
                usage.cache_write
            ),
            (1200, 420, 5000, 300),
            "chunks of {size}"
        );
        assert_eq!(tap.model(), Some("claude-sonnet-4-5-20250929"));
    }
}

#[test]
fn a_change_is_reported_as_it_passes() {
    let mut tap = Tap::new(Api::Messages, Framing::EventStream);
    let text = anthropic_stream();
    let (start, rest) = text.split_at(text.find("event: content_block_start").unwrap());
    assert!(
        tap.feed(start.as_bytes()),
        "the input tokens are known at once"
    );
    assert_eq!(tap.usage().unwrap().output, 1);
    assert!(tap.feed(rest.as_bytes()));
    assert!(!tap.finish());
    assert_eq!(tap.usage().unwrap().output, 420);
}

#[test]
fn a_stream_cut_short_keeps_what_was_read() {
    let text = anthropic_stream();
    let cut = &text[..text.find("event: message_delta").unwrap()];
    let tap = read(Api::Messages, Framing::EventStream, cut, 10);
    assert_eq!(tap.usage().unwrap().input, 1200);
    assert_eq!(tap.usage().unwrap().output, 1);
}

#[test]
fn chat_completions_report_usage_in_the_last_chunk() {
    let chunk = |usage: Value| {
        json!({"id": "c1", "object": "chat.completion.chunk", "model": "gpt-4.1-2025-04-14",
               "choices": [], "usage": usage})
    };
    let text = format!(
        "data: {}\r\n\r\ndata: {}\r\n\r\ndata: [DONE]\r\n\r\n",
        chunk(Value::Null),
        chunk(json!({"prompt_tokens": 1000, "completion_tokens": 50,
                     "prompt_tokens_details": {"cached_tokens": 400},
                     "completion_tokens_details": {"reasoning_tokens": 20}})),
    );
    let tap = read(Api::ChatCompletions, Framing::EventStream, &text, 13);
    let usage = tap.usage().unwrap();
    assert_eq!(
        (usage.input, usage.cache_read, usage.output),
        (600, 400, 50)
    );
    assert_eq!(usage.reasoning, Some(20));
    assert_eq!(tap.model(), Some("gpt-4.1-2025-04-14"));
}

#[test]
fn responses_report_usage_when_completed() {
    let text = sse(&[
        json!({"type": "response.created", "response": {"model": "o4-mini", "usage": null}}),
        json!({"type": "response.output_text.delta", "delta": "hello"}),
        json!({"type": "response.completed", "response": {"model": "o4-mini", "output": [],
            "usage": {"input_tokens": 300, "input_tokens_details": {"cached_tokens": 100},
                      "output_tokens": 80, "output_tokens_details": {"reasoning_tokens": 64}}}}),
    ]);
    let tap = read(Api::Responses, Framing::EventStream, &text, 50);
    let usage = tap.usage().unwrap();
    assert_eq!(
        (usage.input, usage.cache_read, usage.output),
        (200, 100, 80)
    );
    assert_eq!(tap.model(), Some("o4-mini"));
}

#[test]
fn json_answers_are_read_at_their_end() {
    let answer = json!({"id": "msg_1", "type": "message", "model": "claude-haiku-4-5",
        "content": [{"type": "tool_use", "input": {"usage": {"input_tokens": 1}}}],
        "usage": {"input_tokens": 10, "output_tokens": 20}});
    let pretty = serde_json::to_string_pretty(&answer).unwrap();
    let mut tap = Tap::new(Api::Messages, Framing::Json);
    assert!(!tap.feed(pretty.as_bytes()));
    assert!(tap.usage().is_none());
    assert!(tap.finish());
    assert_eq!(tap.usage().unwrap().output, 20);
    assert_eq!(tap.model(), Some("claude-haiku-4-5"));

    let chat = json!({"model": "gpt-5", "choices": [],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3}});
    let tap = read(Api::ChatCompletions, Framing::Json, &chat.to_string(), 4);
    assert_eq!(tap.usage().unwrap().input, 7);
}

#[test]
fn overlong_answers_are_read_from_their_head_and_tail() {
    let long_text = "x\\\"usage\\\": {}".repeat(MAX_LINE_BYTES / 4);
    let answer = json!({"model": "gpt-5-mini", "choices": [{"message": {"content": long_text}}],
        "usage": {"prompt_tokens": 70000, "completion_tokens": 30000},
        "system_fingerprint": "fp"});
    let pretty = serde_json::to_string_pretty(&answer).unwrap();
    assert!(pretty.len() > 3 * MAX_LINE_BYTES);
    let tap = read(Api::ChatCompletions, Framing::Json, &pretty, 4096);
    assert_eq!(tap.usage().unwrap().output, 30000);
    assert_eq!(tap.model(), Some("gpt-5-mini"));

    // A `response.completed` event holding a long output, in one line.
    let event = json!({"type": "response.completed", "response": {"model": "gpt-5",
        "output": [{"content": [{"text": "y".repeat(3 * MAX_LINE_BYTES)}]}],
        "usage": {"input_tokens": 5, "output_tokens": 9}, "user": null}});
    let tap = read(
        Api::Responses,
        Framing::EventStream,
        &format!("data: {event}\n\n"),
        8192,
    );
    assert_eq!(tap.usage().unwrap().output, 9);
}

#[test]
fn anything_else_reads_as_nothing() {
    let tap = read(
        Api::Messages,
        Framing::EventStream,
        "event: error\ndata: {not json\n\n: comment\n",
        3,
    );
    assert!(tap.usage().is_none());
    let tap = read(Api::Messages, Framing::Json, "", 3);
    assert!(tap.usage().is_none());
    assert_eq!(Api::of_path("/v1/messages?beta=true"), Some(Api::Messages));
    assert_eq!(Api::of_path("/v1/messages/count_tokens"), None);
    assert_eq!(Api::of_path("/models"), None);
    assert_eq!(
        Framing::of_content_type("text/event-stream; charset=utf-8"),
        Some(Framing::EventStream)
    );
    assert_eq!(
        Framing::of_content_type("Application/JSON"),
        Some(Framing::Json)
    );
    assert_eq!(Framing::of_content_type("text/html"), None);
}
