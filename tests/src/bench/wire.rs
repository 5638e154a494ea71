//! The three dialects as the benchmark client speaks them: the hello, a
//! prompt, and what a frame means for a run being counted (a text delta,
//! the run's end, a failure).

use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Value};

use super::procs::TOKEN;

/// A dialect `corral serve --dialect` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    Zut,
    Letscode,
    Zi,
}

/// What a frame is to a client counting a run.
#[derive(Debug, PartialEq, Eq)]
pub enum Seen {
    Delta,
    End,
    Failed,
    Other,
}

impl Wire {
    pub const ALL: [Wire; 3] = [Wire::Zut, Wire::Letscode, Wire::Zi];

    pub fn name(self) -> &'static str {
        match self {
            Wire::Zut => "zut",
            Wire::Letscode => "letscode",
            Wire::Zi => "zi",
        }
    }

    pub fn parse(name: &str) -> Option<Wire> {
        Wire::ALL.into_iter().find(|w| w.name() == name)
    }

    /// The in-band hello with the benchmark token (id `h`).
    pub fn hello(self) -> Value {
        match self {
            Wire::Zut => json!({"id": "h", "type": "hello", "token": TOKEN}),
            Wire::Letscode => json!({"cmd": "hello", "id": "h", "token": TOKEN}),
            Wire::Zi => json!({"version": 1, "id": "h", "method": "connection.hello",
                "params": {"token": TOKEN}}),
        }
    }

    /// Whether `frame` is the hello's last answer; `Err` when it refused.
    pub fn hello_answered(self, frame: &Value) -> Result<bool, String> {
        let refused = || Err(format!("hello refused: {frame}"));
        match self {
            Wire::Zut if frame["type"] == "response" => match frame["success"] == true {
                true => Ok(true),
                false => refused(),
            },
            Wire::Letscode if frame["type"] == "error" => refused(),
            Wire::Letscode => Ok(frame["type"] == "done" && frame["id"] == "h"),
            Wire::Zi if frame["type"] == "protocol_error" => refused(),
            Wire::Zi if frame["type"] == "response" && frame["id"] == "h" => {
                match frame["ok"] == true {
                    true => Ok(true),
                    false => refused(),
                }
            }
            _ => Ok(false),
        }
    }

    /// A prompt request with id `id`.
    pub fn prompt(self, id: &str, text: &str) -> Value {
        match self {
            Wire::Zut => json!({"id": id, "type": "prompt", "message": text}),
            Wire::Letscode => json!({"cmd": "prompt", "id": id, "text": text}),
            Wire::Zi => json!({"version": 1, "id": id, "method": "session.prompt",
                "params": {"delivery": "direct", "text": text}}),
        }
    }

    /// What a frame means for a run being counted. Only the envelope is
    /// read (large fields are skipped, not built), so that the client, not
    /// the gateway, is not what a fan-out measures; text that is not a JSON
    /// object is a failure.
    pub fn seen(self, text: &str) -> Seen {
        let Ok(frame) = serde_json::from_str::<Envelope>(text) else {
            return Seen::Failed;
        };
        let kind = frame.kind.as_deref().unwrap_or_default();
        let inner = |k: &Option<Kind>| k.as_ref().and_then(|k| k.kind.clone());
        match self {
            Wire::Zut => match kind {
                "text_delta" => Seen::Delta,
                "done" => Seen::End,
                "response" if frame.success != Some(true) => Seen::Failed,
                _ => Seen::Other,
            },
            Wire::Letscode => match kind {
                "message_update" if inner(&frame.stream_event).as_deref() == Some("text_delta") => {
                    Seen::Delta
                }
                "agent_end" => Seen::End,
                "error" if frame.id.is_some() => Seen::Failed,
                _ => Seen::Other,
            },
            Wire::Zi => {
                let event = frame.event.unwrap_or_default();
                let delta = inner(&event.assistant).as_deref() == Some("text_delta");
                match (kind, event.kind.as_deref()) {
                    ("session_event", Some("message_update")) if delta => Seen::Delta,
                    ("session_event", Some("agent_end")) => Seen::End,
                    ("protocol_error", _) => Seen::Failed,
                    ("response", _) if frame.ok != Some(true) => Seen::Failed,
                    _ => Seen::Other,
                }
            }
        }
    }
}

/// The fields [`Wire::seen`] reads.
#[derive(Deserialize)]
struct Envelope {
    #[serde(rename = "type")]
    kind: Option<String>,
    success: Option<bool>,
    ok: Option<bool>,
    id: Option<IgnoredAny>,
    stream_event: Option<Kind>,
    event: Option<ZiEvent>,
}

#[derive(Deserialize)]
struct Kind {
    #[serde(rename = "type")]
    kind: Option<String>,
}

#[derive(Deserialize, Default)]
struct ZiEvent {
    #[serde(rename = "type")]
    kind: Option<String>,
    #[serde(rename = "assistantMessageEvent")]
    assistant: Option<Kind>,
}
