//! End-to-end: `corral attach` bridging a stdio client to the real gateway
//! (echo or mock-LLM children). Every read is under a timeout; processes are
//! killed on drop.

#![allow(clippy::unwrap_used)]

use std::process::Stdio;
use std::time::Duration;

use corral_e2e::gateway::{Gateway, GatewaySpawn, TOKEN};
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
        let temp = tempfile::tempdir().unwrap();
        let mut command = Command::new(workspace_bin("corral"));
        command
            .arg("attach")
            .arg(url)
            .env_remove("CORRAL_TOKEN")
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

fn is_done(frame: &Value) -> bool {
    frame["type"] == "done"
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
    assert_eq!(responses[0]["data"], json!({"started": true}));
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
