//! End-to-end: `corral attach` bridging a stdio client to the real gateway
//! (echo or mock-LLM children). Every read is under a timeout; processes are
//! killed on drop.

#![allow(clippy::unwrap_used)]

use corral_e2e::harness::is_done;
use std::process::Stdio;
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, ADMIN_TOKEN, OBSERVER_TOKEN, TOKEN};
use corral_e2e::harness::{text_of, workspace_bin, READ_TIMEOUT};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command};

/// How the spawned `corral attach` gets its token.
enum Token<'a> {
    Env(&'a str),
    File(&'a str),
    None,
}

/// A running `corral attach` with piped stdio.
struct Attach {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Lines<BufReader<ChildStdout>>,
    stderr: ChildStderr,
    _temp: tempfile::TempDir,
}

impl Attach {
    fn spawn(url: &str, token: Token) -> Attach {
        Attach::spawn_with(url, token, &[])
    }

    fn spawn_with(url: &str, token: Token, args: &[&str]) -> Attach {
        Attach::spawn_env(url, token, args, &[])
    }

    fn spawn_env(url: &str, token: Token, args: &[&str], env: &[(&str, &str)]) -> Attach {
        let temp = tempfile::tempdir().unwrap();
        let mut command = Command::new(workspace_bin("corral"));
        command
            .arg("attach")
            .arg(url)
            .args(args)
            .env_remove("CORRAL_TOKEN")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        match token {
            Token::Env(token) => {
                command.env("CORRAL_TOKEN", token);
            }
            Token::File(token) => {
                let path = temp.path().join("token");
                std::fs::write(&path, format!("# attach token\n{token}\n")).unwrap();
                command.arg("--token-file").arg(path);
            }
            Token::None => {}
        }
        let mut child = command.spawn().unwrap();
        Attach {
            stdin: child.stdin.take(),
            stdout: BufReader::new(child.stdout.take().unwrap()).lines(),
            stderr: child.stderr.take().unwrap(),
            child,
            _temp: temp,
        }
    }

    fn to(gateway: &Gateway, project: &str) -> Attach {
        Attach::spawn(&gateway.url(project), Token::Env(TOKEN))
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn send(&mut self, value: Value) {
        self.send_raw(format!("{value}\n").as_bytes()).await;
    }

    fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The next stdout line as JSON; `None` at EOF.
    async fn try_recv(&mut self) -> Option<Value> {
        let line = tokio::time::timeout(READ_TIMEOUT, self.stdout.next_line())
            .await
            .expect("timed out waiting for a line from corral attach")
            .unwrap()?;
        Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
    }

    async fn recv_until(&mut self, stop: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut frames = Vec::new();
        loop {
            let frame = self.try_recv().await.expect("stdout closed early");
            let done = stop(&frame);
            frames.push(frame);
            if done {
                return frames;
            }
        }
    }

    /// Sends a request and returns its response, skipping events.
    async fn request(&mut self, value: Value) -> Value {
        let id = value["id"].clone();
        self.send(value).await;
        let frames = self
            .recv_until(|f| f["type"] == "response" && f["id"] == id)
            .await;
        frames.into_iter().last().unwrap()
    }

    /// Everything left on stdout, as frames, up to EOF.
    async fn rest(&mut self) -> Vec<Value> {
        let mut frames = Vec::new();
        while let Some(frame) = self.try_recv().await {
            frames.push(frame);
        }
        frames
    }

    async fn exit_code(&mut self) -> i32 {
        let status = tokio::time::timeout(READ_TIMEOUT, self.child.wait())
            .await
            .expect("corral attach did not exit")
            .unwrap();
        status.code().expect("exited by a signal")
    }

    async fn stderr(&mut self) -> String {
        let mut text = String::new();
        tokio::time::timeout(READ_TIMEOUT, self.stderr.read_to_string(&mut text))
            .await
            .expect("timed out reading stderr")
            .unwrap();
        text
    }
}

/// Frames the agent or gateway emitted on their own (no `id`, not responses).
fn events(frames: &[Value]) -> Vec<&Value> {
    frames.iter().filter(|f| f["type"] != "response").collect()
}

#[tokio::test]
async fn plain_stdio_client_prompts_through_attach() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let mut attach = Attach::to(&gateway, "alpha");

    attach
        .send(json!({"id":"1","type":"prompt","message":"hello"}))
        .await;
    let frames = attach.recv_until(is_done).await;
    let responses: Vec<&Value> = frames.iter().filter(|f| f["type"] == "response").collect();
    assert_eq!(responses.len(), 1, "{frames:?}");
    assert_eq!(responses[0]["id"], "1");
    assert_eq!(responses[0]["command"], "prompt");
    assert_eq!(responses[0]["data"]["started"], true);
    assert!(responses[0]["data"]["run_id"].is_string(), "{frames:?}");
    assert_eq!(text_of(&frames), "hello");
    for event in events(&frames) {
        assert!(
            event["seq"].as_u64().is_some(),
            "event without seq: {event}"
        );
    }

    let reply = attach
        .request(json!({"id":"2","type":"get_messages"}))
        .await;
    assert_eq!(reply["success"], true, "{reply}");
    let messages = reply["data"]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{reply}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[1]["role"], "assistant");

    attach.close_stdin();
    assert!(attach.rest().await.iter().all(|f| f["type"] != "response"));
    assert_eq!(attach.exit_code().await, 0);
}

