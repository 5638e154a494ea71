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
fn zut_stamps_seq_without_touching_other_bytes() {
    let line = br#"{"type":"text_delta","delta":"a\u2028b","future":{"x":[1, 2]}}"#;
    let stamped = zut::stamp_seq(line, 7).unwrap();
    assert_eq!(
        text(&stamped),
        r#"{"type":"text_delta","delta":"a\u2028b","future":{"x":[1, 2]},"seq":7}"#
    );
    assert_eq!(text(&zut::stamp_seq(b" { } ", 1).unwrap()), r#"{ "seq":1}"#);
    assert!(zut::stamp_seq(b"[1]", 1).is_none());
}

#[test]
fn zut_lines_and_requests() {
    let reply = Dialect::Zut
        .rules()
        .outbound(br#"{"type":"response","id":"corral-3","data":{}}"#);
    assert_eq!(
        reply,
        Some(Outbound::Reply {
            id: "corral-3".into(),
            last: true
        })
    );
    assert_eq!(
        Dialect::Zut.rules().outbound(br#"{"type":"done","seq":1}"#),
        Some(Outbound::Event(EventKind::RunEnd))
    );
    assert_eq!(Dialect::Zut.rules().outbound(b"not json"), None);
    assert_eq!(Dialect::Zut.rules().outbound(b"[]"), None);
    let prompt = object(json!({"id": 5, "type": "prompt", "message": "hi"}));
    assert_eq!(
        Dialect::Zut.rules().inbound(&prompt, false),
        Inbound::Forward {
            id: Some(json!(5)),
            command: "prompt".into()
        }
    );
    let Inbound::Reject(refused) = Dialect::Zut.rules().inbound(&prompt, true) else {
        panic!("observers may not prompt");
    };
    assert!(text(&refused).contains(r#""success":false"#));
    let restored = Dialect::Zut
        .rules()
        .restore_id(
            br#"{"type":"response","id":"corral-9","success":true}"#,
            None,
            None,
        )
        .unwrap();
    assert_eq!(text(&restored), r#"{"type":"response","success":true}"#);
}

#[test]
fn zut_made_up_frames() {
    let r = zut::response(
        Some(&json!("1")),
        Some("prompt"),
        Err("observers may not prompt".into()),
    );
    assert_eq!(
        text(&r),
        r#"{"type":"response","id":"1","command":"prompt","success":false,"error":"observers may not prompt"}"#
    );
    let e = zut::event("child_started", json!({"pid": 42, "restarts": 0}), 3, None);
    assert_eq!(
        text(&e),
        r#"{"type":"child_started","pid":42,"restarts":0,"seq":3}"#
    );
}

#[test]
fn letscode_tells_control_messages_from_events() {
    let d = Dialect::Letscode.rules();
    assert_eq!(
        d.outbound(br#"{"type":"ack","id":"corral-1"}"#),
        Some(Outbound::Reply {
            id: "corral-1".into(),
            last: false
        })
    );
    assert_eq!(
        d.outbound(br#"{"type":"error","id":"corral-2","error":"busy","recoverable":true}"#),
        Some(Outbound::Reply {
            id: "corral-2".into(),
            last: true
        })
    );
    // An agent error event has no `id`; a control error with a null id
    // cannot be routed.
    assert_eq!(
        d.outbound(br#"{"type":"error","error":"overloaded"}"#),
        Some(Outbound::Event(EventKind::Other))
    );
    assert!(matches!(
        d.outbound(br#"{"type":"error","id":null,"error":"x","recoverable":true}"#),
        Some(Outbound::Drop(_))
    ));
    assert_eq!(
        d.outbound(br#"{"type":"agent_start","messages":[]}"#),
        Some(Outbound::Event(EventKind::RunStart))
    );
    assert!(matches!(
        d.outbound(br#"{"type":"bye"}"#),
        Some(Outbound::Drop(_))
    ));
    let restored = d
        .restore_id(br#"{"type":"done","id":"corral-4"}"#, None, None)
        .unwrap();
    assert_eq!(text(&restored), r#"{"type":"done","id":null}"#);
}

#[test]
fn letscode_commands_hello_and_bye() {
    let d = Dialect::Letscode.rules();
    let hello = object(json!({"cmd": "hello", "id": "h", "token": "t", "resume_after": 4}));
    assert_eq!(
        d.client_hello(&hello),
        Some(Ok(ClientHello {
            id: Some(json!("h")),
            token: Some("t".into()),
            resume_after: Some(4),
            own_runs: OwnRuns::default(),
        }))
    );
    let wrong = object(json!({"cmd": "hello", "protocol": "letscode-rpc/2"}));
    assert!(matches!(d.client_hello(&wrong), Some(Err(_))));
    let Inbound::Hello {
        refusal: Some(refusal),
        ..
    } = d.inbound(&wrong, false)
    else {
        panic!("a major mismatch is refused");
    };
    assert!(text(&refusal).contains(r#""fatal":true"#));
    assert_eq!(
        d.inbound(&object(json!({"cmd": "bye"})), true),
        Inbound::Leave { id: None }
    );
    assert!(matches!(
        d.inbound(&object(json!({"cmd": "prompt", "text": "x"})), true),
        Inbound::Reject(_)
    ));
    let Inbound::Reject(missing) = d.inbound(&object(json!({"id": 3})), false) else {
        panic!("a command needs `cmd`");
    };
    assert_eq!(
        text(&missing),
        r#"{"type":"error","id":3,"error":"missing field `cmd`","recoverable":true}"#
    );
    assert_eq!(
        text(&d.request_failed(Some(&json!("r1")), "prompt", true, "died")),
        r#"{"type":"done","id":"r1"}"#
    );
}

#[test]
fn zi_frames_are_stamped_per_connection() {
    let frame = zi::ok(&json!("s"), "session.get_state", json!({}));
    assert_eq!(
        text(&frame),
        r#"{"version":1,"type":"response","id":"s","method":"session.get_state","ok":true,"result":{}}"#
    );
    assert_eq!(
        text(&zi::stamp(&frame, 9)),
        r#"{"version":1,"sequence":9,"type":"response","id":"s","method":"session.get_state","ok":true,"result":{}}"#
    );
    assert_eq!(text(&zi::stamp(b"{}", 1)), r#"{"sequence":1}"#);
    assert_eq!(
        text(&zi::stamp(br#"{"a":1}"#, 2)),
        r#"{"sequence":2,"a":1}"#
    );
    let line =
        br#"{"version":1,"sequence":41,"type":"session_event","event":{"type":"agent_end"}}"#;
    assert_eq!(
        Dialect::Zi.rules().outbound(line),
        Some(Outbound::Event(EventKind::RunEnd))
    );
    let event = Dialect::Zi.rules().event_bytes(line, 7, None).unwrap();
    assert_eq!(
        text(&event),
        r#"{"version":1,"type":"session_event","event":{"type":"agent_end"},"seq":7}"#
    );
    assert!(zi::is_session_event(&event));
    // Another field order takes the slow path to the same form.
    let other = br#"{"type":"session_event","sequence":3,"version":1,"event":{}}"#;
    assert_eq!(
        text(&Dialect::Zi.rules().event_bytes(other, 8, None).unwrap()),
        r#"{"version":1,"type":"session_event","event":{},"seq":8}"#
    );
    let restored = Dialect::Zi
        .rules()
        .restore_id(
            br#"{"version":1,"sequence":5,"type":"response","id":"corral-2","ok":true}"#,
            Some(json!("mine")),
            None,
        )
        .unwrap();
    assert_eq!(
        text(&restored),
        r#"{"version":1,"type":"response","id":"mine","ok":true}"#
    );
}

#[test]
fn zi_requests() {
    let d = Dialect::Zi.rules();
    let hello = object(
        json!({"version": 1, "id": "a", "method": "connection.hello",
        "params": {"token": "t", "resumeAfter": 3}}),
    );
    assert_eq!(
        d.client_hello(&hello),
        Some(Ok(ClientHello {
            id: Some(json!("a")),
            token: Some("t".into()),
            resume_after: Some(3),
            own_runs: OwnRuns::default(),
        }))
    );
    let set = object(
        json!({"version": 1, "id": "e", "method": "connection.set_events",
        "params": {"mode": "none"}}),
    );
    assert_eq!(
        d.inbound(&set, true),
        Inbound::SetFilter {
            id: json!("e"),
            all: false
        }
    );
    let prompt = object(json!({"version": 1, "id": "p", "method": "session.prompt",
        "params": {"text": "hi"}}));
    assert!(matches!(d.inbound(&prompt, false), Inbound::Forward { .. }));
    assert!(matches!(d.inbound(&prompt, true), Inbound::Reject(_)));
    let Inbound::Reject(no_id) = d.inbound(&object(json!({"version": 1})), false) else {
        panic!("an id is required");
    };
    assert!(text(&no_id).contains(r#""code":"invalid_request""#));
    let v2 = object(json!({"version": 2, "id": "x", "method": "session.get_state"}));
    let Inbound::Reject(v2) = d.inbound(&v2, false) else {
        panic!("version 2 is refused");
    };
    assert!(text(&v2).contains(r#""id":"x""#));
    let refusal = d.refusal(Some(&json!("a")), "unauthorized", "bad token");
    assert!(text(&refusal).starts_with(r#"{"version":1,"sequence":1,"type":"protocol_error""#));
}

#[test]
fn events_are_routed_by_their_leading_type_without_a_full_parse() {
    assert_eq!(
        leading_type(br#"{"type":"text_delta","delta":"x"}"#),
        Some("text_delta")
    );
    assert_eq!(leading_type(br#" {"type":"done","x":1} "#), Some("done"));
    // Other shapes take the full parse.
    assert_eq!(leading_type(br#"{"type":"done"}"#), None);
    assert_eq!(leading_type(br#"{"type":"a\"b","x":1}"#), None);
    assert_eq!(leading_type(br#"{"id":"1","type":"response"}"#), None);
    // A letscode control message still gets its id read.
    assert_eq!(
        Dialect::Letscode
            .rules()
            .outbound(br#"{"type":"done","id":"corral-7"}"#),
        Some(Outbound::Reply {
            id: "corral-7".into(),
            last: true
        })
    );
    // A big update is an event either way.
    let update = format!(
        r#"{{"type":"message_update","message":{{"text":"{}"}},"stream_event":{{}}}}"#,
        "x".repeat(100_000)
    );
    assert_eq!(
        Dialect::Letscode.rules().outbound(update.as_bytes()),
        Some(Outbound::Event(EventKind::Other))
    );
    let start = br#"{"version":1,"sequence":12,"type":"session_event","event":{"type":"agent_start","x":1}}"#;
    assert_eq!(
        Dialect::Zi.rules().outbound(start),
        Some(Outbound::Event(EventKind::RunStart))
    );
}

/// A W3C trace parent, as a forwarded request carries it.
const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn with_context(dialect: Dialect, frame: Value) -> Value {
    let mut frame = object(frame);
    dialect.rules().put_trace_context(&mut frame, PARENT.into());
    Value::Object(frame)
}

#[test]
fn each_dialect_carries_the_context_where_its_agent_reads_it() {
    let zut = with_context(Dialect::Zut, json!({"type": "prompt", "message": "m"}));
    assert_eq!(zut["traceparent"], PARENT);
    let letscode = with_context(Dialect::Letscode, json!({"cmd": "prompt", "text": "t"}));
    assert_eq!(letscode["traceparent"], PARENT);
    let acp = json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
        "params": {"sessionId": "s", "_meta": {"x": 1}}});
    let acp = with_context(Dialect::Acp, acp);
    assert_eq!(
        acp["params"]["_meta"],
        json!({"x": 1, "traceparent": PARENT})
    );
    let bare = json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
        "params": {"sessionId": "s"}});
    let bare = with_context(Dialect::Acp, bare);
    assert_eq!(bare["params"]["_meta"]["traceparent"], PARENT);
    // Zi refuses unknown fields: its records stay as they are.
    let zi = json!({"version": 1, "id": "1", "method": "prompt", "params": {}});
    assert_eq!(with_context(Dialect::Zi, zi.clone()), zi);
}

#[test]
fn every_dialect_is_named_alike_on_the_command_line_in_the_file_and_by_its_rules() {
    use clap::ValueEnum;
    for dialect in Dialect::all() {
        let name = dialect.rules().name();
        let flag = dialect.to_possible_value().unwrap();
        assert_eq!(flag.get_name(), name);
        assert_eq!(Dialect::named(name), Some(*dialect));
        let from_file: Dialect = serde_json::from_value(json!(name)).unwrap();
        assert_eq!(from_file, *dialect);
    }
}

#[test]
fn each_dialect_reads_the_cost_its_agent_reports() {
    let cases: [(Dialect, &[u8], Option<ReportedCost>); 10] = [
        (
            Dialect::Zut,
            br#"{"type":"usage","input":10,"output":2,"cost_usd":0.0315,"cumulative":{"cost_usd":1.5}}"#,
            Some(ReportedCost::Call(0.0315)),
        ),
        // Another event that mentions a cost is not a report.
        (
            Dialect::Zut,
            br#"{"type":"text_delta","delta":"\"cost_usd\": 5"}"#,
            None,
        ),
        (
            Dialect::Zut,
            br#"{"type":"usage","cost_usd":-1}"#,
            None,
        ),
        (
            Dialect::Letscode,
            br#"{"type":"turn_end","turn":1,"stop":"end","usage":{"input":10,"cost_usd":0.02}}"#,
            Some(ReportedCost::Call(0.02)),
        ),
        (
            Dialect::Letscode,
            br#"{"type":"turn_end","turn":1,"stop":"end","usage":null}"#,
            None,
        ),
        (
            Dialect::Zi,
            br#"{"version":1,"sequence":9,"type":"session_event","event":{"type":"usage","turn":{"cost_usd":0.5},"cumulative":{"cost_usd":2.0}}}"#,
            Some(ReportedCost::Call(0.5)),
        ),
        (
            Dialect::Zi,
            br#"{"version":1,"type":"response","id":"1","result":{"cost_usd":3}}"#,
            None,
        ),
        (
            Dialect::Acp,
            br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"usage_update","used":53000,"size":200000,"cost":{"amount":0.045,"currency":"USD"}}}}"#,
            Some(ReportedCost::SessionTotal(0.045)),
        ),
        // A cost in another currency cannot be counted against USD.
        (
            Dialect::Acp,
            br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"usage_update","used":1,"size":2,"cost":{"amount":1,"currency":"EUR"}}}}"#,
            None,
        ),
        (
            Dialect::Acp,
            br#"{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{"sessionUpdate":"usage_update","used":1,"size":2}}}"#,
            None,
        ),
    ];
    for (dialect, line, expected) in cases {
        assert_eq!(
            dialect.rules().reported_cost(line),
            expected,
            "{dialect:?}: {}",
            String::from_utf8_lossy(line)
        );
    }
}

#[test]
fn no_dialect_lets_a_client_send_the_agent_an_mcp_selection() {
    let frames = [
        (
            "zut",
            json!({"id": "1", "type": "mcp_select", "servers": ["docs"]}),
        ),
        (
            "letscode",
            json!({"id": "1", "cmd": "mcp_select", "servers": ["docs"]}),
        ),
        (
            "zi",
            json!({"version": 1, "id": "1", "method": "mcp_select", "params": {"servers": ["docs"]}}),
        ),
        (
            "zi",
            json!({"version": 1, "id": "1", "method": "mcp.select", "params": {"servers": ["docs"]}}),
        ),
        (
            "acp",
            json!({"jsonrpc": "2.0", "id": 1, "method": "_corral/mcp/select", "params": {"servers": ["docs"]}}),
        ),
    ];
    for (dialect, frame) in frames {
        let rules = Dialect::named(dialect).unwrap().rules();
        match rules.inbound(&object(frame), false) {
            Inbound::Reject(reply) => {
                assert!(
                    text(&reply).contains("mcpServers"),
                    "{dialect}: {}",
                    text(&reply)
                )
            }
            other => panic!("{dialect}: {other:?}"),
        }
    }
    let notification = json!({"jsonrpc": "2.0", "method": "_corral/mcp/select", "params": {}});
    let acp = Dialect::named("acp").unwrap().rules();
    assert!(matches!(
        acp.inbound(&object(notification), false),
        Inbound::Ignore
    ));
}
