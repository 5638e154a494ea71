//! Reads the usage out of a provider's answer as it passes through the
//! broker, from a copy of each chunk (the chunk itself goes on untouched
//! and at once): Anthropic Messages (`message_start` → `message.usage`,
//! `message_delta` → `usage`, counters cumulative), OpenAI Chat
//! Completions (the chunk with `usage`, sent when the request set
//! `stream_options.include_usage`) and OpenAI Responses
//! (`response.completed`/`incomplete`/`failed` → `response.usage`), each
//! as an event stream or as one JSON answer. Pure: no I/O.
//!
//! Memory is bounded: a line (or a JSON answer) is held up to
//! [`MAX_LINE_BYTES`]; of a longer one only its first and last
//! [`MAX_LINE_BYTES`] are kept, and the usage is read from the last
//! `"usage"` key of its tail (where every provider puts it, after the
//! content), the model from the first `"model"` key of its head.

use corral_protocol::catalogue::TokenUsage;
use serde_json::Value;

/// Bytes of one line (or JSON answer) held whole; of a longer one, this
/// many of its start and of its end.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The key every usage object is found under.
const USAGE_KEY: &[u8] = b"\"usage\"";

/// The model APIs whose answers carry usage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// Anthropic `POST /v1/messages`.
    Messages,
    /// OpenAI `POST /chat/completions`.
    ChatCompletions,
    /// OpenAI `POST /responses`.
    Responses,
}

impl Api {
    /// The API of an upstream path (after the provider prefix, query
    /// included); `None` for paths that cost nothing (token counts, the
    /// model list).
    pub fn of_path(rest: &str) -> Option<Api> {
        match rest.split('?').next().unwrap_or_default() {
            "/v1/messages" => Some(Api::Messages),
            "/chat/completions" => Some(Api::ChatCompletions),
            "/responses" => Some(Api::Responses),
            _ => None,
        }
    }
}

/// How an answer is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `text/event-stream`: `data:` lines.
    EventStream,
    /// One JSON document.
    Json,
}

impl Framing {
    /// The framing of an answer with this `Content-Type`; `None` for
    /// anything else (nothing to read).
    pub fn of_content_type(content_type: &str) -> Option<Framing> {
        let essence = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match essence.as_str() {
            "text/event-stream" => Some(Framing::EventStream),
            "application/json" => Some(Framing::Json),
            _ => None,
        }
    }
}

/// One line (or JSON answer) being received, within bounds.
#[derive(Debug, Default)]
struct Held {
    /// The first [`MAX_LINE_BYTES`].
    head: Vec<u8>,
    /// Past the head: the last bytes, at most twice [`MAX_LINE_BYTES`]
    /// before it is trimmed to [`MAX_LINE_BYTES`].
    tail: Vec<u8>,
    overlong: bool,
}

impl Held {
    fn push(&mut self, mut bytes: &[u8]) {
        if !self.overlong {
            let room = MAX_LINE_BYTES - self.head.len();
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if bytes.is_empty() {
                return;
            }
            self.overlong = true;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * MAX_LINE_BYTES {
            let cut = self.tail.len() - MAX_LINE_BYTES;
            self.tail.drain(..cut);
        }
    }

    fn take(&mut self) -> Held {
        std::mem::take(self)
    }
}

/// The usage of one answer, read as it passes.
#[derive(Debug)]
pub struct Tap {
    api: Api,
    framing: Framing,
    held: Held,
    usage: TokenUsage,
    model: Option<String>,
    /// Some usage was read.
    seen: bool,
}

impl Tap {
    pub fn new(api: Api, framing: Framing) -> Tap {
        Tap {
            api,
            framing,
            held: Held::default(),
            usage: TokenUsage::default(),
            model: None,
            seen: false,
        }
    }

    /// Reads a copy of the next chunk; whether the usage changed.
    pub fn feed(&mut self, chunk: &[u8]) -> bool {
        match self.framing {
            Framing::Json => {
                self.held.push(chunk);
                false
            }
            Framing::EventStream => {
                let mut changed = false;
                let mut rest = chunk;
                while let Some(at) = rest.iter().position(|b| *b == b'\n') {
                    self.held.push(&rest[..at]);
                    let line = self.held.take();
                    changed |= self.line(&line);
                    rest = &rest[at + 1..];
                }
                self.held.push(rest);
                changed
            }
        }
    }

    /// The answer ended (or was dropped): reads what is held; whether the
    /// usage changed.
    pub fn finish(&mut self) -> bool {
        let held = self.held.take();
        match self.framing {
            Framing::Json => self.document(&held),
            Framing::EventStream => self.line(&held),
        }
    }

    /// The token counts read so far.
    pub fn usage(&self) -> Option<&TokenUsage> {
        self.seen.then_some(&self.usage)
    }

    /// The model the answer names, if it did.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn line(&mut self, held: &Held) -> bool {
        let Some(data) = held.head.strip_prefix(b"data:") else {
            return false;
        };
        let data = data.strip_prefix(b" ").unwrap_or(data);
        if held.overlong {
            return self.overlong(held);
        }
        // Only events with usage are parsed (they also name the model):
        // the many content deltas of a long answer cost a scan, no more.
        if !data.windows(USAGE_KEY.len()).any(|w| w == USAGE_KEY) {
            return false;
        }
        let Ok(event) = serde_json::from_slice::<Value>(trim(data)) else {
            return false;
        };
        self.remember_model(&event);
        match (self.api, kind(&event)) {
            (Api::Messages, Some("message_start")) => {
                let message = event.get("message");
                if let Some(model) = message.and_then(|m| m.get("model")) {
                    self.remember_model_value(model);
                }
                self.apply(message.and_then(|m| m.get("usage")))
            }
            (Api::Messages, Some("message_delta")) => self.apply(event.get("usage")),
            (Api::ChatCompletions, _) => self.apply(event.get("usage")),
            (
                Api::Responses,
                Some(
                    "response.created"
                    | "response.completed"
                    | "response.incomplete"
                    | "response.failed",
                ),
            ) => {
                let response = event.get("response");
                if let Some(model) = response.and_then(|r| r.get("model")) {
                    self.remember_model_value(model);
                }
                self.apply(response.and_then(|r| r.get("usage")))
            }
            _ => false,
        }
    }

