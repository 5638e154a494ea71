//! End-to-end: `corral-agent rpc --dialect letscode` (letscode-rpc/1) over
//! stdin/stdout, against the mock LLM server or the echo provider.

#![allow(clippy::unwrap_used)]

use std::process::Stdio;
use std::time::Duration;

use corral_e2e::harness::{workspace_bin, AgentProc, AgentSpawn, READ_TIMEOUT};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

async fn agent_on(mock: &MockLlm) -> AgentProc {
    let mut agent = AgentSpawn::rpc(&[
        "--dialect",
        "letscode",
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
    expect_ready(agent.recv().await);
    agent
}

async fn echo_agent() -> AgentProc {
    let mut agent = AgentSpawn::rpc(&["--dialect", "letscode", "--provider", "echo"])
        .spawn()
        .await;
    expect_ready(agent.recv().await);
    agent
}

fn expect_ready(frame: Value) {
    assert_eq!(
        frame,
        json!({"type":"ready","protocol":"letscode-rpc/1","letscode":env!("CARGO_PKG_VERSION")})
    );
}

fn is_done(id: &'static str) -> impl Fn(&Value) -> bool {
    move |f| f["type"] == "done" && f["id"] == id
}

/// Frame types, with `message_update`s as `message_update:<stream event>`
/// and runs of equal entries collapsed.
fn shape(frames: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in frames {
        let mut t = f["type"].as_str().unwrap().to_string();
        if t == "message_update" {
            t = format!("{t}:{}", f["stream_event"]["type"].as_str().unwrap());
        }
        if out.last() != Some(&t) {
            out.push(t);
        }
    }
    out
}

fn find<'a>(frames: &'a [Value], t: &str) -> &'a Value {
    frames.iter().find(|f| f["type"] == t).unwrap()
}

