//! End-to-end: `corral serve --dialect letscode|zi` speaking letscode-rpc/1
//! and Zi RPC v1 to its WebSocket clients, with real `corral-agent` children
//! (started with the same dialect) on the mock LLM. Sharing one child,
//! per-client correlation, resume after a reconnect, crashes, auth.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::collections::HashSet;
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, WsEvent, ADMIN_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

const LETSCODE: &str = "letscode-rpc/1";
const WRONG_TOKEN: &str = "not-the-client-token-0123456789";

// ---------------------------------------------------------------------------
// Shared helpers

/// A gateway in `dialect` whose children use the mock LLM.
async fn gateway(dialect: &str, mock: &MockLlm) -> Gateway {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--dialect")
        .arg(dialect)
        .spawn()
        .await
}

/// A slow streamed answer of `n` chunks `w0 `, `w1 `, …, and its full text.
fn slow(n: usize, delay_ms: u64) -> (Turn, String) {
    let chunks: Vec<String> = (0..n).map(|i| format!("w{i} ")).collect();
    let full = chunks.concat();
    let turn = Turn::Slow {
        chunks,
        delay: Duration::from_millis(delay_ms),
    };
    (turn, full)
}

/// Reads frames onto `frames` until `done(frames)` holds.
async fn collect_onto(ws: &mut Ws, frames: &mut Vec<Value>, done: impl Fn(&[Value]) -> bool) {
    while !done(frames) {
        frames.push(ws.recv().await);
    }
}

/// Frames until `done(frames)` holds.
async fn collect(ws: &mut Ws, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let mut frames = Vec::new();
    collect_onto(ws, &mut frames, done).await;
    frames
}

fn has(frames: &[Value], pred: impl Fn(&Value) -> bool) -> bool {
    frames.iter().any(pred)
}

/// Index of the first frame matching `pred`; panics with the frames.
fn index_of(frames: &[Value], what: &str, pred: impl Fn(&Value) -> bool) -> usize {
    frames
        .iter()
        .position(pred)
        .unwrap_or_else(|| panic!("no {what} in {}", brief(frames)))
}

fn seqs(frames: &[Value]) -> Vec<u64> {
    frames.iter().filter_map(|f| f["seq"].as_u64()).collect()
}

