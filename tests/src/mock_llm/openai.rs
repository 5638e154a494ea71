//! The OpenAI Chat Completions wire format (`POST /v1/chat/completions`):
//! request checks, the `{"error":{...}}` error shape and the streamed
//! `chat.completion.chunk`s, each framed as `data: JSON\n\n`, ending with
//! an optional usage chunk and `data: [DONE]`.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::serve::header;
use super::turn::{content_text, split_even, Block, Reply};
use super::wire::{Ctx, Frame, Rejection, STREAM_ONLY};

/// The error response in OpenAI's shape, with `type` and `code` as the real
/// API reports them for the common statuses.
pub fn error(status: StatusCode, message: &str) -> Response {
    let (kind, code) = match status.as_u16() {
        401 => ("invalid_request_error", Some("invalid_api_key")),
        429 => ("requests", Some("rate_limit_exceeded")),
        s if s >= 500 => ("server_error", None),
        _ => ("invalid_request_error", None),
    };
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    (status, Json(body)).into_response()
}

/// Checks the bearer key and the body as the real API would.
pub fn admit<'a>(
    headers: &HeaderMap,
    body: Option<&'a Value>,
    key: Option<&str>,
) -> Result<&'a Value, Rejection> {
    if let Some(expected) = key {
        let auth = header(headers, "authorization");
        match auth.as_deref().and_then(|a| a.strip_prefix("Bearer ")) {
            None => {
                return Err(Rejection::unauthorized(
                    "You didn't provide an API key. You need to provide your API key in an \
                     Authorization header using Bearer auth (i.e. Authorization: Bearer \
                     YOUR_KEY).",
                ))
            }
            Some(got) if got != expected => {
                return Err(Rejection::unauthorized(
                    "Incorrect API key provided. You can find your API key at \
                     https://platform.openai.com/account/api-keys.",
                ))
            }
            Some(_) => {}
        }
    }
    let Some(body) = body.filter(|b| b.is_object()) else {
        return Err(Rejection::bad_request(
            "mock-llm: the request body is not a JSON object",
        ));
    };
    if body.get("model").is_none() {
        return Err(Rejection::bad_request("you must provide a model parameter"));
    }
    if body.get("messages").is_none() {
        return Err(Rejection::bad_request(
            "Missing required parameter: 'messages'.",
        ));
    }
    if body.get("stream") != Some(&Value::Bool(true)) {
        return Err(Rejection::bad_request(STREAM_ONLY));
    }
    Ok(body)
}

/// The content of the last `role: "tool"` message in the request.
pub fn last_tool_result(body: &Value) -> Option<String> {
    let messages = body.get("messages")?.as_array()?;
    let tool = messages
        .iter()
        .rev()
        .find(|m| m.get("role").and_then(Value::as_str) == Some("tool"))?;
    Some(
        tool.get("content")
            .and_then(content_text)
            .unwrap_or_default(),
    )
}

