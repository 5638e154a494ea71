//! End-to-end: `corral-agent rpc --dialect zi` driven over stdin/stdout with
//! the echo provider or the mock LLM.

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use corral_e2e::harness::{AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

/// A Zi client that checks `version` and the `sequence` of every frame.
struct Zi {
    proc: AgentProc,
    sequence: u64,
}

impl Zi {
    async fn start(proc: AgentProc) -> (Zi, Value) {
        let mut zi = Zi { proc, sequence: 0 };
        let ready = zi.recv().await;
        assert_eq!(ready["type"], "ready");
        assert_eq!(ready["sequence"], 1);
        (zi, ready)
    }

    async fn echo() -> (Zi, Value) {
        Zi::start(
            AgentSpawn::rpc(&["--dialect", "zi", "--provider", "echo"])
                .spawn()
                .await,
        )
        .await
    }

    async fn mock(mock: &MockLlm) -> Zi {
        let proc = AgentSpawn::rpc(&[
            "--dialect",
            "zi",
            "--provider",
            "anthropic",
            "--model",
            "claude-sonnet-4-5",
        ])
        .env("ANTHROPIC_API_KEY", "test-key")
        .arg("--base-url")
        .arg(mock.anthropic_base_url())
        .spawn()
        .await;
        Zi::start(proc).await.0
    }

    async fn recv(&mut self) -> Value {
        let frame = self.proc.recv().await;
        self.sequence += 1;
        assert_eq!(frame["version"], 1, "{frame}");
        assert_eq!(frame["sequence"], self.sequence, "{frame}");
        frame
    }

    async fn send(&mut self, value: Value) {
        self.proc.send(value).await;
    }

    /// Frames up to and including the response (or protocol error) for `id`.
    async fn until(&mut self, id: &str) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let last = frame["id"] == id && frame["type"] != "session_event";
            frames.push(frame);
            if last {
                return frames;
            }
        }
    }

    /// One request and its answer; `params` is left out when empty (the
    /// methods without parameters refuse even `{}`).
    async fn call(&mut self, id: &str, method: &str, params: Value) -> Value {
        let mut request = json!({"version": 1, "id": id, "method": method});
        if params != json!({}) {
            request["params"] = params;
        }
        self.send(request).await;
        self.until(id).await.pop().unwrap()
    }
}