/// No `seq` twice, and each larger than the one before.
fn assert_increasing_unique(seqs: &[u64]) {
    let unique: HashSet<u64> = seqs.iter().copied().collect();
    assert_eq!(unique.len(), seqs.len(), "duplicate seq in {seqs:?}");
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

/// The pid of `project`'s child, from the admin API.
async fn child_pid(gateway: &Gateway, project: &str) -> i32 {
    let (status, body) = gateway.http_get("/v1/projects", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let entry = list["projects"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["project"] == project)
        .unwrap_or_else(|| panic!("{project} not listed: {list}"));
    i32::try_from(entry["pid"].as_u64().expect("a running child has a pid")).unwrap()
}

fn sigkill(pid: i32) {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
}

/// Waits for the server's close without any frame before it.
async fn expect_close(ws: &mut Ws) -> u16 {
    match ws.next_event().await {
        WsEvent::Closed(Some((code, _))) => code,
        other => panic!("expected a close frame, got {other:?}"),
    }
}

/// The `gateway` object of a ready frame or hello response.
fn check_gateway_data(gateway: &Value, project: &str) {
    assert_eq!(gateway["project"], project, "{gateway}");
    assert_eq!(gateway["role"], "client", "{gateway}");
    assert!(gateway["client_id"].is_string(), "{gateway}");
    assert!(gateway["version"].is_string(), "{gateway}");
    assert!(gateway["last_seq"].is_u64(), "{gateway}");
}

/// Two pieces of text the model is told and says, to find in later requests.
const EARLIER_PROMPT: &str = "remember the walrus";
const EARLIER_REPLY: &str = "the walrus is remembered";

/// Whether the request body sent to the model carries `text` in a message.
fn request_mentions(body: &Value, text: &str) -> bool {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m["content"].to_string().contains(text))
}

// ---------------------------------------------------------------------------
// letscode-rpc/1 helpers

fn is_gateway_event(f: &Value) -> bool {
    matches!(f["type"].as_str(), Some("child_started" | "child_exited"))
}

fn is_lc_control(f: &Value) -> bool {
    matches!(
        f["type"].as_str(),
        Some("ready" | "ack" | "done" | "error" | "bye")
    )
}

/// The agent's domain events: neither control messages nor gateway events.
fn lc_domain(frames: &[Value]) -> Vec<Value> {
    frames
        .iter()
        .filter(|f| !is_lc_control(f) && !is_gateway_event(f))
        .cloned()
        .collect()
}

/// A prompt's `ack` or `done` without the `run_id` the gateway adds (which
/// it must carry).
fn without_run(f: &Value) -> Value {
    assert!(f["run_id"].is_string(), "no run_id: {f}");
    let mut f = f.clone();
    f.as_object_mut().unwrap().remove("run_id");
    f
}

fn lc_delta(f: &Value) -> Option<&str> {
    if f["type"] == "message_update" && f["stream_event"]["type"] == "text_delta" {
        f["stream_event"]["delta"].as_str()
    } else {
        None
    }
}

fn lc_text(frames: &[Value]) -> String {
    frames.iter().filter_map(lc_delta).collect()
}

fn is_lc(kind: &'static str, id: &'static str) -> impl Fn(&Value) -> bool {
    move |f| f["type"] == kind && f["id"] == id
}

fn count(frames: &[Value], pred: impl Fn(&Value) -> bool) -> usize {
    frames.iter().filter(|f| pred(f)).count()
}

fn check_lc_ready(ready: &Value, project: &str) {
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(ready["protocol"], LETSCODE, "{ready}");
    assert!(ready["letscode"].is_string(), "{ready}");
    check_gateway_data(&ready["gateway"], project);
}

/// Connects and says `hello` (id `h1`) with `token`: the `ready` comes
/// first, then `ack{h1}` and `done{h1}`. Returns the ready frame and any
/// events that arrived before the `done` (replay after `resume_after`).
async fn lc_hello(
    gateway: &Gateway,
    project: &str,
    resume_after: Option<u64>,
) -> (Ws, Value, Vec<Value>) {
    let mut ws = gateway.connect(project).await;
    let mut hello = json!({"cmd":"hello","id":"h1","protocol":LETSCODE,"token":TOKEN});
    if let Some(seq) = resume_after {
        hello["resume_after"] = json!(seq);
    }
    ws.send(hello).await;
    let ready = ws.recv().await;
    check_lc_ready(&ready, project);
    let mut frames = ws.recv_until(is_lc("done", "h1")).await;
    frames.pop();
    let ack = index_of(&frames, "ack{h1}", is_lc("ack", "h1"));
    frames.remove(ack);
    assert!(
        frames.iter().all(|f| !is_lc_control(f)),
        "only events between the hello's ready and done: {}",
        brief(&frames)
    );
    (ws, ready, frames)
}

// ---------------------------------------------------------------------------
// letscode-rpc/1 over the gateway

/// Two clients of one project see the same events of one client's prompt;
/// control replies go only to the client whose command they answer.
#[tokio::test]
async fn letscode_two_clients_share_events_and_keep_their_own_replies() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("shared answer"));
    let gw = gateway("letscode", &mock).await;
    let (mut a, ready_a, _) = lc_hello(&gw, "alpha", None).await;
    let (mut b, ready_b, _) = lc_hello(&gw, "alpha", None).await;
    assert_ne!(
        ready_a["gateway"]["client_id"],
        ready_b["gateway"]["client_id"]
    );
    assert_eq!(gw.child_pids().len(), 1, "one child for the project");

    a.send(json!({"cmd":"prompt","id":"r1","text":"hi"})).await;
    let fa: Vec<Value> = a
        .recv_until(is_lc("done", "r1"))
        .await
        .into_iter()
        .filter(|f| !is_gateway_event(f))
        .collect();
    assert_eq!(
        without_run(&fa[0]),
        json!({"type":"ack","id":"r1"}),
        "ack first: {}",
        brief(&fa)
    );
    assert_eq!(fa[1]["type"], "agent_start", "{}", brief(&fa));
    assert!(index_of(&fa, "agent_end", |f| f["type"] == "agent_end") < fa.len() - 1);
    let events_a = lc_domain(&fa);
    assert_eq!(
        events_a.len(),
        fa.len() - 2,
        "only ack and done besides events"
    );
    assert_eq!(lc_text(&events_a), "shared answer");
    let s = seqs(&events_a);
    assert_eq!(s.len(), events_a.len(), "every domain event has a seq");
    assert_increasing_unique(&s);

    let fb = b.recv_until(|f| f["type"] == "agent_end").await;
    assert!(
        fb.iter().all(|f| !is_lc_control(f)),
        "B gets none of A's control replies: {}",
        brief(&fb)
    );
    assert_eq!(lc_domain(&fb), events_a, "both clients see the same events");

    // B uses A's id: B alone gets the answer, with the id it sent.
    b.send(json!({"cmd":"abort","id":"r1"})).await;
    assert_eq!(b.recv().await, json!({"type":"ack","id":"r1"}));
    assert_eq!(b.recv().await, json!({"type":"done","id":"r1"}));
    a.send(json!({"cmd":"abort","id":"a2"})).await;
    assert_eq!(
        a.recv().await,
        json!({"type":"ack","id":"a2"}),
        "A's next frame is its own reply, not B's"
    );
    assert_eq!(a.recv().await, json!({"type":"done","id":"a2"}));
}

/// Two commands with the same id in flight at once (A's prompt `r1`, B's
/// abort `r1`): each client gets exactly its own replies.
#[tokio::test]
async fn letscode_the_same_id_in_flight_on_two_clients_is_kept_apart() {
    let mock = MockLlm::start().await;
    let (turn, _) = slow(100, 50);
    mock.push(turn);
    let gw = gateway("letscode", &mock).await;
    let (mut a, _, _) = lc_hello(&gw, "alpha", None).await;
    let (mut b, _, _) = lc_hello(&gw, "alpha", None).await;

    a.send(json!({"cmd":"prompt","id":"r1","text":"count"}))
        .await;
    let mut fa = a.recv_until(|f| lc_delta(f).is_some()).await;
    b.send(json!({"cmd":"abort","id":"r1"})).await;
    collect_onto(&mut a, &mut fa, |fs| has(fs, is_lc("done", "r1"))).await;
    let fb = collect(&mut b, |fs| {
        has(fs, is_lc("done", "r1")) && has(fs, |f| f["type"] == "agent_end")
    })
    .await;

    // A: its prompt's ack before the run, its done after the aborted run.
    let fa: Vec<Value> = fa.into_iter().filter(|f| !is_gateway_event(f)).collect();
    assert_eq!(
        without_run(&fa[0]),
        json!({"type":"ack","id":"r1"}),
        "{}",
        brief(&fa)
    );
    assert_eq!(
        without_run(fa.last().unwrap()),
        json!({"type":"done","id":"r1"})
    );
    assert_eq!(count(&fa, is_lc("ack", "r1")), 1, "{}", brief(&fa));
    assert_eq!(count(&fa, is_lc("done", "r1")), 1, "{}", brief(&fa));
    let end = index_of(&fa, "agent_end", |f| f["type"] == "agent_end");
    assert!(
        fa[end]["error"].is_string(),
        "the run was aborted: {}",
        fa[end]
    );
    // B: its abort's ack and done, once each.
    assert_eq!(count(&fb, is_lc("ack", "r1")), 1, "{}", brief(&fb));
    assert_eq!(count(&fb, is_lc("done", "r1")), 1, "{}", brief(&fb));
    assert!(index_of(&fb, "ack", is_lc("ack", "r1")) < index_of(&fb, "done", is_lc("done", "r1")));
}

