//! One test per point of difference where corral now does what the Zi
//! reference server does (`rpc/protocol.ts`, `rpc/rpc-mode.ts`).

use std::time::Duration;

use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

use super::conn::{event_type, Conn};
use super::peer::{Peer, Target};
use super::{provider_down, zi_gateway, DOWN};

/// A Zi agent on the mock, spawned as the reference client spawns it
/// (`args` replaces the client's arguments when given).
async fn direct(mock: &MockLlm, dir: &tempfile::TempDir, args: Option<&[&str]>) -> Conn {
    let target = Target::Direct {
        base_url: mock.anthropic_base_url(),
    };
    Conn::open(Peer::spawn(&target, dir.path(), args)).await
}

fn prompt(id: &str, delivery: &str, text: &str) -> Value {
    json!({"version": 1, "id": id, "method": "session.prompt",
        "params": {"delivery": delivery, "text": text}})
}

/// A slow answer, so that a run is still going while a test acts.
fn slow(mock: &MockLlm, chunks: usize) {
    mock.push(Turn::Slow {
        chunks: (0..chunks).map(|i| format!("c{i} ")).collect(),
        delay: Duration::from_millis(50),
    });
}

/// Point 1: `direct` is the idle prompt; `--no-session` is accepted in
/// the client's argument order and in the document's.
#[tokio::test]
async fn point1_direct_delivery_and_no_session() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().to_string_lossy().into_owned();
    let document_order = ["--mode", "rpc", "--no-session", "--cwd", cwd.as_str()];
    for args in [None, Some(&document_order[..])] {
        mock.push(Turn::text("hello"));
        let mut zi = direct(&mock, &dir, args).await;
        zi.send(prompt("1", "direct", "hi")).await;
        let r = zi.until("1").await.pop().unwrap();
        assert_eq!(r["result"], json!({"delivery": "direct"}), "{args:?}: {r}");
        let idle = zi.call("2", "session.await_idle", None).await;
        assert_eq!(idle["result"], json!({}));
    }
    let mut zi = direct(&mock, &dir, None).await;
    zi.send(prompt("p", "prompt", "hi")).await;
    let e = zi.recv().await;
    assert_eq!(e["type"], "protocol_error", "{e}");
    assert_eq!(e["code"], "invalid_request");
    assert_eq!(
        e["message"],
        "Prompt delivery must be direct, steer, follow_up, or continue"
    );
}

/// Point 3: `protocol_error` has `code` and `message` at the top level,
/// with the reference's codes, from the agent and from the gateway alike.
#[tokio::test]
async fn point3_protocol_error_shape_and_codes() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (_gateway, attach) = zi_gateway(&mock, &dir.path().join("projects")).await;
    let direct_target = Target::Direct {
        base_url: mock.anthropic_base_url(),
    };
    for target in [direct_target, attach] {
        let mut zi = Conn::open(Peer::spawn(&target, dir.path(), None)).await;
        zi.peer.send_raw(b"not json\n").await;
        let e = zi.recv().await;
        assert_eq!(
            (&e["type"], &e["code"]),
            (&json!("protocol_error"), &json!("invalid_json")),
            "{target:?}: {e}"
        );
        assert!(e["message"].is_string() && e.get("error").is_none(), "{e}");
        for (record, code, id) in [
            (
                json!({"version": 2, "id": "v", "method": "session.get_state"}),
                "unsupported_version",
                json!("v"),
            ),
            (
                json!({"version": 1, "id": "u", "method": "session.nope"}),
                "unknown_method",
                json!("u"),
            ),
            (
                json!({"version": 1, "id": "", "method": "session.get_state"}),
                "invalid_request",
                Value::Null,
            ),
        ] {
            zi.send(record).await;
            let e = zi.recv().await;
            assert_eq!(e["type"], "protocol_error", "{target:?}: {e}");
            assert_eq!(e["code"], code, "{target:?}: {e}");
            assert_eq!(e.get("id").cloned().unwrap_or(Value::Null), id, "{e}");
        }
        let ok = zi.call("s", "session.get_state", None).await;
        assert_eq!(ok["ok"], true, "the connection survives: {ok}");
    }
}

