//! ACP through `corral serve --dialect acp`: two clients on one project
//! see every update, a permission request answered by one is settled for
//! both, and a client that reconnects with `resume_after` and resumes the
//! session misses nothing and gets the request still waiting again; a start stuck in the
//! filesystem holds up no other project. The agent runs with
//! `--permission-mode ask` on the mock LLM.

use serde_json::{json, Value};

use corral_e2e::acp_client;
use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN, TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};

async fn gateway(mock: &MockLlm) -> Gateway {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .child_arg("--permission-mode")
        .child_arg("ask")
        .arg("--dialect")
        .arg("acp")
        .spawn()
        .await
}

/// A client authenticated by its header, `initialize`d; returns it and
/// the answer's result.
async fn client(gw: &Gateway, query: Option<&str>) -> (Ws, Value) {
    let (ws, init, _) = resumed(gw, query).await;
    (ws, init)
}

/// [`client`], with what came before the answer (a resumed client's
/// replay is due before it).
async fn resumed(gw: &Gateway, query: Option<&str>) -> (Ws, Value, Vec<Value>) {
    let mut ws = gw.connect_with_bearer("alpha", TOKEN, query).await;
    let params = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let (init, before) = call(&mut ws, json!(0), "initialize", params).await;
    (ws, init, before)
}

/// Sends a request and returns its result, skipping other messages.
async fn rpc(ws: &mut Ws, id: Value, method: &str, params: Value) -> Value {
    call(ws, id, method, params).await.0
}

/// Sends a request; returns its result and the messages before it.
async fn call(ws: &mut Ws, id: Value, method: &str, params: Value) -> (Value, Vec<Value>) {
    ws.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    let mut frames = ws
        .recv_until(|f| f.get("method").is_none() && f["id"] == id)
        .await;
    let answer = frames.pop().expect("recv_until returns its stop frame");
    assert!(answer.get("error").is_none(), "{method} failed: {answer}");
    (answer["result"].clone(), frames)
}

fn seq(frame: &Value) -> Option<u64> {
    frame["params"]["_meta"]["corral"]["seq"].as_u64()
}

fn is_update(frame: &Value) -> bool {
    frame["method"] == "session/update"
}

fn is_permission(frame: &Value) -> bool {
    frame["method"] == "session/request_permission"
}

fn text_of(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| is_update(f) && f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|f| f["params"]["update"]["content"]["text"].as_str())
        .collect()
}

/// Answers permission request `id` with `option`.
async fn answer(ws: &mut Ws, id: &Value, option: &str) {
    let outcome = json!({"outcome": "selected", "optionId": option});
    ws.send(json!({"jsonrpc": "2.0", "id": id, "result": {"outcome": outcome}}))
        .await;
}

/// A tool call that ran to its end.
fn tool_completed(frame: &Value) -> bool {
    let update = &frame["params"]["update"];
    update["sessionUpdate"] == "tool_call_update" && update["status"] == "completed"
}

