//! One project's ACP session shared by several editors through `corral
//! serve --dialect acp`: the gateway owns its lifecycle. An editor's
//! `session/close` leaves the others (and newcomers) working, and
//! `session/list` shows exactly the projects the token may open; a load
//! replays the whole conversation, as the agent itself does on its
//! journal, before and after a gateway restart; the agent's config
//! options reach every editor and follow `config_option_update`; through
//! `corral attach` the editor's first line is its `initialize` answer.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::ChildStdout;

use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, TOKEN};
use corral_e2e::harness::{workspace_bin, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};

const ALICE: &str = "alice-shared-token-0123456789";
const BOB: &str = "bob-shared-token-0123456789ab";

fn sha256(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A config file where alice may open `a-*` and bob `b-*`.
fn config_file(dir: &Path) -> PathBuf {
    let entry = |name: &str, secret: &str, projects: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nhash = \"sha256:{}\"\nrole = \"client\"\nprojects = [{projects}]\n\n",
            sha256(secret)
        )
    };
    let text = [
        entry("alice", ALICE, "\"a-*\""),
        entry("bob", BOB, "\"b-*\""),
    ]
    .concat();
    let path = dir.join("corral.toml");
    std::fs::write(&path, text).expect("write the config");
    path
}

/// An editor on `project` authenticated by its header, `initialize`d.
async fn editor(gw: &Gateway, project: &str, token: &str) -> (Ws, Value) {
    let mut ws = gw.connect_with_bearer(project, token, None).await;
    let params = json!({"protocolVersion": 1, "clientCapabilities": {}});
    let (init, before) = call(&mut ws, json!("init"), "initialize", params).await;
    assert!(
        before.is_empty(),
        "nothing before the initialize answer: {before:?}"
    );
    (ws, init)
}

/// Sends a request; returns its answer (result or error) and the messages
/// before it.
async fn exchange(ws: &mut Ws, id: Value, method: &str, params: Value) -> (Value, Vec<Value>) {
    ws.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
        .await;
    let mut frames = ws
        .recv_until(|f| f.get("method").is_none() && f["id"] == id)
        .await;
    let answer = frames.pop().expect("recv_until returns its stop frame");
    (answer, frames)
}

/// [`exchange`] for a request that must succeed: its result.
async fn call(ws: &mut Ws, id: Value, method: &str, params: Value) -> (Value, Vec<Value>) {
    let (answer, frames) = exchange(ws, id, method, params).await;
    assert!(answer.get("error").is_none(), "{method} failed: {answer}");
    (answer["result"].clone(), frames)
}

fn seq(frame: &Value) -> Option<u64> {
    frame["params"]["_meta"]["corral"]["seq"].as_u64()
}

fn is_update(frame: &Value) -> bool {
    frame["method"] == "session/update"
}

fn prompt(session: &Value, text: &str) -> Value {
    json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]})
}

/// The user's and the agent's messages among session updates, in order:
/// consecutive chunks of one kind joined.
fn messages<'a>(updates: impl IntoIterator<Item = &'a Value>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for update in updates {
        let kind = update["sessionUpdate"].as_str().unwrap_or("");
        if kind != "user_message_chunk" && kind != "agent_message_chunk" {
            continue;
        }
        let text = update["content"]["text"].as_str().unwrap_or("");
        match out.last_mut() {
            Some((last, joined)) if last == kind => joined.push_str(text),
            _ => out.push((kind.to_string(), text.to_string())),
        }
    }
    out
}