#[tokio::test]
async fn stdin_eof_right_after_a_prompt_still_delivers_the_run() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Slow {
        chunks: vec!["slow ".into(), "and ".into(), "steady".into()],
        delay: Duration::from_millis(300),
    });
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .spawn()
        .await;
    let mut attach = Attach::to(&gateway, "alpha");

    attach
        .send(json!({"id":"p","type":"prompt","message":"go"}))
        .await;
    attach.close_stdin();
    let frames = attach.rest().await;
    assert_eq!(attach.exit_code().await, 0);

    let started = frames
        .iter()
        .find(|f| f["type"] == "response")
        .expect("the prompt's response");
    assert_eq!(started["id"], "p");
    assert_eq!(started["data"]["started"], true);
    assert_eq!(text_of(&frames), "slow and steady");
    let done = frames.iter().position(is_done).expect("done before exit");
    assert!(frames[done..].iter().all(|f| f["type"] != "text_delta"));
}

#[tokio::test]
async fn bad_credentials_fail_clearly() {
    let gateway = GatewaySpawn::default().echo().spawn().await;

    let mut wrong = Attach::spawn(&gateway.url("alpha"), Token::Env("wrong-token-0123456789"));
    wrong.close_stdin();
    assert_eq!(wrong.exit_code().await, 1);
    assert!(wrong.rest().await.is_empty(), "nothing on stdout");
    let stderr = wrong.stderr().await;
    assert!(
        stderr.contains("refused") && stderr.contains("401"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("wrong-token"),
        "the token is not echoed: {stderr}"
    );

    let mut missing = Attach::spawn(&gateway.url("alpha"), Token::None);
    assert_eq!(missing.exit_code().await, 2);
    assert!(missing.rest().await.is_empty());
    let stderr = missing.stderr().await;
    assert!(
        stderr.contains("no token") && stderr.contains("CORRAL_TOKEN"),
        "{stderr}"
    );

    let mut unknown = Attach::spawn(&gateway.url("no-such-project"), Token::Env(TOKEN));
    assert_eq!(unknown.exit_code().await, 1);
    assert!(unknown.rest().await.is_empty());
    assert!(unknown.stderr().await.contains("404"));

    let mut scheme = Attach::spawn(&format!("http://{}/", gateway.addr), Token::Env(TOKEN));
    assert_eq!(scheme.exit_code().await, 2);
    assert!(scheme.stderr().await.contains("ws or wss"));
}

#[tokio::test]
async fn local_hello_and_invalid_json_are_answered_locally() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let mut attach = Attach::spawn(&gateway.url("alpha"), Token::File(TOKEN));

    let hello = attach
        .request(json!({"id":"h","type":"hello","token":"a-local-child-secret"}))
        .await;
    assert_eq!(hello["success"], true, "{hello}");
    assert_eq!(hello["command"], "hello");
    assert_eq!(hello["data"]["protocol_version"], 1);
    assert_eq!(hello["data"]["gateway"]["project"], "alpha");

    attach.send_raw(b"{\"id\":\"x\", not json\r\n").await;
    let error = attach
        .recv_until(|f| f["type"] == "response")
        .await
        .pop()
        .unwrap();
    assert_eq!(error["success"], false, "{error}");
    assert!(error.get("id").is_none(), "{error}");
    assert!(error["error"].as_str().unwrap().contains("JSON"), "{error}");

    let pong = attach.request(json!({"id":3,"type":"ping"})).await;
    assert_eq!(pong["data"]["pong"], true, "{pong}");

    attach.close_stdin();
    assert_eq!(attach.exit_code().await, 0);
}

