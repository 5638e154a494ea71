//! `corral-agent rpc --dialect acp` as a complete ACP v1 agent, driven
//! line by line: the session capabilities (`session/list`,
//! `session/resume`, `session/close`), `available_commands_update` and
//! the `/compact` and `/clear` commands, `configOptions` with
//! `session/set_config_option`, `usage_update` after each model call,
//! `_meta.traceparent` in and out, and `_corral/session/history`.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use corral_e2e::harness::{AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use corral_e2e::otlp::OtlpReceiver;
use serde_json::{json, Value};

/// The trace context the client sends (its own span).
const CLIENT_TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// One ACP connection to a spawned agent.
struct Acp {
    agent: AgentProc,
    next_id: u64,
    session: String,
}

impl Acp {
    async fn start(mock: &MockLlm, extra: &[&str]) -> Acp {
        let mut args = vec!["--dialect", "acp", "--no-context-files"];
        args.extend_from_slice(extra);
        let agent = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &args)
            .spawn()
            .await;
        let mut acp = Acp {
            agent,
            next_id: 0,
            session: String::new(),
        };
        let (_, init) = acp.call("initialize", json!({"protocolVersion": 1})).await;
        assert_eq!(
            init["result"]["agentCapabilities"]["sessionCapabilities"],
            json!({"list": {}, "resume": {}, "close": {}})
        );
        acp
    }

    fn cwd(&self) -> String {
        self.agent.cwd.to_str().unwrap().to_string()
    }

    /// Sends a request; the frames before its answer, and the answer.
    async fn call(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        self.next_id += 1;
        let id = self.next_id;
        self.agent
            .send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        let mut frames = self
            .agent
            .recv_until(|f| f["id"] == id && f.get("method").is_none())
            .await;
        let answer = frames.pop().unwrap();
        (frames, answer)
    }

    /// `session/new`, and the update that follows its answer.
    async fn new_session(&mut self) -> (Value, Value) {
        let cwd = self.cwd();
        let (_, answer) = self
            .call("session/new", json!({"cwd": cwd, "mcpServers": []}))
            .await;
        self.session = answer["result"]["sessionId"].as_str().unwrap().to_string();
        let after = self.agent.recv().await;
        (answer, after)
    }

    /// A prompt's updates (their `update`s) and its answer.
    async fn prompt(&mut self, text: &str) -> (Vec<Value>, Value) {
        let session = self.session.clone();
        let (frames, answer) = self
            .call(
                "session/prompt",
                json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
            )
            .await;
        let updates = frames
            .iter()
            .map(|f| f["params"]["update"].clone())
            .collect();
        (updates, answer)
    }
}

fn of_kind<'a>(updates: &'a [Value], kind: &str) -> Vec<&'a Value> {
    updates
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

fn option<'a>(options: &'a Value, id: &str) -> &'a Value {
    options
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["id"] == id)
        .unwrap_or_else(|| panic!("no option {id} in {options}"))
}

#[tokio::test]
async fn the_session_is_listed_closed_and_resumed() {
    let mock = MockLlm::start().await;
    mock.push_all([Turn::text("Hello there"), Turn::text("Back again")]);
    let mut acp = Acp::start(&mock, &[]).await;
    let (_, empty) = acp.call("session/list", json!({})).await;
    assert_eq!(empty["result"], json!({"sessions": []}));

    let (_, commands) = acp.new_session().await;
    let (updates, answer) = acp.prompt("Say hello\nplease").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    assert!(!of_kind(&updates, "agent_message_chunk").is_empty());
    assert_eq!(
        commands["params"]["update"]["sessionUpdate"],
        "available_commands_update"
    );

    let (_, listed) = acp.call("session/list", Value::Null).await;
    let sessions = listed["result"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0]["sessionId"], acp.session.as_str());
    assert_eq!(sessions[0]["title"], "Say hello");
    let cwd = acp.agent.cwd.canonicalize().unwrap();
    assert_eq!(sessions[0]["cwd"], cwd.to_str().unwrap());
    assert!(sessions[0]["updatedAt"].as_str().unwrap().ends_with('Z'));
    assert!(listed["result"].get("nextCursor").is_none());
    let (_, elsewhere) = acp.call("session/list", json!({"cwd": "/"})).await;
    assert_eq!(elsewhere["result"]["sessions"], json!([]));
    let (_, bad_cursor) = acp.call("session/list", json!({"cursor": "x"})).await;
    assert_eq!(bad_cursor["error"]["code"], -32602);

    let session = acp.session.clone();
    let (_, closed) = acp
        .call("session/close", json!({"sessionId": session}))
        .await;
    assert_eq!(closed["result"], json!({}));
    let (_, refused) = acp.prompt("anyone there?").await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    assert!(refused["error"]["message"]
        .as_str()
        .unwrap()
        .contains("closed"));
    let (_, other) = acp
        .call("session/close", json!({"sessionId": "corral-nope"}))
        .await;
    assert_eq!(other["error"]["code"], -32002);

    // Resume: the session's state, no replay, then its commands.
    let cwd = acp.cwd();
    let (before, resumed) = acp
        .call("session/resume", json!({"sessionId": session, "cwd": cwd}))
        .await;
    assert!(before.is_empty(), "no replay before the answer: {before:?}");
    assert_eq!(resumed["result"]["modes"]["currentModeId"], "auto");
    assert!(resumed["result"]["configOptions"].is_array());
    let after = acp.agent.recv().await;
    assert_eq!(
        after["params"]["update"]["sessionUpdate"],
        "available_commands_update"
    );
    let (_, answer) = acp.prompt("anyone there?").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let second = mock.requests()[1].body["messages"].clone();
    assert_eq!(
        second.as_array().unwrap().len(),
        3,
        "the resumed session kept its conversation: {second}"
    );
}

