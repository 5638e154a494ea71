//! What `corral attach` does differently per dialect: which stdin lines it
//! answers itself, what it sends when stdin closes, and what it reads of
//! the gateway's frames. Pure logic, no I/O.
//!
//! - zut: a `hello` from the tool is answered with the gateway's hello data
//!   (the session is already authenticated); a line that is not a JSON
//!   object gets an error response, as the agent would send. Requests and
//!   runs are tracked so that end of input waits for them.
//! - letscode: a line that is not a JSON object gets a recoverable
//!   `error{id:null}`; everything else (`hello` included: the gateway
//!   answers it) is forwarded. End of input sends a `bye`.
//! - Zi: every UTF-8 line is forwarded, even one that is not JSON: the
//!   gateway answers it with a `protocol_error` in the connection's
//!   `sequence`. Invalid UTF-8 or an over-long line is fatal, as for the
//!   agent: one `protocol_error` with code `invalid_framing` (the next
//!   `sequence`), then exit. End of input closes at once.
//! - ACP: `corral attach` authenticates with its own `initialize` (token in
//!   `_meta.corral`) and consumes the answer; the editor's `initialize`
//!   then goes to the gateway like any request. A line that is not a JSON
//!   object gets a JSON-RPC parse error. End of input closes at once (the
//!   editor is gone).

use corral_protocol::ndjson::{encode_line, parse_object, FrameError};
use serde_json::{json, Map, Value};

use super::{acp, zut, Dialect};

pub use super::zut_inflight::InFlight;

/// The `id` of the letscode `bye` sent when stdin closes; its `ack` and
/// `done` are not the tool's business.
const BYE_ID: &str = "corral-attach-bye";
/// The `id` of the zut hello `corral attach` sends; its response is
/// consumed there, never forwarded.
const HELLO_ID: &str = "corral-attach-hello";

/// One stdin line, sorted.
#[derive(Debug, PartialEq)]
pub enum StdinFrame {
    /// Send `text` (the line as the tool wrote it) as one text frame;
    /// `frame` is its parsed form, for in-flight tracking.
    Forward {
        text: String,
        frame: Map<String, Value>,
    },
    /// Write this line to stdout; nothing goes to the gateway.
    Answer(Vec<u8>),
    /// Write this line to stdout, then end the session (Zi framing).
    Fatal(Vec<u8>),
}

/// What the bridge does when stdin closes.
#[derive(Debug, PartialEq)]
pub enum EndOfInput {
    /// Wait (bounded) for the requests and runs in flight, then close.
    DrainInFlight,
    /// Send this frame, then wait (bounded) for the gateway to close.
    Send(String),
    /// Close at once.
    Leave,
}

/// What a frame from the gateway means to the bridge.
#[derive(Debug, PartialEq)]
pub enum Seen {
    /// Write it; it may answer or end work in flight.
    Track,
    /// Not for the tool (the answers to the bridge's own `bye`).
    Hide,
    /// Write it; it carries the connection's `sequence` (if any).
    Sequence(Option<u64>),
}

impl Dialect {
    /// Sorts one stdin line of `corral attach`. `hello` is the zut
    /// gateway's hello data; `sequence` the last Zi `sequence` written to
    /// stdout.
    pub fn attach_stdin(
        self,
        line: Result<Vec<u8>, FrameError>,
        hello: &Value,
        sequence: u64,
    ) -> StdinFrame {
        match self {
            Dialect::Zut => classify(line, hello),
            Dialect::Letscode => match line.and_then(|line| {
                let frame = parse_object(&line)?;
                Ok((line, frame))
            }) {
                Ok((line, frame)) => forward(line, frame),
                Err(error) => StdinFrame::Answer(line_of(&json!({"type": "error", "id": null,
                    "error": error.to_string(), "recoverable": true}))),
            },
            Dialect::Zi => {
                let framing = |message: String| {
                    StdinFrame::Fatal(line_of(&json!({"version": 1, "sequence": sequence + 1,
                        "type": "protocol_error", "code": "invalid_framing", "message": message})))
                };
                match line.map(String::from_utf8) {
                    Ok(Ok(text)) => StdinFrame::Forward {
                        text,
                        frame: Map::new(),
                    },
                    Ok(Err(_)) | Err(FrameError::InvalidUtf8) => {
                        framing("record is not valid UTF-8".into())
                    }
                    Err(error) => framing(error.to_string()),
                }
            }
            Dialect::Acp => match line.and_then(|line| {
                let frame = parse_object(&line)?;
                Ok((line, frame))
            }) {
                Ok((line, frame)) => forward(line, frame),
                Err(error) => {
                    let mut answer =
                        acp::error(None, acp::error_code::PARSE_ERROR, &error.to_string()).to_vec();
                    answer.push(b'\n');
                    StdinFrame::Answer(answer)
                }
            },
        }
    }