/// A client reads part of a long run and leaves twice: it comes back once
/// with `resume_after` in its hello, once with a bearer header (`ready` at
/// once) and `?resume_after=`. What it saw is the whole answer, with no
/// event twice.
#[tokio::test]
async fn letscode_reconnects_with_resume_after_miss_nothing() {
    let mock = MockLlm::start().await;
    let (turn, full) = slow(30, 30);
    mock.push(turn);
    let gw = gateway("letscode", &mock).await;
    let (mut ws, _, _) = lc_hello(&gw, "alpha", None).await;
    ws.send(json!({"cmd":"prompt","id":"r1","text":"stream"}))
        .await;
    let mut seen = ws.recv_until(|f| lc_delta(f) == Some("w5 ")).await;
    let first = seen.iter().find(|f| !is_gateway_event(f)).unwrap();
    assert_eq!(
        without_run(first),
        json!({"type":"ack","id":"r1"}),
        "{}",
        brief(&seen)
    );
    let last = *seqs(&seen).last().unwrap();
    drop(ws);

    let (mut ws, ready, replayed) = lc_hello(&gw, "alpha", Some(last)).await;
    assert_eq!(ready["gateway"]["gap"], false, "{ready}");
    assert!(
        ready["gateway"]["last_seq"].as_u64().unwrap() >= last,
        "{ready}"
    );
    seen.extend(replayed);
    collect_onto(&mut ws, &mut seen, |fs| {
        has(fs, |f| lc_delta(f) == Some("w15 "))
    })
    .await;
    let last = *seqs(&seen).last().unwrap();
    drop(ws);

    let query = format!("resume_after={last}");
    let mut ws = gw.connect_with_bearer("alpha", TOKEN, Some(&query)).await;
    let ready = ws.recv().await;
    check_lc_ready(&ready, "alpha");
    assert_eq!(ready["gateway"]["gap"], false, "{ready}");
    collect_onto(&mut ws, &mut seen, |fs| {
        has(fs, |f| f["type"] == "agent_end")
    })
    .await;
    let events = lc_domain(&seen);
    assert_increasing_unique(&seqs(&events));
    assert_eq!(lc_text(&events), full);
}

/// SIGKILL mid-prompt: every client sees `child_exited`, then a terminal
/// `agent_end` with an error; the prompting client its `done`; then the
/// restarted child, which still has the earlier exchange.
#[tokio::test]
async fn letscode_a_killed_child_ends_the_run_and_restarts_with_its_conversation() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text(EARLIER_REPLY));
    let (turn, _) = slow(200, 50);
    mock.push(turn);
    mock.push(Turn::text("after the restart"));
    let gw = gateway("letscode", &mock).await;
    let (mut a, _, _) = lc_hello(&gw, "alpha", None).await;
    let (mut b, _, _) = lc_hello(&gw, "alpha", None).await;

    a.send(json!({"cmd":"prompt","id":"r0","text":EARLIER_PROMPT}))
        .await;
    let first = a.recv_until(is_lc("done", "r0")).await;
    assert_eq!(lc_text(&first), EARLIER_REPLY);
    b.recv_until(|f| f["type"] == "agent_end").await;

    a.send(json!({"cmd":"prompt","id":"r1","text":"two"})).await;
    a.recv_until(|f| lc_delta(f).is_some()).await;
    sigkill(child_pid(&gw, "alpha").await);

    let restarted = |fs: &[Value]| {
        has(fs, |f| f["type"] == "child_exited") && fs.last().unwrap()["type"] == "child_started"
    };
    let fa = collect(&mut a, restarted).await;
    let fb = collect(&mut b, restarted).await;
    for (who, frames) in [("A", &fa), ("B", &fb)] {
        let exited = index_of(frames, "child_exited", |f| f["type"] == "child_exited");
        let end = index_of(frames, "agent_end", |f| f["type"] == "agent_end");
        assert!(
            exited < end,
            "{who}: child_exited before agent_end: {}",
            brief(frames)
        );
        let exit = &frames[exited];
        assert_eq!(exit["signal"], 9, "{who}: {exit}");
        assert_eq!(exit["restarting"], true, "{who}: {exit}");
        assert!(exit["seq"].is_u64(), "{who}: {exit}");
        let end = &frames[end];
        assert_eq!(end["messages"], json!([]), "{who}: {end}");
        assert!(
            !end["error"].as_str().unwrap_or_default().is_empty(),
            "{who}: agent_end names the error: {end}"
        );
        assert!(end["seq"].is_u64(), "{who}: {end}");
        assert_increasing_unique(&seqs(frames));
    }
    let done = index_of(&fa, "done{r1}", is_lc("done", "r1"));
    let end = index_of(&fa, "agent_end", |f| f["type"] == "agent_end");
    assert!(end < done && done < fa.len() - 1, "{}", brief(&fa));
    assert!(
        fb.iter().all(|f| !is_lc_control(f)),
        "B gets no control replies: {}",
        brief(&fb)
    );

    // The restarted child has the completed exchange from its journal.
    a.send(json!({"cmd":"prompt","id":"r2","text":"three"}))
        .await;
    let after = a.recv_until(is_lc("done", "r2")).await;
    assert_eq!(lc_text(&after), "after the restart");
    let body = mock.requests().last().unwrap().body.clone();
    assert!(request_mentions(&body, EARLIER_PROMPT), "{body}");
    assert!(request_mentions(&body, EARLIER_REPLY), "{body}");
}

