//! The project's one session in the hub, with a fake ACP child and paused
//! time: a load gets the child's history pages for that client alone, then
//! its answer, then only the live events after the history (those the
//! child sent meanwhile are in it); a child without history is asked once
//! and its loads replay the ring; a closed client hears no more events.

use serde_json::{json, Value};

use super::tests::{harness, join, received, request, settings, FakeChild};
use super::{Attached, HubSettings};
use crate::dialect::Dialect;

fn acp() -> HubSettings {
    HubSettings {
        dialect: Dialect::named("acp").unwrap(),
        ..settings()
    }
}

fn update(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s",
        "update": {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}}})
}

fn text(frame: &Value) -> &str {
    frame["params"]["update"]["content"]["text"]
        .as_str()
        .unwrap_or("")
}

async fn open(hub: &super::HubHandle, client: &Attached, method: &str, id: &str) {
    let frame = json!({"jsonrpc": "2.0", "id": id, "method": method,
        "params": {"sessionId": "corral-project:alpha", "cwd": "/", "mcpServers": []}});
    hub.request(client.client, request(frame)).await;
}

#[tokio::test(start_paused = true)]
async fn a_load_sends_the_childs_history_then_only_what_followed_it() {
    let mut h = harness(acp());
    let start = h.next_start().await;
    let waiting = {
        let hub = h.hub.clone();
        tokio::spawn(async move { hub.attach(join()).await })
    };
    let mut child = FakeChild::start(start, true);
    let mut a = waiting.await.unwrap().unwrap();
    let mut b = h.hub.attach(join()).await.unwrap();
    open(&h.hub, &a, "session/new", "a1").await;
    // Answered, so a has joined before the child speaks.
    let (mut seen_by_a, _) = received(&mut a).await;
    assert!(seen_by_a.iter().any(|f| f["id"] == "a1"), "{seen_by_a:?}");
    child.say(update("before")).await;
    open(&h.hub, &b, "session/load", "b1").await;
    let ask = child.next_request().await;
    assert_eq!(ask["method"], "_corral/session/history");
    assert!(ask["params"].get("cursor").is_none());
    // Sent before the history's answer: the history covers it.
    child.say(update("during")).await;
    child
        .say(
            json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"updates": [
            {"sessionId": "s", "update": {"sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "hi"}}}], "nextCursor": "c1"}}),
        )
        .await;
    let next = child.next_request().await;
    assert_eq!(next["params"]["cursor"], "c1");
    child
        .say(
            json!({"jsonrpc": "2.0", "id": next["id"], "result": {"updates": [
            {"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
                "content": {"type": "text", "text": "before during"}}}]}}),
        )
        .await;
    child.say(update("after")).await;

    let (frames, _) = received(&mut b).await;
    let seen: Vec<String> = frames
        .iter()
        .map(|f| match f["id"].as_str() {
            Some(id) => format!("answer {id}"),
            None => format!("{} {}", text(f), f["params"]["_meta"]["corral"]["replay"]),
        })
        .collect();
    assert_eq!(
        seen,
        ["hi true", "before during true", "answer b1", "after null"]
    );
    seen_by_a.extend(received(&mut a).await.0);
    let live: Vec<&str> = seen_by_a
        .iter()
        .filter(|f| f["id"].is_null())
        .map(text)
        .collect();
    assert_eq!(live, ["before", "during", "after"]);
}

#[tokio::test(start_paused = true)]
async fn a_child_without_history_is_asked_once_and_loads_replay_the_ring_once() {
    let mut h = harness(acp());
    let start = h.next_start().await;
    let waiting = {
        let hub = h.hub.clone();
        tokio::spawn(async move { hub.attach(join()).await })
    };
    let mut child = FakeChild::start(start, true);
    let mut a = waiting.await.unwrap().unwrap();
    child.say(update("one")).await;
    open(&h.hub, &a, "session/load", "l1").await;
    let ask = child.next_request().await;
    child
        .say(json!({"jsonrpc": "2.0", "id": ask["id"],
            "error": {"code": -32601, "message": "method not found"}}))
        .await;
    let (frames, _) = received(&mut a).await;
    let updates: Vec<&Value> = frames
        .iter()
        .filter(|f| f["method"] == "session/update")
        .collect();
    assert_eq!(updates.len(), 1, "{frames:?}");
    assert_eq!(text(updates[0]), "one");
    assert!(updates[0]["params"]["_meta"]["corral"]["seq"].is_u64());
    assert_eq!(frames.last().unwrap()["id"], "l1");
    // Again: the child is not asked, and no seq comes twice.
    open(&h.hub, &a, "session/load", "l2").await;
    let (frames, _) = received(&mut a).await;
    assert_eq!(frames.len(), 1, "{frames:?}");
    assert_eq!(frames[0]["id"], "l2");
    // Closed: the events go on without it.
    let close = json!({"jsonrpc": "2.0", "id": "c", "method": "session/close", "params": {}});
    h.hub.request(a.client, request(close)).await;
    // The hub reads its requests and the child's output on separate
    // paths: once the close is answered, nothing the child says reaches a.
    let (frames, _) = received(&mut a).await;
    assert_eq!(frames, [json!({"jsonrpc": "2.0", "id": "c", "result": {}})]);
    child.say(update("two")).await;
    let prompt = json!({"jsonrpc": "2.0", "id": "p", "method": "session/prompt", "params": {}});
    h.hub.request(a.client, request(prompt)).await;
    assert_eq!(child.next_request().await["method"], "session/prompt");
    let (frames, _) = received(&mut a).await;
    assert_eq!(frames, Vec::<Value>::new());
}