fn session_events(frames: &[Value]) -> Vec<String> {
    frames
        .iter()
        .filter(|f| f["type"] == "session_event")
        .map(|f| f["event"]["type"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn ready_snapshot_and_documented_examples() {
    let (mut zi, ready) = Zi::echo().await;
    let state = &ready["state"];
    for key in [
        "sessionId",
        "activity",
        "model",
        "thinkingLevel",
        "supportedThinkingLevels",
        "steeringMode",
        "followUpMode",
        "queuedInputs",
        "workPlan",
        "messageCount",
        "compaction",
        "retry",
        "contextUsage",
    ] {
        assert!(state.get(key).is_some(), "ready state lacks {key}: {state}");
    }
    assert_eq!(state["activity"], json!({"type": "idle"}));
    assert_eq!(
        state["queuedInputs"],
        json!({"steering": [], "followUp": []})
    );
    assert_eq!(state["messageCount"], 0);

    // The document's request example, verbatim.
    zi.send(json!({ "version": 1, "id": "state-1", "method": "session.get_state" }))
        .await;
    let response = zi.recv().await;
    assert_eq!(response["sequence"], 2);
    assert_eq!(response["type"], "response");
    assert_eq!(response["id"], "state-1");
    assert_eq!(response["method"], "session.get_state");
    assert_eq!(response["ok"], true);
    assert_eq!(response["result"]["sessionId"], state["sessionId"]);
}

#[tokio::test]
async fn rejected_records_are_recoverable_protocol_errors() {
    let (mut zi, _) = Zi::echo().await;
    zi.proc.send_raw(b"{not json\n").await;
    let e = zi.recv().await;
    assert_eq!(e["type"], "protocol_error");
    assert_eq!(e["code"], "invalid_json", "{e}");
    assert!(e["message"].is_string() && e.get("error").is_none(), "{e}");
    for (record, code, id) in [
        (
            json!({"version": 2, "id": "v2", "method": "session.get_state"}),
            "unsupported_version",
            json!("v2"),
        ),
        (
            json!({"version": 1, "id": "u", "method": "session.nope"}),
            "unknown_method",
            json!("u"),
        ),
        (
            json!({"version": 1, "method": "session.get_state"}),
            "invalid_request",
            Value::Null,
        ),
        (
            json!({"id": "nov", "method": "session.get_state"}),
            "unsupported_version",
            json!("nov"),
        ),
        (
            json!({"version": 1, "id": "x".repeat(257), "method": "model.list"}),
            "invalid_request",
            Value::Null,
        ),
        (
            json!({"version": 1, "id": "p", "method": "session.prompt",
                "params": {"delivery": "prompt", "text": "hi"}}),
            "invalid_request",
            json!("p"),
        ),
    ] {
        zi.send(record).await;
        let e = zi.recv().await;
        assert_eq!(e["type"], "protocol_error", "{e}");
        assert_eq!(e["code"], code, "{e}");
        assert_eq!(e.get("id").cloned().unwrap_or(Value::Null), id);
    }
    zi.proc.send_raw(b"[1]\n").await;
    let e = zi.recv().await;
    assert_eq!(e["code"], "invalid_request", "{e}");
    let ok = zi.call("after", "session.get_state", json!({})).await;
    assert_eq!(ok["ok"], true);
}

#[tokio::test]
async fn prompt_then_await_idle_returns_the_cycle_completion() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("first answer"));
    mock.push(Turn::text("the final answer"));
    let mut zi = Zi::mock(&mock).await;

    // Every frame from the first prompt on: the first run may stream
    // before the later requests are answered.
    let mut frames = Vec::new();
    zi.send(json!({"version": 1, "id": "p1", "method": "session.prompt",
                   "params": {"delivery": "direct", "text": "hi", "completionId": "cycle"}}))
        .await;
    frames.extend(zi.until("p1").await);
    let r = frames.last().unwrap().clone();
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        r["result"],
        json!({"delivery": "direct", "completionRevision": 1})
    );
    // Whether the first run is still going (a follow-up of it) or over (a
    // new run), `continue` joins the cycle.
    zi.send(json!({"version": 1, "id": "p2", "method": "session.prompt",
                   "params": {"delivery": "continue", "text": "more", "completionId": "cycle"}}))
        .await;
    frames.extend(zi.until("p2").await);
    let r = frames.last().unwrap().clone();
    assert_eq!(r["result"]["completionRevision"], 2, "{r}");

    zi.send(json!({"version": 1, "id": "idle", "method": "session.await_idle", "params": {"completionId": "cycle"}}))
        .await;
    frames.extend(zi.until("idle").await);
    let events = session_events(&frames);
    for expected in [
        "agent_start",
        "message_start",
        "turn_start",
        "message_update",
        "message_end",
        "turn_end",
        "agent_end",
        "agent_settled",
    ] {
        assert!(
            events.iter().any(|e| e == expected),
            "{expected} missing from {events:?}"
        );
    }
    let delta: String = frames
        .iter()
        .filter(|f| f["event"]["assistantMessageEvent"]["type"] == "text_delta")
        .filter_map(|f| f["event"]["assistantMessageEvent"]["delta"].as_str())
        .collect();
    assert_eq!(delta, "first answerthe final answer");
    let idle = frames.last().unwrap();
    assert_eq!(idle["ok"], true, "{idle}");
    assert_eq!(
        idle["result"],
        json!({"completionRevision": 2, "messageCount": 4, "completion": {
            "text": "the final answer", "stopReason": "stop",
            "originalBytes": 16, "omittedBytes": 0}})
    );
    let settled = frames
        .iter()
        .rposition(|f| f["event"]["type"] == "agent_settled");
    assert_eq!(
        settled,
        Some(frames.len() - 2),
        "agent_settled just before the answer"
    );

    let page = zi
        .call("m", "session.get_messages", json!({"start": 1, "limit": 2}))
        .await;
    assert_eq!(page["result"]["start"], 1);
    assert_eq!(page["result"]["total"], 4);
    assert_eq!(page["result"]["nextStart"], 3);
    assert_eq!(page["result"]["messages"].as_array().unwrap().len(), 2);
    let last = zi
        .call("m2", "session.get_messages", json!({"start": 3}))
        .await;
    assert_eq!(last["result"]["nextStart"], Value::Null);
    let plain = zi.call("i2", "session.await_idle", json!({})).await;
    assert_eq!(plain["result"], json!({}));
}