    fn document(&mut self, held: &Held) -> bool {
        if held.overlong {
            return self.overlong(held);
        }
        let Ok(answer) = serde_json::from_slice::<Value>(&held.head) else {
            return false;
        };
        self.remember_model(&answer);
        self.apply(answer.get("usage"))
    }

    /// A line or answer too long to hold: the first `"model"` of its
    /// head, the last `"usage"` of its tail.
    fn overlong(&mut self, held: &Held) -> bool {
        if self.model.is_none() {
            if let Some(model) = value_after_key(&held.head, b"\"model\"", Find::First) {
                self.remember_model_value(&model);
            }
        }
        let usage = value_after_key(&held.tail, USAGE_KEY, Find::Last);
        self.apply(usage.as_ref())
    }

    fn remember_model(&mut self, object: &Value) {
        if let Some(model) = object.get("model") {
            self.remember_model_value(model);
        }
    }

    fn remember_model_value(&mut self, model: &Value) {
        if self.model.is_none() {
            if let Some(model) = model.as_str().filter(|m| !m.is_empty() && m.len() <= 256) {
                self.model = Some(model.to_string());
            }
        }
    }

    /// Applies a usage object in this API's shape; whether it changed.
    fn apply(&mut self, usage: Option<&Value>) -> bool {
        let Some(usage) = usage.filter(|u| u.is_object()) else {
            return false;
        };
        let before = self.usage.clone();
        let count = |key: &str| usage.get(key).and_then(Value::as_u64);
        let nested = |outer: &str, key: &str| {
            usage
                .get(outer)
                .and_then(|o| o.get(key))
                .and_then(Value::as_u64)
        };
        match self.api {
            // Cumulative counters: later reports replace earlier ones.
            Api::Messages => {
                let set = |field: &mut u64, value: Option<u64>| {
                    if let Some(value) = value {
                        *field = value;
                    }
                };
                set(&mut self.usage.input, count("input_tokens"));
                set(&mut self.usage.output, count("output_tokens"));
                set(&mut self.usage.cache_read, count("cache_read_input_tokens"));
                set(
                    &mut self.usage.cache_write,
                    count("cache_creation_input_tokens"),
                );
                self.usage.cache_reported = true;
            }
            Api::ChatCompletions => {
                let cached = nested("prompt_tokens_details", "cached_tokens");
                self.usage = TokenUsage {
                    input: count("prompt_tokens")
                        .unwrap_or(0)
                        .saturating_sub(cached.unwrap_or(0)),
                    output: count("completion_tokens").unwrap_or(0),
                    reasoning: nested("completion_tokens_details", "reasoning_tokens"),
                    cache_read: cached.unwrap_or(0),
                    cache_write: 0,
                    cache_reported: cached.is_some(),
                };
            }
            Api::Responses => {
                let cached = nested("input_tokens_details", "cached_tokens");
                self.usage = TokenUsage {
                    input: count("input_tokens")
                        .unwrap_or(0)
                        .saturating_sub(cached.unwrap_or(0)),
                    output: count("output_tokens").unwrap_or(0),
                    reasoning: nested("output_tokens_details", "reasoning_tokens"),
                    cache_read: cached.unwrap_or(0),
                    cache_write: 0,
                    cache_reported: cached.is_some(),
                };
            }
        }
        self.seen = true;
        self.usage != before
    }
}

fn kind(event: &Value) -> Option<&str> {
    event.get("type").and_then(Value::as_str)
}

fn trim(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .iter()
        .rposition(|b| !b.is_ascii_whitespace())
        .map_or(0, |at| at + 1);
    &bytes[..end]
}

#[derive(Clone, Copy)]
enum Find {
    First,
    Last,
}

/// The JSON value after the key `key` (quoted) in `bytes`: its first or
/// last occurrence that is a key (not escaped inside a string, and
/// followed by `:`), whose value parses.
fn value_after_key(bytes: &[u8], key: &[u8], which: Find) -> Option<Value> {
    let mut starts: Vec<usize> = bytes
        .windows(key.len())
        .enumerate()
        .filter(|(_, w)| *w == key)
        .map(|(at, _)| at)
        .collect();
    if let Find::Last = which {
        starts.reverse();
    }
    starts.into_iter().find_map(|at| {
        let backslashes = bytes[..at]
            .iter()
            .rev()
            .take_while(|b| **b == b'\\')
            .count();
        if backslashes % 2 == 1 {
            return None;
        }
        let rest = &bytes[at + key.len()..];
        let rest = &rest[rest.iter().position(|b| !b.is_ascii_whitespace())?..];
        let rest = rest.strip_prefix(b":")?;
        serde_json::Deserializer::from_slice(rest)
            .into_iter::<Value>()
            .next()?
            .ok()
    })
}

#[cfg(test)]
#[path = "tap_tests.rs"]
mod tests;