/// `bye` from one client mid-run: that client gets the end of the run,
/// its `done` and `bye`, and is closed; the child and the other client
/// carry on.
#[tokio::test]
async fn letscode_bye_closes_only_that_client() {
    let mock = MockLlm::start().await;
    let (turn, full) = slow(10, 100);
    mock.push(turn);
    mock.push(Turn::text("still here"));
    let gw = gateway("letscode", &mock).await;
    let (mut a, _, _) = lc_hello(&gw, "alpha", None).await;
    let (mut b, _, _) = lc_hello(&gw, "alpha", None).await;
    let pid = child_pid(&gw, "alpha").await;

    a.send(json!({"cmd":"prompt","id":"r1","text":"count"}))
        .await;
    b.recv_until(|f| lc_delta(f).is_some()).await;
    b.send(json!({"cmd":"bye","id":"b"})).await;
    let fb = b.recv_until(|f| f["type"] == "bye").await;
    assert_eq!(fb.last().unwrap(), &json!({"type":"bye"}));
    let ack = index_of(&fb, "ack{b}", is_lc("ack", "b"));
    let done = index_of(&fb, "done{b}", is_lc("done", "b"));
    let end = index_of(&fb, "agent_end", |f| f["type"] == "agent_end");
    assert!(ack < done, "{}", brief(&fb));
    assert!(
        end < done,
        "done{{b}} once no run is active: {}",
        brief(&fb)
    );
    assert_eq!(
        done,
        fb.len() - 2,
        "bye right after done{{b}}: {}",
        brief(&fb)
    );
    assert!(
        !has(&fb, is_lc("done", "r1")),
        "A's done is not B's: {}",
        brief(&fb)
    );
    assert_eq!(expect_close(&mut b).await, 1000);

    let fa = a.recv_until(is_lc("done", "r1")).await;
    assert_eq!(lc_text(&fa), full);
    assert!(
        fa.iter()
            .all(|f| f["type"] != "bye" && f["type"] != "child_exited" && f["id"] != "b"),
        "A sees nothing of B's bye: {}",
        brief(&fa)
    );
    a.send(json!({"cmd":"prompt","id":"r2","text":"again"}))
        .await;
    let again = a.recv_until(is_lc("done", "r2")).await;
    assert_eq!(lc_text(&again), "still here");
    assert_eq!(child_pid(&gw, "alpha").await, pid, "the same child");
}

/// A wrong or missing token in the hello: a fatal `error` for that id,
/// then close 1008, and no child is started.
#[tokio::test]
async fn letscode_hello_with_a_wrong_token_is_refused() {
    let gw = GatewaySpawn::default()
        .echo()
        .arg("--dialect")
        .arg("letscode")
        .spawn()
        .await;
    for hello in [
        json!({"cmd":"hello","id":"h1","protocol":LETSCODE,"token":WRONG_TOKEN}),
        json!({"cmd":"hello","id":"h1","protocol":LETSCODE}),
    ] {
        let mut ws = gw.connect("alpha").await;
        ws.send(hello.clone()).await;
        let e = ws.recv().await;
        assert_eq!(e["type"], "error", "{hello} → {e}");
        assert_eq!(e["id"], "h1", "{e}");
        assert_eq!(e["recoverable"], false, "{e}");
        assert_eq!(e["fatal"], true, "{e}");
        let message = e["error"].as_str().unwrap();
        assert!(message.starts_with("authentication failed"), "{e}");
        assert_eq!(expect_close(&mut ws).await, 1008);
    }
    assert!(gw.child_pids().is_empty(), "no child before authentication");
    // The right token is let in.
    lc_hello(&gw, "alpha", None).await;
}

// ---------------------------------------------------------------------------
// Zi RPC v1 helpers

/// A Zi client over the gateway that checks `version` and the connection's
/// `sequence` (1, 2, 3, … with no gap) of every frame it reads.
struct Zi {
    ws: Ws,
    sequence: u64,
}

impl Zi {
    async fn recv(&mut self) -> Value {
        let frame = self.ws.recv().await;
        self.sequence += 1;
        assert_eq!(frame["version"], 1, "{frame}");
        assert_eq!(
            frame["sequence"], self.sequence,
            "gap-free sequence: {frame}"
        );
        frame
    }

    /// Sends a request; `params` is left out when empty (the methods
    /// without parameters refuse even `{}`).
    async fn send(&mut self, id: &str, method: &str, params: Value) {
        let mut request = json!({"version": 1, "id": id, "method": method});
        if params != json!({}) {
            request["params"] = params;
        }
        self.ws.send(request).await;
    }

    /// Frames up to and including the response (or protocol error) for `id`.
    async fn until(&mut self, id: &str) -> Vec<Value> {
        self.collect(|fs| fs.last().is_some_and(|f| is_zi_answer(f, id)))
            .await
    }

    async fn call(&mut self, id: &str, method: &str, params: Value) -> Value {
        self.send(id, method, params).await;
        self.until(id).await.pop().unwrap()
    }

    /// Frames until `done(frames)` holds.
    async fn collect(&mut self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        self.collect_onto(&mut frames, done).await;
        frames
    }

    async fn collect_onto(&mut self, frames: &mut Vec<Value>, done: impl Fn(&[Value]) -> bool) {
        while !done(frames) {
            frames.push(self.recv().await);
        }
    }
}

