//! The own-runs extension in each dialect's shapes.

use serde_json::json;

use super::*;

fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        other => panic!("not an object: {other}"),
    }
}

fn text(bytes: &Bytes) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

#[test]
fn events_carry_the_run_id_before_seq() {
    let line = br#"{"type":"text_delta","delta":"a"}"#;
    let zut = Dialect::Zut
        .rules()
        .event_bytes(line, 4, Some("run-2"))
        .unwrap();
    assert_eq!(
        text(&zut),
        r#"{"type":"text_delta","delta":"a","run_id":"run-2","seq":4}"#
    );
    let plain = Dialect::Letscode
        .rules()
        .event_bytes(line, 4, None)
        .unwrap();
    assert_eq!(text(&plain), r#"{"type":"text_delta","delta":"a","seq":4}"#);
    let zi = br#"{"version":1,"sequence":9,"type":"session_event","event":{"type":"agent_start"}}"#;
    assert_eq!(
        text(
            &Dialect::Zi
                .rules()
                .event_bytes(zi, 5, Some("run-2"))
                .unwrap()
        ),
        r#"{"version":1,"type":"session_event","event":{"type":"agent_start"},"runId":"run-2","seq":5}"#
    );
    let made = Dialect::Zi
        .rules()
        .gateway_event("agent_end", json!({}), 6, Some("run-2"));
    assert!(
        text(&made).ends_with(r#""runId":"run-2","seq":6}"#),
        "{}",
        text(&made)
    );
    let made = Dialect::Zut
        .rules()
        .gateway_event("done", json!({}), 6, Some("run-2"));
    assert_eq!(text(&made), r#"{"type":"done","run_id":"run-2","seq":6}"#);
}

#[test]
fn answers_name_the_run_in_each_dialect() {
    let zut = br#"{"type":"response","id":"corral-1","command":"prompt","success":true,"data":{"started":true}}"#;
    assert_eq!(Dialect::Zut.rules().run_answer("prompt", zut), Answer::Now);
    assert_eq!(
        Dialect::Zut.rules().run_answer("get_state", zut),
        Answer::Nothing
    );
    let named = Dialect::Zut
        .rules()
        .restore_id(zut, Some(json!("1")), Some("run-7"))
        .unwrap();
    assert!(text(&named).contains(r#""data":{"started":true,"run_id":"run-7"}"#));
    let failed = br#"{"type":"response","id":"corral-1","command":"prompt","success":false}"#;
    assert_eq!(
        Dialect::Zut.rules().run_answer("prompt", failed),
        Answer::NoRun
    );

    let d = Dialect::Letscode.rules();
    let ack = br#"{"type":"ack","id":"corral-2"}"#;
    assert_eq!(d.run_answer("prompt", ack), Answer::Next);
    assert_eq!(d.run_answer("follow_up", ack), Answer::Queued);
    let error = br#"{"type":"error","id":"corral-2","error":"busy","recoverable":true}"#;
    assert_eq!(d.run_answer("prompt", error), Answer::NoRun);
    let named = d.restore_id(ack, None, Some("run-8")).unwrap();
    assert_eq!(text(&named), r#"{"type":"ack","id":null,"run_id":"run-8"}"#);
    assert_eq!(d.run_claim("steer", &Map::new()), Claim::Join);

    let d = Dialect::Zi.rules();
    let prompt = |delivery: &str| {
        let frame = object(json!({"version": 1, "id": "p", "method": "session.prompt",
            "params": {"delivery": delivery, "text": "x"}}));
        d.run_claim("session.prompt", &frame)
    };
    assert_eq!(prompt("direct"), Claim::May);
    assert_eq!(prompt("continue"), Claim::Join);
    assert_eq!(prompt("steer"), Claim::Input);
    let ok = br#"{"version":1,"type":"response","id":"corral-3","ok":true,"result":{}}"#;
    assert_eq!(d.run_answer("session.prompt", ok), Answer::Queued);
    let failed = br#"{"version":1,"type":"response","id":"corral-3","ok":false}"#;
    assert_eq!(d.run_answer("session.prompt", failed), Answer::NoRun);
    assert_eq!(d.run_answer("session.interrupt", ok), Answer::Interrupted);
    assert_eq!(d.run_answer("model.list", ok), Answer::Nothing);
    let compact = object(json!({"method": "command.invoke", "params": {"name": "compact"}}));
    assert_eq!(d.run_claim("command.invoke", &compact), Claim::May);
    let clear = object(json!({"method": "command.invoke", "params": {"name": "clear"}}));
    assert_eq!(d.run_claim("command.invoke", &clear), Claim::None);
    let named = d.restore_id(ok, Some(json!("p")), Some("run-9")).unwrap();
    assert!(text(&named).contains(r#""result":{"runId":"run-9"}"#));
}

#[test]
fn hellos_ask_for_own_runs() {
    let zut = object(json!({"type": "hello", "token": "t", "own_runs": true, "client_id": "3"}));
    let hello = Dialect::Zut.rules().client_hello(&zut).unwrap().unwrap();
    assert_eq!(
        hello.own_runs,
        OwnRuns {
            on: Some(true),
            client_id: Some(3)
        }
    );
    let later = Dialect::Letscode
        .rules()
        .inbound(&object(json!({"cmd": "hello", "own_runs": false})), false);
    assert!(matches!(
        later,
        Inbound::Hello {
            own_runs: OwnRuns {
                on: Some(false),
                ..
            },
            ..
        }
    ));
    let zi = object(
        json!({"version": 1, "id": "h", "method": "connection.hello",
        "params": {"token": "t", "ownRuns": true}}),
    );
    let hello = Dialect::Zi.rules().client_hello(&zi).unwrap().unwrap();
    assert_eq!(hello.own_runs.on, Some(true));
    let bad = object(
        json!({"version": 1, "id": "h", "method": "connection.hello",
        "params": {"ownRuns": 1}}),
    );
    assert!(matches!(
        Dialect::Zi.rules().inbound(&bad, false),
        Inbound::Reject(_)
    ));
    let bad = object(json!({"type": "hello", "own_runs": "yes"}));
    assert!(matches!(
        Dialect::Zut.rules().inbound(&bad, false),
        Inbound::Reject(_)
    ));
}
