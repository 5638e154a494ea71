//! End-to-end: protocol behaviour of `corral-agent rpc` that needs no model
//! script (echo provider) or only a short one: auth, bad input, queueing,
//! state commands, compaction, the session journal, shutdown.

#![allow(clippy::unwrap_used)]

use corral_e2e::harness::is_done;
use std::time::Duration;

use corral_e2e::harness::{text_of, types, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

fn echo() -> AgentSpawn {
    AgentSpawn::rpc(&["--provider", "echo"])
}

#[tokio::test]
async fn token_auth_accepts_the_right_token_only() {
    // Right token.
    let mut agent = echo().env("ZUTCORE_RPC_TOKEN", "s3cret").spawn().await;
    let hello = agent
        .send_recv(json!({"id":"0","type":"hello","token":"s3cret"}))
        .await;
    assert_eq!(hello["success"], true);
    assert_eq!(hello["data"]["protocol_version"], 1);
    assert_eq!(hello["data"]["provider"], "echo");
    assert_eq!(hello["data"]["model"], "echo");
    assert!(hello["data"]["version"].is_string());
    assert_eq!(
        agent.send_recv(json!({"id":"1","type":"ping"})).await["data"]["pong"],
        true
    );

    // Wrong token: refused, and the process exits 1 (as zut's does).
    let mut agent = echo().env("ZUTCORE_RPC_TOKEN", "s3cret").spawn().await;
    let hello = agent
        .send_recv(json!({"id":"0","type":"hello","token":"guess"}))
        .await;
    assert_eq!(
        hello,
        json!({"type":"response","id":"0","command":"hello","success":false,"error":"invalid token"})
    );
    assert_eq!(agent.wait().await, Some(1));

    // No hello yet: each command is refused under its own id and name,
    // and the process keeps reading until the hello comes.
    let mut agent = echo().env("ZUTCORE_RPC_TOKEN", "s3cret").spawn().await;
    let reply = agent.send_recv(json!({"id":"1","type":"ping"})).await;
    assert_eq!(
        reply,
        json!({"type":"response","id":"1","command":"ping","success":false,
               "error":"auth required: send hello with token first"})
    );
    agent.send_raw(b"{not json\n").await;
    let reply = agent.recv().await;
    assert_eq!(reply["success"], false);
    assert!(reply["error"].as_str().unwrap().contains("invalid JSON"));
    let reply = agent
        .send_recv(json!({"id":"2","type":"prompt","message":"hi"}))
        .await;
    assert_eq!(reply["command"], "prompt");
    assert_eq!(reply["success"], false);
    let hello = agent
        .send_recv(json!({"id":"3","type":"hello","token":"s3cret"}))
        .await;
    assert_eq!(hello["success"], true, "{hello}");
    assert_eq!(
        agent.send_recv(json!({"id":"4","type":"ping"})).await["success"],
        true
    );
    agent.close_stdin();
    assert_eq!(agent.try_recv().await, None, "the refused prompt never ran");
    assert_eq!(agent.wait().await, Some(0));

    // Without a token configured, hello is optional and any token is fine.
    let mut agent = echo().spawn().await;
    assert_eq!(
        agent.send_recv(json!({"id":"1","type":"ping"})).await["success"],
        true
    );
    let hello = agent.send_recv(json!({"type":"hello"})).await;
    assert_eq!(hello["success"], true);
    assert!(hello.get("id").is_none(), "no id in, no id out: {hello}");
}

#[tokio::test]
async fn bad_input_gets_an_error_and_the_next_line_is_served() {
    let mut agent = echo().spawn().await;
    let mut huge = vec![b'{'; 17 * 1024 * 1024];
    huge.push(b'\n');
    let cases: Vec<(Vec<u8>, Option<&str>, &str)> = vec![
        (b"{not json\n".to_vec(), None, "invalid JSON"),
        (b"[]\n".to_vec(), None, "expected a JSON object"),
        (
            b"{\"id\":\"n\",\"type\":\"nope\"}\n".to_vec(),
            Some("nope"),
            "unknown command",
        ),
        (
            b"{\"id\":\"r\",\"type\":\"set_reasoning\",\"reasoning\":\"huge\"}\n".to_vec(),
            Some("set_reasoning"),
            "huge",
        ),
        (
            b"{\"id\":\"p\",\"type\":\"prompt\"}\n".to_vec(),
            Some("prompt"),
            "missing field `message`",
        ),
        (huge, None, "maximum length"),
        (
            b"{\"type\":\"ping\",\"x\":\"\xff\xfe\"}\n".to_vec(),
            None,
            "UTF-8",
        ),
    ];
    for (i, (line, command, needle)) in cases.into_iter().enumerate() {
        agent.send_raw(&line).await;
        let reply = agent.recv().await;
        assert_eq!(reply["type"], "response", "case {i}: {reply}");
        assert_eq!(reply["success"], false, "case {i}: {reply}");
        assert_eq!(
            reply.get("command").and_then(Value::as_str),
            command,
            "case {i}: {reply}"
        );
        let error = reply["error"].as_str().unwrap();
        assert!(
            error.contains(needle),
            "case {i}: {error:?} lacks {needle:?}"
        );
        let pong = agent.send_recv(json!({"id": i, "type": "ping"})).await;
        assert_eq!(pong["id"], i, "case {i}: numeric ids are echoed as numbers");
        assert_eq!(pong["data"]["pong"], true, "case {i}");
    }
    // Blank lines and CRLF are fine.
    agent
        .send_raw(b"\n\r\n{\"id\":\"crlf\",\"type\":\"ping\"}\r\n")
        .await;
    assert_eq!(agent.recv().await["id"], "crlf");
}

#[tokio::test]
async fn back_to_back_prompts_queue_and_complete_in_order() {
    let mut agent = echo().spawn().await;
    agent
        .send(json!({"id":"a","type":"prompt","message":"first"}))
        .await;
    agent
        .send(json!({"id":"b","type":"prompt","message":"second"}))
        .await;
    let first = agent.recv_until(is_done).await;
    let second = agent.recv_until(is_done).await;
    assert_eq!(first[0]["id"], "a");
    assert_eq!(first[0]["data"]["started"], true);
    assert_eq!(text_of(&first), "first");
    assert_eq!(
        second[0]["id"], "b",
        "the second response comes when its run starts"
    );
    assert_eq!(text_of(&second), "second");
    for frames in [&first, &second] {
        assert_eq!(types(frames).iter().filter(|t| *t == "done").count(), 1);
        assert_eq!(types(frames).iter().filter(|t| *t == "response").count(), 1);
    }
}

#[tokio::test]
async fn state_models_reasoning_and_clear() {
    let mut agent = echo().spawn().await;
    let state = agent.request(json!({"id":1,"type":"get_state"})).await;
    let data = &state["data"];
    assert_eq!(data["provider"], "echo");
    assert_eq!(data["busy"], false);
    assert_eq!(data["message_count"], 0);
    assert_eq!(data["reasoning"], "", "zut reports off as the empty string");
    assert!(data["cwd"].as_str().unwrap().ends_with("project"));
    for field in [
        "input",
        "output",
        "reasoning",
        "cache_read",
        "cache_write",
        "cache_measured_prompt",
        "cache_measured_read",
        "cost_usd",
    ] {
        assert!(
            data["usage"].get(field).is_some(),
            "usage.{field} missing: {state}"
        );
    }
    let models = agent.request(json!({"id":2,"type":"get_models"})).await;
    assert_eq!(models["data"]["models"][0]["id"], "echo");
    let set = agent
        .request(json!({"id":3,"type":"set_reasoning","reasoning":"max"}))
        .await;
    assert_eq!(set["success"], true);
    let state = agent.request(json!({"id":4,"type":"get_state"})).await;
    assert_eq!(state["data"]["reasoning"], "max");
    let bad = agent
        .request(json!({"id":5,"type":"set_model","model":"gpt-99"}))
        .await;
    assert_eq!(bad["success"], false);
    assert!(bad["error"].as_str().unwrap().contains("unknown model"));

    agent
        .send(json!({"id":6,"type":"prompt","message":"hello"}))
        .await;
    agent.recv_until(is_done).await;
    let state = agent.request(json!({"id":7,"type":"get_state"})).await;
    assert_eq!(state["data"]["message_count"], 2);
    assert!(state["data"]["usage"]["output"].as_u64().unwrap() > 0);
    assert_eq!(
        agent.request(json!({"id":8,"type":"clear"})).await["success"],
        true
    );
    let messages = agent.request(json!({"id":9,"type":"get_messages"})).await;
    assert_eq!(messages["data"]["messages"], json!([]));
}

#[tokio::test]
async fn set_model_is_checked_against_the_catalogue() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("ok"));
    let mut agent = AgentSpawn::rpc(&["--provider", "anthropic"])
        .env("ANTHROPIC_API_KEY", "k")
        .spawn()
        .await;
    let ok = agent
        .request(json!({"id":"1","type":"set_model","model":"claude-haiku-4-5"}))
        .await;
    assert_eq!(ok["success"], true);
    let state = agent.request(json!({"id":"2","type":"get_state"})).await;
    assert_eq!(state["data"]["model"], "claude-haiku-4-5");
    let bad = agent
        .request(json!({"id":"3","type":"set_model","model":"gpt-4.1"}))
        .await;
    assert_eq!(bad["success"], false);

    // With a custom base URL any model name goes (local servers).
    let mut agent = AgentSpawn::rpc(&["--provider", "openai", "--model", "llama3.2"])
        .arg("--base-url")
        .arg(mock.openai_base_url())
        .spawn()
        .await;
    let ok = agent
        .request(json!({"id":"1","type":"set_model","model":"qwen2.5-coder"}))
        .await;
    assert_eq!(ok["success"], true);
    agent
        .send(json!({"id":"2","type":"prompt","message":"hi"}))
        .await;
    let frames = agent.recv_until(is_done).await;
    assert_eq!(text_of(&frames), "ok");
    let request = &mock.requests()[0];
    assert_eq!(request.body["model"], "qwen2.5-coder");
    assert!(
        request.auth.is_none(),
        "no key configured, no Authorization header"
    );
}

