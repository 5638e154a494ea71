//! The gateway's own Zi frames have the child's shapes and codes.

#![allow(clippy::unwrap_used)]

use serde_json::{json, Map, Value};

use super::*;

fn object(value: Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap()
}

/// The frame a rejected client frame gets.
fn rejection(frame: Value) -> Value {
    match inbound(&object(frame), false) {
        Inbound::Reject(bytes) => serde_json::from_slice(&bytes).unwrap(),
        other => panic!("not rejected: {other:?}"),
    }
}

#[test]
fn protocol_errors_have_code_and_message_at_the_top_level() {
    let frame: Value =
        serde_json::from_slice(&protocol_error(Some(&json!("a")), "unauthorized", "bad")).unwrap();
    assert_eq!(
        frame,
        json!({"version": 1, "type": "protocol_error", "code": "unauthorized",
            "message": "bad", "id": "a"})
    );
}

#[test]
fn the_version_is_checked_before_the_id() {
    let e = rejection(json!({"version": 2, "id": "x", "method": "session.get_state"}));
    assert_eq!(e["code"], "unsupported_version");
    assert_eq!(e["id"], "x");
    let e = rejection(json!({"id": 3, "method": "session.get_state"}));
    assert_eq!(e["code"], "unsupported_version");
    assert!(e.get("id").is_none());
    let e = rejection(json!({"version": 1, "id": "", "method": "session.get_state"}));
    assert_eq!(e["code"], "invalid_request");
    assert!(e.get("id").is_none());
    let e = rejection(json!({"version": 1, "id": "m", "method": 5}));
    assert_eq!(
        (&e["code"], &e["id"]),
        (&json!("invalid_request"), &json!("m"))
    );
}

#[test]
fn set_events_is_as_strict_as_the_childs() {
    for (mode, all) in [("all", true), ("none", false), ("activity", true)] {
        let frame = object(
            json!({"version": 1, "id": "e", "method": "connection.set_events",
            "params": {"mode": mode}}),
        );
        assert_eq!(
            inbound(&frame, false),
            Inbound::SetFilter {
                id: json!("e"),
                all
            }
        );
    }
    for bad in [
        json!({"version": 1, "id": "e", "method": "connection.set_events"}),
        json!({"version": 1, "id": "e", "method": "connection.set_events", "params": {}}),
        json!({"version": 1, "id": "e", "method": "connection.set_events", "mode": "all"}),
        json!({"version": 1, "id": "e", "method": "connection.set_events",
            "params": {"mode": "all", "x": 1}}),
        json!({"version": 1, "id": "e", "method": "connection.set_events",
            "params": {"mode": "sometimes"}}),
    ] {
        let e = rejection(bad.clone());
        assert_eq!(
            (&e["code"], &e["id"]),
            (&json!("invalid_request"), &json!("e")),
            "{bad}"
        );
    }
}

#[test]
fn a_lost_run_ends_and_settles() {
    let kinds: Vec<&str> = run_aborted("child exited")
        .iter()
        .map(|(k, _)| *k)
        .collect();
    assert_eq!(kinds, ["agent_end", "agent_settled"]);
}
