//! What `corral attach` answers itself instead of forwarding, and how a
//! frame becomes a stdout line. Pure logic, no I/O.
//!
//! - zut: a `hello` from the tool is answered with the gateway's hello data
//!   (the session is already authenticated); a line that is not a JSON
//!   object gets an error response, as the agent would send.
//! - letscode: a line that is not a JSON object gets a recoverable
//!   `error{id:null}`; everything else (`hello` included: the gateway
//!   answers it) is forwarded.
//! - Zi: every UTF-8 line is forwarded, even one that is not JSON: the
//!   gateway answers it with a `protocol_error` in the connection's
//!   `sequence`. Invalid UTF-8 or an over-long line is fatal, as for the
//!   agent: one `protocol_error` with code `invalid_framing` (the next
//!   `sequence`), then exit.

use corral_protocol::ndjson::{encode_line, escape_line_separators, parse_object, FrameError};
use serde_json::{json, Map, Value};

use crate::dialect::{zut, Dialect};

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

/// Sorts one stdin line for `dialect`. `hello` is the zut gateway's hello
/// data; `sequence` the last Zi `sequence` written to stdout.
pub fn classify_in(
    dialect: Dialect,
    line: Result<Vec<u8>, FrameError>,
    hello: &Value,
    sequence: u64,
) -> StdinFrame {
    match dialect {
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

/// Sorts one line read from stdin (or the framing error it produced).
/// `hello` is the `data` of the gateway's hello response.
pub fn classify(line: Result<Vec<u8>, FrameError>, hello: &Value) -> StdinFrame {
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

/// A `response` line made up locally, with the tool's `id` echoed as given.
pub fn response(
    id: Option<&Value>,
    command: Option<&str>,
    result: Result<&Value, String>,
) -> Vec<u8> {
    let id = id.filter(|id| !id.is_null());
    let mut line = zut::response(id, command, result.map(|data| Some(data.clone()))).to_vec();
    line.push(b'\n');
    line
}

/// One frame from the gateway as one stdout line (with its LF), U+2028 and
/// U+2029 escaped. A frame spread over several lines (pretty-printed JSON)
/// is re-encoded from `parsed`; `None` when there is nothing to write.
pub fn frame_line(text: &str, parsed: Option<&Value>) -> Option<Vec<u8>> {
    let text = text.trim_end_matches(['\r', '\n']);
    if text.trim().is_empty() {
        return None;
    }
    let mut line = if text.contains('\n') {
        serde_json::to_vec(parsed?).ok()?
    } else {
        text.as_bytes().to_vec()
    };
    escape_line_separators(&mut line);
    line.push(b'\n');
    Some(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(frame: StdinFrame) -> Value {
        match frame {
            StdinFrame::Answer(line) => {
                assert_eq!(line.last(), Some(&b'\n'));
                serde_json::from_slice(&line).unwrap()
            }
            other => panic!("expected a local answer, got {other:?}"),
        }
    }

    #[test]
    fn requests_are_forwarded_byte_for_byte() {
        let line = br#"{"id":"1", "type":"prompt","message":"a\u2028b"}"#.to_vec();
        match classify(Ok(line.clone()), &json!({})) {
            StdinFrame::Forward { text, frame } => {
                assert_eq!(text.as_bytes(), line.as_slice());
                assert_eq!(frame["type"], "prompt");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn hello_is_answered_with_the_gateway_data() {
        let data = json!({"protocol_version": 1, "gateway": {"project": "p"}});
        let line = br#"{"id":7,"type":"hello","token":"local-secret"}"#.to_vec();
        let reply = answer(classify(Ok(line), &data));
        assert_eq!(
            reply,
            json!({"type":"response","id":7,"command":"hello","success":true,"data":data})
        );
    }

    #[test]
    fn bad_lines_get_an_error_without_id() {
        for line in [&b"{nope"[..], b"[1,2]", b"\"text\""] {
            let reply = answer(classify(Ok(line.to_vec()), &json!({})));
            assert_eq!(reply["success"], false, "{reply}");
            assert!(reply.get("id").is_none() && reply.get("command").is_none());
            assert!(reply["error"].as_str().unwrap().len() > 5);
        }
        let too_long = Err(FrameError::TooLong { limit: 10 });
        let reply = answer(classify(too_long, &json!({})));
        assert!(reply["error"].as_str().unwrap().contains("maximum length"));
    }

    #[test]
    fn letscode_and_zi_lines() {
        let hello = br#"{"cmd":"hello","id":"h"}"#.to_vec();
        assert!(matches!(
            classify_in(Dialect::Letscode, Ok(hello), &json!({}), 0),
            StdinFrame::Forward { .. }
        ));
        let bad = answer(classify_in(
            Dialect::Letscode,
            Ok(b"{no".to_vec()),
            &json!({}),
            0,
        ));
        assert_eq!(bad["type"], "error");
        assert_eq!(bad["id"], Value::Null);
        assert_eq!(bad["recoverable"], true);
        // Zi: not JSON, but UTF-8: the gateway answers it in sequence.
        assert!(matches!(
            classify_in(Dialect::Zi, Ok(b"{no".to_vec()), &json!({}), 4),
            StdinFrame::Forward { .. }
        ));
        for line in [Ok(vec![0xff, b'{']), Err(FrameError::TooLong { limit: 10 })] {
            let StdinFrame::Fatal(fatal) = classify_in(Dialect::Zi, line, &json!({}), 4) else {
                panic!("framing errors are fatal");
            };
            let frame: Value = serde_json::from_slice(&fatal).unwrap();
            assert_eq!(frame["sequence"], 5);
            assert_eq!(frame["type"], "protocol_error");
            assert_eq!(frame["code"], "invalid_framing");
        }
    }

    #[test]
    fn frames_become_single_escaped_lines() {
        let line = frame_line("{\"d\":\"a\u{2028}b\"}\n", None).unwrap();
        assert_eq!(line, b"{\"d\":\"a\\u2028b\"}\n");
        let pretty = "{\n  \"type\": \"done\"\n}";
        let parsed: Value = serde_json::from_str(pretty).unwrap();
        assert_eq!(
            frame_line(pretty, Some(&parsed)).unwrap(),
            b"{\"type\":\"done\"}\n"
        );
        assert_eq!(frame_line(pretty, None), None);
        assert_eq!(frame_line(" \r\n", None), None);
    }
}