/// The chunk sequence of one streamed reply, `[DONE]` included.
pub fn render(reply: &Reply, ctx: &Ctx) -> Vec<Frame> {
    let include_usage =
        ctx.body.pointer("/stream_options/include_usage") == Some(&Value::Bool(true));
    let chunk = |choices: Value, usage: Option<Value>| {
        let mut c = json!({
            "id": format!("chatcmpl-mock{:06}", ctx.seq),
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model(),
            "system_fingerprint": "fp_mock",
            "choices": choices,
        });
        if include_usage {
            c["usage"] = usage.unwrap_or(Value::Null);
        }
        format!("data: {c}\n\n")
    };
    let choice = |delta: Value, finish: Value| {
        let choice = json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish});
        json!([choice])
    };

    // The role comes first, as the real API sends it: in a chunk of its own
    // before text, or merged into the first tool call (with null content).
    let mut deltas = deltas(reply, ctx.seq);
    match deltas.first_mut() {
        Some((Value::Object(first), _)) if first.contains_key("tool_calls") => {
            first.insert("role".into(), json!("assistant"));
            first.insert("content".into(), Value::Null);
            first.insert("refusal".into(), Value::Null);
        }
        _ => {
            let role = json!({"role": "assistant", "content": "", "refusal": null});
            deltas.insert(0, (role, false));
        }
    }

    let mut frames: Vec<Frame> = deltas
        .into_iter()
        .map(|(delta, paced)| Frame {
            delay: if paced { reply.delay } else { Duration::ZERO },
            text: chunk(choice(delta, Value::Null), None),
        })
        .collect();
    let finish = if reply.wants_tools() {
        "tool_calls"
    } else {
        "stop"
    };
    frames.push(Frame::now(chunk(choice(json!({}), json!(finish)), None)));
    if include_usage {
        let (prompt, cached, completion) = match ctx.usage {
            Some(usage) => (usage.input, 0, usage.output),
            None => {
                let prompt = ctx.prompt_tokens();
                let cached = if ctx.nth == 0 { 0 } else { (prompt / 2).max(1) };
                (prompt, cached, reply.output_tokens())
            }
        };
        let usage = json!({
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
            "completion_tokens_details": {
                "reasoning_tokens": 0,
                "audio_tokens": 0,
                "accepted_prediction_tokens": 0,
                "rejected_prediction_tokens": 0,
            },
        });
        frames.push(Frame::now(chunk(json!([]), Some(usage))));
    }
    frames.push(Frame::now("data: [DONE]\n\n".to_string()));
    frames
}

/// The deltas of a reply, each with whether it is a paced text chunk. A
/// tool call's id and name come only in its first fragment; the arguments
/// follow in several fragments.
fn deltas(reply: &Reply, seq: usize) -> Vec<(Value, bool)> {
    let mut out = Vec::new();
    let mut tool_index = 0;
    for block in &reply.blocks {
        match block {
            Block::Text(chunks) => {
                out.extend(chunks.iter().map(|c| (json!({"content": c}), true)));
            }
            Block::ToolUse { name, args } => {
                let i = tool_index;
                tool_index += 1;
                let head = json!({
                    "index": i,
                    "id": format!("call_mock{seq:06}_{i}"),
                    "type": "function",
                    "function": {"name": name, "arguments": ""},
                });
                out.push((json!({"tool_calls": [head]}), false));
                for piece in split_even(&args.to_string(), 3) {
                    let frag = json!({"index": i, "function": {"arguments": piece}});
                    out.push((json!({"tool_calls": [frag]}), false));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_call_fragments_carry_id_once_and_reassemble() {
        let args = json!({"path": "src/main.rs"});
        let reply = Reply {
            blocks: vec![
                Block::ToolUse {
                    name: "read".into(),
                    args: args.clone(),
                },
                Block::ToolUse {
                    name: "ls".into(),
                    args: json!({}),
                },
            ],
            delay: Duration::ZERO,
        };
        let d = deltas(&reply, 7);
        let calls: Vec<&Value> = d.iter().map(|(v, _)| &v["tool_calls"][0]).collect();
        assert_eq!(calls[0]["id"], "call_mock000007_0");
        assert_eq!(calls[0]["function"]["name"], "read");
        let first: Vec<&Value> = calls.iter().copied().filter(|c| c["index"] == 0).collect();
        assert!(first.len() >= 3);
        assert!(first[1..].iter().all(|c| c.get("id").is_none()));
        let joined: String = first
            .iter()
            .map(|c| c["function"]["arguments"].as_str().unwrap())
            .collect();
        assert_eq!(serde_json::from_str::<Value>(&joined).unwrap(), args);
        assert!(calls
            .iter()
            .any(|c| c["index"] == 1 && c["id"] == "call_mock000007_1"));
    }

    #[test]
    fn last_tool_result_reads_the_last_tool_message() {
        let body = json!({"messages": [
            {"role": "tool", "tool_call_id": "a", "content": "old"},
            {"role": "assistant", "content": "x"},
            {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "new"}]},
            {"role": "user", "content": "go on"},
        ]});
        assert_eq!(last_tool_result(&body).as_deref(), Some("new"));
    }
}
