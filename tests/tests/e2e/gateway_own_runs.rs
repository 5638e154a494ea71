//! End-to-end: the own-runs extension. Two clients share one project; each
//! asked (hello field, query parameter or `corral attach --own-runs`) for
//! its own runs only and sees only its own run's events and its own end of
//! run, in zut, letscode and Zi. A client without the flag sees every run,
//! each event with its run id; replay after a reconnect keeps the filter.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::process::Stdio;
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, TOKEN};
use corral_e2e::harness::{text_of, workspace_bin, READ_TIMEOUT};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Two slow replies, so the second client's prompt arrives mid-run.
async fn two_replies() -> MockLlm {
    let mock = MockLlm::start().await;
    for word in ["alpha", "beta"] {
        mock.push(Turn::Slow {
            chunks: (0..6).map(|i| format!("{word}{i} ")).collect(),
            delay: Duration::from_millis(60),
        });
    }
    mock
}

fn reply(word: &str) -> String {
    (0..6).map(|i| format!("{word}{i} ")).collect()
}

async fn gateway(mock: &MockLlm, dialect: &str) -> Gateway {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--dialect")
        .arg(dialect)
        .spawn()
        .await
}

/// The run ids (`key`) that `frames` carry.
fn runs_of<'a>(frames: &'a [Value], key: &str) -> Vec<&'a str> {
    let mut runs: Vec<&str> = frames.iter().filter_map(|f| f[key].as_str()).collect();
    runs.dedup();
    runs
}

// ---------------------------------------------------------------------------
// zut

/// A zut client whose hello carries `extra`; returns it and the hello data.
async fn zut_client(gw: &Gateway, extra: Value) -> (Ws, Value) {
    let mut ws = gw.connect("alpha").await;
    let mut hello = json!({"id": "h", "type": "hello", "token": TOKEN});
    hello
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    ws.send(hello).await;
    let answer = ws.recv().await;
    assert_eq!(answer["success"], true, "{answer}");
    (ws, answer["data"].clone())
}

#[tokio::test]
async fn zut_clients_with_own_runs_see_only_their_own_run() {
    let mock = two_replies().await;
    let gw = gateway(&mock, "zut").await;
    let (mut a, hello_a) = zut_client(&gw, json!({"own_runs": true})).await;
    let (mut b, _) = zut_client(&gw, json!({"own_runs": true})).await;
    let (mut all, _) = zut_client(&gw, json!({})).await;
    let start = hello_a["gateway"]["last_seq"].as_u64().unwrap();

    a.send(json!({"id": "1", "type": "prompt", "message": "a"}))
        .await;
    let first = a.recv().await;
    assert_eq!(first["type"], "response", "{first}");
    let run_a = first["data"]["run_id"].as_str().unwrap().to_string();
    assert_eq!(first["data"]["started"], true, "{first}");
    b.send(json!({"id": "1", "type": "prompt", "message": "b"}))
        .await;

    let fa = a.recv_until(|f| f["type"] == "done").await;
    assert_eq!(text_of(&fa), reply("alpha"));
    assert_eq!(runs_of(&fa, "run_id"), [run_a.as_str()], "{}", brief(&fa));
    assert!(fa.iter().all(|f| f["run_id"] == run_a.as_str()));

    let fb = b.recv_until(|f| f["type"] == "done").await;
    assert_eq!(
        fb[0]["type"],
        "response",
        "B's own response first: {}",
        brief(&fb)
    );
    let run_b = fb[0]["data"]["run_id"].as_str().unwrap().to_string();
    assert_ne!(run_a, run_b);
    assert_eq!(text_of(&fb), reply("beta"), "B sees only its own reply");
    assert_eq!(
        runs_of(&fb[1..], "run_id"),
        [run_b.as_str()],
        "{}",
        brief(&fb)
    );

    // Without the flag: both runs, every run event naming its run.
    let fall = all
        .recv_until(|f| f["type"] == "done" && f["run_id"] == run_b.as_str())
        .await;
    assert_eq!(runs_of(&fall, "run_id"), [run_a.as_str(), run_b.as_str()]);
    assert!(
        fall.iter().all(|f| f["run_id"].is_string()),
        "{}",
        brief(&fall)
    );
    assert_eq!(fall.iter().filter(|f| f["type"] == "done").count(), 2);
    assert_eq!(text_of(&fall), reply("alpha") + &reply("beta"));

    // A reconnects as itself and replays what it missed: its run only.
    let id_a = hello_a["gateway"]["client_id"].as_str().unwrap();
    let resume = json!({"own_runs": true, "client_id": id_a, "resume_after": start});
    let (mut again, data) = zut_client(&gw, resume).await;
    assert_eq!(data["gateway"]["client_id"], id_a, "{data}");
    let replay = again.recv_until(|f| f["type"] == "done").await;
    assert_eq!(text_of(&replay), reply("alpha"));
    assert_eq!(runs_of(&replay, "run_id"), [run_a.as_str()]);
    let ping = again.request(json!({"id": "p", "type": "ping"})).await;
    assert_eq!(ping["success"], true, "nothing of B's run came first");
    // A later hello switches the filter off for what follows.
    let hello = again
        .request(json!({"id": "h2", "type": "hello", "own_runs": false}))
        .await;
    assert_eq!(hello["success"], true, "{hello}");
}