/// The document's example: one prompt, one tool call, event for event.
#[tokio::test]
async fn example_session_one_prompt_one_tool_call() {
    let mock = MockLlm::start().await;
    mock.push(Turn::TextAndToolCalls {
        text: "Reading".into(),
        calls: vec![("read".into(), json!({"path": "app.py"}))],
    });
    mock.push(Turn::text("It prints hello."));
    let mut agent = agent_on(&mock).await;
    std::fs::write(agent.cwd.join("app.py"), "print('hello')\n").unwrap();

    agent
        .send(json!({"cmd":"prompt","id":"r1","text":"read app.py and summarise"}))
        .await;
    let frames = agent.recv_until(is_done("r1")).await;
    assert_eq!(
        shape(&frames),
        [
            "ack",
            "agent_start",
            "turn_start",
            "message_start",
            "message_update:text_delta",
            "message_update:tool_call_start",
            "message_update:tool_call_delta",
            "message_update:tool_call_end",
            "message_end",
            "tool_execution_start",
            "tool_execution_end",
            "turn_end",
            "turn_start",
            "message_start",
            "message_update:text_delta",
            "message_end",
            "turn_end",
            "agent_end",
            "done",
        ]
    );
    assert_eq!(frames[0], json!({"type":"ack","id":"r1"}));
    let start = &frames[1]["messages"];
    assert_eq!(start[0]["role"], "user");
    assert_eq!(start[0]["content"][0]["text"], "read app.py and summarise");
    assert_eq!(frames[2], json!({"type":"turn_start","turn":1}));
    assert_eq!(frames[3]["message"]["role"], "assistant");

    let first_delta = find(&frames, "message_update");
    assert_eq!(first_delta["stream_event"]["type"], "text_delta");
    let call_start = frames
        .iter()
        .find(|f| f["stream_event"]["type"] == "tool_call_start")
        .unwrap();
    let call_id = call_start["stream_event"]["tool_call_id"].clone();
    assert_eq!(call_start["stream_event"]["name"], "read");
    assert_eq!(call_start["message"]["content"][0]["text"], "Reading");

    let end = find(&frames, "message_end");
    assert_eq!(
        end["message"]["content"][1],
        json!({"type":"tool_call","id":call_id,"name":"read","arguments":{"path":"app.py"}})
    );
    let exec = find(&frames, "tool_execution_start");
    assert_eq!(exec["tool_call_id"], call_id);
    assert_eq!(exec["tool_name"], "read");
    assert_eq!(exec["arguments"], json!({"path":"app.py"}));
    let result = &find(&frames, "tool_execution_end")["result"];
    assert_eq!(result["tool_call_id"], call_id);
    assert_eq!(result["is_error"], false);
    assert!(result["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("print('hello')"));

    let turn_end = find(&frames, "turn_end");
    assert_eq!(turn_end["turn"], 1);
    assert_eq!(turn_end["message"]["role"], "assistant");
    assert_eq!(turn_end["tool_results"], json!([result]));
    let last_end = frames.iter().rfind(|f| f["type"] == "message_end").unwrap();
    assert_eq!(
        last_end["message"]["content"],
        json!([{"type":"text","text":"It prints hello."}])
    );
    let turns: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "turn_start")
        .map(|f| &f["turn"])
        .collect();
    assert_eq!(turns, [1, 2]);

    let agent_end = &frames[frames.len() - 2];
    assert_eq!(agent_end["error"], Value::Null);
    let roles: Vec<&str> = agent_end["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    assert!(agent_end["messages"][3]["timestamp"].is_string());
    assert_eq!(frames.last().unwrap(), &json!({"type":"done","id":"r1"}));
}

/// Every command of the table, on an idle agent.
#[tokio::test]
async fn every_command_is_acked_and_done() {
    let mut agent = echo_agent().await;
    agent
        .send(json!({"cmd":"hello","id":"h","protocol":"letscode-rpc/1"}))
        .await;
    assert_eq!(agent.recv().await, json!({"type":"ack","id":"h"}));
    assert_eq!(agent.recv().await, json!({"type":"done","id":"h"}));

    agent.send(json!({"cmd":"prompt","text":"no id"})).await;
    let frames = agent
        .recv_until(|f| f["type"] == "done" && f["id"].is_null())
        .await;
    assert_eq!(frames[0], json!({"type":"ack","id":null}));
    assert_eq!(frames[1]["type"], "agent_start");
    assert_eq!(frames[frames.len() - 2]["type"], "agent_end");

    // steer and follow_up on an idle agent: answered at once, then their
    // own run (no ack/done around it).
    for (cmd, id, text) in [("steer", "s", "steered"), ("follow_up", "f", "followed")] {
        agent.send(json!({"cmd":cmd,"id":id,"text":text})).await;
        assert_eq!(agent.recv().await, json!({"type":"ack","id":id}));
        assert_eq!(agent.recv().await, json!({"type":"done","id":id}));
        let run = agent.recv_until(|f| f["type"] == "agent_end").await;
        assert_eq!(run[0]["type"], "agent_start");
        assert_eq!(run[0]["messages"][0]["content"][0]["text"], text);
        assert!(run
            .iter()
            .all(|f| f["type"] != "done" && f["type"] != "ack"));
    }

    for (cmd, id) in [("abort", "a"), ("reset", "z")] {
        agent.send(json!({"cmd":cmd,"id":id})).await;
        assert_eq!(agent.recv().await, json!({"type":"ack","id":id}));
        assert_eq!(agent.recv().await, json!({"type":"done","id":id}));
    }
    // After reset the transcript is empty: the next run starts afresh.
    agent
        .send(json!({"cmd":"prompt","id":"p","text":"again"}))
        .await;
    let frames = agent.recv_until(is_done("p")).await;
    let end = &frames[frames.len() - 2];
    assert_eq!(end["messages"].as_array().unwrap().len(), 2);

    agent.send(json!({"cmd":"bye","id":"b"})).await;
    assert_eq!(agent.recv().await, json!({"type":"ack","id":"b"}));
    assert_eq!(agent.recv().await, json!({"type":"done","id":"b"}));
    assert_eq!(agent.recv().await, json!({"type":"bye"}));
    assert_eq!(agent.try_recv().await, None);
    assert_eq!(agent.wait().await, Some(0));
}

#[tokio::test]
async fn bad_lines_get_recoverable_errors_and_the_stream_continues() {
    let mut agent = echo_agent().await;
    agent.send(json!({"cmd":"dance","id":"d1"})).await;
    let e = agent.recv().await;
    assert_eq!(e["type"], "error");
    assert_eq!(e["id"], "d1");
    assert_eq!(e["recoverable"], true);
    assert!(e.get("fatal").is_none());
    assert!(e["error"].as_str().unwrap().contains("dance"));

    agent.send_raw(b"{not json\n\n[1,2]\n").await;
    for _ in 0..2 {
        let e = agent.recv().await;
        assert_eq!(e["type"], "error");
        assert_eq!(e["id"], Value::Null);
        assert_eq!(e["recoverable"], true);
    }
    agent.send(json!({"cmd":"prompt","id":"x"})).await;
    let e = agent.recv().await;
    assert_eq!((&e["type"], &e["id"]), (&json!("error"), &json!("x")));

    agent.send(json!({"cmd":"abort","id":"a"})).await;
    assert_eq!(agent.recv().await, json!({"type":"ack","id":"a"}));
    assert_eq!(agent.recv().await, json!({"type":"done","id":"a"}));
}

#[tokio::test]
async fn hello_with_another_major_is_fatal() {
    let mut agent = echo_agent().await;
    agent
        .send(json!({"cmd":"hello","id":1,"protocol":"letscode-rpc/2"}))
        .await;
    let e = agent.recv().await;
    assert_eq!(e["type"], "error");
    assert_eq!(e["id"], 1);
    assert_eq!(e["recoverable"], false);
    assert_eq!(e["fatal"], true);
    assert_eq!(agent.try_recv().await, None, "no bye after a fatal error");
    assert_ne!(agent.wait().await, Some(0));
}

/// Busy rejections, steering mid-run and abort, on a hanging model call.
#[tokio::test]
async fn prompt_while_busy_is_rejected_and_abort_ends_the_run() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Hang);
    let mut agent = agent_on(&mock).await;
    agent
        .send(json!({"cmd":"prompt","id":"r1","text":"hi"}))
        .await;
    agent.recv_until(|f| f["type"] == "message_start").await;

    agent
        .send(json!({"cmd":"prompt","id":"r2","text":"again"}))
        .await;
    let e = agent.recv().await;
    assert_eq!(e["type"], "error");
    assert_eq!(e["id"], "r2");
    assert_eq!(e["recoverable"], true);
    assert!(e["error"].as_str().unwrap().contains("busy"));
    agent.send(json!({"cmd":"reset","id":"z"})).await;
    let e = agent.recv().await;
    assert_eq!((&e["type"], &e["id"]), (&json!("error"), &json!("z")));

    agent
        .send(json!({"cmd":"steer","id":"s","text":"faster"}))
        .await;
    assert_eq!(agent.recv().await, json!({"type":"ack","id":"s"}));
    assert_eq!(agent.recv().await, json!({"type":"done","id":"s"}));

    agent.send(json!({"cmd":"abort","id":"a"})).await;
    let frames = agent.recv_until(is_done("r1")).await;
    assert_eq!(
        shape(&frames),
        [
            "ack",
            "done",
            "message_end",
            "turn_end",
            "agent_end",
            "done"
        ]
    );
    assert_eq!(frames[0]["id"], "a");
    assert_eq!(frames[1]["id"], "a");
    assert_eq!(frames[3]["stop"], "aborted");
    assert_eq!(frames[4]["error"], "aborted");

    // Idle again: a new prompt is accepted.
    mock.push(Turn::text("ok"));
    agent
        .send(json!({"cmd":"prompt","id":"r3","text":"hi"}))
        .await;
    let frames = agent.recv_until(is_done("r3")).await;
    assert_eq!(frames[frames.len() - 2]["error"], Value::Null);
}