#[tokio::test]
async fn capacity_duplicates_and_interrupt() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: (0..100).map(|i| format!("c{i} ")).collect(),
        delay: Duration::from_millis(100),
    });
    let mut zi = Zi::mock(&mock).await;
    let r = zi
        .call(
            "p",
            "session.prompt",
            json!({"delivery": "direct", "text": "go"}),
        )
        .await;
    assert_eq!(r["result"], json!({"delivery": "direct"}));
    let busy = zi
        .call(
            "p2",
            "session.prompt",
            json!({"delivery": "direct", "text": "again"}),
        )
        .await;
    assert_eq!(busy["ok"], false, "{busy}");
    assert_eq!(busy["error"]["code"], "operation_failed");
    for i in 0..32 {
        zi.send(json!({"version": 1, "id": format!("w{i}"), "method": "session.await_idle"}))
            .await;
    }
    let full = zi.call("w32", "session.await_idle", json!({})).await;
    assert_eq!(full["ok"], false);
    assert_eq!(full["error"]["code"], "capacity");
    // Reusing an in-flight id, even for the reserved interruption slot.
    let dup = zi.call("w0", "session.interrupt", json!({})).await;
    assert_eq!(dup["type"], "protocol_error");
    assert_eq!(dup["code"], "invalid_request");
    let state = zi.call("s", "session.get_state", json!({})).await;
    assert_eq!(
        state["result"]["activity"]["type"], "running",
        "the duplicate was not launched"
    );

    // The interrupt uses the reserved slot, and answers after settlement.
    zi.send(json!({"version": 1, "id": "int", "method": "session.interrupt"}))
        .await;
    let mut frames = Vec::new();
    while frames
        .iter()
        .filter(|f: &&Value| f["type"] == "response")
        .count()
        < 33
    {
        frames.push(zi.recv().await);
    }
    let int = frames.iter().find(|f| f["id"] == "int").unwrap();
    assert_eq!(int["result"], json!({}));
    let waiters = frames
        .iter()
        .filter(|f| f["type"] == "response" && f["ok"] == true)
        .count();
    assert_eq!(waiters, 33, "32 idle waiters and the interrupt");
    assert!(session_events(&frames).contains(&"agent_end".to_string()));
    let state = zi.call("s2", "session.get_state", json!({})).await;
    assert_eq!(state["result"]["activity"]["type"], "idle");
    // The id can be reused after its response.
    let again = zi.call("w0", "session.await_idle", json!({})).await;
    assert_eq!(again["ok"], true);
}

#[tokio::test]
async fn events_none_suppresses_only_session_events() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("quiet"));
    let mut zi = Zi::mock(&mock).await;
    let r = zi
        .call("e", "connection.set_events", json!({"mode": "none"}))
        .await;
    assert_eq!(r["result"], json!({"mode": "none"}));
    zi.call(
        "p",
        "session.prompt",
        json!({"delivery": "direct", "text": "hi"}),
    )
    .await;
    zi.send(json!({"version": 1, "id": "i", "method": "session.await_idle"}))
        .await;
    let frames = zi.until("i").await;
    assert!(
        frames.iter().all(|f| f["type"] != "session_event"),
        "{frames:?}"
    );
    let r = zi.call("e2", "connection.set_events", json!({})).await;
    assert_eq!(r["type"], "protocol_error", "the mode is required");
    let r = zi
        .call("e3", "connection.set_events", json!({"mode": "activity"}))
        .await;
    assert_eq!(r["result"], json!({"mode": "activity"}));
}