#[tokio::test]
async fn zut_own_runs_by_query_parameter_and_gateway_events_pass() {
    let mock = two_replies().await;
    let gw = gateway(&mock, "zut").await;
    let (mut a, _) = zut_client(&gw, json!({"own_runs": true})).await;
    let mut b = gw
        .connect_with_bearer("alpha", TOKEN, Some("own_runs=true"))
        .await;
    a.send(json!({"id": "1", "type": "prompt", "message": "a"}))
        .await;
    a.recv_until(|f| f["type"] == "done").await;
    b.send(json!({"id": "1", "type": "prompt", "message": "b"}))
        .await;
    let fb = b.recv_until(|f| f["type"] == "done").await;
    assert_eq!(
        fb[0]["type"],
        "response",
        "nothing of A's run: {}",
        brief(&fb)
    );
    assert_eq!(text_of(&fb), reply("beta"));
    // A gateway event (the admin restart's child_exited/child_started)
    // reaches everyone.
    let (status, _) = gw
        .http_post(
            "/v1/projects/alpha/restart",
            Some(corral_e2e::gateway::ADMIN_TOKEN),
        )
        .await;
    assert_eq!(status, 202);
    let fa = a.recv_until(|f| f["type"] == "child_started").await;
    assert!(
        fa.iter().any(|f| f["type"] == "child_exited"),
        "{}",
        brief(&fa)
    );
    b.recv_until(|f| f["type"] == "child_started").await;
    let (status, _) = gw
        .http("GET", "/v1/projects/alpha/rpc?own_runs=maybe", None)
        .await;
    assert_eq!(status, 400, "a bad own_runs is refused before the upgrade");
}

// ---------------------------------------------------------------------------
// letscode

fn lc_text(frames: &[Value]) -> String {
    frames
        .iter()
        .filter(|f| f["type"] == "message_update" && f["stream_event"]["type"] == "text_delta")
        .filter_map(|f| f["stream_event"]["delta"].as_str())
        .collect()
}

async fn lc_client(gw: &Gateway, own: bool) -> Ws {
    let mut ws = gw.connect("alpha").await;
    ws.send(json!({"cmd": "hello", "id": "h", "token": TOKEN, "own_runs": own}))
        .await;
    ws.recv_until(|f| f["type"] == "done" && f["id"] == "h")
        .await;
    ws
}

