//! The decoder against the reference's accepted and rejected records.

#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::json;

fn parse_value(v: Value) -> Result<Request, Rejection> {
    parse(v.as_object().cloned().unwrap_or_default())
}

/// The code and message of a rejected record, and the id it echoes.
fn rejected(v: Value) -> (ProtocolCode, String, Option<String>) {
    let r = parse_value(v).unwrap_err();
    (r.code, r.message, r.id)
}

fn invalid(v: Value) -> String {
    let (code, message, id) = rejected(v);
    assert_eq!(code, ProtocolCode::InvalidRequest, "{message}");
    assert_eq!(id.as_deref(), Some("r"), "{message}");
    message
}

#[test]
fn accepts_the_documented_request() {
    let r = parse_value(json!({"version":1,"id":"state-1","method":"session.get_state"}));
    assert_eq!(
        r.map(|r| (r.id, r.method)),
        Ok(("state-1".to_string(), "session.get_state"))
    );
}

#[test]
fn the_version_is_checked_before_the_id() {
    let (code, message, id) = rejected(json!({"version":2,"id":"a","method":"model.list"}));
    assert_eq!(code, ProtocolCode::UnsupportedVersion);
    assert_eq!(message, "Unsupported RPC protocol version: 2 (expected 1)");
    assert_eq!(id.as_deref(), Some("a"));
    let (code, _, id) = rejected(json!({"id":7,"method":"model.list"}));
    assert_eq!((code, id), (ProtocolCode::UnsupportedVersion, None));
    for bad_id in [json!(7), json!(""), json!("x".repeat(MAX_ID_BYTES + 1))] {
        let (code, _, id) = rejected(json!({"version":1,"id":bad_id,"method":"model.list"}));
        assert_eq!((code, id), (ProtocolCode::InvalidRequest, None));
    }
}

#[test]
fn methods_are_strings_and_known() {
    let (code, message, id) = rejected(json!({"version":1,"id":"b","method":"nope"}));
    assert_eq!(code, ProtocolCode::UnknownMethod);
    assert_eq!(message, "Unknown RPC method: nope");
    assert_eq!(id.as_deref(), Some("b"));
    invalid(json!({"version":1,"id":"r","method":3}));
}

#[test]
fn unknown_and_missing_fields_are_refused() {
    let m = invalid(json!({"version":1,"id":"r","method":"session.get_state","extra":1}));
    assert_eq!(m, "RPC request contains unknown fields");
    invalid(json!({"version":1,"id":"r","method":"session.get_state","params":{}}));
    invalid(json!({"version":1,"id":"r","method":"session.get_messages","start":4}));
    let m = invalid(json!({"version":1,"id":"r","method":"session.prompt"}));
    assert_eq!(m, "RPC request is missing required fields");
    let m = invalid(
        json!({"version":1,"id":"r","method":"connection.set_events",
        "params":{"mode":"all","extra":true}}),
    );
    assert_eq!(m, "RPC request contains unknown fields");
    invalid(json!({"version":1,"id":"r","method":"connection.set_events","params":{}}));
    let m = invalid(json!({"version":1,"id":"r","method":"session.get_messages","params":null}));
    assert_eq!(m, "session.get_messages params must be an object");
}

#[test]
fn pages_are_bounded() {
    let m = invalid(json!({"version":1,"id":"r","method":"session.get_messages",
        "params":{"limit":101}}));
    assert_eq!(m, "Message limit must be an integer from 1 through 100");
    let m = invalid(json!({"version":1,"id":"r","method":"session.get_outcomes",
        "params":{"limit":101}}));
    assert_eq!(m, "Outcome limit must be an integer from 1 through 100");
    invalid(json!({"version":1,"id":"r","method":"session.get_messages","params":{"start":-1}}));
    invalid(json!({"version":1,"id":"r","method":"session.get_messages","params":{"limit":0}}));
    let ok = parse_value(json!({"version":1,"id":"r","method":"session.get_messages",
        "params":{"start":3.0,"limit":100}}))
    .unwrap();
    assert_eq!(ok.u64_param("start"), Ok(Some(3)));
    let bare = parse_value(json!({"version":1,"id":"r","method":"session.get_messages"}));
    assert!(bare.is_ok());
}

#[test]
fn prompts_and_completion_ids() {
    for delivery in ["direct", "steer", "follow_up", "continue"] {
        let r = parse_value(json!({"version":1,"id":"r","method":"session.prompt",
            "params":{"delivery":delivery,"text":""}}));
        assert!(r.is_ok(), "{delivery}");
    }
    let m = invalid(json!({"version":1,"id":"r","method":"session.prompt",
        "params":{"delivery":"later","text":"x"}}));
    assert_eq!(
        m,
        "Prompt delivery must be direct, steer, follow_up, or continue"
    );
    let m = invalid(json!({"version":1,"id":"r","method":"session.prompt",
        "params":{"delivery":"direct","text":"x","completionId":""}}));
    assert_eq!(
        m,
        "Completion id must be a non-empty string of at most 256 bytes"
    );
    invalid(json!({"version":1,"id":"r","method":"session.await_idle",
        "params":{"completionId":""}}));
    invalid(json!({"version":1,"id":"r","method":"session.await_idle","params":{}}));
    assert!(parse_value(json!({"version":1,"id":"r","method":"session.await_idle"})).is_ok());
}

#[test]
fn commands_modes_models_and_thinking() {
    let m = invalid(json!({"version":1,"id":"r","method":"command.invoke",
        "params":{"name":"Invalid_Command","arguments":""}}));
    assert_eq!(m, "Command name must use lowercase kebab-case");
    invalid(json!({"version":1,"id":"r","method":"command.invoke","params":{"name":"compact"}}));
    for name in ["compact", "a1-b2", "x"] {
        let r = parse_value(json!({"version":1,"id":"r","method":"command.invoke",
            "params":{"name":name,"arguments":""}}));
        assert!(r.is_ok(), "{name}");
    }
    for name in ["a--b", "-a", "a-", "1a"] {
        invalid(json!({"version":1,"id":"r","method":"command.invoke",
            "params":{"name":name,"arguments":""}}));
    }
    let m = invalid(
        json!({"version":1,"id":"r","method":"connection.set_events",
        "params":{"mode":"sometimes"}}),
    );
    assert_eq!(m, "Event mode must be all, none, or activity");
    invalid(
        json!({"version":1,"id":"r","method":"model.select","params":{"provider":"","id":"m"}}),
    );
    let m = invalid(json!({"version":1,"id":"r","method":"thinking.select",
        "params":{"level":"minimum"}}));
    assert_eq!(m, "Unsupported thinking level");
    invalid(json!({"version":1,"id":"r","method":"thinking.select",
        "params":{"level":"low","scope":"team"}}));
    let ok = parse_value(json!({"version":1,"id":"r","method":"thinking.select",
        "params":{"level":"minimal"}}));
    assert!(ok.is_ok());
}