/// Point 4: invalid UTF-8 is one `protocol_error` with code
/// `invalid_framing` (no invented frame type), then exit 1.
#[tokio::test]
async fn point4_framing_errors_are_protocol_errors() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut zi = direct(&mock, &dir, None).await;
    zi.peer.send_raw(b"{\"version\":1,\"id\":\"\xff\"}\n").await;
    let e = zi.recv().await;
    assert_eq!(e["type"], "protocol_error", "{e}");
    assert_eq!(e["code"], "invalid_framing");
    assert_eq!(e["message"], "RPC input must be valid UTF-8");
    assert!(e.get("id").is_none());
    assert_eq!(zi.peer.exit_within(Duration::from_secs(10)).await, Some(1));
}

/// Point 5: `await_idle` with a `completionId` answers the reference's
/// shape; a watch that is not active fails.
#[tokio::test]
async fn point5_await_idle_with_a_completion_id() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("the answer"));
    let dir = tempfile::tempdir().unwrap();
    let mut zi = direct(&mock, &dir, None).await;
    zi.send(json!({"version": 1, "id": "p", "method": "session.prompt",
        "params": {"delivery": "direct", "text": "q", "completionId": "cycle"}}))
        .await;
    let r = zi.until("p").await.pop().unwrap();
    assert_eq!(
        r["result"],
        json!({"delivery": "direct", "completionRevision": 1})
    );
    let idle = zi
        .call(
            "w",
            "session.await_idle",
            Some(json!({"completionId": "cycle"})),
        )
        .await;
    assert_eq!(
        idle["result"],
        json!({"completionRevision": 1, "messageCount": 2, "completion": {
            "text": "the answer", "stopReason": "stop", "originalBytes": 10, "omittedBytes": 0}}),
        "{idle}"
    );
    let other = zi
        .call(
            "o",
            "session.await_idle",
            Some(json!({"completionId": "other"})),
        )
        .await;
    assert_eq!(other["ok"], false, "{other}");
    assert_eq!(other["error"]["code"], "operation_failed");
    assert_eq!(
        other["error"]["message"],
        "Completion watch is not active: other"
    );
}