fn prompt(session: &Value, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

#[tokio::test]
async fn two_clients_see_every_update_and_the_first_answer_settles_a_permission_for_both() {
    let mock = MockLlm::start().await;
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": "echo from-bash"}),
    ));
    mock.push(Turn::text("Done after bash"));
    let gw = gateway(&mock).await;

    let (mut a, init) = client(&gw, None).await;
    assert_eq!(init["protocolVersion"], 1);
    assert_eq!(init["agentCapabilities"]["loadSession"], true);
    assert_eq!(init["_meta"]["corral"]["project"], "alpha");
    let (mut b, _) = client(&gw, None).await;
    let session = rpc(
        &mut a,
        json!(1),
        "session/new",
        json!({"cwd": "/anywhere", "mcpServers": []}),
    )
    .await;
    let sid = session["sessionId"].clone();
    assert!(sid.as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(session["modes"]["currentModeId"], "ask");
    let same = rpc(
        &mut b,
        json!("b1"),
        "session/new",
        json!({"cwd": "/else", "mcpServers": []}),
    )
    .await;
    assert_eq!(same["sessionId"], sid, "one session per project");

    a.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(&sid, "run it")}))
        .await;
    // Both are asked, under the same gateway id.
    let a_seen = a.recv_until(is_permission).await;
    let b_seen = b.recv_until(is_permission).await;
    let (ask_a, ask_b) = (a_seen.last().unwrap(), b_seen.last().unwrap());
    assert_eq!(ask_a["id"], ask_b["id"]);
    let gid = ask_a["id"].clone();
    assert!(gid.as_str().unwrap().starts_with("corral-ask-"), "{gid}");
    assert_eq!(ask_a["params"]["toolCall"]["kind"], "execute");
    let options: Vec<&str> = ask_a["params"]["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["optionId"].as_str())
        .collect();
    assert!(options.contains(&"allow_once") && options.contains(&"reject_once"));

    // B answers first; A hears it is settled.
    answer(&mut b, &gid, "allow_once").await;
    let settled = a
        .recv_until(|f| f["method"] == "_corral/request_resolved")
        .await;
    assert!(settled
        .iter()
        .any(|f| f["method"] == "$/cancel_request" && f["params"]["requestId"] == gid));
    assert_eq!(
        settled.last().unwrap()["params"]["outcome"]["optionId"],
        "allow_once"
    );
    // A late answer from A changes nothing.
    answer(&mut a, &gid, "reject_once").await;

    // The prompt ends for A; both saw the same updates, in the same order.
    let rest = a
        .recv_until(|f| f["id"] == 2 && f.get("method").is_none())
        .await;
    let answer = rest.last().unwrap();
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let a_all: Vec<Value> = a_seen.into_iter().chain(settled).chain(rest).collect();
    let a_updates: Vec<u64> = a_all
        .iter()
        .filter(|f| is_update(f))
        .filter_map(seq)
        .collect();
    let last = *a_updates.last().unwrap();
    let b_rest = b.recv_until(|f| is_update(f) && seq(f) == Some(last)).await;
    let b_all: Vec<Value> = b_seen.into_iter().chain(b_rest).collect();
    let b_updates: Vec<u64> = b_all
        .iter()
        .filter(|f| is_update(f))
        .filter_map(seq)
        .collect();
    assert_eq!(a_updates, b_updates);
    assert!(a_updates.windows(2).all(|w| w[0] < w[1]), "{a_updates:?}");
    assert!(text_of(&b_all).contains("Done after bash"));
    let completed = b_all.iter().any(tool_completed);
    assert!(completed, "the allowed command ran");
    assert!(
        !b_all.iter().any(|f| f["id"] == 2),
        "the prompt's answer goes to its sender only"
    );
}

#[tokio::test]
async fn a_client_that_reconnects_misses_nothing_and_is_asked_again() {
    let mock = MockLlm::start().await;
    mock.push(Turn::TextAndToolCalls {
        text: "Let me run it.".into(),
        calls: vec![("bash".into(), json!({"command": "echo again"}))],
    });
    mock.push(Turn::text("Finished."));
    let gw = gateway(&mock).await;

    let (mut a, init) = client(&gw, None).await;
    let start = init["_meta"]["corral"]["last_seq"].as_u64().unwrap();
    let session = rpc(
        &mut a,
        json!(1),
        "session/new",
        json!({"cwd": "/", "mcpServers": []}),
    )
    .await;
    let sid = session["sessionId"].clone();
    a.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(&sid, "go")}))
        .await;
    // The client goes away at once; the run goes on without it.
    drop(a);

    // Back, with what it saw: nothing before the initialize answer, and
    // everything since once it resumes the session.
    let query = format!("resume_after={start}");
    let (mut again, init, before) = resumed(&gw, Some(&query)).await;
    assert_eq!(init["_meta"]["corral"]["gap"], false);
    assert!(before.is_empty(), "{before:?}");
    let resume = json!({"sessionId": sid, "cwd": "/"});
    let (resumed_answer, mut frames) = call(&mut again, json!(3), "session/resume", resume).await;
    assert_eq!(resumed_answer["_meta"]["corral"]["gap"], false);
    if !frames.iter().any(is_permission) {
        frames.extend(again.recv_until(is_permission).await);
    }
    assert!(
        text_of(&frames).contains("Let me run it."),
        "the text streamed while it was away is replayed: {frames:?}"
    );
    let seqs: Vec<u64> = frames.iter().filter_map(seq).collect();
    let ask = frames.iter().find(|f| is_permission(f)).unwrap().clone();
    assert!(ask["id"].as_str().is_some());
    assert!(seqs.first().is_some_and(|s| *s == start + 1), "{seqs:?}");
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] + 1),
        "no gap: {seqs:?}"
    );
    let ask = frames.last().unwrap().clone();

    // Once more: a second reconnect is asked the same request again.
    let last = *seqs.last().unwrap();
    drop(again);
    let query = format!("resume_after={last}");
    let (mut third, _, _) = resumed(&gw, Some(&query)).await;
    let resume = json!({"sessionId": sid, "cwd": "/"});
    let (_, mut frames) = call(&mut third, json!(3), "session/resume", resume).await;
    if !frames.iter().any(is_permission) {
        frames.extend(third.recv_until(is_permission).await);
    }
    let asked: Vec<&Value> = frames.iter().filter(|f| is_permission(f)).collect();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0]["id"], ask["id"]);
    assert!(
        frames.iter().all(|f| seq(f).is_none_or(|s| s > last)),
        "{frames:?}"
    );
    answer(&mut third, &ask["id"], "allow_once").await;
    let mut rest = Vec::new();
    while !text_of(&rest).contains("Finished.") {
        rest.push(third.recv().await);
    }
    assert!(rest.iter().any(tool_completed));
}