/// A `response` or `protocol_error` for `id`.
fn is_zi_answer(f: &Value, id: &str) -> bool {
    f["id"] == id && matches!(f["type"].as_str(), Some("response" | "protocol_error"))
}

/// The event type of a `session_event` frame.
fn zi_event(f: &Value) -> Option<&str> {
    if f["type"] == "session_event" {
        f["event"]["type"].as_str()
    } else {
        None
    }
}

fn is_zi_event(kind: &'static str) -> impl Fn(&Value) -> bool {
    move |f| zi_event(f) == Some(kind)
}

fn zi_delta(f: &Value) -> Option<&str> {
    let inner = &f["event"]["assistantMessageEvent"];
    if zi_event(f) == Some("message_update") && inner["type"] == "text_delta" {
        inner["delta"].as_str()
    } else {
        None
    }
}

fn zi_text(frames: &[Value]) -> String {
    frames.iter().filter_map(zi_delta).collect()
}

/// The agent's session events (not the gateway's), as `(event, seq)`:
/// what two clients must see alike (their `sequence`s differ).
fn zi_agent_events(frames: &[Value]) -> Vec<(Value, Value)> {
    frames
        .iter()
        .filter(|f| zi_event(f).is_some_and(|t| !matches!(t, "child_started" | "child_exited")))
        .map(|f| (f["event"].clone(), f["seq"].clone()))
        .collect()
}

/// The `seq`s of the session events among `frames`.
fn zi_seqs(frames: &[Value]) -> Vec<u64> {
    frames
        .iter()
        .filter(|f| f["type"] == "session_event")
        .map(|f| f["seq"].as_u64().unwrap_or_else(|| panic!("no seq: {f}")))
        .collect()
}

fn check_zi_ready(ready: &Value, project: &str) {
    assert_eq!(ready["type"], "ready", "{ready}");
    let state = &ready["state"];
    for key in ["sessionId", "activity", "model", "messageCount"] {
        assert!(state.get(key).is_some(), "ready state lacks {key}: {ready}");
    }
    check_gateway_data(&ready["gateway"], project);
}

/// Connects and sends `connection.hello` (id `auth`): `ready` is frame 1,
/// the hello's response frame 2.
async fn zi_hello(gateway: &Gateway, project: &str, resume_after: Option<u64>) -> (Zi, Value) {
    let mut zi = Zi {
        ws: gateway.connect(project).await,
        sequence: 0,
    };
    let mut params = json!({"token": TOKEN});
    if let Some(seq) = resume_after {
        params["resumeAfter"] = json!(seq);
    }
    zi.send("auth", "connection.hello", params).await;
    let ready = zi.recv().await;
    check_zi_ready(&ready, project);
    let response = zi.recv().await;
    assert_eq!(response["type"], "response", "{response}");
    assert_eq!(response["id"], "auth", "{response}");
    assert_eq!(response["method"], "connection.hello", "{response}");
    assert_eq!(response["ok"], true, "{response}");
    check_gateway_data(&response["result"]["gateway"], project);
    (zi, ready)
}

/// Connects with a bearer header (and `query`): `ready` at once, frame 1.
async fn zi_bearer(gateway: &Gateway, project: &str, query: Option<&str>) -> (Zi, Value) {
    let mut zi = Zi {
        ws: gateway.connect_with_bearer(project, TOKEN, query).await,
        sequence: 0,
    };
    let ready = zi.recv().await;
    check_zi_ready(&ready, project);
    (zi, ready)
}

fn prompt_params(text: &str) -> Value {
    json!({"delivery": "direct", "text": text})
}

/// The text of each message of a `session.get_messages` result.
fn zi_message_texts(result: &Value) -> Vec<String> {
    result["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            m["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Zi RPC v1 over the gateway

/// Two clients of one project: the same session events for one client's
/// prompt, each its own response to the same id, and on each connection a
/// `sequence` of 1, 2, 3, … with no gap.
#[tokio::test]
async fn zi_two_clients_share_events_and_keep_their_own_responses() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("shared answer"));
    let gw = gateway("zi", &mock).await;
    let (mut a, ready_a) = zi_hello(&gw, "alpha", None).await;
    let (mut b, ready_b) = zi_hello(&gw, "alpha", None).await;
    assert_eq!(ready_a["state"]["sessionId"], ready_b["state"]["sessionId"]);
    assert_ne!(
        ready_a["gateway"]["client_id"],
        ready_b["gateway"]["client_id"]
    );
    assert_eq!(gw.child_pids().len(), 1, "one child for the project");

    // The same id from both clients at once: one response each.
    a.send("s", "session.get_state", json!({})).await;
    b.send("s", "session.get_state", json!({})).await;
    for (zi, ready) in [(&mut a, &ready_a), (&mut b, &ready_b)] {
        let r = zi.until("s").await.pop().unwrap();
        assert_eq!(r["type"], "response", "{r}");
        assert_eq!(r["method"], "session.get_state", "{r}");
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["result"]["sessionId"], ready["state"]["sessionId"], "{r}");
    }

    a.send("p1", "session.prompt", prompt_params("hi")).await;
    let fa = a
        .collect(|fs| has(fs, |f| is_zi_answer(f, "p1")) && has(fs, is_zi_event("agent_end")))
        .await;
    assert!(
        !has(&fa, |f| f["id"] == "s"),
        "A never sees B's response: {}",
        brief(&fa)
    );
    let p1 = fa.iter().find(|f| is_zi_answer(f, "p1")).unwrap();
    assert_eq!(p1["type"], "response", "{p1}");
    assert_eq!(p1["ok"], true, "{p1}");
    let fb = b.collect(|fs| has(fs, is_zi_event("agent_end"))).await;
    assert!(
        fb.iter().all(|f| f["type"] == "session_event"),
        "B gets only events: {}",
        brief(&fb)
    );
    let events = zi_agent_events(&fa);
    assert_eq!(
        zi_agent_events(&fb),
        events,
        "both clients see the same events"
    );
    assert_eq!(events.first().unwrap().0["type"], "agent_start");
    assert_eq!(zi_text(&fb), "shared answer");
    assert_increasing_unique(&zi_seqs(&fb));

    // A's next response is its own, and B's sequence carries on.
    let state = a.call("s", "session.get_state", json!({})).await;
    assert_eq!(state["result"]["activity"]["type"], "idle", "{state}");
    let state = b.call("s", "session.get_state", json!({})).await;
    assert_eq!(state["ok"], true, "{state}");
}