#[tokio::test]
async fn sigterm_closes_the_session() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    let mut attach = Attach::to(&gateway, "alpha");
    let pong = attach.request(json!({"id":"1","type":"ping"})).await;
    assert_eq!(pong["data"]["pong"], true);
    let pid = nix::unistd::Pid::from_raw(attach.child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    assert_eq!(attach.exit_code().await, 143);
}

/// A gateway in `dialect` on the mock LLM, and `corral attach --dialect`.
async fn dialect_session(dialect: &str, mock: &MockLlm) -> (Gateway, Attach) {
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .arg("--dialect")
        .arg(dialect)
        .spawn()
        .await;
    let url = gateway.url("alpha");
    let attach = Attach::spawn_with(&url, Token::Env(TOKEN), &["--dialect", dialect]);
    (gateway, attach)
}

/// A letscode-rpc/1 host drives the remote agent through attach as it
/// would a local child: `ready` first, a prompt's `ack` … `done`, a bad
/// line answered with a recoverable error, and at EOF the run drains, then
/// `bye`, exit 0.
#[tokio::test]
async fn a_letscode_host_works_through_attach_unchanged() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("first answer"));
    mock.push(Turn::Slow {
        chunks: (0..20).map(|i| format!("s{i} ")).collect(),
        delay: Duration::from_millis(20),
    });
    let (_gateway, mut attach) = dialect_session("letscode", &mock).await;
    let ready = attach.try_recv().await.unwrap();
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(ready["protocol"], "letscode-rpc/1");

    attach
        .send(json!({"cmd":"prompt","id":"r1","text":"hi"}))
        .await;
    let frames = attach
        .recv_until(|f| f["type"] == "done" && f["id"] == "r1")
        .await;
    assert_eq!(
        (&frames[0]["type"], &frames[0]["id"]),
        (&json!("ack"), &json!("r1"))
    );
    assert!(frames[0]["run_id"].is_string(), "{frames:?}");
    let kinds: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[1], "agent_start", "{kinds:?}");
    assert_eq!(kinds[kinds.len() - 2], "agent_end", "{kinds:?}");

    attach.send_raw(b"{not json\n").await;
    let error = attach.try_recv().await.unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["id"], Value::Null);
    assert_eq!(error["recoverable"], true);

    // EOF right after a prompt: the run completes, its done, then bye.
    attach
        .send(json!({"cmd":"prompt","id":"r2","text":"more"}))
        .await;
    attach.close_stdin();
    let rest = attach.rest().await;
    let kinds: Vec<&str> = rest.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(kinds.last(), Some(&"bye"), "{kinds:?}");
    let n = kinds.len();
    assert!(n >= 3, "the run was drained: {kinds:?}");
    assert_eq!(kinds[n - 3..n - 1], ["agent_end", "done"], "{kinds:?}");
    assert_eq!(rest[n - 2]["id"], "r2");
    let text: String = rest
        .iter()
        .filter(|f| f["type"] == "message_update")
        .filter_map(|f| f["stream_event"]["delta"].as_str())
        .collect();
    assert_eq!(text, (0..20).map(|i| format!("s{i} ")).collect::<String>());
    assert!(
        rest.iter().all(|f| f["id"] != "corral-attach-bye"),
        "the bridge's own bye stays private: {rest:?}"
    );
    assert_eq!(attach.exit_code().await, 0);
}