#[tokio::test]
async fn a_close_leaves_the_others_working_and_a_list_shows_the_tokens_projects() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("B is answered"));
    let dir = tempfile::tempdir().unwrap();
    let gw = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects(&["a-1", "a-2", "b-1"])
        .arg("--config")
        .arg(config_file(dir.path()).display().to_string())
        .arg("--dialect")
        .arg("acp")
        .spawn()
        .await;

    let (mut a, init) = editor(&gw, "a-1", ALICE).await;
    let caps = &init["agentCapabilities"];
    assert_eq!(caps["loadSession"], true);
    assert_eq!(
        caps["sessionCapabilities"],
        json!({"list": {}, "resume": {}, "close": {}})
    );
    let (mut b, _) = editor(&gw, "a-1", ALICE).await;
    let new = json!({"cwd": "/anywhere", "mcpServers": []});
    let (opened, _) = call(&mut a, json!(1), "session/new", new.clone()).await;
    let sid = opened["sessionId"].clone();
    let (joined, _) = call(&mut b, json!(1), "session/new", new.clone()).await;
    assert_eq!(joined["sessionId"], sid);

    // A leaves the session; the agent's session goes on for B.
    let (closed, _) = call(&mut a, json!(2), "session/close", json!({"sessionId": sid})).await;
    assert_eq!(closed, json!({}));
    let (done, updates) = call(&mut b, json!(2), "session/prompt", prompt(&sid, "hi")).await;
    assert_eq!(done["stopReason"], "end_turn", "{done}");
    let text: String = updates
        .iter()
        .filter(|f| f["params"]["update"]["sessionUpdate"] == "agent_message_chunk")
        .filter_map(|f| f["params"]["update"]["content"]["text"].as_str())
        .collect();
    assert_eq!(text, "B is answered");
    // A hears no more of it: B's updates were out before this answer.
    let (_, before) = call(&mut a, json!(3), "session/list", json!({})).await;
    assert!(!before.iter().any(is_update), "{before:?}");

    // A newcomer joins and loads the same, living session.
    let (mut c, _) = editor(&gw, "a-1", ALICE).await;
    let (again, _) = call(&mut c, json!(1), "session/new", new.clone()).await;
    assert_eq!(again["sessionId"], sid);
    let load = json!({"sessionId": sid, "cwd": "/", "mcpServers": []});
    let (_, replayed) = call(&mut c, json!(2), "session/load", load).await;
    let seqs: Vec<u64> = replayed.iter().filter_map(seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");

    // The list: exactly the token's projects, under virtual paths.
    let (listed, _) = call(&mut c, json!(3), "session/list", json!({})).await;
    let sessions = listed["sessions"].as_array().unwrap();
    let cwds: Vec<&str> = sessions.iter().filter_map(|s| s["cwd"].as_str()).collect();
    assert_eq!(cwds, ["/projects/a-1", "/projects/a-2"]);
    assert_eq!(
        sessions[0]["sessionId"], sid,
        "the running project's session"
    );
    assert_eq!(sessions[1]["sessionId"], "corral-project:a-2");
    assert!(listed.get("nextCursor").is_none());
    let root = gw.root.display().to_string();
    assert!(
        !listed.to_string().contains(&root),
        "no host path: {listed}"
    );
    let (mut other, _) = editor(&gw, "b-1", BOB).await;
    let (theirs, _) = call(&mut other, json!(1), "session/list", json!({})).await;
    let titles: Vec<&str> = theirs["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["title"].as_str())
        .collect();
    assert_eq!(titles, ["b-1"]);

    // No fork of the shared session; a session of another project is
    // not this connection's.
    let (forked, _) = exchange(&mut c, json!(4), "session/fork", json!({"sessionId": sid})).await;
    assert_eq!(forked["error"]["code"], -32601, "{forked}");
    let elsewhere = json!({"sessionId": "corral-project:a-2", "cwd": "/", "mcpServers": []});
    let (refused, _) = exchange(&mut c, json!(5), "session/load", elsewhere).await;
    assert_eq!(refused["error"]["code"], -32002, "{refused}");
    // B still prompts; the session was never closed in the agent.
    mock.push(Turn::text("still here"));
    let (done, _) = call(&mut b, json!(3), "session/prompt", prompt(&sid, "again")).await;
    assert_eq!(done["stopReason"], "end_turn", "{done}");
}

/// The conversation `corral-agent` itself replays on `session/load` of
/// `journal` (run in `cwd` on `mock`), as (kind, text) messages.
async fn direct_replay(
    mock: &MockLlm,
    journal: &Path,
    cwd: &Path,
    session: &str,
) -> Vec<(String, String)> {
    let journal = journal.display().to_string();
    let extra = ["--dialect", "acp", "--session", journal.as_str()];
    // The gateway's child may still hold the journal for a moment.
    for _ in 0..50 {
        let mut agent = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &extra)
            .cwd(cwd)
            .spawn()
            .await;
        agent
            .send(json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": 1, "clientCapabilities": {}}}))
            .await;
        if agent.try_recv().await.is_none() {
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            continue;
        }
        agent
            .send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/load",
                "params": {"sessionId": session, "cwd": cwd, "mcpServers": []}}))
            .await;
        let mut updates = Vec::new();
        loop {
            let frame = agent.recv().await;
            if frame["id"] == 2 {
                assert!(frame.get("error").is_none(), "{frame}");
                return messages(&updates);
            }
            if is_update(&frame) {
                updates.push(frame["params"]["update"].clone());
            }
        }
    }
    panic!("the agent never took the journal");
}

