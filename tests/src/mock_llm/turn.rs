//! Scripted turns: the [`Turn`] enum tests push, its JSON script form, and
//! the wire-neutral [`Reply`] a turn becomes once the request is known.
//! Pure logic, no I/O; the wire modules render a [`Reply`] as SSE.

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// The text served when the script has run out, so a test sees it instead of
/// hanging.
pub const NO_TURN_LEFT: &str = "mock: no scripted turn left";

/// One scripted model response; each model request consumes one.
///
/// JSON script form (see the `mock-llm` binary): `{"text":"hi"}`,
/// `{"slow":{"chunks":["a","b"],"delay_ms":200}}`,
/// `{"tool_call":{"name":"read","args":{"path":"a.txt"}}}`,
/// `{"tool_calls":[{"name":"read","args":{}}]}`,
/// `{"text_and_tool_calls":{"text":"Let me look.","calls":[{"name":"ls","args":{}}]}}`,
/// `{"echo_tool_result":{"prefix":"saw: "}}`,
/// `{"status":429,"retry_after":1,"body":"slow down"}` and `"hang"`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(try_from = "Value")]
pub enum Turn {
    /// A text answer streamed in a few chunks; stops with `end_turn`/`stop`.
    Text(String),
    /// A text answer sent one chunk per `delay` (for abort/reconnect tests).
    Slow {
        chunks: Vec<String>,
        delay: Duration,
    },
    /// One tool call; its id is generated (`toolu_…` / `call_…`).
    ToolCall { name: String, args: Value },
    /// Several tool calls in one turn, as `(name, args)`.
    ToolCalls(Vec<(String, Value)>),
    /// Some leading text, then tool calls.
    TextAndToolCalls {
        text: String,
        calls: Vec<(String, Value)>,
    },
    /// Replies `prefix` + the text of the last tool result in the request,
    /// so a test can prove a tool's output reached the model.
    EchoToolResult { prefix: String },
    /// An HTTP error in the provider's error JSON shape; `body` is the error
    /// message (a default one when empty). `retry_after` sets the
    /// `retry-after` header, in seconds.
    Status {
        code: u16,
        retry_after: Option<u64>,
        body: String,
    },
    /// Sends the streaming headers and then nothing, until the mock is dropped.
    Hang,
}

impl Turn {
    /// Shorthand for [`Turn::Text`].
    pub fn text(text: impl Into<String>) -> Turn {
        Turn::Text(text.into())
    }

    /// Shorthand for [`Turn::ToolCall`].
    pub fn tool_call(name: impl Into<String>, args: Value) -> Turn {
        Turn::ToolCall {
            name: name.into(),
            args,
        }
    }
}

/// A tool call in the JSON script form.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallSpec {
    name: String,
    #[serde(default = "empty_object")]
    args: Value,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// The externally tagged JSON forms; `status` is flat and handled apart.
#[derive(Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum TurnSpec {
    Text(String),
    Slow { chunks: Vec<String>, delay_ms: u64 },
    ToolCall(CallSpec),
    ToolCalls(Vec<CallSpec>),
    TextAndToolCalls { text: String, calls: Vec<CallSpec> },
    EchoToolResult { prefix: String },
    Hang,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct StatusSpec {
    status: u16,
    #[serde(default)]
    retry_after: Option<u64>,
    #[serde(default)]
    body: String,
}

fn calls(specs: Vec<CallSpec>) -> Vec<(String, Value)> {
    specs.into_iter().map(|c| (c.name, c.args)).collect()
}

impl TryFrom<Value> for Turn {
    type Error = serde_json::Error;

    fn try_from(value: Value) -> Result<Turn, serde_json::Error> {
        if value.get("status").is_some() {
            let s: StatusSpec = serde_json::from_value(value)?;
            if !(100..=599).contains(&s.status) {
                return Err(serde::de::Error::custom(format!(
                    "status {} is not an HTTP status code",
                    s.status
                )));
            }
            return Ok(Turn::Status {
                code: s.status,
                retry_after: s.retry_after,
                body: s.body,
            });
        }
        Ok(match serde_json::from_value(value)? {
            TurnSpec::Text(text) => Turn::Text(text),
            TurnSpec::Slow { chunks, delay_ms } => Turn::Slow {
                chunks,
                delay: Duration::from_millis(delay_ms),
            },
            TurnSpec::ToolCall(c) => Turn::ToolCall {
                name: c.name,
                args: c.args,
            },
            TurnSpec::ToolCalls(c) => Turn::ToolCalls(calls(c)),
            TurnSpec::TextAndToolCalls { text, calls: c } => Turn::TextAndToolCalls {
                text,
                calls: calls(c),
            },
            TurnSpec::EchoToolResult { prefix } => Turn::EchoToolResult { prefix },
            TurnSpec::Hang => Turn::Hang,
        })
    }
}

/// One content block of a reply, before wire-specific ids and framing.
#[derive(Clone, Debug, PartialEq)]
pub enum Block {
    /// Text, already split into the chunks to stream.
    Text(Vec<String>),
    ToolUse {
        name: String,
        args: Value,
    },
}

/// A successful streamed answer, independent of the wire format.
#[derive(Clone, Debug, PartialEq)]
pub struct Reply {
    pub blocks: Vec<Block>,
    /// Pause before each text chunk (zero except for [`Turn::Slow`]).
    pub delay: Duration,
}

impl Reply {
    /// A plain text reply split into a few chunks.
    pub fn text(text: &str) -> Reply {
        Reply {
            blocks: vec![Block::Text(split_even(text, 3))],
            delay: Duration::ZERO,
        }
    }

