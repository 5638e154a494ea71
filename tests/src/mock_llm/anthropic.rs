//! The Anthropic Messages wire format (`POST /v1/messages`): request checks,
//! the `{"type":"error",...}` error shape and the streaming SSE events
//! (`message_start`, `content_block_*`, `ping`, `message_delta`,
//! `message_stop`), each framed as `event: NAME\ndata: JSON\n\n`.

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::serve::header;
use super::turn::{content_text, split_even, Block, Reply};
use super::wire::{Ctx, Frame, Rejection, STREAM_ONLY};

/// The error response in Anthropic's shape; the error type follows the status.
pub fn error(status: StatusCode, message: &str) -> Response {
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    };
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, Json(body)).into_response()
}

/// Checks the key, the version header and the body as the real API would.
pub fn admit<'a>(
    headers: &HeaderMap,
    body: Option<&'a Value>,
    key: Option<&str>,
) -> Result<&'a Value, Rejection> {
    if let Some(expected) = key {
        match header(headers, "x-api-key") {
            None => return Err(Rejection::unauthorized("x-api-key header is required")),
            Some(got) if got != expected => {
                return Err(Rejection::unauthorized("invalid x-api-key"))
            }
            Some(_) => {}
        }
    }
    if header(headers, "anthropic-version").is_none() {
        return Err(Rejection::bad_request(
            "anthropic-version: header is required",
        ));
    }
    let Some(body) = body.filter(|b| b.is_object()) else {
        return Err(Rejection::bad_request(
            "mock-llm: the request body is not a JSON object",
        ));
    };
    for field in ["model", "max_tokens", "messages"] {
        if body.get(field).is_none() {
            return Err(Rejection::bad_request(format!("{field}: Field required")));
        }
    }
    if body.get("stream") != Some(&Value::Bool(true)) {
        return Err(Rejection::bad_request(STREAM_ONLY));
    }
    Ok(body)
}

/// The text of the last `tool_result` block in the request's messages.
pub fn last_tool_result(body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    messages
        .iter()
        .rev()
        .filter_map(|m| m.get("content")?.as_array())
        .flat_map(|blocks| blocks.iter().rev())
        .find(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
        .map(|b| b.get("content").and_then(content_text).unwrap_or_default())
}

/// Splits a prompt of `total` tokens into (uncached input, cache read,
/// cache creation): the first reply writes the cache, later ones read it.
pub fn cache_split(total: u64, nth: usize) -> (u64, u64, u64) {
    if nth == 0 {
        let created = total / 2;
        (total - created, 0, created)
    } else {
        let read = (total / 2).max(1);
        let created = total / 8;
        let input = total.saturating_sub(read + created).max(1);
        (input, read, created)
    }
}

fn event(name: &str, data: Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

/// The full event sequence of one streamed reply.
pub fn render(reply: &Reply, ctx: &Ctx) -> Vec<Frame> {
    let (input, read, created) = match ctx.usage {
        Some(usage) => (usage.input, 0, 0),
        None => cache_split(ctx.prompt_tokens(), ctx.nth),
    };
    let output = ctx
        .usage
        .map_or_else(|| reply.output_tokens(), |u| u.output);
    let start = json!({
        "type": "message_start",
        "message": {
            "id": format!("msg_mock{:06}", ctx.seq),
            "type": "message",
            "role": "assistant",
            "model": ctx.model(),
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {
                "input_tokens": input,
                "cache_creation_input_tokens": created,
                "cache_read_input_tokens": read,
                "output_tokens": 1,
            },
        },
    });
    let mut frames = vec![Frame::now(event("message_start", start))];
    for (index, block) in reply.blocks.iter().enumerate() {
        let (content_block, deltas, delay) = match block {
            Block::Text(chunks) => {
                let deltas: Vec<Value> = chunks
                    .iter()
                    .map(|c| json!({"type": "text_delta", "text": c}))
                    .collect();
                (json!({"type": "text", "text": ""}), deltas, reply.delay)
            }
            Block::ToolUse { name, args } => {
                let id = format!("toolu_mock{:06}_{index}", ctx.seq);
                let start = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
                (start, json_deltas(args), std::time::Duration::ZERO)
            }
        };
        let start = json!({
            "type": "content_block_start",
            "index": index,
            "content_block": content_block,
        });
        frames.push(Frame::now(event("content_block_start", start)));
        if index == 0 {
            // The real API sends a keep-alive ping early in every stream.
            frames.push(Frame::now(event("ping", json!({"type": "ping"}))));
        }
        for delta in deltas {
            let data = json!({"type": "content_block_delta", "index": index, "delta": delta});
            frames.push(Frame {
                delay,
                text: event("content_block_delta", data),
            });
        }
        let stop = json!({"type": "content_block_stop", "index": index});
        frames.push(Frame::now(event("content_block_stop", stop)));
    }
    let stop_reason = if reply.wants_tools() {
        "tool_use"
    } else {
        "end_turn"
    };
    let delta = json!({
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason, "stop_sequence": null},
        "usage": {"output_tokens": output},
    });
    frames.push(Frame::now(event("message_delta", delta)));
    let stop = json!({"type": "message_stop"});
    frames.push(Frame::now(event("message_stop", stop)));
    frames
}

/// `input_json_delta`s for tool arguments: an empty piece first, then the
/// JSON in a few pieces. Like the real API, an argument-less call (`{}`)
/// sends only the empty piece, so clients must read `""` as `{}`.
fn json_deltas(args: &Value) -> Vec<Value> {
    let json = match args {
        Value::Object(map) if map.is_empty() => String::new(),
        _ => args.to_string(),
    };
    std::iter::once(String::new())
        .chain(split_even(&json, 3))
        .map(|piece| json!({"type": "input_json_delta", "partial_json": piece}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_is_written_first_then_read() {
        assert_eq!(cache_split(100, 0), (50, 0, 50));
        let (input, read, created) = cache_split(100, 1);
        assert!(read > 0 && input > 0);
        assert_eq!(input + read + created, 100);
        assert_eq!(cache_split(1, 3).1, 1);
    }

    #[test]
    fn json_deltas_reassemble_to_the_args() {
        let args = json!({"path": "a.txt", "limit": 10});
        let pieces = json_deltas(&args);
        assert!(pieces.len() >= 3);
        let joined: String = pieces
            .iter()
            .map(|p| p["partial_json"].as_str().unwrap())
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&joined).unwrap(), args);
        assert_eq!(
            json_deltas(&json!({})),
            vec![json!({"type": "input_json_delta", "partial_json": ""})]
        );
    }

    #[test]
    fn last_tool_result_takes_the_last_block() {
        fn result(id: &str, content: Value) -> Value {
            json!({"type": "tool_result", "tool_use_id": id, "content": content})
        }
        let text = |t: &str| json!([{"type": "text", "text": t}]);
        let body = json!({"messages": [
            {"role": "user", "content": [result("a", json!("old"))]},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": [result("b", text("first")), result("c", text("new"))]},
        ]});
        assert_eq!(last_tool_result(&body).as_deref(), Some("new"));
        assert_eq!(last_tool_result(&json!({"messages": []})), None);
    }
}