#[tokio::test]
async fn session_load_replays_what_the_gateway_holds_and_other_sessions_are_unknown() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("First answer"));
    let gw = gateway(&mock).await;
    let (mut a, _) = client(&gw, None).await;
    let session = rpc(
        &mut a,
        json!(1),
        "session/new",
        json!({"cwd": "/", "mcpServers": []}),
    )
    .await;
    let sid = session["sessionId"].clone();
    let done = rpc(&mut a, json!(2), "session/prompt", prompt(&sid, "hello")).await;
    assert_eq!(done["stopReason"], "end_turn");

    let (mut b, _) = client(&gw, None).await;
    b.send(json!({"jsonrpc": "2.0", "id": 5, "method": "session/load",
        "params": {"sessionId": sid, "cwd": "/", "mcpServers": []}}))
        .await;
    let frames = b.recv_until(|f| f["id"] == 5).await;
    assert!(frames.last().unwrap().get("result").is_some());
    // A second load on the connection sends no seq it was sent already.
    b.send(json!({"jsonrpc": "2.0", "id": 8, "method": "session/load",
        "params": {"sessionId": sid, "cwd": "/", "mcpServers": []}}))
        .await;
    let again = b.recv_until(|f| f["id"] == 8).await;
    assert!(again.last().unwrap().get("result").is_some());
    let first: Vec<u64> = frames.iter().filter_map(seq).collect();
    assert!(
        again.iter().filter_map(seq).all(|s| !first.contains(&s)),
        "{again:?}"
    );
    assert!(text_of(&frames).contains("First answer"), "{frames:?}");
    b.send(json!({"jsonrpc": "2.0", "id": 6, "method": "session/load",
        "params": {"sessionId": "someone-else", "cwd": "/", "mcpServers": []}}))
        .await;
    let refused = b.recv_until(|f| f["id"] == 6).await;
    assert_eq!(refused.last().unwrap()["error"]["code"], -32002);

    // A mode switch holds for clients that join later.
    let params = json!({"sessionId": sid, "modeId": "read-only"});
    let (_, before) = call(&mut a, json!(7), "session/set_mode", params).await;
    let switched = |f: &Value| f["params"]["update"]["sessionUpdate"] == "current_mode_update";
    if !before.iter().any(switched) {
        a.recv_until(switched).await;
    }
    let (mut c, _) = client(&gw, None).await;
    let joined = rpc(
        &mut c,
        json!(1),
        "session/new",
        json!({"cwd": "/", "mcpServers": []}),
    )
    .await;
    assert_eq!(joined["modes"]["currentModeId"], "read-only");
}