#[tokio::test]
async fn commands_config_options_and_usage() {
    let mock = MockLlm::start().await;
    mock.push_all([
        Turn::text("first answer"),
        Turn::text("Summary: we said hello."),
        Turn::text("after the summary"),
    ]);
    let mut acp = Acp::start(&mock, &["--model", "claude-sonnet-4-5"]).await;
    let (new, commands) = acp.new_session().await;
    let names: Vec<&Value> = commands["params"]["update"]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect();
    assert_eq!(names, ["compact", "clear"]);
    assert_eq!(commands["params"]["sessionId"], acp.session.as_str());

    let options = &new["result"]["configOptions"];
    assert_eq!(option(options, "mode")["currentValue"], "auto");
    assert_eq!(option(options, "mode")["category"], "mode");
    let model = option(options, "model");
    assert_eq!(model["type"], "select");
    assert_eq!(model["currentValue"], "claude-sonnet-4-5");
    assert!(model["options"]
        .as_array()
        .unwrap()
        .iter()
        .any(|o| o["value"] == "claude-haiku-4-5"));
    assert_eq!(option(options, "reasoning")["currentValue"], "off");

    // A new model and reasoning level: answered with the whole set,
    // announced, and used by the next model call.
    let session = acp.session.clone();
    let (announced, set) = acp
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "claude-haiku-4-5"}),
        )
        .await;
    assert_eq!(
        option(&set["result"]["configOptions"], "model")["currentValue"],
        "claude-haiku-4-5"
    );
    assert_eq!(announced.len(), 1);
    let update = &announced[0]["params"]["update"];
    assert_eq!(update["sessionUpdate"], "config_option_update");
    assert_eq!(update["configOptions"], set["result"]["configOptions"]);
    let (_, set) = acp
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "reasoning", "value": "high"}),
        )
        .await;
    assert_eq!(
        option(&set["result"]["configOptions"], "reasoning")["currentValue"],
        "high"
    );
    let (announced, _) = acp
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "mode", "value": "read-only"}),
        )
        .await;
    let kinds: Vec<&Value> = announced
        .iter()
        .map(|f| &f["params"]["update"]["sessionUpdate"])
        .collect();
    assert_eq!(kinds, ["current_mode_update", "config_option_update"]);
    let (_, wrong) = acp
        .call(
            "session/set_config_option",
            json!({"sessionId": session, "configId": "model", "value": "gpt-5"}),
        )
        .await;
    assert_eq!(wrong["error"]["code"], -32602);

    let (updates, answer) = acp.prompt("hello").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let request = &mock.requests()[0].body;
    assert_eq!(request["model"], "claude-haiku-4-5");
    assert!(request.get("thinking").is_some(), "reasoning on: {request}");
    let usage = of_kind(&updates, "usage_update");
    assert_eq!(usage.len(), 1, "one model call, one report: {updates:?}");
    assert!(usage[0]["used"].as_u64().unwrap() > 0);
    assert_eq!(usage[0]["size"], 200_000);
    assert_eq!(usage[0]["cost"]["currency"], "USD");
    assert!(usage[0]["cost"]["amount"].as_f64().unwrap() > 0.0);

    // `/compact` summarises; `/clear` empties the conversation.
    let (updates, answer) = acp.prompt("/compact").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let told: String = of_kind(&updates, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(told.starts_with("Compacting"), "{told}");
    assert!(told.ends_with("Summary: we said hello."), "{told}");
    let (_, answer) = acp.prompt("go on").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let after_compact = mock.requests()[2].body["messages"].to_string();
    assert!(
        after_compact.contains("Summary: we said hello.")
            && !after_compact.contains("first answer"),
        "the model continues from the summary alone: {after_compact}"
    );
    let (_, answer) = acp.prompt("/clear").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");
    let (_, listed) = acp.call("session/list", json!({})).await;
    assert_eq!(listed["result"]["sessions"], json!([]), "nothing left");
    let (_, wrong) = acp.prompt("/clear now").await;
    assert_eq!(wrong["error"]["code"], -32602);
}