#[tokio::test]
async fn letscode_prompt_and_follow_up_each_reach_only_their_sender() {
    let mock = two_replies().await;
    let gw = gateway(&mock, "letscode").await;
    let mut a = lc_client(&gw, true).await;
    let mut b = lc_client(&gw, true).await;
    let mut all = lc_client(&gw, false).await;

    a.send(json!({"cmd": "prompt", "id": "r1", "text": "a"}))
        .await;
    let ack = a.recv().await;
    assert_eq!(ack["type"], "ack", "{ack}");
    let run_a = ack["run_id"].as_str().unwrap().to_string();
    // B's follow-up is queued behind A's run: a run of B's own.
    b.send(json!({"cmd": "follow_up", "id": "f1", "text": "b"}))
        .await;
    let fb_ack = b.recv().await;
    assert_eq!(fb_ack["type"], "ack", "{fb_ack}");
    let run_b = fb_ack["run_id"].as_str().unwrap().to_string();
    assert_ne!(run_a, run_b);

    let fa = a
        .recv_until(|f| f["type"] == "done" && f["id"] == "r1")
        .await;
    assert_eq!(
        fa.last().unwrap()["run_id"],
        run_a.as_str(),
        "{}",
        brief(&fa)
    );
    assert_eq!(lc_text(&fa), reply("alpha"));
    assert_eq!(runs_of(&fa, "run_id"), [run_a.as_str()]);

    let fb = b.recv_until(|f| f["type"] == "agent_end").await;
    assert_eq!(lc_text(&fb), reply("beta"), "{}", brief(&fb));
    assert!(
        !runs_of(&fb, "run_id").contains(&run_a.as_str()),
        "{}",
        brief(&fb)
    );

    let fall = all
        .recv_until(|f| f["type"] == "agent_end" && f["run_id"] == run_b.as_str())
        .await;
    assert_eq!(runs_of(&fall, "run_id"), [run_a.as_str(), run_b.as_str()]);
    assert!(
        fall.iter().all(|f| f["run_id"].is_string()),
        "{}",
        brief(&fall)
    );
}

// ---------------------------------------------------------------------------
// Zi

/// A Zi client that checks its gap-free `sequence`.
struct Zi {
    ws: Ws,
    sequence: u64,
}

impl Zi {
    async fn hello(gw: &Gateway, own: bool) -> Zi {
        let mut zi = Zi {
            ws: gw.connect("alpha").await,
            sequence: 0,
        };
        let params = json!({"token": TOKEN, "ownRuns": own});
        zi.send("h", "connection.hello", params).await;
        zi.until("h").await;
        zi
    }

    async fn recv(&mut self) -> Value {
        let frame = self.ws.recv().await;
        self.sequence += 1;
        assert_eq!(frame["sequence"], self.sequence, "gap-free: {frame}");
        frame
    }

    /// Sends a request; `params` is left out when `null`.
    async fn send(&mut self, id: &str, method: &str, params: Value) {
        let mut frame = json!({"version": 1, "id": id, "method": method});
        if !params.is_null() {
            frame["params"] = params;
        }
        self.ws.send(frame).await;
    }

    async fn until(&mut self, id: &str) -> Vec<Value> {
        self.collect(|f| f["id"] == id && f["type"] == "response")
            .await
    }

    async fn collect(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.recv().await;
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }
}

fn zi_text(frames: &[Value]) -> String {
    frames
        .iter()
        .map(|f| &f["event"]["assistantMessageEvent"])
        .filter(|e| e["type"] == "text_delta")
        .filter_map(|e| e["delta"].as_str())
        .collect()
}

fn is_agent_end(f: &Value) -> bool {
    f["event"]["type"] == "agent_end"
}

