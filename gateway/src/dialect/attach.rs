//! What `corral attach` asks of a dialect ([`DialectRules`]'s `attach_*`
//! methods, each dialect deciding in its own module): which stdin lines it
//! answers itself, what it sends when stdin closes, and what it reads of
//! the gateway's frames; the answers' types and the helpers the dialects
//! share. Pure logic, no I/O.
//!
//! [`DialectRules`]: super::DialectRules
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
use serde_json::{Map, Value};

pub use super::zut_inflight::InFlight;

/// The `id` of the hello `corral attach` sends (zut, ACP); its answer is
/// consumed there, never forwarded.
pub(super) const HELLO_ID: &str = "corral-attach-hello";

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

/// A stdin line read as a JSON object, for the gateway.
pub(super) fn forward(line: Vec<u8>, frame: Map<String, Value>) -> StdinFrame {
    // `parse_object` accepted the line, so it is UTF-8; re-encoding is only
    // a fallback that keeps this free of panics.
    let text = String::from_utf8(line).unwrap_or_else(|_| Value::Object(frame.clone()).to_string());
    StdinFrame::Forward { text, frame }
}

/// A JSON value as an output line.
pub(super) fn line_of(value: &Value) -> Vec<u8> {
    encode_line(value).unwrap_or_else(|_| b"{}\n".to_vec())
}

/// A stdin line that must be a JSON object: the line and its parsed form.
pub(super) fn object(
    line: Result<Vec<u8>, FrameError>,
) -> Result<(Vec<u8>, Map<String, Value>), FrameError> {
    line.and_then(|line| {
        let frame = parse_object(&line)?;
        Ok((line, frame))
    })
}

/// Why a gateway that greets first sent `frame` instead of its greeting:
/// letscode `error{error}`, Zi `protocol_error{code,message}` or a failed
/// response `{error:{message}}`.
pub fn refusal_reason(frame: &Value) -> String {
    frame["error"]["message"]
        .as_str()
        .or_else(|| frame["error"].as_str())
        .or_else(|| frame["message"].as_str())
        .unwrap_or("the gateway did not send ready")
        .to_string()
}

#[cfg(test)]
#[path = "attach_tests.rs"]
mod tests;