    /// The hello `corral attach` sends after the upgrade (zut); `None`
    /// when the gateway greets first (letscode and Zi send `ready`).
    pub fn attach_hello(self, token: &str) -> Option<String> {
        if self == Dialect::Acp {
            let hello = json!({"jsonrpc": "2.0", "id": HELLO_ID, "method": "initialize",
                "params": {"protocolVersion": corral_protocol::acp::PROTOCOL_VERSION,
                    "clientCapabilities": {}, "_meta": {"corral": {"token": token}}}});
            return Some(hello.to_string());
        }
        (!self.greets_first())
            .then(|| json!({"id": HELLO_ID, "type": "hello", "token": token}).to_string())
    }

    /// Whether `frame` answers the hello of [`Dialect::attach_hello`]:
    /// `Some(Ok(data))` when it succeeded, `Some(Err(reason))` when it was
    /// refused, `None` for any other frame.
    pub fn attach_hello_answer(self, frame: &Value) -> Option<Result<Value, String>> {
        if self == Dialect::Acp {
            if frame["id"] != HELLO_ID {
                return None;
            }
            return Some(match frame.get("result") {
                Some(result) => Ok(result.clone()),
                None => Err(frame["error"]["message"]
                    .as_str()
                    .unwrap_or("no reason given")
                    .to_string()),
            });
        }
        let is_answer =
            frame["type"] == "response" && (frame["id"] == HELLO_ID || frame["command"] == "hello");
        if !is_answer {
            return None;
        }
        if frame["success"] == true {
            return Some(Ok(frame.get("data").cloned().unwrap_or_else(|| json!({}))));
        }
        let error = frame["error"].as_str().unwrap_or("no reason given");
        Some(Err(error.to_string()))
    }

    /// Why a gateway that greets first sent `frame` instead of `ready`:
    /// letscode `error{error}`, Zi `protocol_error{code,message}` or a
    /// failed response `{error:{message}}`.
    pub fn attach_refusal(self, frame: &Value) -> String {
        frame["error"]["message"]
            .as_str()
            .or_else(|| frame["error"].as_str())
            .or_else(|| frame["message"].as_str())
            .unwrap_or("the gateway did not send ready")
            .to_string()
    }

    /// Whether `corral attach` tracks requests and runs in flight, so that
    /// end of input waits for them (zut).
    pub fn attach_tracks_work(self) -> bool {
        self == Dialect::Zut
    }

    /// What `corral attach` does when stdin closes.
    pub fn attach_end_of_input(self) -> EndOfInput {
        match self {
            Dialect::Zut => EndOfInput::DrainInFlight,
            Dialect::Letscode => EndOfInput::Send(json!({"cmd": "bye", "id": BYE_ID}).to_string()),
            Dialect::Zi | Dialect::Acp => EndOfInput::Leave,
        }
    }

    /// What a frame from the gateway means to `corral attach`.
    pub fn attach_seen(self, frame: &Value) -> Seen {
        match self {
            Dialect::Zut => Seen::Track,
            Dialect::Letscode if frame["id"] == BYE_ID => Seen::Hide,
            Dialect::Letscode => Seen::Sequence(None),
            Dialect::Zi => Seen::Sequence(frame["sequence"].as_u64()),
            Dialect::Acp => Seen::Sequence(None),
        }
    }
}

fn forward(line: Vec<u8>, frame: Map<String, Value>) -> StdinFrame {
    // `parse_object` accepted the line, so it is UTF-8; re-encoding is only
    // a fallback that keeps this free of panics.
    let text = String::from_utf8(line).unwrap_or_else(|_| Value::Object(frame.clone()).to_string());
    StdinFrame::Forward { text, frame }
}

fn line_of(value: &Value) -> Vec<u8> {
    encode_line(value).unwrap_or_else(|_| b"{}\n".to_vec())
}

/// Sorts one zut line read from stdin (or the framing error it produced).
/// `hello` is the `data` of the gateway's hello response.
fn classify(line: Result<Vec<u8>, FrameError>, hello: &Value) -> StdinFrame {
    let parsed = line.and_then(|line| {
        let frame = parse_object(&line)?;
        Ok((line, frame))
    });
    let (line, frame) = match parsed {
        Ok(parsed) => parsed,
        Err(error) => return StdinFrame::Answer(response(None, None, Err(error.to_string()))),
    };
    if frame.get("type").and_then(Value::as_str) == Some("hello") {
        let answer = response(frame.get("id"), Some("hello"), Ok(hello));
        return StdinFrame::Answer(answer);
    }
    forward(line, frame)
}

/// A zut `response` line made up locally, with the tool's `id` echoed as
/// given.
fn response(id: Option<&Value>, command: Option<&str>, result: Result<&Value, String>) -> Vec<u8> {
    let id = id.filter(|id| !id.is_null());
    let mut line = zut::response(id, command, result.map(|data| Some(data.clone()))).to_vec();
    line.push(b'\n');
    line
}

#[cfg(test)]
#[path = "attach_tests.rs"]
mod tests;
