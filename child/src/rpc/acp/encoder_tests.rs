use serde_json::json;

use super::*;
use crate::agent::permission::{PermissionAsk, Risk};
use crate::rpc::trace_context::TraceContext;
use crate::tools::PlanUpdate;
use crate::transcript::Block;

fn encoder() -> AcpEncoder {
    let mut encoder = AcpEncoder::new(PathBuf::from("/p"));
    frames(
        &mut encoder,
        vec![Output::Frame(
            Private::Session { id: "s1".into() }.to_frame(),
        )],
    );
    encoder
}

fn frames(encoder: &mut AcpEncoder, outputs: Vec<Output>) -> Vec<Value> {
    let mut lines = Vec::new();
    for output in outputs {
        encoder.encode(output, &mut lines);
    }
    lines
        .iter()
        .map(|line| serde_json::from_slice(line).expect("a JSON line"))
        .collect()
}

fn start(request: Value) -> Private {
    Private::RunStart {
        request,
        compact: false,
        trace: None,
    }
}

fn run(events: Vec<AgentEvent>) -> Vec<Value> {
    run_as(start(json!(7)), events)
}

fn run_as(start: Private, events: Vec<AgentEvent>) -> Vec<Value> {
    let mut encoder = encoder();
    let mut outputs = vec![Output::Frame(start.to_frame())];
    outputs.extend(events.into_iter().map(Output::Event));
    frames(&mut encoder, outputs)
}

fn turn_end(stop: Stop) -> AgentEvent {
    AgentEvent::TurnEnd { stop, error: None }
}