/// A Zi host through attach: `ready` is sequence 1, every line after it
/// continues the sequence (a line that is not JSON gets a sequenced
/// protocol_error from the gateway), and invalid UTF-8 is fatal with one
/// `protocol_error` of code `invalid_framing` and exit 1, as the agent does.
#[tokio::test]
async fn a_zi_host_works_through_attach_unchanged() {
    let mock = MockLlm::start().await;
    mock.push(Turn::text("zi answer"));
    let (_gateway, mut attach) = dialect_session("zi", &mock).await;
    let ready = attach.try_recv().await.unwrap();
    assert_eq!(ready["type"], "ready", "{ready}");
    assert_eq!(ready["sequence"], 1);
    assert!(ready["state"]["sessionId"].is_string(), "{ready}");

    attach
        .send(json!({"version":1,"id":"p","method":"session.prompt",
            "params":{"delivery":"direct","text":"hi"}}))
        .await;
    attach
        .send(json!({"version":1,"id":"w","method":"session.await_idle"}))
        .await;
    let mut frames = attach
        .recv_until(|f| f["type"] == "response" && f["id"] == "w")
        .await;
    attach.send_raw(b"{not json\n").await;
    frames.push(attach.try_recv().await.unwrap());
    let sequences: Vec<u64> = frames
        .iter()
        .map(|f| f["sequence"].as_u64().unwrap())
        .collect();
    let expected: Vec<u64> = (2..2 + sequences.len() as u64).collect();
    assert_eq!(sequences, expected, "gap-free after ready");
    let last = frames.last().unwrap();
    assert_eq!(last["type"], "protocol_error", "{last}");
    let deltas: String = frames
        .iter()
        .filter(|f| f["event"]["assistantMessageEvent"]["type"] == "text_delta")
        .filter_map(|f| f["event"]["assistantMessageEvent"]["delta"].as_str())
        .collect();
    assert_eq!(deltas, "zi answer");

    attach.send_raw(b"{\"bad\": \"\xff\"}\n").await;
    let fatal = attach.try_recv().await.unwrap();
    assert_eq!(fatal["type"], "protocol_error", "{fatal}");
    assert_eq!(fatal["code"], "invalid_framing", "{fatal}");
    assert_eq!(fatal["sequence"], expected.last().unwrap() + 1);
    assert_eq!(attach.rest().await, Vec::<Value>::new());
    assert_eq!(attach.exit_code().await, 1);
}

#[tokio::test]
async fn no_token_or_key_reaches_the_logs_at_trace_level() {
    const KEY: &str = "sk-ant-test-provider-key-0123456789";
    let mock = MockLlm::start().await;
    mock.push(Turn::text("traced"));
    mock.set_api_key(Some(KEY.into()));
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .env("ANTHROPIC_API_KEY", KEY)
        .env("CORRAL_LOG", "trace")
        .spawn()
        .await;
    // A hello token (attach), a header token (a raw client), the admin
    // bearer (admin API) and the observer's hello.
    let mut attach = Attach::spawn_env(
        &gateway.url("alpha"),
        Token::Env(TOKEN),
        &[],
        &[("CORRAL_LOG", "trace")],
    );
    attach
        .send(json!({"id":"1","type":"prompt","message":"hello"}))
        .await;
    let frames = attach.recv_until(is_done).await;
    assert_eq!(text_of(&frames), "traced", "{frames:?}");
    let mut header = gateway.connect_with_bearer("alpha", TOKEN, None).await;
    let reply = header.request(json!({"id":"h","type":"ping"})).await;
    assert_eq!(reply["success"], true, "{reply}");
    let mut observer = gateway.connect("beta").await;
    observer
        .send(json!({"id":"0","type":"hello","token":OBSERVER_TOKEN}))
        .await;
    assert_eq!(observer.recv().await["success"], true);
    let (status, _) = gateway.http_get("/v1/projects", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    attach.close_stdin();
    assert_eq!(attach.exit_code().await, 0);

    let attach_log = attach.stderr().await;
    let gateway_log = gateway.log_text();
    // The agents' own logs: their stderr files in the state directory
    // (which the gateway's log takes up every few seconds).
    let agents_log: String = std::fs::read_dir(gateway.state.join("logs"))
        .unwrap()
        .map(|entry| std::fs::read_to_string(entry.unwrap().path()).unwrap())
        .collect();
    assert!(
        gateway_log.contains("TRACE") || agents_log.contains("TRACE"),
        "the gateway and its agents ran at trace level"
    );
    for secret in [TOKEN, OBSERVER_TOKEN, ADMIN_TOKEN, KEY] {
        for (name, log) in [
            ("gateway", &gateway_log),
            ("agents'", &agents_log),
            ("attach", &attach_log),
        ] {
            assert!(!log.contains(secret), "the {name} log holds a secret");
        }
    }
}
