//! Tests of the frames a hub answers itself and its per-client rules.

use serde_json::{json, Map, Value};

use super::*;
use crate::dialect::{zi, Dialect};

struct Requests {
    ids: Vec<Value>,
    others: usize,
}

impl ClientRequests for Requests {
    fn has_id(&self, id: &Value) -> bool {
        self.ids.contains(id)
    }
    fn count_except(&self, _command: &str) -> usize {
        self.others
    }
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn zi_admits_an_id_once_and_bounds_operations() {
    let free = Requests {
        ids: vec![],
        others: 0,
    };
    let id = json!("a");
    assert!(Dialect::Zi
        .rules()
        .admit(Some(&id), "session.prompt", &free)
        .is_ok());
    let busy = Requests {
        ids: vec![id.clone()],
        others: zi::CLIENT_IN_FLIGHT,
    };
    let refusal = parse(
        &Dialect::Zi
            .rules()
            .admit(Some(&id), "session.prompt", &busy)
            .unwrap_err(),
    );
    assert_eq!(refusal["type"], "protocol_error");
    let other = json!("b");
    let refusal = parse(
        &Dialect::Zi
            .rules()
            .admit(Some(&other), "session.prompt", &busy)
            .unwrap_err(),
    );
    assert_eq!(refusal["error"]["code"], "capacity");
    assert!(Dialect::Zi
        .rules()
        .admit(Some(&other), "session.interrupt", &busy)
        .is_ok());
    for dialect in [Dialect::Zut, Dialect::Letscode] {
        assert!(dialect.rules().admit(Some(&id), "prompt", &busy).is_ok());
    }
}

#[test]
fn letscode_ready_must_name_major_one() {
    let ready = |protocol: Value| {
        let mut frame = Map::new();
        frame.insert("type".into(), json!("ready"));
        frame.insert("protocol".into(), protocol);
        frame
    };
    assert!(Dialect::Letscode
        .rules()
        .check_ready(&ready(json!("letscode-rpc/1.2")))
        .is_ok());
    let error = Dialect::Letscode
        .rules()
        .check_ready(&ready(json!("letscode-rpc/2")))
        .unwrap_err();
    assert_eq!(error, "the child speaks letscode-rpc/2, not letscode-rpc/1");
    assert!(Dialect::Letscode.rules().check_ready(&Map::new()).is_err());
    assert!(Dialect::Zi.rules().check_ready(&Map::new()).is_ok());
}

#[test]
fn zut_hello_answer_carries_the_child_hello_and_gap() {
    let mut hello = Map::new();
    hello.insert("protocol_version".into(), json!(1));
    let id = json!(3);
    let answer =
        Dialect::Zut
            .rules()
            .hello_answer(Some(&id), &hello, json!({"project": "p"}), true);
    let answer = parse(&answer[0]);
    assert_eq!(answer["data"]["protocol_version"], 1);
    assert_eq!(answer["data"]["gateway"]["project"], "p");
    assert_eq!(answer["data"]["gap"], true);
    assert_eq!(answer["id"], 3);
}

#[test]
fn only_zut_responses_carry_run_and_model_news() {
    let line = br#"{"type":"response","success":true,"data":{"started":true}}"#;
    assert!(
        Dialect::Zut
            .rules()
            .response_news("prompt", line)
            .run_started
    );
    assert!(
        !Dialect::Zut
            .rules()
            .response_news("steer", line)
            .run_started
    );
    assert_eq!(
        Dialect::Letscode.rules().response_news("prompt", line),
        ResponseNews::default()
    );
    let line = br#"{"type":"response","success":true,"data":{"model":"m"}}"#;
    let news = Dialect::Zut.rules().response_news("set_model", line);
    assert_eq!(news.model.as_deref(), Some("m"));
}

#[test]
fn unknown_commands_share_one_metrics_label() {
    assert_eq!(Dialect::Zut.rules().command_label("ping"), "ping");
    assert_eq!(Dialect::Zi.rules().command_label("made-up"), "other");
}
