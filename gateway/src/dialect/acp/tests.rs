use serde_json::{json, Map, Value};

use super::*;

fn object(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn parsed(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn initialize_with_a_token_in_meta_is_the_hello() {
    let frame = object(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "_meta": {"corral": {"token": "t0ken", "resumeAfter": 7}}}}));
    let hello = client_hello(&frame).unwrap().unwrap();
    assert_eq!(hello.token.as_deref(), Some("t0ken"));
    assert_eq!(hello.resume_after, Some(7));
    assert_eq!(hello.id, Some(json!(0)));
    let other = object(json!({"jsonrpc": "2.0", "id": 1, "method": "session/new"}));
    assert!(client_hello(&other).is_none());
    let bad = object(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"_meta": {"corral": {"token": 5}}}}));
    assert!(client_hello(&bad).unwrap().is_err());
}

#[test]
fn client_messages_are_sorted() {
    let inbound = |v: Value, observer| super::inbound(&object(v), observer);
    assert!(matches!(
        inbound(
            json!({"jsonrpc": "2.0", "id": 1, "method": "initialize"}),
            false
        ),
        Inbound::Hello { .. }
    ));
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/load", "params": {"sessionId": "s"}}),
            false
        ),
        Inbound::OpenSession {
            id: json!(2),
            open: Open::Load,
            session: Some("s".into()),
            resume_after: None,
            epoch: None,
            mcp_servers: Vec::new(),
        }
    );
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "id": 3, "method": "session/prompt", "params": {}}),
            false
        ),
        Inbound::Forward {
            id: Some(json!(3)),
            command: "session/prompt".into()
        }
    );
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "method": "session/cancel", "params": {}}),
            false
        ),
        Inbound::Notify {
            command: "session/cancel".into()
        }
    );
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "id": "corral-ask-1", "result": {}}),
            false
        ),
        Inbound::AnswerAsk {
            id: json!("corral-ask-1")
        }
    );
    // Observers read; they neither prompt, cancel nor answer.
    let Inbound::Reject(refusal) = inbound(
        json!({"jsonrpc": "2.0", "id": 4, "method": "session/prompt"}),
        true,
    ) else {
        panic!("an observer's prompt is refused");
    };
    assert_eq!(parsed(&refusal)["error"]["code"], -32600);
    assert_eq!(
        inbound(json!({"jsonrpc": "2.0", "method": "session/cancel"}), true),
        Inbound::Ignore
    );
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "id": "corral-ask-1", "result": {}}),
            true
        ),
        Inbound::Ignore
    );
    let Inbound::Reject(refusal) = inbound(json!({"jsonrpc": "2.0", "id": 5}), false) else {
        panic!("neither request nor response");
    };
    assert_eq!(parsed(&refusal)["error"]["code"], -32600);
}

#[test]
fn child_messages_are_sorted_and_notifications_carry_the_seq() {
    let update = br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk"}}}"#;
    assert_eq!(outbound(update), Some(Outbound::Event(EventKind::Other)));
    let stamped = parsed(&event_bytes(update, 42).unwrap());
    assert_eq!(stamped["params"]["_meta"]["corral"]["seq"], 42);
    assert_eq!(
        stamped["params"]["update"]["sessionUpdate"],
        "agent_message_chunk"
    );
    let ask =
        br#"{"jsonrpc":"2.0","id":"perm-1","method":"session/request_permission","params":{}}"#;
    assert_eq!(
        outbound(ask),
        Some(Outbound::Ask {
            id: json!("perm-1")
        })
    );
    let answer = br#"{"jsonrpc":"2.0","id":"corral-3","result":{"stopReason":"end_turn"}}"#;
    assert_eq!(
        outbound(answer),
        Some(Outbound::Reply {
            id: "corral-3".into(),
            last: true
        })
    );
    assert_eq!(outbound(b"not json"), None);
}

