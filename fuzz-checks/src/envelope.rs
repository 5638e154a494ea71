//! The gateway's envelope scanning of child lines, in every dialect:
//! `Dialect::outbound` (a byte-prefix fast path for the common event shape,
//! a serde parse of `type`/`id`/`event` otherwise), then what the hub does
//! with the verdict: `event_bytes` stamps `seq` into an event,
//! `restore_id` gives a reply its client's id back, Zi's `stamp` numbers a
//! frame per connection.
//!
//! What must hold for any line: no panic; the fast path and the full parse
//! classify a canonical line alike (checked against the same object
//! pretty-printed, which only the full parse reads); every frame made from
//! a valid JSON object is a valid JSON object with the fields it should
//! have.

use corral::dialect::{zi, zut, Dialect, Outbound};
use serde_json::{Map, Value};

use crate::produced;

const SEQ: u64 = 4_294_967_301;
/// A run id that needs escaping (the gateway makes its own; the escaping
/// must hold anyway).
const RUN: &str = "run-7\"\u{2028}";

/// The field that names an event's run.
fn run_field(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Zi => zi::RUN_FIELD,
        _ => zut::RUN_FIELD,
    }
}

pub fn check(line: &[u8]) {
    for dialect in [Dialect::Zut, Dialect::Letscode, Dialect::Zi] {
        let verdict = dialect.rules().outbound(line);
        let _ = dialect.rules().event_bytes(line, SEQ, None);
        let _ = dialect
            .rules()
            .restore_id(line, Some(Value::from("client-1")), Some(RUN));
        let Ok(Value::Object(frame)) = serde_json::from_slice::<Value>(line) else {
            continue;
        };
        if let Some(Outbound::Event(_)) = verdict {
            // Any object line stamps into an object; its fields are compared
            // below, on the canonical form (a line with duplicate keys may
            // keep either copy).
            check_event(dialect, line, None);
        }
        let value = Value::Object(frame.clone());
        let (Ok(canonical), Ok(pretty)) = (
            serde_json::to_vec(&value),
            serde_json::to_vec_pretty(&value),
        ) else {
            continue;
        };
        assert_eq!(
            dialect.rules().outbound(&canonical),
            dialect.rules().outbound(&pretty),
            "{dialect:?}: the fast path and the full parse disagree on {}",
            String::from_utf8_lossy(&canonical)
        );
        check_event(dialect, &canonical, Some(&frame));
        check_reply(dialect, &canonical);
    }
}

/// An event goes into the ring with the project's `seq` and every other
/// field of `frame` as the child wrote it (Zi: without the child's
/// `sequence`).
fn check_event(dialect: Dialect, line: &[u8], frame: Option<&Map<String, Value>>) {
    let Some(stamped) = dialect.rules().event_bytes(line, SEQ, Some(RUN)) else {
        panic!("{dialect:?}: a JSON object line was not stamped");
    };
    let mut stamped = produced(&stamped, "a stamped event");
    assert_eq!(stamped.shift_remove("seq"), Some(Value::from(SEQ)));
    let field = run_field(dialect);
    assert_eq!(stamped.shift_remove(field), Some(Value::from(RUN)));
    let Some(frame) = frame else {
        return;
    };
    let mut expected = frame.clone();
    expected.shift_remove("seq");
    expected.shift_remove(field);
    if dialect == Dialect::Zi {
        expected.shift_remove("sequence");
        expected.insert("version".into(), Value::from(1));
        check_zi_stamp(&stamped);
    }
    crate::assert_same(
        &Value::Object(stamped),
        &Value::Object(expected),
        "a stamped event",
    );
}

/// A reply reaches its client with the client's id (zut: none when the
/// client sent none; the others: `null`).
fn check_reply(dialect: Dialect, line: &[u8]) {
    let cases = [
        (None, None),
        (Some(Value::from("c")), Some(RUN)),
        (Some(Value::from(7)), None),
    ];
    for (original, run) in cases {
        let Some(restored) = dialect.rules().restore_id(line, original.clone(), run) else {
            panic!("{dialect:?}: a JSON object line was not restored");
        };
        let restored = produced(&restored, "a restored reply");
        let expected = match (dialect, original) {
            (Dialect::Zut, original) => original,
            (_, original) => Some(original.unwrap_or(Value::Null)),
        };
        assert_eq!(restored.get("id"), expected.as_ref());
        if dialect == Dialect::Zi {
            check_zi_stamp(&restored);
        }
    }
}

/// An unstamped Zi frame numbered for a connection keeps its fields and
/// gets `sequence` (and `version` 1).
fn check_zi_stamp(unstamped: &Map<String, Value>) {
    let bytes = zi::unstamped(unstamped.clone());
    let mut numbered = produced(&zi::stamp(&bytes, 9), "a stamped Zi frame");
    assert_eq!(numbered.shift_remove("sequence"), Some(Value::from(9)));
    let mut expected = unstamped.clone();
    expected.shift_remove("sequence");
    expected.insert("version".into(), Value::from(1));
    crate::assert_same(
        &Value::Object(numbered),
        &Value::Object(expected),
        "a numbered Zi frame",
    );
}