#[tokio::test]
async fn compact_replaces_the_transcript_with_a_summary() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("first answer"));
    mock.push(Turn::text("SUMMARY: the user said hi"));
    let mut agent = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &[])
        .spawn()
        .await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"hi"}))
        .await;
    agent.recv_until(is_done).await;
    agent.send(json!({"id":"2","type":"compact"})).await;
    let frames = agent.recv_until(is_done).await;
    let kinds: Vec<String> = types(&frames)
        .into_iter()
        .filter(|t| t != "text_delta")
        .collect();
    assert_eq!(
        kinds,
        [
            "response",
            "request_started",
            "cache_diagnostics",
            "assistant_start",
            "compact_done",
            "done"
        ]
    );
    assert_eq!(text_of(&frames), "SUMMARY: the user said hi");
    let done = frames.iter().find(|f| f["type"] == "compact_done").unwrap();
    assert_eq!(done["summary"], "SUMMARY: the user said hi");
    let messages = agent.request(json!({"id":"3","type":"get_messages"})).await;
    let messages = messages["data"]["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    assert!(messages[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .contains("SUMMARY: the user said hi"));
}

#[tokio::test]
async fn journal_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("sessions/p.jsonl");
    let journal_arg = journal.to_str().unwrap().to_string();
    let mut agent = echo()
        .arg("--session")
        .arg(journal_arg.clone())
        .spawn()
        .await;
    for (id, text) in [("1", "alpha"), ("2", "beta")] {
        agent
            .send(json!({"id":id,"type":"prompt","message":text}))
            .await;
        agent.recv_until(is_done).await;
    }
    agent.child.start_kill().unwrap();
    agent.wait().await;

    let mut agent = echo().arg("--session").arg(journal_arg).spawn().await;
    let messages = agent.request(json!({"id":"m","type":"get_messages"})).await;
    let messages = messages["data"]["messages"].as_array().unwrap().clone();
    let texts: Vec<(&str, &str)> = messages
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"][0]["text"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        texts,
        [
            ("user", "alpha"),
            ("assistant", "alpha"),
            ("user", "beta"),
            ("assistant", "beta")
        ]
    );
    // Clear is journaled too.
    agent.request(json!({"id":"c","type":"clear"})).await;
    agent.child.start_kill().unwrap();
    agent.wait().await;
    let mut agent = echo()
        .arg("--session")
        .arg(journal.to_str().unwrap())
        .spawn()
        .await;
    let messages = agent.request(json!({"id":"m","type":"get_messages"})).await;
    assert_eq!(messages["data"]["messages"], json!([]));
}