#[test]
fn an_answer_reaches_the_child_under_its_own_id_and_the_others_hear_the_outcome() {
    let ask = br#"{"jsonrpc":"2.0","id":"perm-1","method":"session/request_permission","params":{"sessionId":"s"}}"#;
    let for_clients = parsed(&ask_for_clients(ask, "corral-ask-9").unwrap());
    assert_eq!(for_clients["id"], "corral-ask-9");
    let answer = object(json!({"jsonrpc": "2.0", "id": "corral-ask-9",
        "result": {"outcome": {"outcome": "selected", "optionId": "allow_once"}}}));
    let line = answer_for_child(&answer, &json!("perm-1"));
    assert!(line.ends_with('\n'));
    let to_child: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(to_child["id"], "perm-1");
    let outcome = outcome_of(&answer);
    assert_eq!(
        outcome,
        json!({"outcome": "selected", "optionId": "allow_once"})
    );
    let frames: Vec<Value> = ask_resolved("corral-ask-9", &outcome)
        .iter()
        .map(|b| parsed(b))
        .collect();
    assert_eq!(frames[0]["method"], "$/cancel_request");
    assert_eq!(frames[0]["params"]["requestId"], "corral-ask-9");
    assert_eq!(frames[1]["method"], REQUEST_RESOLVED);
    assert_eq!(frames[1]["params"]["outcome"]["optionId"], "allow_once");
    let unanswered: Value = serde_json::from_str(&ask_unanswered(
        &json!("perm-1"),
        "session/request_permission",
    ))
    .unwrap();
    assert_eq!(unanswered["result"]["outcome"]["outcome"], "cancelled");
}

#[test]
fn the_greeting_loads_the_kept_session_and_falls_back_to_a_new_one() {
    let capable = object(json!({"jsonrpc": "2.0", "id": "corral-init",
        "result": {"protocolVersion": 1, "agentCapabilities": {"loadSession": true}}}));
    let mut greeter = Greeter::new("/p", Some("old".into()));
    let first: Value = serde_json::from_str(&greeter.start()).unwrap();
    assert_eq!(first["method"], "initialize");
    assert!(Greeter::is_answer(&capable));
    let Greeting::Send(load) = greeter.answer(&capable).unwrap() else {
        panic!("a session request follows");
    };
    let load: Value = serde_json::from_str(&load).unwrap();
    assert_eq!(load["method"], "session/load");
    assert_eq!(load["params"]["sessionId"], "old");
    assert_eq!(load["params"]["cwd"], "/p");
    let failed = object(json!({"jsonrpc": "2.0", "id": "corral-session",
        "error": {"code": -32002, "message": "unknown session"}}));
    let Greeting::Send(new) = greeter.answer(&failed).unwrap() else {
        panic!("a failed load falls back to session/new");
    };
    assert!(new.contains("session/new"));
    let created = object(json!({"jsonrpc": "2.0", "id": "corral-session",
        "result": {"sessionId": "fresh", "modes": {"currentModeId": "ask"}}}));
    let Greeting::Ready(hello) = greeter.answer(&created).unwrap() else {
        panic!("ready after the session");
    };
    assert_eq!(hello["sessionId"], "fresh");
    assert_eq!(hello["session"]["modes"]["currentModeId"], "ask");
    assert!(hello["session"].get("sessionId").is_none());
    assert_eq!(hello["cwd"], "/p");
    assert_eq!(
        hello["initialize"]["agentCapabilities"]["loadSession"],
        true
    );

    // An agent that cannot load sessions gets session/new at once.
    let mut greeter = Greeter::new("/p", Some("old".into()));
    let plain =
        object(json!({"jsonrpc": "2.0", "id": "corral-init", "result": {"protocolVersion": 1}}));
    let Greeting::Send(new) = greeter.answer(&plain).unwrap() else {
        panic!("a session request follows");
    };
    assert!(new.contains("session/new"));
}