/// Two reconnects, with `resumeAfter` in `connection.hello` and with a
/// bearer header and `?resume_after=`: each new connection counts
/// `sequence` from 1 again, and together they deliver the whole run once.
#[tokio::test]
async fn zi_reconnects_with_resume_after_miss_nothing() {
    let mock = MockLlm::start().await;
    let (turn, full) = slow(30, 30);
    mock.push(turn);
    let gw = gateway("zi", &mock).await;
    let (mut zi, _) = zi_hello(&gw, "alpha", None).await;
    zi.send("p1", "session.prompt", prompt_params("stream"))
        .await;
    let mut seen = zi
        .collect(|fs| has(fs, |f| zi_delta(f) == Some("w5 ")))
        .await;
    let last = *zi_seqs(&seen).last().unwrap();
    drop(zi);

    let (mut zi, ready) = zi_hello(&gw, "alpha", Some(last)).await;
    assert_eq!(ready["gateway"]["gap"], false, "{ready}");
    zi.collect_onto(&mut seen, |fs| has(fs, |f| zi_delta(f) == Some("w15 ")))
        .await;
    let last = *zi_seqs(&seen).last().unwrap();
    drop(zi);

    let query = format!("resume_after={last}");
    let (mut zi, ready) = zi_bearer(&gw, "alpha", Some(&query)).await;
    assert_eq!(ready["gateway"]["gap"], false, "{ready}");
    zi.collect_onto(&mut seen, |fs| has(fs, is_zi_event("agent_end")))
        .await;
    assert_increasing_unique(&zi_seqs(&seen));
    assert_eq!(zi_text(&seen), full);
}

/// SIGKILL mid-prompt: `child_exited`, a terminal `agent_end` with an
/// error, the pending `await_idle` fails, `child_started`; the restarted
/// child still has the completed exchange.
#[tokio::test]
async fn zi_a_killed_child_ends_the_run_and_restarts_with_its_conversation() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text(EARLIER_REPLY));
    let (turn, _) = slow(200, 50);
    mock.push(turn);
    let gw = gateway("zi", &mock).await;
    let (mut a, _) = zi_hello(&gw, "alpha", None).await;
    let (mut b, _) = zi_hello(&gw, "alpha", None).await;

    a.send("p0", "session.prompt", prompt_params(EARLIER_PROMPT))
        .await;
    a.send("w0", "session.await_idle", json!({})).await;
    let first = a
        .collect(|fs| has(fs, |f| is_zi_answer(f, "w0")) && has(fs, is_zi_event("agent_end")))
        .await;
    let w0 = first.iter().find(|f| is_zi_answer(f, "w0")).unwrap();
    assert_eq!(w0["ok"], true, "{w0}");
    assert_eq!(zi_text(&first), EARLIER_REPLY);
    b.collect(|fs| has(fs, is_zi_event("agent_end"))).await;

    a.send("p1", "session.prompt", prompt_params("two")).await;
    let mut fa = a
        .collect(|fs| has(fs, |f| is_zi_answer(f, "p1")) && has(fs, |f| zi_delta(f).is_some()))
        .await;
    a.send("w", "session.await_idle", json!({})).await;
    // Answered after `w` reached the child: `w` is pending there now.
    a.send("s", "session.get_state", json!({})).await;
    a.collect_onto(&mut fa, |fs| has(fs, |f| is_zi_answer(f, "s")))
        .await;
    let state = fa.iter().find(|f| is_zi_answer(f, "s")).unwrap();
    assert_eq!(state["result"]["activity"]["type"], "running", "{state}");
    sigkill(child_pid(&gw, "alpha").await);

    let restarted = |fs: &[Value]| {
        has(fs, is_zi_event("child_exited"))
            && fs.last().and_then(zi_event) == Some("child_started")
    };
    let fa = a.collect(restarted).await;
    let fb = b.collect(restarted).await;
    for (who, frames) in [("A", &fa), ("B", &fb)] {
        let exited = index_of(frames, "child_exited", is_zi_event("child_exited"));
        let end = index_of(frames, "agent_end", is_zi_event("agent_end"));
        assert!(
            exited < end,
            "{who}: child_exited before agent_end: {}",
            brief(frames)
        );
        let exit = &frames[exited]["event"];
        assert_eq!(exit["signal"], 9, "{who}: {exit}");
        assert_eq!(exit["restarting"], true, "{who}: {exit}");
        let end = &frames[end]["event"];
        assert!(
            !end["errorMessage"].as_str().unwrap_or_default().is_empty(),
            "{who}: agent_end names the error: {end}"
        );
        assert_increasing_unique(&zi_seqs(frames));
    }
    let w = index_of(&fa, "the response to w", |f| is_zi_answer(f, "w"));
    assert!(
        w < fa.len() - 1,
        "w fails before child_started: {}",
        brief(&fa)
    );
    assert_eq!(fa[w]["type"], "response", "{}", fa[w]);
    assert_eq!(fa[w]["ok"], false, "{}", fa[w]);
    assert_eq!(fa[w]["error"]["code"], "operation_failed", "{}", fa[w]);
    assert!(
        fb.iter().all(|f| f["type"] == "session_event"),
        "B gets no responses: {}",
        brief(&fb)
    );

    // The restarted child has the completed exchange from its journal.
    let page = a.call("m", "session.get_messages", json!({})).await;
    assert_eq!(page["ok"], true, "{page}");
    let texts = zi_message_texts(&page["result"]);
    assert!(
        texts.starts_with(&[EARLIER_PROMPT.to_string(), EARLIER_REPLY.to_string()]),
        "{texts:?}"
    );
}