    /// Whether the model stops to wait for tool results.
    pub fn wants_tools(&self) -> bool {
        self.blocks
            .iter()
            .any(|b| matches!(b, Block::ToolUse { .. }))
    }

    /// A plausible output token count: a quarter of the characters sent.
    pub fn output_tokens(&self) -> u64 {
        let chars: usize = self
            .blocks
            .iter()
            .map(|b| match b {
                Block::Text(chunks) => chunks.iter().map(|c| c.chars().count()).sum(),
                Block::ToolUse { args, .. } => args.to_string().len(),
            })
            .sum();
        (chars as u64 / 4).max(1)
    }
}

/// What a streamed turn becomes; `Status` and `Hang` are not replies.
pub enum Plan {
    Reply(Reply),
    Status {
        code: u16,
        retry_after: Option<u64>,
        body: String,
    },
    Hang,
}

/// Turns a scripted turn into a plan; `last_tool_result` is only called for
/// [`Turn::EchoToolResult`].
pub fn plan(turn: Turn, last_tool_result: impl FnOnce() -> Option<String>) -> Plan {
    let tool_blocks = |calls: Vec<(String, Value)>| {
        calls
            .into_iter()
            .map(|(name, args)| Block::ToolUse { name, args })
            .collect::<Vec<_>>()
    };
    let reply = match turn {
        Turn::Text(text) => Reply::text(&text),
        Turn::Slow { chunks, delay } => Reply {
            blocks: vec![Block::Text(chunks)],
            delay,
        },
        Turn::ToolCall { name, args } => Reply {
            blocks: tool_blocks(vec![(name, args)]),
            delay: Duration::ZERO,
        },
        Turn::ToolCalls(calls) => Reply {
            blocks: tool_blocks(calls),
            delay: Duration::ZERO,
        },
        Turn::TextAndToolCalls { text, calls } => {
            let mut blocks = vec![Block::Text(split_even(&text, 3))];
            blocks.extend(tool_blocks(calls));
            Reply {
                blocks,
                delay: Duration::ZERO,
            }
        }
        Turn::EchoToolResult { prefix } => {
            let seen = last_tool_result().unwrap_or_else(|| "(no tool result in request)".into());
            Reply::text(&format!("{prefix}{seen}"))
        }
        Turn::Status {
            code,
            retry_after,
            body,
        } => {
            return Plan::Status {
                code,
                retry_after,
                body,
            }
        }
        Turn::Hang => return Plan::Hang,
    };
    Plan::Reply(reply)
}

/// Splits `s` into at most `parts` non-empty pieces of similar length, on
/// char boundaries. An empty string gives no pieces.
pub fn split_even(s: &str, parts: usize) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let size = chars.len().div_ceil(parts.max(1)).max(1);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// The text of a tool result's `content`: a string, or the `text` of an
/// array of content parts (both APIs accept either form).
pub fn content_text(content: &Value) -> Option<String> {
    match content {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn split_even_keeps_all_chars_on_boundaries() {
        assert_eq!(split_even("abcdefg", 3), vec!["abc", "def", "g"]);
        assert_eq!(split_even("ab", 3), vec!["a", "b"]);
        assert!(split_even("", 3).is_empty());
        assert_eq!(split_even("héllo", 2).concat(), "héllo");
    }

    #[test]
    fn script_json_forms_parse() {
        let turns: Vec<Turn> = serde_json::from_value(json!([
            {"text": "hi"},
            {"tool_call": {"name": "read", "args": {"path": "a.txt"}}},
            {"tool_calls": [{"name": "ls"}]},
            {"status": 429, "retry_after": 1},
            {"slow": {"chunks": ["a"], "delay_ms": 5}},
            "hang",
        ]))
        .unwrap();
        assert_eq!(turns[0], Turn::text("hi"));
        assert_eq!(turns[1], Turn::tool_call("read", json!({"path": "a.txt"})));
        assert_eq!(turns[2], Turn::ToolCalls(vec![("ls".into(), json!({}))]));
        assert_eq!(
            turns[3],
            Turn::Status {
                code: 429,
                retry_after: Some(1),
                body: String::new()
            }
        );
        assert_eq!(
            turns[4],
            Turn::Slow {
                chunks: vec!["a".into()],
                delay: Duration::from_millis(5)
            }
        );
        assert_eq!(turns[5], Turn::Hang);
    }

    #[test]
    fn script_json_rejects_typos_and_bad_status() {
        assert!(serde_json::from_value::<Turn>(json!({"txt": "hi"})).is_err());
        assert!(serde_json::from_value::<Turn>(json!({"status": 42})).is_err());
        assert!(serde_json::from_value::<Turn>(json!({"status": 500, "x": 1})).is_err());
    }

    #[test]
    fn echo_uses_the_last_tool_result() {
        let Plan::Reply(reply) = plan(
            Turn::EchoToolResult {
                prefix: "saw: ".into(),
            },
            || Some("42".into()),
        ) else {
            panic!("expected a reply")
        };
        assert_eq!(reply.blocks, vec![Block::Text(split_even("saw: 42", 3))]);
        assert!(!reply.wants_tools());
    }

    #[test]
    fn content_text_reads_strings_and_parts() {
        assert_eq!(content_text(&json!("x")).as_deref(), Some("x"));
        let parts = json!([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]);
        assert_eq!(content_text(&parts).as_deref(), Some("ab"));
        assert_eq!(content_text(&json!(null)), None);
    }
}
