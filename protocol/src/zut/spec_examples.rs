//! Every JSON example of `zut-rpc.md`, parsed into the typed model and
//! written back: the result must equal the example.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::*;

fn round_trip<T: DeserializeOwned + Serialize>(example: Value) -> T {
    let typed: T = serde_json::from_value(example.clone()).expect("example parses");
    let back = serde_json::to_value(&typed).expect("serialises");
    assert_eq!(back, example);
    typed
}

fn request(example: Value) -> Request {
    let Value::Object(map) = example.clone() else {
        panic!("not an object")
    };
    let request = Request::from_object(map).expect("request parses");
    assert_eq!(request.to_value(), example);
    request
}

#[test]
fn every_command_example() {
    let hello = request(json!({"id":"0","type":"hello","token":"shared-secret"}));
    assert_eq!(
        hello.command,
        Command::Hello {
            token: Some("shared-secret".into())
        }
    );
    let prompt =
        request(json!({"id":"1","type":"prompt","message":"fix the failing test","images":[]}));
    assert_eq!(prompt.id, Some(RequestId::from("1")));
    request(
        json!({"id":"1","type":"prompt","message":"look","images":[{"mime_type":"image/png","data":"aGk="}]}),
    );
    request(json!({"id":"2","type":"abort"}));
    request(json!({"id":"3","type":"compact"}));
    request(json!({"id":"4","type":"get_state"}));
    request(json!({"id":"5","type":"get_messages"}));
    request(json!({"id":"6","type":"clear"}));
    request(json!({"id":"7","type":"set_model","model":"claude-sonnet-4-5"}));
    let reasoning = request(json!({"id":"8","type":"set_reasoning","reasoning":"max"}));
    assert_eq!(
        reasoning.command,
        Command::SetReasoning {
            reasoning: ReasoningLevel::Max
        }
    );
    request(json!({"id":"8","type":"get_models"}));
    request(json!({"id":"9","type":"ping"}));
    // Numeric ids are echoed as numbers; no id stays no id.
    assert_eq!(
        request(json!({"id":42,"type":"ping"})).id,
        Some(RequestId::Num(42.into()))
    );
    assert_eq!(request(json!({"type":"ping"})).id, None);
}

#[test]
fn every_response_example() {
    let hello: Response = round_trip(
        json!({"type":"response","id":"0","command":"hello","success":true,
        "data":{"protocol_version":1,"version":"0.0.4","provider":"anthropic","model":"claude-opus-4-5"}}),
    );
    let data: HelloData = round_trip(hello.data.unwrap());
    assert_eq!(data.protocol_version, PROTOCOL_VERSION);
    round_trip::<Response>(
        json!({"type":"response","id":"1","command":"prompt","success":true,"data":{"started":true}}),
    );
    round_trip::<Response>(json!({"type":"response","id":"2","command":"abort","success":true}));
    round_trip::<Response>(
        json!({"type":"response","id":"9","command":"ping","success":true,"data":{"pong":true}}),
    );
    round_trip::<Response>(
        json!({"type":"response","command":"ping","success":false,"error":"nope"}),
    );
    let state: StateData = round_trip(json!({
        "provider": "anthropic",
        "model": "claude-opus-4-5",
        "cwd": "/path/to/zut",
        "message_count": 12,
        "busy": false,
        "usage": {"input": 1234, "output": 567, "reasoning": 123, "cache_read": 890, "cache_write": 0,
                  "cache_measured_prompt": 1234, "cache_measured_read": 890, "cost_usd": 0.0123}
    }));
    assert_eq!(state.usage.cache_read, 890);
    round_trip::<ModelsData>(
        json!({"models":[{"id":"claude-opus-4-5","provider":"anthropic",
        "context_window":200000,"max_output":8192,"reasoning":true}]}),
    );
    round_trip::<MessagesData>(json!({"messages":[]}));
}

#[test]
fn message_shape_and_content_blocks() {
    let message: Message = round_trip(json!({
        "role": "user",
        "content": [
            {"type": "text", "text": "..."},
            {"type": "image", "mime_type": "image/png", "bytes": 12345},
            {"type": "tool_call", "id": "toolu_xyz", "name": "read", "args": {"path": "..."}},
            {"type": "tool_result", "call_id": "toolu_xyz", "is_error": false,
             "content": [{"type": "text", "text": "..."}]}
        ],
        "time": "2026-04-19T11:30:00Z"
    }));
    assert!(matches!(
        message.content[1],
        ContentBlock::Image(ImageBlock { bytes: 12345, .. })
    ));
}

