//! End-to-end: a spent project budget in letscode-rpc/1, Zi RPC v1 and
//! ACP (zut is in `gateway_budget`), with the model broker counting. In
//! each, the prompt whose first model event crosses the $0.01 budget is
//! stopped as an abort stops it and its clients get the dialect's event
//! naming the budget; the next prompt is refused as the dialect refuses a
//! request, with the budget's message; once an admin raises the budget
//! the project answers again.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use corral_e2e::gateway::{Gateway, Ws, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

use super::gateway_budget::{
    brokered, is_refusal, is_stop_notice, long_answer, priced_mock, raise,
};

/// A brokered gateway speaking `dialect`, with a $0.01 budget per project.
async fn gateway(dialect: &str, mock: &MockLlm, dir: &std::path::Path) -> Gateway {
    std::fs::create_dir_all(dir.join("projects/alpha")).unwrap();
    brokered(mock, dir)
        .arg("--dialect")
        .arg(dialect)
        .spawn()
        .await
}

fn has(frames: &[Value], pred: impl Fn(&Value) -> bool) -> bool {
    frames.iter().any(pred)
}

#[tokio::test]
async fn letscode_a_crossing_prompt_is_stopped_and_the_next_refused() {
    let mock = priced_mock().await;
    let dir = corral_e2e::dir_outside_tmp();
    let gw = gateway("letscode", &mock, dir.path()).await;
    let mut ws = gw.connect("alpha").await;
    ws.send(json!({"cmd":"hello","id":"h1","protocol":"letscode-rpc/1","token":TOKEN}))
        .await;
    ws.recv_until(|f| f["type"] == "done" && f["id"] == "h1")
        .await;

    mock.push(long_answer());
    ws.send(json!({"cmd":"prompt","id":"r1","text":"count"}))
        .await;
    let frames = ws
        .recv_until(|f| f["type"] == "done" && f["id"] == "r1")
        .await;
    let notice = frames
        .iter()
        .find(|f| f["type"] == "error" && f.get("id").is_none())
        .unwrap_or_else(|| panic!("no notice: {}", brief(&frames)));
    assert!(
        is_stop_notice(notice["message"].as_str().unwrap()),
        "{notice}"
    );
    let end = frames.iter().find(|f| f["type"] == "agent_end").unwrap();
    assert!(end["error"].is_string(), "the run was aborted: {end}");

    mock.push(Turn::text("answered again"));
    ws.send(json!({"cmd":"prompt","id":"r2","text":"again"}))
        .await;
    let refused = ws.recv().await;
    assert_eq!(refused["type"], "error", "{refused}");
    assert_eq!(refused["id"], "r2", "{refused}");
    assert_eq!(refused["recoverable"], true, "{refused}");
    assert!(is_refusal(refused["error"].as_str().unwrap()), "{refused}");

    raise(&gw).await;
    ws.send(json!({"cmd":"prompt","id":"r3","text":"again"}))
        .await;
    let frames = ws
        .recv_until(|f| f["type"] == "done" && f["id"] == "r3")
        .await;
    let end = frames.iter().find(|f| f["type"] == "agent_end").unwrap();
    assert_eq!(end["error"], Value::Null, "{}", brief(&frames));
    assert_eq!(mock.requests().len(), 2);
}

/// A Zi client: the frames of a connection, hello'd.
async fn zi_client(gw: &Gateway) -> Ws {
    let mut ws = gw.connect("alpha").await;
    ws.send(json!({"version":1,"id":"auth","method":"connection.hello","params":{"token":TOKEN}}))
        .await;
    ws.recv_until(|f| f["id"] == "auth").await;
    ws
}

fn zi_event(f: &Value) -> Option<&str> {
    (f["type"] == "session_event")
        .then(|| f["event"]["type"].as_str())
        .flatten()
}

async fn zi_prompt(ws: &mut Ws, id: &str) {
    ws.send(json!({"version":1,"id":id,"method":"session.prompt","params":{"delivery":"direct","text":"count"}}))
        .await;
}

