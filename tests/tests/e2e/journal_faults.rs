//! End-to-end: the session journal under faults. A full disk costs the
//! client an `error` and nothing else (the file never tears, writes resume,
//! a restart finds every message); a crash mid-tool leaves the call
//! answered "interrupted" and never run twice; `corral journal check` and
//! `repair` deal with a journal damaged some other way.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use corral_e2e::harness::is_done;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use corral_e2e::gateway::{Gateway, GatewaySpawn};
use corral_e2e::harness::{workspace_bin, AgentProc, AgentSpawn};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};

/// `corral journal ACTION FILE`.
fn journal_tool(action: &str, file: &Path) -> Output {
    Command::new(workspace_bin("corral"))
        .args(["journal", action])
        .arg(file)
        .output()
        .unwrap()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// (role, text of the first block) of each message of a `get_messages`
/// response.
fn texts(response: &Value) -> Vec<(String, String)> {
    response["data"]["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let text = m["content"][0]["text"].as_str().unwrap_or_default();
            (m["role"].as_str().unwrap().to_string(), text.to_string())
        })
        .collect()
}

/// A small tmpfs, unmounted on drop (lazily, so a straggler cannot keep
/// it mounted).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    /// Mounts one at `dir`, or says why not.
    fn mount(dir: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(dir).unwrap();
        let output = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).trim().to_string());
        }
        Ok(Tmpfs {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Fills the file system holding `dir` with one file, up to ENOSPC.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    let chunk = vec![b'x'; 4096];
    loop {
        if let Err(e) = file.write_all(&chunk) {
            assert_eq!(e.raw_os_error(), Some(28), "expected ENOSPC, got {e}");
            return path;
        }
    }
}

/// Sends a prompt and returns its frames up to `done`.
async fn prompt(ws: &mut corral_e2e::gateway::Ws, id: &str, text: &str) -> Vec<Value> {
    ws.send(json!({"id": id, "type": "prompt", "message": text}))
        .await;
    ws.recv_until(is_done).await
}

/// Stops a gateway with SIGTERM (so its child stops too) and waits.
async fn stop(mut gateway: Gateway) {
    let pid = gateway.child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(20), gateway.child.wait())
        .await
        .expect("the gateway did not stop")
        .unwrap();
}

#[tokio::test]
async fn a_full_disk_loses_nothing_and_the_project_serves_after_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let state = temp.path().join("state");
    let tmpfs = match Tmpfs::mount(&state, "256k") {
        Ok(tmpfs) => tmpfs,
        Err(why) => {
            eprintln!("SKIPPED: cannot mount a tmpfs for the state dir (needs root): {why}");
            return;
        }
    };
    let projects = temp.path().join("projects");
    let spawn = || {
        GatewaySpawn::default()
            .echo()
            .projects(&["alpha"])
            .projects_root(projects.clone())
            .state_dir(state.clone())
    };
    let gateway = spawn().spawn().await;
    let mut ws = gateway.client("alpha").await;
    for (id, text) in [("1", "before one"), ("2", "before two")] {
        let frames = prompt(&mut ws, id, text).await;
        assert!(
            !frames.iter().any(|f| f["type"] == "error"),
            "{}",
            brief(&frames)
        );
    }

    // Disk full: a prompt bigger than a page needs new blocks the
    // file system no longer has.
    let filler = fill(&state);
    let during = format!("during {}", "d".repeat(9000));
    let frames = prompt(&mut ws, "3", &during).await;
    let errors: Vec<&Value> = frames.iter().filter(|f| f["type"] == "error").collect();
    assert_eq!(errors.len(), 1, "one error per run: {}", brief(&frames));
    let message = errors[0]["message"].as_str().unwrap();
    assert!(
        message.contains("could not be saved") && message.contains("No space left"),
        "{message}"
    );
    let journal = state.join("sessions/alpha.jsonl");
    let check = journal_tool("check", &journal);
    assert!(check.status.success(), "torn: {}", stdout(&check));

    // Space again: the next prompt writes what waited, then itself.
    std::fs::remove_file(&filler).unwrap();
    let frames = prompt(&mut ws, "4", "after").await;
    assert!(
        !frames.iter().any(|f| f["type"] == "error"),
        "{}",
        brief(&frames)
    );
    drop(ws);
    stop(gateway).await;

    let check = journal_tool("check", &journal);
    assert!(check.status.success(), "{}", stdout(&check));
    let gateway = spawn().spawn().await;
    let mut ws = gateway.client("alpha").await;
    let messages = ws.request(json!({"id":"m","type":"get_messages"})).await;
    assert_eq!(messages["success"], true, "{messages}");
    let expected: Vec<(String, String)> = [
        "before one",
        "before one",
        "before two",
        "before two",
        &during,
        &during,
        "after",
        "after",
    ]
    .iter()
    .zip(["user", "assistant"].iter().cycle())
    .map(|(text, role)| (role.to_string(), text.to_string()))
    .collect();
    assert_eq!(texts(&messages), expected);
    drop(ws);
    stop(gateway).await;
    drop(tmpfs);
}