/// A steer sent while the model streams is added before the next model
/// call; a follow-up runs after the prompt's `done`.
#[tokio::test]
async fn steer_joins_the_active_run_and_follow_up_runs_after_it() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: vec!["one ".into(), "two ".into(), "three".into()],
        delay: Duration::from_millis(300),
    });
    mock.push(Turn::text("steered answer"));
    mock.push(Turn::text("follow-up answer"));
    let mut agent = agent_on(&mock).await;
    agent
        .send(json!({"cmd":"prompt","id":"r1","text":"count"}))
        .await;
    agent.recv_until(|f| f["type"] == "message_update").await;
    agent
        .send(json!({"cmd":"steer","id":"s1","text":"in French please"}))
        .await;
    agent
        .send(json!({"cmd":"follow_up","id":"f1","text":"and now?"}))
        .await;

    let frames = agent.recv_until(is_done("r1")).await;
    let controls: Vec<&Value> = frames
        .iter()
        .filter(|f| matches!(f["type"].as_str(), Some("ack" | "done")))
        .collect();
    assert_eq!(
        controls,
        [
            &json!({"type":"ack","id":"s1"}),
            &json!({"type":"done","id":"s1"}),
            &json!({"type":"ack","id":"f1"}),
            &json!({"type":"done","id":"f1"}),
            &json!({"type":"done","id":"r1"}),
        ]
    );
    let steps: Vec<String> = shape(&frames)
        .into_iter()
        .filter(|t| !matches!(t.as_str(), "ack" | "done" | "message_update:text_delta"))
        .collect();
    assert_eq!(
        steps,
        [
            "message_end",
            "turn_end",
            "message_start",
            "message_end",
            "turn_start",
            "message_start",
            "message_end",
            "turn_end",
            "agent_end",
        ]
    );
    let steer = frames
        .iter()
        .find(|f| f["type"] == "message_start" && f["message"]["role"] == "user")
        .unwrap();
    assert_eq!(steer["message"]["content"][0]["text"], "in French please");
    let end = &frames[frames.len() - 2];
    let roles: Vec<&str> = end["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    // The model's second call saw the steering message.
    let second = &mock.requests()[1].body;
    assert!(second.to_string().contains("in French please"));

    let follow = agent.recv_until(|f| f["type"] == "agent_end").await;
    assert_eq!(follow[0]["type"], "agent_start");
    assert_eq!(follow[0]["messages"][0]["content"][0]["text"], "and now?");
    assert!(follow.iter().all(|f| f["type"] != "done"));
}