#[tokio::test]
async fn stdin_eof_lets_the_run_finish_then_exits_zero() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: vec!["one ".into(), "two ".into(), "three".into()],
        delay: Duration::from_millis(100),
    });
    let mut agent = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &[])
        .spawn()
        .await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"count"}))
        .await;
    agent.close_stdin();
    let frames = agent.recv_until(is_done).await;
    assert_eq!(text_of(&frames), "one two three");
    assert_eq!(agent.try_recv().await, None);
    assert_eq!(agent.wait().await, Some(0));
}

#[tokio::test]
async fn sigterm_aborts_and_exits_promptly() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Hang);
    let mut agent = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &[])
        .spawn()
        .await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"wait"}))
        .await;
    agent.recv_until(|f| f["type"] == "assistant_start").await;
    let pid = agent.child.id().unwrap();
    let start = std::time::Instant::now();
    std::process::Command::new("kill")
        .arg(pid.to_string())
        .status()
        .unwrap();
    let frames = agent.recv_until(is_done).await;
    assert_eq!(
        frames.iter().find(|f| f["type"] == "turn_end").unwrap()["stop"],
        "aborted"
    );
    assert_eq!(agent.wait().await, Some(0));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn line_separators_in_output_are_escaped() {
    let mut agent = echo().spawn().await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"a\u{2028}b\u{2029}c"}))
        .await;
    let mut escaped = 0;
    loop {
        let line = agent.recv_line().await.expect("a line");
        assert!(
            !line.contains(['\u{2028}', '\u{2029}']),
            "raw separator in {line}"
        );
        escaped += usize::from(line.contains("\\u2028") && line.contains("\\u2029"));
        if line == r#"{"type":"done"}"# {
            break;
        }
    }
    assert!(
        escaped >= 2,
        "user_message and the reply carry the escaped text"
    );
}
