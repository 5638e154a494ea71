//! Tests of `corral attach`'s per-dialect rules.

use serde_json::{json, Value};

use super::*;
use crate::dialect::Dialect;
use corral_protocol::ndjson::FrameError;

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
    match Dialect::Zut
        .rules()
        .attach_stdin(Ok(line.clone()), &json!({}), 0)
    {
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
    let reply = answer(Dialect::Zut.rules().attach_stdin(Ok(line), &data, 0));
    assert_eq!(
        reply,
        json!({"type":"response","id":7,"command":"hello","success":true,"data":data})
    );
}

#[test]
fn bad_lines_get_an_error_without_id() {
    for line in [&b"{nope"[..], b"[1,2]", b"\"text\""] {
        let reply = answer(
            Dialect::Zut
                .rules()
                .attach_stdin(Ok(line.to_vec()), &json!({}), 0),
        );
        assert_eq!(reply["success"], false, "{reply}");
        assert!(reply.get("id").is_none() && reply.get("command").is_none());
        assert!(reply["error"].as_str().unwrap().len() > 5);
    }
    let too_long = Err(FrameError::TooLong { limit: 10 });
    let reply = answer(Dialect::Zut.rules().attach_stdin(too_long, &json!({}), 0));
    assert!(reply["error"].as_str().unwrap().contains("maximum length"));
}

#[test]
fn letscode_and_zi_lines() {
    let hello = br#"{"cmd":"hello","id":"h"}"#.to_vec();
    assert!(matches!(
        Dialect::Letscode
            .rules()
            .attach_stdin(Ok(hello), &json!({}), 0),
        StdinFrame::Forward { .. }
    ));
    let bad = answer(
        Dialect::Letscode
            .rules()
            .attach_stdin(Ok(b"{no".to_vec()), &json!({}), 0),
    );
    assert_eq!(bad["type"], "error");
    assert_eq!(bad["id"], Value::Null);
    assert_eq!(bad["recoverable"], true);
    // Zi: not JSON, but UTF-8: the gateway answers it in sequence.
    assert!(matches!(
        Dialect::Zi
            .rules()
            .attach_stdin(Ok(b"{no".to_vec()), &json!({}), 4),
        StdinFrame::Forward { .. }
    ));
    for line in [Ok(vec![0xff, b'{']), Err(FrameError::TooLong { limit: 10 })] {
        let StdinFrame::Fatal(fatal) = Dialect::Zi.rules().attach_stdin(line, &json!({}), 4) else {
            panic!("framing errors are fatal");
        };
        let frame: Value = serde_json::from_slice(&fatal).unwrap();
        assert_eq!(frame["sequence"], 5);
        assert_eq!(frame["type"], "protocol_error");
        assert_eq!(frame["code"], "invalid_framing");
    }
}

#[test]
fn end_of_input_and_frames_seen() {
    assert_eq!(
        Dialect::Zut.rules().attach_end_of_input(),
        EndOfInput::DrainInFlight
    );
    assert_eq!(Dialect::Zi.rules().attach_end_of_input(), EndOfInput::Leave);
    let EndOfInput::Send(bye) = Dialect::Letscode.rules().attach_end_of_input() else {
        panic!("letscode says bye");
    };
    let bye: Value = serde_json::from_str(&bye).unwrap();
    assert_eq!(Dialect::Letscode.rules().attach_seen(&bye), Seen::Hide);
    let frame = json!({"version": 1, "sequence": 9, "type": "response"});
    assert_eq!(
        Dialect::Zi.rules().attach_seen(&frame),
        Seen::Sequence(Some(9))
    );
    assert_eq!(Dialect::Zut.rules().attach_seen(&frame), Seen::Track);
}