#[test]
fn a_prompt_streams_updates_and_ends_with_its_answer() {
    let out = run(vec![
        AgentEvent::TurnStart { step: 1 },
        AgentEvent::ThinkingDelta("hm".into()),
        AgentEvent::TextDelta("Fixing.".into()),
        AgentEvent::ToolCall {
            id: "t1".into(),
            name: "edit".into(),
            args: json!({"path": "a.rs", "old_text": "x", "new_text": "y"}),
        },
        AgentEvent::ToolExecutionStarted {
            id: "t1".into(),
            name: "edit".into(),
        },
        AgentEvent::ToolResult {
            id: "t1".into(),
            is_error: false,
            content: vec![Block::text("Replaced 1 occurrence in a.rs")],
        },
        AgentEvent::PlanUpdate {
            id: "t2".into(),
            update: PlanUpdate {
                explanation: None,
                plan: vec![PlanItem {
                    step: "fix".into(),
                    status: "completed".into(),
                }],
            },
        },
        turn_end(Stop::ToolUse),
        AgentEvent::TurnStart { step: 2 },
        AgentEvent::TextDelta("Done.".into()),
        turn_end(Stop::End),
        AgentEvent::Done,
    ]);
    for frame in &out[..out.len() - 1] {
        assert_eq!(frame["method"], "session/update", "{frame}");
        assert_eq!(frame["params"]["sessionId"], "s1");
        assert_eq!(frame["jsonrpc"], "2.0");
    }
    let updates: Vec<&Value> = out[..out.len() - 1]
        .iter()
        .map(|f| &f["params"]["update"])
        .collect();
    assert_eq!(
        updates[0],
        &json!({"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hm"}})
    );
    assert_eq!(updates[1]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(updates[2]["sessionUpdate"], "tool_call");
    assert_eq!(updates[2]["status"], "pending");
    assert_eq!(updates[2]["kind"], "edit");
    assert_eq!(updates[2]["content"][0]["path"], "/p/a.rs");
    assert_eq!(
        updates[3],
        &json!({"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "in_progress"})
    );
    assert_eq!(updates[4]["status"], "completed");
    assert_eq!(updates[4]["content"][0]["type"], "diff");
    assert_eq!(
        updates[4]["content"][1]["content"]["text"],
        "Replaced 1 occurrence in a.rs"
    );
    assert_eq!(
        updates[5],
        &json!({"sessionUpdate": "plan", "entries": [{"content": "fix", "priority": "medium", "status": "completed"}]})
    );
    assert_eq!(
        out.last().unwrap(),
        &json!({"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "end_turn"}})
    );
}

fn stop_reason(events: Vec<AgentEvent>) -> Value {
    let out = run(events);
    let answer = out.last().expect("an answer");
    assert_eq!(answer["id"], 7);
    answer["result"]["stopReason"].clone()
}

#[test]
fn stop_reasons_follow_how_the_run_ended() {
    let done = AgentEvent::Done;
    assert_eq!(
        stop_reason(vec![turn_end(Stop::Length), done.clone()]),
        "max_tokens"
    );
    assert_eq!(
        stop_reason(vec![
            turn_end(Stop::ToolUse),
            AgentEvent::Error("stopped".into()),
            done.clone()
        ]),
        "max_turn_requests"
    );
    assert_eq!(
        stop_reason(vec![AgentEvent::Refused, turn_end(Stop::End), done.clone()]),
        "refusal"
    );
    assert_eq!(
        stop_reason(vec![turn_end(Stop::Aborted), done.clone()]),
        "cancelled"
    );
    let mut encoder = encoder();
    let cancelled_late = frames(
        &mut encoder,
        vec![
            Output::Frame(start(json!("p")).to_frame()),
            Output::Frame(Private::Cancel.to_frame()),
            Output::Event(turn_end(Stop::End)),
            Output::Event(AgentEvent::Done),
            Output::Frame(
                Private::Discarded {
                    request: json!("q"),
                }
                .to_frame(),
            ),
        ],
    );
    assert_eq!(cancelled_late[0]["result"]["stopReason"], "cancelled");
    assert_eq!(
        cancelled_late[1],
        json!({"jsonrpc": "2.0", "id": "q", "result": {"stopReason": "cancelled"}})
    );
}

#[test]
fn a_failed_run_answers_with_an_error() {
    let out = run(vec![
        AgentEvent::TurnEnd {
            stop: Stop::Error,
            error: Some("provider down".into()),
        },
        AgentEvent::Done,
    ]);
    assert_eq!(
        out.last().unwrap(),
        &json!({"jsonrpc": "2.0", "id": 7, "error": {"code": -32603, "message": "provider down"}})
    );
}

#[test]
fn a_permission_request_is_a_request_to_the_client() {
    let ask = PermissionAsk {
        id: "perm-1".into(),
        call_id: "t1".into(),
        tool: "bash".into(),
        args: json!({"command": "rm -rf build"}),
        risk: Risk::Execute,
    };
    let out = run(vec![AgentEvent::PermissionRequest(ask)]);
    let request = &out[0];
    assert_eq!(request["id"], "perm-1");
    assert_eq!(request["method"], "session/request_permission");
    assert_eq!(request["params"]["sessionId"], "s1");
    assert_eq!(
        request["params"]["toolCall"],
        json!({"toolCallId": "t1", "title": "Run `rm -rf build`", "kind": "execute",
               "status": "pending", "rawInput": {"command": "rm -rf build"}})
    );
    let kinds: Vec<&Value> = request["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| &o["kind"])
        .collect();
    assert_eq!(
        kinds,
        ["allow_once", "allow_always", "reject_once", "reject_always"]
    );
    assert_eq!(request["params"]["options"][0]["optionId"], "allow_once");
}

#[test]
fn progress_accumulates_in_the_call_and_frames_pass_through() {
    let out = run(vec![
        AgentEvent::ToolCall {
            id: "t1".into(),
            name: "bash".into(),
            args: json!({"command": "make"}),
        },
        AgentEvent::ToolProgress {
            id: "t1".into(),
            text: "one".into(),
        },
        AgentEvent::ToolProgress {
            id: "t1".into(),
            text: "two".into(),
        },
    ]);
    assert_eq!(
        out[2]["params"]["update"]["content"][0]["content"]["text"],
        "one\ntwo\n"
    );
    let mut encoder = encoder();
    let passed = frames(
        &mut encoder,
        vec![Output::Frame(
            json!({"jsonrpc": "2.0", "id": 1, "result": {}}),
        )],
    );
    assert_eq!(passed, [json!({"jsonrpc": "2.0", "id": 1, "result": {}})]);
}

fn usage(input: u64, output: u64, cost_usd: f64) -> Usage {
    Usage {
        input,
        output,
        cost_usd,
        ..Usage::default()
    }
}

#[test]
fn each_model_call_reports_context_and_the_session_cost() {
    let out = run(vec![
        AgentEvent::RequestStarted {
            provider: "anthropic",
            model: "claude-sonnet-4-5".into(),
            attempt: 1,
            max_attempts: 3,
        },
        AgentEvent::Usage {
            turn: Usage {
                cache_read: 100,
                cache_write: 10,
                ..usage(1000, 50, 0.25)
            },
            cumulative: usage(5000, 500, 1.5),
        },
        AgentEvent::RequestStarted {
            provider: "openai",
            model: "local-model".into(),
            attempt: 1,
            max_attempts: 3,
        },
        AgentEvent::Usage {
            turn: usage(10, 5, 0.0),
            cumulative: usage(5010, 505, 1.5),
        },
    ]);
    assert_eq!(
        out[0]["params"]["update"],
        json!({"sessionUpdate": "usage_update", "used": 1160, "size": 200000,
               "cost": {"amount": 1.5, "currency": "USD"}})
    );
    assert_eq!(
        out[1]["params"]["update"]["size"], 0,
        "a model the catalogue lacks"
    );
    assert_eq!(out[1]["params"]["update"]["used"], 15);
}

#[test]
fn a_compaction_answers_with_its_outcome() {
    let compact = || Private::RunStart {
        request: json!(7),
        compact: true,
        trace: None,
    };
    let done = run_as(
        compact(),
        vec![
            AgentEvent::TextDelta("We fixed a.rs.".into()),
            AgentEvent::CompactDone {
                summary: "We fixed a.rs.".into(),
            },
            AgentEvent::Done,
        ],
    );
    let texts: Vec<&Value> = done[..2]
        .iter()
        .map(|f| &f["params"]["update"]["content"]["text"])
        .collect();
    assert_eq!(texts, [COMPACTING, "We fixed a.rs."]);
    assert_eq!(done[2]["result"]["stopReason"], "end_turn");
    let failed = run_as(
        compact(),
        vec![
            AgentEvent::Error("nothing to compact: the transcript is empty".into()),
            AgentEvent::Done,
        ],
    );
    assert_eq!(
        failed[1]["error"]["message"],
        "nothing to compact: the transcript is empty"
    );
}

#[test]
fn a_traced_run_writes_its_context_on_what_it_sends() {
    let trace = TraceContext {
        traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        tracestate: Some("corral=1".into()),
    };
    let ask = PermissionAsk {
        id: "perm-1".into(),
        call_id: "t1".into(),
        tool: "bash".into(),
        args: json!({"command": "make"}),
        risk: Risk::Execute,
    };
    let out = run_as(
        Private::RunStart {
            request: json!(7),
            compact: false,
            trace: Some(trace.clone()),
        },
        vec![
            AgentEvent::TextDelta("hi".into()),
            AgentEvent::PermissionRequest(ask),
            turn_end(Stop::End),
            AgentEvent::Done,
        ],
    );
    let meta = json!({"traceparent": trace.traceparent, "tracestate": "corral=1"});
    assert_eq!(out[0]["params"]["_meta"], meta);
    assert_eq!(out[1]["params"]["_meta"], meta);
    assert_eq!(
        out[2],
        json!({"jsonrpc": "2.0", "id": 7, "result": {"stopReason": "end_turn"}})
    );
    let untraced = run(vec![AgentEvent::TextDelta("hi".into())]);
    assert!(untraced[0]["params"].get("_meta").is_none());
}
