use serde_json::{json, Map, Value};

use super::*;
use crate::dialect::rules::{HistoryPage, ListedSession};
use crate::dialect::{Inbound, Open};

fn object(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn parsed(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn hello() -> Map<String, Value> {
    object(json!({"sessionId": "s1", "cwd": "/srv/p",
        "session": {"modes": {"currentModeId": "auto", "availableModes": []},
            "configOptions": [{"id": "model", "category": "model", "currentValue": "a"}],
            "models": {"currentModelId": "a"}, "vendorField": 7},
        "initialize": {"protocolVersion": 1, "agentInfo": {"name": "x"},
            "agentCapabilities": {"loadSession": false,
                "promptCapabilities": {"image": true},
                "sessionCapabilities": {"fork": {}, "list": {}}}}}))
}

#[test]
fn initialize_offers_what_the_gateway_honours_not_the_agents_session_capabilities() {
    let init = parsed(&initialize_answer(
        Some(&json!(0)),
        &hello(),
        json!({"project": "p"}),
    ));
    let caps = &init["result"]["agentCapabilities"];
    assert_eq!(caps["loadSession"], true);
    assert_eq!(
        caps["sessionCapabilities"],
        json!({"list": {}, "resume": {}, "close": {}})
    );
    assert_eq!(caps["promptCapabilities"]["image"], true);
    assert_eq!(init["result"]["agentInfo"]["name"], "x");
    assert_eq!(init["result"]["_meta"]["corral"]["project"], "p");
}

#[test]
fn every_opening_passes_the_agents_session_state_through() {
    let meta = json!({"epoch": "e", "gap": false});
    let new = parsed(&opened(&json!(1), &hello(), Open::New, meta.clone()));
    assert_eq!(new["result"]["sessionId"], "s1");
    assert_eq!(new["result"]["modes"]["currentModeId"], "auto");
    assert_eq!(new["result"]["configOptions"][0]["id"], "model");
    assert_eq!(new["result"]["models"]["currentModelId"], "a");
    assert_eq!(new["result"]["vendorField"], 7);
    assert_eq!(new["result"]["_meta"]["corral"]["epoch"], "e");
    for open in [Open::Load, Open::Resume] {
        let answer = parsed(&opened(&json!(2), &hello(), open, meta.clone()));
        assert!(answer["result"].get("sessionId").is_none(), "{answer}");
        assert_eq!(answer["result"]["configOptions"][0]["currentValue"], "a");
    }
    assert!(names_session(&hello(), "p", "s1"));
    assert!(names_session(&hello(), "p", "corral-project:p"));
    assert!(!names_session(&hello(), "p", "corral-project:q"));
    assert!(!names_session(&hello(), "p", "s2"));
    let other = parsed(&unknown(&json!(3), &hello(), Some("s2")));
    assert_eq!(other["error"]["code"], -32002);
}

#[test]
fn config_option_and_mode_updates_keep_the_state_later_editors_are_told() {
    let mut hello = hello();
    let options = br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"config_option_update","configOptions":[{"id":"mode","category":"mode","currentValue":"plan"},{"id":"model","category":"model","currentValue":"b"}]}}}"#;
    follow_update(&mut hello, options);
    let state = &hello["session"];
    assert_eq!(state["configOptions"][1]["currentValue"], "b");
    assert_eq!(state["modes"]["currentModeId"], "plan");
    let switch = br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s1","update":{"sessionUpdate":"current_mode_update","currentModeId":"read-only"}}}"#;
    follow_update(&mut hello, switch);
    assert_eq!(hello["session"]["modes"]["currentModeId"], "read-only");
    // Text that mentions an update is not one.
    let chunk = br#"{"jsonrpc":"2.0","method":"session/update","params":{"update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"current_mode_update"}}}}"#;
    follow_update(&mut hello, chunk);
    assert_eq!(hello["session"]["modes"]["currentModeId"], "read-only");
}

#[test]
fn history_pages_become_updates_marked_as_history_without_a_seq() {
    let line = br#"{"jsonrpc":"2.0","id":"corral-history-1","result":{"updates":[{"sessionId":"s1","update":{"sessionUpdate":"user_message_chunk","content":{"type":"text","text":"hi"}}},{"junk":1}],"nextCursor":"c2"}}"#;
    let HistoryPage::Updates { frames, next } = history_page(line) else {
        panic!("a page");
    };
    assert_eq!(next.as_deref(), Some("c2"));
    assert_eq!(frames.len(), 1, "items without an update are dropped");
    let frame = parsed(&frames[0]);
    assert_eq!(frame["method"], "session/update");
    assert_eq!(frame["params"]["sessionId"], "s1");
    assert_eq!(frame["params"]["_meta"]["corral"]["replay"], true);
    assert!(frame["params"]["_meta"]["corral"].get("seq").is_none());
    let missing =
        br#"{"jsonrpc":"2.0","id":"corral-history-1","error":{"code":-32601,"message":"no"}}"#;
    assert_eq!(history_page(missing), HistoryPage::Unsupported);
    let failed =
        br#"{"jsonrpc":"2.0","id":"corral-history-1","error":{"code":-32603,"message":"disk"}}"#;
    assert_eq!(history_page(failed), HistoryPage::Failed("disk".into()));
    let request: Value =
        serde_json::from_str(&history_request(&hello(), "corral-history-2", Some("c2"))).unwrap();
    assert_eq!(request["method"], HISTORY);
    assert_eq!(
        request["params"],
        json!({"sessionId": "s1", "cursor": "c2"})
    );
}