#[tokio::test]
async fn models_thinking_commands_and_outcomes() {
    let mock = MockLlm::start().await;
    let mut zi = Zi::mock(&mock).await;
    let list = zi.call("ml", "model.list", json!({})).await;
    let first = &list["result"]["models"][0];
    let mut keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "configured",
            "contextWindow",
            "id",
            "input",
            "maxTokens",
            "name",
            "provider",
            "reasoning"
        ]
    );
    let sel = zi
        .call(
            "ms",
            "model.select",
            json!({"provider": "anthropic", "id": "claude-haiku-4-5"}),
        )
        .await;
    assert_eq!(sel["result"]["model"]["id"], "claude-haiku-4-5", "{sel}");
    let bad = zi
        .call(
            "mb",
            "model.select",
            json!({"provider": "openai", "id": "gpt-4.1"}),
        )
        .await;
    assert_eq!(bad["error"]["code"], "not_found");

    let levels = zi.call("tl", "thinking.list", json!({})).await;
    assert!(levels["result"]["levels"]
        .as_array()
        .unwrap()
        .contains(&json!("high")));
    let t = zi
        .call(
            "ts",
            "thinking.select",
            json!({"level": "high", "scope": "project"}),
        )
        .await;
    assert_eq!(
        t["result"],
        json!({"scope": "project", "requested": "high", "effective": "high"})
    );
    let state = zi.call("s", "session.get_state", json!({})).await;
    assert_eq!(state["result"]["thinkingLevel"], "high");

    let commands = zi.call("cl", "command.list", json!({})).await;
    assert_eq!(commands["result"]["commands"][0]["name"], "compact");
    let unknown = zi
        .call(
            "ci",
            "command.invoke",
            json!({"name": "deploy", "arguments": ""}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], "not_found");
    let clear = zi
        .call(
            "cc",
            "command.invoke",
            json!({"name": "clear", "arguments": ""}),
        )
        .await;
    assert_eq!(clear["ok"], true);

    let outcomes = zi.call("o", "session.get_outcomes", json!({})).await;
    assert_eq!(
        outcomes["result"],
        json!({"start": 0, "total": 0, "nextStart": null, "outcomes": []})
    );
}

#[tokio::test]
async fn an_oversized_record_is_fatal_invalid_framing() {
    let (mut zi, _) = Zi::echo().await;
    let mut record = vec![b' '; 16 * 1024 * 1024 + 1];
    record.push(b'\n');
    zi.proc.send_raw(&record).await;
    let frame = zi.recv().await;
    assert_eq!(frame["type"], "protocol_error");
    assert_eq!(frame["code"], "invalid_framing");
    assert_eq!(
        frame["message"],
        "RPC input records cannot exceed 16777216 bytes"
    );
    assert_eq!(zi.proc.wait().await, Some(1));
}

#[tokio::test]
async fn invalid_utf8_is_fatal_invalid_framing() {
    let (mut zi, _) = Zi::echo().await;
    zi.proc.send_raw(b"{\"version\":1,\"id\":\"\xff\"}\n").await;
    let frame = zi.recv().await;
    assert_eq!(frame["type"], "protocol_error");
    assert_eq!(frame["code"], "invalid_framing");
    assert_eq!(frame["message"], "RPC input must be valid UTF-8");
    assert!(frame.get("id").is_none());
    assert_eq!(zi.proc.wait().await, Some(1));
}

#[tokio::test]
async fn eof_interrupts_active_work_and_exits_zero() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: (0..200).map(|i| format!("c{i} ")).collect(),
        delay: Duration::from_millis(100),
    });
    let mut zi = Zi::mock(&mock).await;
    zi.call(
        "p",
        "session.prompt",
        json!({"delivery": "direct", "text": "go"}),
    )
    .await;
    let started = std::time::Instant::now();
    zi.proc.close_stdin();
    assert_eq!(zi.proc.wait().await, Some(0));
    assert!(started.elapsed() < Duration::from_secs(8));
}