/// `connection.set_events none` silences one client only; its `sequence`
/// stays gap-free, and turning events back on brings only new ones.
#[tokio::test]
async fn zi_set_events_none_applies_to_that_client_only() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("quiet answer"));
    mock.push(Turn::text("loud answer"));
    let gw = gateway("zi", &mock).await;
    let (mut a, _) = zi_hello(&gw, "alpha", None).await;
    let (mut b, _) = zi_hello(&gw, "alpha", None).await;
    let none = b
        .call("e", "connection.set_events", json!({"mode": "none"}))
        .await;
    assert_eq!(none["result"], json!({"mode": "none"}), "{none}");

    a.send("p1", "session.prompt", prompt_params("hush")).await;
    let fa = a
        .collect(|fs| has(fs, |f| is_zi_answer(f, "p1")) && has(fs, is_zi_event("agent_end")))
        .await;
    assert_eq!(zi_text(&fa), "quiet answer", "A still gets the events");
    let quiet_last = *zi_seqs(&fa).last().unwrap();

    // B's next frame is the answer to its next request: no events before.
    b.send("s", "session.get_state", json!({})).await;
    let fb = b.until("s").await;
    assert_eq!(fb.len(), 1, "no session events for B: {}", brief(&fb));
    assert_eq!(fb[0]["result"]["messageCount"], 2, "{}", fb[0]);
    let all = b
        .call("e2", "connection.set_events", json!({"mode": "all"}))
        .await;
    assert_eq!(all["result"], json!({"mode": "all"}), "{all}");

    a.send("p2", "session.prompt", prompt_params("shout")).await;
    let fb = b.collect(|fs| has(fs, is_zi_event("agent_end"))).await;
    assert_eq!(zi_text(&fb), "loud answer");
    let seqs = zi_seqs(&fb);
    assert!(
        seqs.iter().all(|s| *s > quiet_last),
        "no replay of what was suppressed: {seqs:?} after {quiet_last}"
    );
}

/// A second request with an in-flight id on the same connection is
/// refused and not launched; another client may use that id meanwhile.
#[tokio::test]
async fn zi_duplicate_in_flight_id_is_refused_per_client() {
    let mock = MockLlm::start().await;
    let (turn, full) = slow(40, 50);
    mock.push(turn);
    let gw = gateway("zi", &mock).await;
    let (mut a, _) = zi_hello(&gw, "alpha", None).await;
    let (mut b, _) = zi_hello(&gw, "alpha", None).await;

    a.send("p1", "session.prompt", prompt_params("count")).await;
    let mut fa = a.until("p1").await;
    let p1 = fa.last().unwrap().clone();
    assert_eq!(p1["result"]["delivery"], "direct", "{p1}");
    a.send("w", "session.await_idle", json!({})).await;
    // The duplicate would abort the run if it were launched.
    a.send("w", "session.interrupt", json!({})).await;
    let mut refused = a.until("w").await;
    let dup = refused.pop().unwrap();
    fa.extend(refused);
    assert_eq!(dup["type"], "protocol_error", "{dup}");
    assert_eq!(dup["code"], "invalid_request", "{dup}");

    // B's own `w` while A's is in flight: no error.
    b.send("w", "session.await_idle", json!({})).await;
    b.send("s", "session.get_state", json!({})).await;
    let fb = b.until("s").await;
    assert!(
        !has(&fb, |f| f["type"] == "protocol_error"),
        "B may use id w: {}",
        brief(&fb)
    );

    a.collect_onto(&mut fa, |fs| {
        has(fs, |f| is_zi_answer(f, "w")) && has(fs, is_zi_event("agent_end"))
    })
    .await;
    let w = fa.iter().find(|f| is_zi_answer(f, "w")).unwrap();
    assert_eq!(w["type"], "response", "{w}");
    assert_eq!(w["ok"], true, "{w}");
    let end = fa
        .iter()
        .find(|f| zi_event(f) == Some("agent_end"))
        .unwrap();
    assert!(
        end["event"].get("errorMessage").is_none(),
        "not interrupted: {end}"
    );
    assert_eq!(zi_text(&fa), full, "the run was not interrupted");
    let wb = b.until("w").await.pop().unwrap();
    assert_eq!(wb["type"], "response", "{wb}");
    assert_eq!(wb["ok"], true, "{wb}");

    // Once answered, the id may be used again.
    let again = a.call("w", "session.get_state", json!({})).await;
    assert_eq!(again["ok"], true, "{again}");
}

/// A wrong token in `connection.hello`: an `unauthorized` protocol error
/// as frame 1, then close 1008, and no child is started.
#[tokio::test]
async fn zi_hello_with_a_wrong_token_is_refused() {
    let gw = GatewaySpawn::default()
        .echo()
        .arg("--dialect")
        .arg("zi")
        .spawn()
        .await;
    let mut zi = Zi {
        ws: gw.connect("alpha").await,
        sequence: 0,
    };
    zi.send("auth", "connection.hello", json!({"token": WRONG_TOKEN}))
        .await;
    let e = zi.recv().await;
    assert_eq!(e["type"], "protocol_error", "{e}");
    assert_eq!(e["id"], "auth", "{e}");
    assert_eq!(e["code"], "unauthorized", "{e}");
    assert!(e["message"].is_string(), "{e}");
    assert_eq!(expect_close(&mut zi.ws).await, 1008);
    assert!(gw.child_pids().is_empty(), "no child before authentication");
    // The right token is let in.
    zi_hello(&gw, "alpha", None).await;
}

