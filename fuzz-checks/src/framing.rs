//! NDJSON framing (`corral_protocol::ndjson`) against a reference model.
//!
//! Input: one byte for the reader's buffer capacity, one for the line
//! limit (both small, so chunk edges and the over-long paths are hit
//! constantly), then the stream. The model: split on LF; drop one trailing
//! CR; a line longer than the limit is one `TooLong`; blank lines vanish.
//! Every line read must also survive `parse_object` → `encode_line` →
//! `parse_object` unchanged, on one line, with U+2028/U+2029 escaped.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use corral_protocol::ndjson::{encode_line, parse_object, FrameError, FrameReader};
use serde_json::Value;
use tokio::io::BufReader;

/// One framing outcome, comparable with the model's.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Ok(Vec<u8>),
    TooLong,
}

pub fn check(data: &[u8]) {
    let [cap, max, stream @ ..] = data else {
        return;
    };
    let cap = usize::from(*cap % 64) + 1;
    let max = usize::from(*max % 48) + 1;
    assert_eq!(
        read_all(stream, cap, max),
        model(stream, max),
        "capacity {cap}, limit {max}, input {:?}",
        String::from_utf8_lossy(stream)
    );
    // The whole input under a generous limit: JSON of any size.
    for line in read_all(stream, cap, 1 << 20) {
        if let Line::Ok(line) = line {
            round_trip(&line);
        }
    }
}

/// What `FrameReader` yields for `input`.
pub fn read_all(input: &[u8], cap: usize, max: usize) -> Vec<Line> {
    let mut frames = FrameReader::with_max_line(BufReader::with_capacity(cap, input), max);
    let mut out = Vec::new();
    while let Some(line) = ready(frames.next_line()) {
        out.push(match line {
            Ok(line) => Line::Ok(line),
            Err(FrameError::TooLong { limit }) => {
                assert_eq!(limit, max);
                Line::TooLong
            }
            Err(other) => panic!("an in-memory read failed: {other}"),
        });
    }
    out
}

/// What the framing rules say `input` is.
pub fn model(input: &[u8], max: usize) -> Vec<Line> {
    input
        .split(|b| *b == b'\n')
        .filter_map(|segment| {
            let line = segment.strip_suffix(b"\r").unwrap_or(segment);
            if line.len() > max {
                Some(Line::TooLong)
            } else if line.iter().all(u8::is_ascii_whitespace) {
                None
            } else {
                Some(Line::Ok(line.to_vec()))
            }
        })
        .collect()
}

/// A line that parses keeps its meaning through encoding.
fn round_trip(line: &[u8]) {
    let Ok(object) = parse_object(line) else {
        return;
    };
    let value = Value::Object(object);
    let Ok(encoded) = encode_line(&value) else {
        panic!("a parsed object does not encode: {value}");
    };
    let Some((b'\n', body)) = encoded.split_last() else {
        panic!("an encoded line does not end in LF");
    };
    assert!(!body.contains(&b'\n'), "an encoded line holds an LF");
    let separator = |w: &[u8]| w[0] == 0xE2 && w[1] == 0x80 && (w[2] == 0xA8 || w[2] == 0xA9);
    assert!(
        !body.windows(3).any(separator),
        "U+2028/U+2029 left unescaped"
    );
    match parse_object(body) {
        Ok(back) => crate::assert_same(&Value::Object(back), &value, "an encoded line reads back"),
        Err(e) => panic!("an encoded line does not parse: {e}"),
    }
}

/// Runs a future that cannot wait (every reader here is in memory).
fn ready<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("an in-memory reader waited"),
    }
}