/// Point 6: a failed run and an aborted run leave an assistant message
/// that says so; the failure is not sent to the model again.
#[tokio::test]
async fn point6_failed_and_aborted_runs_are_recorded() {
    let mock = MockLlm::start().await;
    provider_down(&mock);
    let dir = tempfile::tempdir().unwrap();
    let mut zi = direct(&mock, &dir, None).await;
    zi.send(json!({"version": 1, "id": "p", "method": "session.prompt",
        "params": {"delivery": "direct", "text": "q", "completionId": "c"}}))
        .await;
    zi.until("p").await;
    let idle = zi
        .call(
            "w",
            "session.await_idle",
            Some(json!({"completionId": "c"})),
        )
        .await;
    let completion = &idle["result"]["completion"];
    assert_eq!(completion["stopReason"], "error", "{idle}");
    assert!(
        completion["error"].as_str().unwrap().contains(DOWN),
        "{idle}"
    );
    let page = zi.call("m", "session.get_messages", None).await;
    let last = page["result"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (&last["role"], &last["stopReason"]),
        (&json!("assistant"), &json!("error"))
    );
    assert!(
        last["errorMessage"].as_str().unwrap().contains(DOWN),
        "{last}"
    );

    slow(&mock, 200);
    zi.send(prompt("p2", "direct", "again")).await;
    zi.until_frame(|f| f["event"]["assistantMessageEvent"]["type"] == "text_delta")
        .await;
    let sent = mock.requests().last().unwrap().body.clone();
    let roles: Vec<&Value> = sent["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["role"])
        .collect();
    assert!(
        roles.iter().all(|r| *r == "user"),
        "the failure stays out: {sent}"
    );
    zi.call("i", "session.interrupt", None).await;
    let page = zi.call("m2", "session.get_messages", None).await;
    let last = page["result"]["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["stopReason"], "aborted", "{last}");
    assert!(last["errorMessage"].is_string(), "{last}");
}

/// Point 7: `direct` while running is refused; `continue` while running is
/// a queued follow-up of the active run (listed as `{text}`), taken in
/// the same run; `agent_settled` follows the last `agent_end`; event modes.
#[tokio::test]
async fn point7_queueing_settlement_and_event_modes() {
    let mock = MockLlm::start().await;
    slow(&mock, 20);
    mock.push(Turn::text("the follow-up answer"));
    let dir = tempfile::tempdir().unwrap();
    let mut zi = direct(&mock, &dir, None).await;
    let mut frames = Vec::new();
    zi.send(prompt("p", "direct", "first")).await;
    frames.extend(zi.until("p").await);
    zi.send(prompt("busy", "direct", "refused")).await;
    frames.extend(zi.until("busy").await);
    let busy = frames.last().unwrap().clone();
    assert_eq!(busy["ok"], false, "{busy}");
    assert_eq!(busy["error"]["code"], "operation_failed");
    assert_eq!(
        busy["error"]["message"],
        "streamingBehavior is required while the agent is running"
    );
    zi.send(prompt("c", "continue", "and then?")).await;
    frames.extend(zi.until("c").await);
    assert_eq!(
        frames.last().unwrap()["result"],
        json!({"delivery": "continue"})
    );
    zi.send(json!({"version": 1, "id": "s", "method": "session.get_state"}))
        .await;
    frames.extend(zi.until("s").await);
    let queued = &frames.last().unwrap()["result"]["queuedInputs"];
    assert_eq!(queued["followUp"][0]["text"], "and then?", "{queued}");
    zi.send(json!({"version": 1, "id": "w", "method": "session.await_idle"}))
        .await;
    frames.extend(zi.until("w").await);
    let events: Vec<&str> = frames.iter().filter_map(event_type).collect();
    let starts = events.iter().filter(|e| **e == "agent_start").count();
    assert_eq!(starts, 1, "the follow-up ran in the same run: {events:?}");
    assert_eq!(events.last(), Some(&"agent_settled"), "{events:?}");
    let end = events.iter().rposition(|e| *e == "agent_end").unwrap();
    assert_eq!(
        end + 1,
        events.len() - 1,
        "agent_settled right after agent_end"
    );
    assert_eq!(mock.requests().len(), 2);

    // A follow-up while idle stays queued and starts nothing.
    zi.send(prompt("f", "follow_up", "later")).await;
    assert_eq!(zi.until("f").await.len(), 1, "no events: nothing started");
    let state = zi.call("s2", "session.get_state", None).await;
    assert_eq!(state["result"]["activity"]["type"], "idle");
    assert_eq!(
        state["result"]["queuedInputs"]["followUp"][0]["text"],
        "later"
    );

    for mode in ["none", "activity", "all"] {
        let r = zi
            .call(mode, "connection.set_events", Some(json!({"mode": mode})))
            .await;
        assert_eq!(r["result"], json!({"mode": mode}), "{r}");
    }
    let missing = zi.call("m", "connection.set_events", Some(json!({}))).await;
    assert_eq!(missing["type"], "protocol_error", "{missing}");
}

/// Point 8: the reference's strict decoding.
#[tokio::test]
async fn point8_strict_decoding() {
    let mock = MockLlm::start().await;
    let dir = tempfile::tempdir().unwrap();
    let mut zi = direct(&mock, &dir, None).await;
    let request = |method: &str, params: Value| json!({"version": 1, "id": "r", "method": method, "params": params});
    for record in [
        json!({"version": 1, "id": "r", "method": "session.get_state", "extra": true}),
        request("session.get_state", json!({})),
        request("session.get_messages", json!({"start": 0, "cursor": 1})),
        request("session.get_messages", json!({"limit": 101})),
        request("session.get_outcomes", json!({"limit": 101})),
        request("session.await_idle", json!({"completionId": ""})),
        request(
            "session.prompt",
            json!({"delivery": "direct", "text": "x", "completionId": ""}),
        ),
        request(
            "command.invoke",
            json!({"name": "Invalid_Command", "arguments": ""}),
        ),
        request("thinking.select", json!({"level": "minimum"})),
    ] {
        zi.send(record.clone()).await;
        let e = zi.recv().await;
        assert_eq!(e["type"], "protocol_error", "{record}: {e}");
        assert_eq!(
            (&e["code"], &e["id"]),
            (&json!("invalid_request"), &json!("r")),
            "{record}: {e}"
        );
    }
    let t = zi
        .call("t", "thinking.select", Some(json!({"level": "minimal"})))
        .await;
    assert_eq!(t["result"]["scope"], "global", "{t}");
}