#[test]
fn a_list_shows_virtual_paths_and_ids_for_projects_that_never_ran() {
    let listed_page = [
        ListedSession {
            project: "alpha".into(),
            session: Some("s1".into()),
            updated: Some(std::time::UNIX_EPOCH),
        },
        ListedSession {
            project: "beta".into(),
            session: None,
            updated: None,
        },
    ];
    let page = parsed(&listed(&json!(4), &listed_page, Some("beta")));
    let sessions = &page["result"]["sessions"];
    assert_eq!(sessions[0]["sessionId"], "s1");
    assert_eq!(sessions[0]["cwd"], "/projects/alpha");
    assert_eq!(sessions[0]["title"], "alpha");
    assert_eq!(sessions[0]["updatedAt"], "1970-01-01T00:00:00Z");
    assert_eq!(sessions[1]["sessionId"], "corral-project:beta");
    assert!(sessions[1].get("updatedAt").is_none());
    assert_eq!(page["result"]["nextCursor"], "beta");
}

#[test]
fn a_reset_is_the_agents_session_new_and_its_answer_becomes_the_state() {
    let mut hello = hello();
    let frame = reset(&hello);
    assert_eq!(frame["method"], "session/new");
    assert_eq!(frame["params"]["cwd"], "/srv/p");
    let answer = br#"{"jsonrpc":"2.0","id":"corral-9","result":{"sessionId":"s2","modes":{"currentModeId":"ask"}}}"#;
    assert!(reset_done(&mut hello, answer));
    assert_eq!(hello["sessionId"], "s2");
    assert_eq!(hello["session"]["modes"]["currentModeId"], "ask");
    let failed = br#"{"jsonrpc":"2.0","id":"corral-9","error":{"code":-32603,"message":"busy"}}"#;
    assert!(!reset_done(&mut hello, failed));
}

#[test]
fn lifecycle_requests_are_the_gateways_and_fork_and_delete_are_refused() {
    let inbound = |v: Value, observer| crate::dialect::acp::inbound(&object(v), observer);
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "id": 1, "method": "session/resume",
            "params": {"sessionId": "s1", "_meta": {"corral": {"resumeAfter": 4, "epoch": "e"}}}}),
            true
        ),
        Inbound::OpenSession {
            id: json!(1),
            open: Open::Resume,
            session: Some("s1".into()),
            resume_after: Some(4),
            epoch: Some("e".into()),
            mcp_servers: Vec::new(),
        }
    );
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "id": 2, "method": "session/close", "params": {"sessionId": "s1"}}),
            true
        ),
        Inbound::CloseSession { id: json!(2) }
    );
    assert_eq!(
        inbound(
            json!({"jsonrpc": "2.0", "id": 3, "method": "session/list", "params": {"cursor": "b"}}),
            true
        ),
        Inbound::ListSessions {
            id: json!(3),
            cursor: Some("b".into())
        }
    );
    assert_eq!(
        inbound(json!({"jsonrpc": "2.0", "id": 4, "method": RESET}), false),
        Inbound::ResetSession { id: json!(4) }
    );
    // Observers may not reset.
    assert!(matches!(
        inbound(json!({"jsonrpc": "2.0", "id": 4, "method": RESET}), true),
        Inbound::Reject(_)
    ));
    for method in REFUSED {
        let Inbound::Reject(refusal) =
            inbound(json!({"jsonrpc": "2.0", "id": 5, "method": method}), false)
        else {
            panic!("{method} is refused");
        };
        let refusal = parsed(&refusal);
        assert_eq!(refusal["error"]["code"], -32601);
        assert!(refusal["error"]["message"]
            .as_str()
            .unwrap()
            .contains(RESET));
    }
    let Inbound::Reject(bad) = inbound(
        json!({"jsonrpc": "2.0", "id": 6, "method": "session/resume",
        "params": {"_meta": {"corral": {"resumeAfter": -1}}}}),
        false,
    ) else {
        panic!("a bad resume point is refused");
    };
    assert_eq!(parsed(&bad)["error"]["code"], -32602);
}