// ---------------------------------------------------------------------------
// Health checks and admin abort, in both dialects

/// A gateway that pings its children every 100 ms and kills one that does
/// not answer within 2 s (generous, so that a loaded machine never makes a
/// live child look hung; the hub's unit tests cover the timeout itself).
async fn pinging_gateway(dialect: &str, mock: &MockLlm) -> Gateway {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--dialect")
        .arg(dialect)
        .arg("--ping-interval")
        .arg("100ms")
        .arg("--ping-timeout")
        .arg("2s")
        .spawn()
        .await
}

/// A run of about 3 s under frequent health pings: the child answers them
/// (it is not killed as hung), and the admin API's abort ends the run.
#[tokio::test]
async fn letscode_health_pings_are_answered_and_admin_abort_ends_the_run() {
    let mock = MockLlm::start().await;
    let (turn, _) = slow(60, 50);
    mock.push(turn);
    let gw = pinging_gateway("letscode", &mock).await;
    let (mut ws, _, _) = lc_hello(&gw, "alpha", None).await;
    let pid = child_pid(&gw, "alpha").await;
    ws.send(json!({"cmd":"prompt","id":"r1","text":"stream"}))
        .await;
    // Forty chunks take at least two seconds: a ping timeout's worth of
    // ping rounds, so a child that did not answer them would be killed.
    let mut seen = ws.recv_until(|f| lc_delta(f) == Some("w40 ")).await;
    let (status, body) = gw
        .http_post("/v1/projects/alpha/abort", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202, "{body}");
    collect_onto(&mut ws, &mut seen, |fs| has(fs, is_lc("done", "r1"))).await;
    let end = index_of(&seen, "agent_end", |f| f["type"] == "agent_end");
    assert_eq!(
        end,
        seen.len() - 2,
        "agent_end, then done: {}",
        brief(&seen)
    );
    assert!(
        !has(&seen, is_gateway_event),
        "the child was not restarted: {}",
        brief(&seen)
    );
    assert!(
        !has(&seen, |f| lc_delta(f) == Some("w59 ")),
        "the run was cut short"
    );
    assert_eq!(child_pid(&gw, "alpha").await, pid);
}

#[tokio::test]
async fn zi_health_pings_are_answered_and_admin_abort_ends_the_run() {
    let mock = MockLlm::start().await;
    let (turn, _) = slow(60, 50);
    mock.push(turn);
    let gw = pinging_gateway("zi", &mock).await;
    let (mut zi, _) = zi_hello(&gw, "alpha", None).await;
    let pid = child_pid(&gw, "alpha").await;
    zi.send("p1", "session.prompt", prompt_params("stream"))
        .await;
    let mut seen = zi
        .collect(|fs| has(fs, |f| zi_delta(f) == Some("w40 ")))
        .await;
    let (status, body) = gw
        .http_post("/v1/projects/alpha/abort", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202, "{body}");
    zi.collect_onto(&mut seen, |fs| has(fs, is_zi_event("agent_end")))
        .await;
    assert!(
        !has(&seen, is_zi_event("child_exited")),
        "the child was not restarted: {}",
        brief(&seen)
    );
    assert!(
        !has(&seen, |f| zi_delta(f) == Some("w59 ")),
        "the run was cut short"
    );
    // Nothing the gateway sent for itself reaches the client.
    assert!(
        seen.iter()
            .all(|f| f["type"] == "session_event" || f["id"] == "p1"),
        "{}",
        brief(&seen)
    );
    assert_eq!(child_pid(&gw, "alpha").await, pid);
    let (_, stats) = gw.http_get("/v1/stats", Some(ADMIN_TOKEN)).await;
    let stats: Value = serde_json::from_str(&stats).unwrap();
    assert_eq!(stats["dialect"], "zi", "{stats}");
}

/// The Zi bound of 32 operations in flight holds per connection: a 33rd
/// gets `capacity` and is not launched, while another client of the same
/// child still gets its operations admitted.
#[tokio::test]
async fn zi_in_flight_bound_is_per_client() {
    let mock = MockLlm::start().await;
    let (turn, _) = slow(40, 25);
    mock.push(turn);
    let gw = gateway("zi", &mock).await;
    let (mut a, _) = zi_hello(&gw, "alpha", None).await;
    let (mut b, _) = zi_hello(&gw, "alpha", None).await;
    a.send("p", "session.prompt", prompt_params("stream")).await;
    a.until("p").await;
    for n in 0..32 {
        a.send(&format!("w{n}"), "session.await_idle", json!({}))
            .await;
    }
    let refused = a.call("w32", "session.await_idle", json!({})).await;
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(refused["error"]["code"], "capacity", "{refused}");
    // Another connection is not held to A's operations.
    b.send("b", "session.await_idle", json!({})).await;
    let fb = b.until("b").await;
    assert_eq!(fb.last().unwrap()["ok"], true, "{}", brief(&fb));
    // A's 32 waits all settle when the run does.
    let fa = a
        .collect(|fs| (0..32).all(|n| has(fs, |f| is_zi_answer(f, &format!("w{n}")))))
        .await;
    for n in 0..32 {
        let w = fa
            .iter()
            .find(|f| is_zi_answer(f, &format!("w{n}")))
            .unwrap();
        assert_eq!(w["ok"], true, "{w}");
    }
}