#[tokio::test]
async fn zi_clients_with_own_runs_see_only_their_own_run() {
    let mock = two_replies().await;
    let gw = gateway(&mock, "zi").await;
    let mut a = Zi::hello(&gw, true).await;
    let mut b = Zi {
        ws: gw
            .connect_with_bearer("alpha", TOKEN, Some("own_runs=true"))
            .await,
        sequence: 0,
    };
    b.collect(|f| f["type"] == "ready").await;
    let mut all = Zi::hello(&gw, false).await;

    let direct = |text: &str| json!({"delivery": "direct", "text": text});
    a.send("p", "session.prompt", direct("a")).await;
    // B waits for idle (it never sees A's run), then prompts.
    b.send("idle", "session.await_idle", Value::Null).await;
    let fa = a.collect(is_agent_end).await;
    let answer = fa.iter().find(|f| f["id"] == "p").unwrap();
    let run_a = answer["result"]["runId"].as_str().unwrap().to_string();
    assert_eq!(zi_text(&fa), reply("alpha"));
    assert_eq!(runs_of(&fa, "runId"), [run_a.as_str()], "{}", brief(&fa));

    let waited = b.until("idle").await;
    assert!(runs_of(&waited, "runId").is_empty(), "{}", brief(&waited));
    b.send("p", "session.prompt", direct("b")).await;
    let fb = b.collect(is_agent_end).await;
    let answer = fb.iter().find(|f| f["id"] == "p").unwrap();
    let run_b = answer["result"]["runId"].as_str().unwrap().to_string();
    assert_ne!(run_a, run_b);
    assert_eq!(zi_text(&fb), reply("beta"));
    assert_eq!(runs_of(&fb, "runId"), [run_b.as_str()], "{}", brief(&fb));

    // A asks for idle after B's run: nothing of it arrives before.
    a.send("idle", "session.await_idle", Value::Null).await;
    let rest = a.until("idle").await;
    assert!(
        !runs_of(&rest, "runId").contains(&run_b.as_str()),
        "{}",
        brief(&rest)
    );

    let fall = all
        .collect(|f| is_agent_end(f) && f["runId"] == run_b.as_str())
        .await;
    let events: Vec<&Value> = fall
        .iter()
        .filter(|f| f["type"] == "session_event")
        .collect();
    assert!(
        events.iter().all(|f| f["runId"].is_string()),
        "{}",
        brief(&fall)
    );
    assert_eq!(runs_of(&fall, "runId"), [run_a.as_str(), run_b.as_str()]);
}

// ---------------------------------------------------------------------------
// corral attach --own-runs

/// A `corral attach --own-runs` driven as the zut example clients drive a
/// child: one prompt, then every line until `done`.
struct Bridge {
    _child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
}

impl Bridge {
    fn spawn(gw: &Gateway) -> Bridge {
        let mut child = Command::new(workspace_bin("corral"))
            .arg("attach")
            .arg(gw.url("alpha"))
            .arg("--own-runs")
            .env("CORRAL_TOKEN", TOKEN)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        Bridge {
            stdin: child.stdin.take().unwrap(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            _child: child,
        }
    }

    async fn prompt(&mut self, message: &str) {
        let line = json!({"id": "1", "type": "prompt", "message": message});
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(READ_TIMEOUT, self.stdout.next_line())
            .await
            .expect("timed out reading corral attach")
            .unwrap()
            .expect("corral attach ended early");
        serde_json::from_str(&line).unwrap()
    }

    /// What an example client prints: the reply, up to `done`.
    async fn reply(&mut self) -> (String, Vec<Value>) {
        let mut frames = Vec::new();
        loop {
            let frame = self.next().await;
            let done = frame["type"] == "done";
            frames.push(frame);
            if done {
                return (text_of(&frames), frames);
            }
        }
    }
}

#[tokio::test]
async fn two_attach_bridges_with_own_runs_each_print_only_their_reply() {
    let mock = two_replies().await;
    let gw = gateway(&mock, "zut").await;
    let mut one = Bridge::spawn(&gw);
    let mut two = Bridge::spawn(&gw);
    one.prompt("first").await;
    let started = one.next().await;
    assert_eq!(started["data"]["started"], true, "{started}");
    // The second prompt arrives while the first run streams.
    two.prompt("second").await;
    let ((reply_two, frames_two), (reply_one, _)) = tokio::join!(two.reply(), one.reply());
    assert_eq!(reply_one, reply("alpha"));
    assert_eq!(reply_two, reply("beta"), "{}", brief(&frames_two));
    assert_eq!(frames_two[0]["type"], "response", "{}", brief(&frames_two));
}