#[test]
fn every_event_of_the_table() {
    let content = json!([{"type":"text","text":"hi"}]);
    let usage = json!({"input":1,"output":2,"reasoning":null,"cache_read":3,"cache_write":4,
        "cache_measured_prompt":8,"cache_measured_read":3,"cost_usd":0.5});
    let mut usage_event = usage.clone();
    usage_event["type"] = json!("usage");
    usage_event["cumulative"] = usage.clone();
    let examples = [
        json!({"type":"turn_start","step":1}),
        json!({"type":"request_started","provider":"anthropic","model":"m","scope":"provider","attempt":1,"max_attempts":4}),
        json!({"type":"cache_diagnostics","eligible":true,"mode":"anthropic_cache_control","transport":"sse","continuation":false}),
        json!({"type":"retry_scheduled","scope":"provider","attempt":2,"max_attempts":4,"delay_ms":500}),
        json!({"type":"user_message","content":content,"time":"2026-04-19T11:30:00Z"}),
        json!({"type":"assistant_start"}),
        json!({"type":"text_delta","delta":"Hel"}),
        json!({"type":"tool_use_start","id":"t1","name":"read"}),
        json!({"type":"tool_use_args","id":"t1","delta":"{\"pa"}),
        json!({"type":"tool_use_end","id":"t1"}),
        json!({"type":"tool_call","id":"t1","name":"read","args":{"path":"a"}}),
        json!({"type":"tool_execution_started","id":"t1","name":"read"}),
        json!({"type":"tool_progress","id":"t1","text":"line"}),
        json!({"type":"plan_update","id":"t2","explanation":null,"plan":[{"step":"a","status":"pending"}]}),
        json!({"type":"plan_update","explanation":"why","plan":[]}),
        json!({"type":"tool_result","id":"t1","is_error":false,"content":content}),
        json!({"type":"assistant_message","content":content,"time":"2026-04-19T11:30:01Z"}),
        usage_event,
        json!({"type":"turn_end","stop":"end"}),
        json!({"type":"turn_end","stop":"aborted"}),
        json!({"type":"turn_end","stop":"error","error":"boom"}),
        json!({"type":"turn_recovery","reason":"missing_answer","attempt":1}),
        json!({"type":"done"}),
        json!({"type":"error","message":"careful"}),
        json!({"type":"compact_done","summary":"<text>"}),
        json!({"type":"ext_alert","extension":"x","kind":"bell"}),
        json!({"type":"ext_alert","extension":"x","kind":"bell","reason":"r"}),
        json!({"type":"ext_widget","extension":"x","id":"w","position":"above","title":"T","lines":["a"]}),
        json!({"type":"ext_widget_clear","extension":"x","id":"w"}),
        json!({"type":"ext_chrome_clear","extension":"x"}),
    ];
    for example in examples {
        let event: Event = round_trip(example.clone());
        assert!(
            !matches!(event, Event::Unknown(_)),
            "{example} parsed as unknown"
        );
        assert_eq!(event.type_name(), example["type"].as_str().unwrap());
    }
}

#[test]
fn unknown_events_and_fields_survive() {
    let future = json!({"type":"something_new","a":[1,2]});
    let event: Event = round_trip(future);
    assert_eq!(event.type_name(), "something_new");
    let grown: Event = round_trip(json!({"type":"text_delta","delta":"x","seq":7,"lane":"main"}));
    let Event::TextDelta(delta) = grown else {
        panic!()
    };
    assert_eq!(delta.extra["seq"], json!(7));
    let block: ContentBlock = round_trip(json!({"type":"audio","seconds":3}));
    assert!(matches!(block, ContentBlock::Unknown(_)));
    // Serialised events put `type` first.
    let line = serde_json::to_string(&Event::Done(Empty::default())).unwrap();
    assert_eq!(line, r#"{"type":"done"}"#);
}

#[test]
fn bad_requests_are_typed_errors_with_what_is_known() {
    let parse = |v: Value| match v {
        Value::Object(m) => Request::from_object(m),
        _ => unreachable!(),
    };
    let e = parse(json!({"id":"1","type":"nope"})).unwrap_err();
    assert_eq!(
        (e.id, e.command.as_deref()),
        (Some(RequestId::from("1")), Some("nope"))
    );
    assert!(e.message.contains("unknown command"));
    let e = parse(json!({"id":"2","type":"set_reasoning","reasoning":"huge"})).unwrap_err();
    assert_eq!(e.command.as_deref(), Some("set_reasoning"));
    assert!(e.message.contains("huge"), "{}", e.message);
    let e = parse(json!({"id":"3","type":"prompt"})).unwrap_err();
    assert!(
        e.message.contains("missing field `message`"),
        "{}",
        e.message
    );
    let e = parse(json!({"id":"4","type":"prompt","message":5})).unwrap_err();
    assert!(e.message.contains("invalid type"), "{}", e.message);
    let e = parse(json!({"id":{"x":1},"type":"ping"})).unwrap_err();
    assert!(e.message.contains("`id` must be"));
    let e = parse(json!({"id":"5"})).unwrap_err();
    assert!(e.message.contains("missing field `type`"));
    // Unknown fields in a known command are ignored, not rejected.
    assert!(parse(json!({"type":"ping","future":true})).is_ok());
}