/// The snapshot follows the session: `contextUsage` after a model call,
/// `compaction` while a `compact` command runs, and back to idle (with the
/// context unmeasured) once the transcript was replaced by its summary.
#[tokio::test]
async fn the_snapshot_reports_context_usage_and_compaction() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("an answer"));
    mock.push(Turn::Slow {
        chunks: (0..20).map(|i| format!("summary{i} ")).collect(),
        delay: Duration::from_millis(25),
    });
    let mut zi = Zi::mock(&mock).await;
    let state = zi.call("s0", "session.get_state", json!({})).await;
    assert_eq!(
        state["result"]["contextUsage"],
        json!({"type": "unavailable", "reason": "not_measured"})
    );
    zi.call(
        "p",
        "session.prompt",
        json!({"delivery": "direct", "text": "go"}),
    )
    .await;
    zi.call("w", "session.await_idle", json!({})).await;
    let state = zi.call("s1", "session.get_state", json!({})).await;
    let usage = &state["result"]["contextUsage"];
    assert_eq!(usage["type"], "available", "{usage}");
    assert!(usage["tokens"].as_u64().unwrap() > 0, "{usage}");
    assert_eq!(usage["contextWindow"], 200_000, "{usage}");
    assert!(usage["percent"].as_f64().unwrap() > 0.0, "{usage}");

    zi.send(json!({"version": 1, "id": "c", "method": "command.invoke",
        "params": {"name": "compact", "arguments": ""}}))
        .await;
    let state = zi.call("s2", "session.get_state", json!({})).await;
    assert_eq!(state["result"]["compaction"], json!({"type": "running"}));
    let done = zi.until("c").await.pop().unwrap();
    assert_eq!(done["ok"], true, "{done}");
    let state = zi.call("s3", "session.get_state", json!({})).await;
    assert_eq!(state["result"]["compaction"], json!({"type": "idle"}));
    assert_eq!(state["result"]["retry"], json!({"type": "idle"}));
    assert_eq!(state["result"]["contextUsage"]["type"], "unavailable");
}

/// `session.interrupt` aborts the active run and discards the input queued
/// for it: the follow-up never runs (no second model request), and the
/// session is idle with an empty queue when it answers.
#[tokio::test]
async fn interrupt_discards_queued_work() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: (0..100).map(|i| format!("c{i} ")).collect(),
        delay: Duration::from_millis(20),
    });
    mock.push(Turn::text("never asked for"));
    let mut zi = Zi::mock(&mock).await;
    let mut frames = Vec::new();
    let prompt = |id: &str, delivery: &str| {
        json!({"version": 1, "id": id, "method": "session.prompt",
            "params": {"delivery": delivery, "text": "some text"}})
    };
    zi.send(prompt("p1", "direct")).await;
    frames.extend(zi.until("p1").await);
    zi.send(prompt("p2", "follow_up")).await;
    frames.extend(zi.until("p2").await);
    zi.send(json!({"version": 1, "id": "q", "method": "session.get_state"}))
        .await;
    frames.extend(zi.until("q").await);
    let queued = &frames.last().unwrap()["result"]["queuedInputs"];
    assert_eq!(queued["followUp"][0]["text"], "some text", "{queued}");
    while !frames
        .iter()
        .any(|f| f["event"]["type"] == "message_update")
    {
        frames.push(zi.recv().await);
    }
    zi.send(json!({"version": 1, "id": "int", "method": "session.interrupt"}))
        .await;
    frames.extend(zi.until("int").await);
    let idle = zi.call("w", "session.await_idle", json!({})).await;
    assert_eq!(idle["ok"], true, "{idle}");
    let state = zi.call("s", "session.get_state", json!({})).await;
    assert_eq!(state["result"]["activity"]["type"], "idle");
    assert_eq!(
        state["result"]["queuedInputs"],
        json!({"steering": [], "followUp": []})
    );
    let events = session_events(&frames);
    let starts = events.iter().filter(|e| *e == "agent_start").count();
    let ends = events.iter().filter(|e| *e == "agent_end").count();
    assert_eq!((starts, ends), (1, 1), "{events:?}");
    assert_eq!(mock.requests().len(), 1, "the queued prompt never ran");
    assert_eq!(mock.remaining(), 1);
}

/// Zi RPC has no permission request: asking the client is refused at start
/// (usage error, exit 2) with a line saying which dialects can ask, while
/// a dialect that can ask starts in that mode.
#[tokio::test]
async fn permission_mode_ask_is_refused_for_zi_only() {
    let mut zi = AgentSpawn::rpc(&[
        "--dialect",
        "zi",
        "--provider",
        "echo",
        "--permission-mode",
        "ask",
    ])
    .spawn()
    .await;
    assert_eq!(zi.wait().await, Some(2));
    let stderr = zi.stderr();
    assert!(
        stderr.contains("--permission-mode ask needs a dialect that can ask the client"),
        "{stderr}"
    );
    let mut acp = AgentSpawn::rpc(&[
        "--dialect",
        "acp",
        "--provider",
        "echo",
        "--permission-mode",
        "ask",
    ])
    .spawn()
    .await;
    let answer = acp
        .send_recv(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 1}}))
        .await;
    assert_eq!(answer["id"], 1, "{answer}");
    assert!(answer.get("result").is_some(), "{answer}");
}