#[tokio::test]
async fn the_history_pages_what_load_replays_and_leaves_the_session_alone() {
    let mock = MockLlm::start().await;
    mock.push_all([
        Turn::tool_call("bash", json!({"command": "echo hi"})),
        Turn::text("It said hi."),
    ]);
    let mut acp = Acp::start(&mock, &[]).await;
    acp.new_session().await;
    let (_, answer) = acp.prompt("run echo").await;
    assert_eq!(answer["result"]["stopReason"], "end_turn");

    let session = acp.session.clone();
    let (sent, history) = acp
        .call("_corral/session/history", json!({"sessionId": session}))
        .await;
    assert!(sent.is_empty(), "nothing but the answer: {sent:?}");
    assert!(history["result"].get("nextCursor").is_none());
    let updates = history["result"]["updates"].as_array().unwrap().clone();
    let cwd = acp.cwd();
    let (replayed, loaded) = acp
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert!(loaded.get("result").is_some(), "{loaded}");
    let replayed: Vec<Value> = replayed.iter().map(|f| f["params"].clone()).collect();
    assert_eq!(updates, replayed, "the history is the load's replay");
    let kinds: Vec<&Value> = updates
        .iter()
        .map(|u| &u["update"]["sessionUpdate"])
        .collect();
    assert_eq!(
        kinds,
        [
            "user_message_chunk",
            "tool_call",
            "tool_call_update",
            "agent_message_chunk"
        ]
    );
    let (_, stale) = acp
        .call(
            "_corral/session/history",
            json!({"sessionId": session, "cursor": "h1.1.0000000000000000"}),
        )
        .await;
    assert_eq!(stale["error"]["code"], -32602);
    let (_, other) = acp
        .call(
            "_corral/session/history",
            json!({"sessionId": "corral-other"}),
        )
        .await;
    assert_eq!(other["error"]["code"], -32002);
}

#[tokio::test]
async fn trace_context_passes_through_meta() {
    let mock = MockLlm::start().await;
    mock.push_all([Turn::text("untraced"), Turn::text("traced")]);
    let mut acp = Acp::start(&mock, &[]).await;
    acp.new_session().await;
    let session = acp.session.clone();
    let (frames, _) = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}],
                   "_meta": {"traceparent": CLIENT_TRACE, "tracestate": "vendor=1"}}),
        )
        .await;
    assert!(!frames.is_empty());
    for frame in &frames {
        assert_eq!(
            frame["params"]["_meta"],
            json!({"traceparent": CLIENT_TRACE, "tracestate": "vendor=1"}),
            "without an exporter the caller's context passes on: {frame}"
        );
    }

    // With an exporter, the updates name the agent's own run span, in
    // the caller's trace.
    let receiver = OtlpReceiver::start().await;
    let endpoint = receiver.endpoint();
    let mut acp = Acp::start(&mock, &["--otlp-endpoint", &endpoint]).await;
    acp.new_session().await;
    let session = acp.session.clone();
    let (frames, _) = acp
        .call(
            "session/prompt",
            json!({"sessionId": session, "prompt": [{"type": "text", "text": "hi"}],
                   "_meta": {"traceparent": CLIENT_TRACE}}),
        )
        .await;
    let sent = frames[0]["params"]["_meta"]["traceparent"]
        .as_str()
        .unwrap()
        .to_string();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(
        parts[1], "4bf92f3577b34da6a3ce929d0e0e4736",
        "the caller's trace"
    );
    assert_ne!(parts[2], "00f067aa0ba902b7", "the agent's own span");
    let spans = receiver
        .wait_for(Duration::from_secs(10), |spans| {
            spans.iter().any(|s| s.name == "prompt")
        })
        .await;
    let prompt = spans.iter().find(|s| s.name == "prompt").unwrap();
    assert_eq!(prompt.span_id, parts[2], "the run's span: {spans:?}");
    assert_eq!(prompt.parent_span_id, "00f067aa0ba902b7");
}