/// stdin EOF mid-run: the run drains to `agent_end` + `done`, then `bye`.
#[tokio::test]
async fn eof_lets_the_active_run_finish_then_says_bye() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: vec!["slow ".into(), "answer".into()],
        delay: Duration::from_millis(200),
    });
    let mut agent = agent_on(&mock).await;
    agent
        .send(json!({"cmd":"prompt","id":"r1","text":"hi"}))
        .await;
    agent.close_stdin();
    let frames = agent.recv_until(|f| f["type"] == "bye").await;
    let n = frames.len();
    assert_eq!(frames[n - 3]["type"], "agent_end");
    assert_eq!(frames[n - 3]["error"], Value::Null);
    assert_eq!(frames[n - 2], json!({"type":"done","id":"r1"}));
    let text: String = frames
        .iter()
        .filter(|f| f["stream_event"]["type"] == "text_delta")
        .map(|f| f["stream_event"]["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, "slow answer");
    assert_eq!(agent.try_recv().await, None);
    assert_eq!(agent.wait().await, Some(0));
}

/// `bye` mid-run: same drain, and the bye's own `done` just before `bye`.
#[tokio::test]
async fn bye_command_drains_the_run() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: vec!["a".into(), "b".into()],
        delay: Duration::from_millis(200),
    });
    let mut agent = agent_on(&mock).await;
    agent
        .send(json!({"cmd":"prompt","id":"r1","text":"hi"}))
        .await;
    agent.send(json!({"cmd":"bye","id":"b"})).await;
    let frames = agent.recv_until(|f| f["type"] == "bye").await;
    let n = frames.len();
    assert!(frames.contains(&json!({"type":"ack","id":"b"})));
    assert_eq!(frames[n - 4]["type"], "agent_end");
    assert_eq!(frames[n - 3], json!({"type":"done","id":"r1"}));
    assert_eq!(frames[n - 2], json!({"type":"done","id":"b"}));
    assert_eq!(agent.try_recv().await, None);
    assert_eq!(agent.wait().await, Some(0));
}

/// letscode's own spelling: `--mode rpc` instead of the `rpc` subcommand.
#[tokio::test]
async fn mode_rpc_flag_selects_rpc_mode() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new(workspace_bin("corral-agent"))
        .args([
            "--mode",
            "rpc",
            "--dialect",
            "letscode",
            "--provider",
            "echo",
        ])
        .arg("--cwd")
        .arg(dir.path())
        .env("ZUT_HOME", dir.path())
        .env_remove("ZUTCORE_RPC_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(b"{\"cmd\":\"prompt\",\"id\":\"r1\",\"text\":\"ping\"}\n")
        .await
        .unwrap();
    drop(stdin);
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut frames = Vec::new();
    while let Some(line) = tokio::time::timeout(READ_TIMEOUT, lines.next_line())
        .await
        .unwrap()
        .unwrap()
    {
        frames.push(serde_json::from_str::<Value>(&line).unwrap());
    }
    expect_ready(frames[0].clone());
    assert_eq!(frames[1], json!({"type":"ack","id":"r1"}));
    let n = frames.len();
    assert_eq!(frames[n - 3]["type"], "agent_end");
    assert_eq!(frames[n - 2], json!({"type":"done","id":"r1"}));
    assert_eq!(frames[n - 1], json!({"type":"bye"}));
    let status = tokio::time::timeout(READ_TIMEOUT, child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}