/// An agent on the mock LLM with `journal`, in `cwd`.
async fn agent_on(mock: &MockLlm, journal: &Path, cwd: &Path) -> AgentProc {
    AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--session"])
        .arg(journal.to_str().unwrap())
        .cwd(cwd)
        .spawn()
        .await
}

#[tokio::test]
async fn a_crash_mid_tool_answers_the_call_interrupted_and_never_reruns_it() {
    let temp = tempfile::tempdir().unwrap();
    let cwd = temp.path().join("project");
    std::fs::create_dir_all(&cwd).unwrap();
    let journal = temp.path().join("sessions/p.jsonl");
    let mock = MockLlm::start().await;
    // The marker line is written first, so a surviving `sleep` (killing
    // tool processes with their agent is another test's business) cannot
    // add a second one.
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": "echo ran >> marker.txt; sleep 5"}),
    ));
    let mut agent = agent_on(&mock, &journal, &cwd).await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"run the command"}))
        .await;
    agent
        .recv_until(|f| f["type"] == "tool_execution_started")
        .await;
    let marker = cwd.join("marker.txt");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !marker.exists() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(marker.exists(), "the command never started");
    agent.child.start_kill().unwrap(); // SIGKILL
    agent.wait().await;

    mock.push(Turn::text("I will not run it again."));
    let mut agent = agent_on(&mock, &journal, &cwd).await;
    let messages = agent.request(json!({"id":"m","type":"get_messages"})).await;
    let messages = messages["data"]["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3, "{}", brief(&messages));
    assert_eq!(messages[0]["role"], "user");
    let call = &messages[1]["content"][0];
    assert_eq!(call["type"], "tool_call", "{}", brief(&messages));
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["call_id"], call["id"]);
    assert_eq!(result["is_error"], true);
    assert_eq!(
        result["content"][0]["text"],
        "interrupted: the agent restarted"
    );

    agent
        .send(json!({"id":"2","type":"prompt","message":"what happened?"}))
        .await;
    let frames = agent.recv_until(is_done).await;
    assert!(
        !frames.iter().any(|f| f["type"] == "tool_call"),
        "{}",
        brief(&frames)
    );
    // The model was told, in order: the call, then its interrupted result.
    let requests = mock.requests();
    let last = requests.last().unwrap().body.to_string();
    assert!(last.contains("interrupted: the agent restarted"), "{last}");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran\n");
    assert!(journal_tool("check", &journal).status.success());
}

#[tokio::test]
async fn check_and_repair_a_journal_damaged_mid_file() {
    let temp = tempfile::tempdir().unwrap();
    let journal = temp.path().join("p.jsonl");
    let message = |role: &str, text: &str| {
        json!({"kind": "message", "message": {"role": role, "content": [{"type": "text", "text": text}], "time": "2024-01-01T00:00:00Z"}})
            .to_string()
    };
    // What the old bug left: a torn line with the next entry glued to it.
    let good = format!(
        "{}\n{}\n",
        message("user", "hi"),
        message("assistant", "hi")
    );
    let rest = format!(
        "{{\"kind\":\"message\",\"mess{}\n{}\n",
        message("user", "lost?"),
        message("assistant", "lost?")
    );
    std::fs::write(&journal, format!("{good}{rest}")).unwrap();

    let check = journal_tool("check", &journal);
    assert_eq!(check.status.code(), Some(1), "{}", stdout(&check));
    assert!(
        stdout(&check).contains("line 3 is not a journal entry"),
        "{}",
        stdout(&check)
    );
    // The agent refuses it, and says what to do.
    let refused = Command::new(workspace_bin("corral-agent"))
        .args(["rpc", "--provider", "echo", "--cwd"])
        .arg(temp.path())
        .arg("--session")
        .arg(&journal)
        .env("ZUT_HOME", temp.path())
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("corral journal repair"), "{stderr}");

    let repair = journal_tool("repair", &journal);
    assert!(repair.status.success(), "{}", stdout(&repair));
    let report = stdout(&repair);
    let aside = report
        .split_whitespace()
        .find(|w| w.contains(".damaged-"))
        .unwrap_or_else(|| panic!("no file named in {report}"));
    assert_eq!(std::fs::read_to_string(&journal).unwrap(), good);
    assert_eq!(std::fs::read_to_string(aside).unwrap(), rest);
    assert!(journal_tool("check", &journal).status.success());

    let mut agent = AgentSpawn::rpc(&["--provider", "echo", "--session"])
        .arg(journal.to_str().unwrap())
        .spawn()
        .await;
    let messages = agent.request(json!({"id":"m","type":"get_messages"})).await;
    let expected = [("user", "hi"), ("assistant", "hi")]
        .map(|(r, t)| (r.to_string(), t.to_string()))
        .to_vec();
    assert_eq!(texts(&messages), expected);

    // A missing file is an error, not a new journal.
    let missing = journal_tool("check", &temp.path().join("none.jsonl"));
    assert_eq!(missing.status.code(), Some(2));
}
