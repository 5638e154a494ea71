//! The checks behind the fuzz targets, one function per target
//! ([`TARGETS`]), shared with the corpus replay test (`cargo test -p
//! corral-fuzz-checks`, part of the workspace's tests) so that every input
//! in the committed corpus is checked on every test run, without libFuzzer.
//!
//! Each check feeds bytes from outside to the parser the real code runs and
//! asserts what must hold for *any* input: no panic, and properties that
//! tie the parser to its reference or to the other side of the pipe. A
//! failed assertion is a finding, like a crash.

pub mod dialects;
pub mod envelope;
pub mod framing;
pub mod hello;

use serde_json::{Map, Value};

/// What a fuzz target runs on each input.
pub type Check = fn(&[u8]);

/// Every fuzz target (its name under `fuzz_targets/` and `corpus/`) and the
/// check it runs.
pub const TARGETS: [(&str, Check); 6] = [
    ("ndjson_framing", framing::check),
    ("zut_request", dialects::zut),
    ("letscode_request", dialects::letscode),
    ("zi_request", dialects::zi),
    ("gateway_hello", hello::check),
    ("envelope_scan", envelope::check),
];

/// The input as one JSON object, the way both sides read a line (the
/// framing's own parser), when it is one.
pub fn object(line: &[u8]) -> Option<Map<String, Value>> {
    corral_protocol::ndjson::parse_object(line).ok()
}

/// Parses bytes the gateway produced; they must always be a JSON object.
pub fn produced(bytes: &[u8], what: &str) -> Map<String, Value> {
    match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(map)) => map,
        other => panic!(
            "{what} is not a JSON object: {other:?} from {:?}",
            String::from_utf8_lossy(bytes)
        ),
    }
}

/// Equality of JSON values up to the last bits of floats: serde_json (without
/// its `float_roundtrip` feature, as the workspace builds it) may read a
/// float it printed itself one unit in the last place off.
pub fn same(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) if x.is_f64() || y.is_f64() => {
            match (x.as_f64(), y.as_f64()) {
                (Some(x), Some(y)) => x == y || (x - y).abs() <= x.abs().max(y.abs()) * 1e-15,
                _ => false,
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| same(x, y))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| same(v, w)))
        }
        _ => a == b,
    }
}

/// Asserts [`same`], showing both values when they differ.
#[track_caller]
pub fn assert_same(a: &Value, b: &Value, what: &str) {
    assert!(same(a, b), "{what}:\n  {a}\n  {b}");
}