/// A load through the gateway: the history before its answer (each marked
/// as replay, without a seq), as messages, and its answer.
async fn gateway_replay(ws: &mut Ws, sid: &Value) -> (Vec<(String, String)>, Value) {
    let load = json!({"sessionId": sid, "cwd": "/", "mcpServers": []});
    let (answer, frames) = call(ws, json!("load"), "session/load", load).await;
    let updates: Vec<&Value> = frames.iter().filter(|f| is_update(f)).collect();
    for update in &updates {
        assert_eq!(
            update["params"]["_meta"]["corral"]["replay"], true,
            "{update}"
        );
        assert!(seq(update).is_none(), "history carries no seq: {update}");
    }
    (
        messages(updates.iter().map(|u| &u["params"]["update"])),
        answer,
    )
}

/// The gateway asks corral-agent for its whole history
/// (`_corral/session/history`): its ring alone holds no user messages and
/// is empty after a restart.
#[tokio::test]
async fn a_load_replays_the_whole_conversation_before_and_after_a_gateway_restart() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("First answer"));
    mock.push(Turn::text("Second answer"));
    let dir = tempfile::tempdir().unwrap();
    let (root, state) = (dir.path().join("projects"), dir.path().join("state"));
    let spawn = || {
        GatewaySpawn::default()
            .projects_root(root.clone())
            .state_dir(state.clone())
            .projects(&["alpha"])
            .mock(&mock.anthropic_base_url())
            .arg("--dialect")
            .arg("acp")
            .spawn()
    };
    let gw = spawn().await;
    let (mut a, _) = editor(&gw, "alpha", TOKEN).await;
    let new = json!({"cwd": "/", "mcpServers": []});
    let (opened, _) = call(&mut a, json!(1), "session/new", new).await;
    let sid = opened["sessionId"].clone();
    for (n, text) in [(2, "one"), (3, "two")] {
        let (done, _) = call(&mut a, json!(n), "session/prompt", prompt(&sid, text)).await;
        assert_eq!(done["stopReason"], "end_turn");
    }
    let (mut b, _) = editor(&gw, "alpha", TOKEN).await;
    let (before, answer) = gateway_replay(&mut b, &sid).await;
    let epoch = answer["_meta"]["corral"]["epoch"].clone();
    let expected = vec![
        ("user_message_chunk".to_string(), "one".to_string()),
        (
            "agent_message_chunk".to_string(),
            "First answer".to_string(),
        ),
        ("user_message_chunk".to_string(), "two".to_string()),
        (
            "agent_message_chunk".to_string(),
            "Second answer".to_string(),
        ),
    ];
    assert_eq!(before, expected);
    // Live updates after the load, once each and in order.
    mock.push(Turn::text("Third answer"));
    let (_, live) = call(&mut a, json!(4), "session/prompt", prompt(&sid, "three")).await;
    let last = live.iter().filter_map(seq).max().unwrap();
    let seen = b.recv_until(|f| seq(f) == Some(last)).await;
    let seqs: Vec<u64> = seen.iter().filter_map(seq).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
    drop((a, b));
    drop(gw);

    // The agent on the journal replays the same conversation.
    let journal = state.join("sessions/alpha.jsonl");
    let kept = std::fs::read_to_string(state.join("sessions/alpha.session-id")).unwrap();
    let direct = direct_replay(&mock, &journal, &root.join("alpha"), kept.trim()).await;
    assert_eq!(direct[..4], expected[..]);

    // After a restart, the gateway's load replays it too, in a new epoch.
    let gw = spawn().await;
    let (mut c, _) = editor(&gw, "alpha", TOKEN).await;
    let (after, answer) = gateway_replay(&mut c, &sid).await;
    assert_eq!(after, direct);
    assert_ne!(answer["_meta"]["corral"]["epoch"], epoch);
}