/// A FIFO where alpha's kept session id belongs (planted in the state
/// directory, as a hung network mount would hold the open) holds up
/// nothing: the start opens it without waiting, takes it for no kept
/// session and starts afresh, and beta is served meanwhile. (That a start
/// really stuck in the filesystem holds up only its own project is the
/// file lane's business, tested in `offload`.)
#[tokio::test]
async fn a_fifo_in_the_state_directory_holds_up_no_start() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("beta is answered"));
    let gw = gateway(&mock).await;
    let sessions = gw.state.join("sessions");
    std::fs::create_dir_all(&sessions).unwrap();
    let fifo = sessions.join("alpha.session-id");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();

    let init = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let mut a = gw.connect_with_bearer("alpha", TOKEN, None).await;
    let (hello, _) = call(&mut a, json!(0), "initialize", init.clone()).await;
    assert_eq!(hello["_meta"]["corral"]["project"], "alpha", "{hello}");

    let mut b = gw.connect_with_bearer("beta", TOKEN, None).await;
    let (hello, _) = call(&mut b, json!(0), "initialize", init).await;
    assert_eq!(hello["_meta"]["corral"]["project"], "beta");
    let cwd = json!({"cwd": "/", "mcpServers": []});
    let session = rpc(&mut b, json!(1), "session/new", cwd).await;
    let sid = session["sessionId"].clone();
    let (done, frames) = call(&mut b, json!(2), "session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(done["stopReason"], "end_turn");
    assert!(text_of(&frames).contains("beta is answered"), "{frames:?}");
    let (status, text) = gw.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    assert!(
        text.contains(r#"corral_blocking_jobs{lane="files",state="running"} 0"#),
        "a file job is still stuck"
    );
}

// ---------------------------------------------------------------------------
// The official SDK's ClientSideConnection through `corral attach`

fn of_kind<'a>(updates: &'a Value, kind: &str) -> Vec<&'a Value> {
    updates
        .as_array()
        .expect("updates")
        .iter()
        .filter(|u| u["sessionUpdate"] == kind)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_client_works_through_corral_attach() {
    let node = acp_client::sdk_ready();
    let mock = MockLlm::start().await;
    acp_client::script_conversation(&mock, "disk");
    let root = tempfile::tempdir().expect("temp dir");
    let projects = root.path().join("projects");
    let project = projects.join("alpha");
    std::fs::create_dir_all(&project).expect("project dir");
    std::fs::write(project.join("notes.txt"), "the disk text\n").expect("notes");
    let gw = GatewaySpawn::default()
        .projects_root(projects)
        .mock(&mock.anthropic_base_url())
        .child_arg("--permission-mode")
        .child_arg("ask")
        .arg("--dialect")
        .arg("acp")
        .spawn()
        .await;
    let args = json!(["attach", "--dialect", "acp", gw.url("alpha")]);
    let mut client = acp_client::script(&node, "client.mjs");
    client
        .env("ACP_AGENT", corral_e2e::harness::workspace_bin("corral"))
        .env("ACP_AGENT_ARGS", args.to_string())
        .env("ACP_CWD", &project)
        .env("CORRAL_TOKEN", TOKEN);
    let report = acp_client::report(client).await;

    assert_eq!(report["initialize"]["protocolVersion"], 1);
    assert_eq!(
        report["initialize"]["agentCapabilities"]["loadSession"],
        true
    );
    assert_eq!(report["initialize"]["_meta"]["corral"]["project"], "alpha");
    let session_id = report["newSession"]["sessionId"].clone();
    assert_eq!(report["newSession"]["modes"]["currentModeId"], "ask");
    assert_eq!(report["hello"]["stopReason"], "end_turn");
    assert_eq!(report["hello"]["text"], "Hi there");
    // The gateway offers the agent no editor files: the edit is on disk.
    assert_eq!(report["edited"]["stopReason"], "end_turn");
    assert_eq!(report["reads"], json!([]));
    assert_eq!(
        std::fs::read_to_string(project.join("notes.txt")).expect("notes"),
        "the edited text\n"
    );
    // Allowed runs, rejected does not; both asked through the gateway.
    assert_eq!(report["allowed"]["text"], "Ran it.");
    assert_eq!(
        std::fs::read_to_string(project.join("out.txt")).expect("out.txt"),
        "allowed\n"
    );
    assert!(
        !project.join("no.txt").exists(),
        "the rejected command never ran"
    );
    let asked: Vec<&str> = report["permissions"]
        .as_array()
        .expect("permissions")
        .iter()
        .filter_map(|p| p["toolCall"]["kind"].as_str())
        .collect();
    assert_eq!(asked, ["edit", "execute", "execute"]);
    assert!(report["rejected"]["text"]
        .as_str()
        .is_some_and(|t| t.starts_with("saw: ")));
    assert_eq!(report["cancelled"]["stopReason"], "cancelled");
    assert_eq!(report["firstExit"], 0);

    // A second editor loads the session: the gateway sends what it holds.
    assert!(report["load"].is_object(), "{}", report["load"]);
    let replayed = &report["replayed"];
    assert!(replayed
        .as_array()
        .expect("replayed")
        .iter()
        .all(|u| u["sessionId"] == session_id));
    let text: String = of_kind(replayed, "agent_message_chunk")
        .iter()
        .filter_map(|u| u["content"]["text"].as_str())
        .collect();
    assert!(
        text.contains("Hi there") && text.contains("Ran it."),
        "{text}"
    );
    assert!(!of_kind(replayed, "tool_call").is_empty());
    assert_eq!(report["secondExit"], 0);
}