#[tokio::test]
async fn zi_a_crossing_prompt_is_stopped_and_the_next_refused() {
    let mock = priced_mock().await;
    let dir = corral_e2e::dir_outside_tmp();
    let gw = gateway("zi", &mock, dir.path()).await;
    let mut ws = zi_client(&gw).await;

    mock.push(long_answer());
    zi_prompt(&mut ws, "p1").await;
    let frames = ws.recv_until(|f| zi_event(f) == Some("agent_end")).await;
    let notice = frames
        .iter()
        .find(|f| zi_event(f) == Some("error") && f["event"].get("budget").is_some())
        .unwrap_or_else(|| panic!("no notice: {}", brief(&frames)));
    assert!(
        is_stop_notice(notice["event"]["message"].as_str().unwrap()),
        "{notice}"
    );
    let end = frames.last().unwrap();
    assert!(
        end["event"]["errorMessage"].is_string()
            || has(&frames, |f| f["event"]["stopReason"] == "aborted"),
        "the run was aborted: {}",
        brief(&frames)
    );

    mock.push(Turn::text("answered again"));
    zi_prompt(&mut ws, "p2").await;
    let refused = ws
        .recv_until(|f| f["type"] == "response" && f["id"] == "p2")
        .await
        .pop()
        .unwrap();
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["error"]["code"], "operation_failed", "{refused}");
    assert!(
        is_refusal(refused["error"]["message"].as_str().unwrap()),
        "{refused}"
    );

    raise(&gw).await;
    zi_prompt(&mut ws, "p3").await;
    let frames = ws.recv_until(|f| zi_event(f) == Some("agent_end")).await;
    assert!(
        has(&frames, |f| f["type"] == "response"
            && f["id"] == "p3"
            && f["ok"] == true),
        "{}",
        brief(&frames)
    );
    assert_eq!(mock.requests().len(), 2);
}

/// An ACP client, initialized, with the project's session.
async fn acp_client(gw: &Gateway) -> (Ws, Value) {
    let mut ws = gw.connect_with_bearer("alpha", TOKEN, None).await;
    for (id, method, params) in [
        (
            0,
            "initialize",
            json!({"protocolVersion": 1, "clientCapabilities": {}}),
        ),
        (1, "session/new", json!({"cwd": "/", "mcpServers": []})),
    ] {
        ws.send(json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}))
            .await;
        let answer = ws
            .recv_until(|f| f.get("method").is_none() && f["id"] == id)
            .await
            .pop()
            .unwrap();
        if method == "session/new" {
            return (ws, answer["result"]["sessionId"].clone());
        }
    }
    unreachable!("session/new answers")
}

/// Sends a prompt; returns its answer and what came before it.
async fn acp_prompt(ws: &mut Ws, id: u64, session: &Value) -> (Value, Vec<Value>) {
    let params = json!({"sessionId": session, "prompt": [{"type": "text", "text": "count"}]});
    ws.send(json!({"jsonrpc":"2.0","id":id,"method":"session/prompt","params":params}))
        .await;
    let mut frames = ws
        .recv_until(|f| f.get("method").is_none() && f["id"] == id)
        .await;
    let answer = frames.pop().unwrap();
    (answer, frames)
}

#[tokio::test]
async fn acp_a_crossing_prompt_is_stopped_and_the_next_refused() {
    let mock = priced_mock().await;
    let dir = corral_e2e::dir_outside_tmp();
    let gw = gateway("acp", &mock, dir.path()).await;
    let (mut ws, session) = acp_client(&gw).await;

    mock.push(long_answer());
    let (answer, before) = acp_prompt(&mut ws, 2, &session).await;
    assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
    let notice = before
        .iter()
        .find(|f| f["method"] == "_corral/event" && f["params"]["type"] == "error")
        .unwrap_or_else(|| panic!("no notice: {}", brief(&before)));
    assert!(
        is_stop_notice(notice["params"]["message"].as_str().unwrap()),
        "{notice}"
    );

    mock.push(Turn::text("answered again"));
    let (refused, _) = acp_prompt(&mut ws, 3, &session).await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(is_refusal(message), "{refused}");

    raise(&gw).await;
    let (answer, _) = acp_prompt(&mut ws, 4, &session).await;
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(mock.requests().len(), 2);
}