#[tokio::test]
async fn the_agents_config_options_reach_every_editor_and_follow_its_updates() {
    // Copied out of the checkout: the sandboxed agent's /tmp is private.
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("acp_fake/config_agent.mjs");
    let here = corral_e2e::dir_outside_tmp();
    let script = here.path().join("config_agent.mjs");
    std::fs::copy(&source, &script).unwrap();
    let gw = GatewaySpawn::default()
        .projects(&["alpha"])
        .arg("--dialect")
        .arg("acp")
        .arg("--child-command")
        .arg(format!("node {}", script.display()))
        .spawn()
        .await;
    let (mut a, init) = editor(&gw, "alpha", TOKEN).await;
    // The gateway's capabilities, the agent's prompt capabilities.
    let caps = &init["agentCapabilities"];
    assert_eq!(caps["promptCapabilities"]["embeddedContext"], true);
    assert!(caps["sessionCapabilities"].get("fork").is_none(), "{caps}");
    let new = json!({"cwd": "/", "mcpServers": []});
    let (first, _) = call(&mut a, json!(1), "session/new", new.clone()).await;
    let sid = first["sessionId"].clone();
    assert_eq!(first["configOptions"][1]["currentValue"], "small");
    assert_eq!(first["models"]["currentModelId"], "small");
    assert_eq!(first["vendorExtra"]["kept"], true);

    let (mut b, _) = editor(&gw, "alpha", TOKEN).await;
    let (second, _) = call(&mut b, json!(1), "session/new", new.clone()).await;
    assert_eq!(second["configOptions"], first["configOptions"]);
    assert_eq!(second["modes"]["currentModeId"], "ask");

    // A switches the mode; the agent says so only in config_option_update.
    let set = json!({"sessionId": sid, "configId": "mode", "value": "code"});
    let (_, before) = call(&mut a, json!(2), "session/set_config_option", set).await;
    let changed = |f: &Value| f["params"]["update"]["sessionUpdate"] == "config_option_update";
    if !before.iter().any(changed) {
        a.recv_until(changed).await;
    }
    b.recv_until(changed).await;
    let (mut c, _) = editor(&gw, "alpha", TOKEN).await;
    let (third, _) = call(&mut c, json!(1), "session/new", new).await;
    assert_eq!(third["configOptions"][0]["currentValue"], "code");
    assert_eq!(third["modes"]["currentModeId"], "code");
    let load = json!({"sessionId": sid, "cwd": "/", "mcpServers": []});
    let (loaded, _) = call(&mut c, json!(2), "session/load", load).await;
    assert_eq!(loaded["modes"]["currentModeId"], "code");
    assert!(loaded.get("sessionId").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_attach_the_editors_first_line_is_its_initialize_answer() {
    let mock = MockLlm::start().await;
    mock.push(Turn::tool_call("bash", json!({"command": "echo hi"})));
    mock.push(Turn::text("ran"));
    let gw = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .child_arg("--permission-mode")
        .child_arg("ask")
        .arg("--dialect")
        .arg("acp")
        .spawn()
        .await;
    // Another editor's run waits on a permission request, with updates
    // before it: all of it is there when the second editor attaches.
    let (mut a, _) = editor(&gw, "alpha", TOKEN).await;
    let new = json!({"cwd": "/", "mcpServers": []});
    let (opened, _) = call(&mut a, json!(1), "session/new", new).await;
    let sid = opened["sessionId"].clone();
    a.send(json!({"jsonrpc": "2.0", "id": 2, "method": "session/prompt", "params": prompt(&sid, "go")}))
        .await;
    a.recv_until(|f| f["method"] == "session/request_permission")
        .await;

    let mut attach = tokio::process::Command::new(workspace_bin("corral"))
        .args(["attach", "--dialect", "acp", &gw.url("alpha")])
        .env("CORRAL_TOKEN", TOKEN)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = attach.stdin.take().unwrap();
    let mut stdout = BufReader::new(attach.stdout.take().unwrap()).lines();
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": 1, "clientCapabilities": {}}});
    stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let first = read(&mut stdout).await;
    assert_eq!(first["id"], 0, "{first}");
    assert_eq!(first["result"]["protocolVersion"], 1, "{first}");
    // Once it joins, the waiting request comes after the join's answer.
    let join = json!({"jsonrpc": "2.0", "id": 1, "method": "session/new",
        "params": {"cwd": "/", "mcpServers": []}});
    stdin
        .write_all(format!("{join}\n").as_bytes())
        .await
        .unwrap();
    let joined = read(&mut stdout).await;
    assert_eq!(joined["result"]["sessionId"], sid, "{joined}");
    let asked = read(&mut stdout).await;
    assert_eq!(asked["method"], "session/request_permission", "{asked}");
}

/// The next line `corral attach` writes, as JSON.
async fn read(stdout: &mut Lines<BufReader<ChildStdout>>) -> Value {
    let line = tokio::time::timeout(std::time::Duration::from_secs(30), stdout.next_line());
    let line = line
        .await
        .expect("a line within 30 s")
        .expect("read stdout");
    let line = line.expect("corral attach wrote a line before it ended");
    serde_json::from_str(&line).expect("a JSON line")
}
