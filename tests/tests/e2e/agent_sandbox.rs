//! End-to-end: `corral-agent --sandbox` as a user sees it. Tool calls come
//! from the mock LLM; the checks are on tool results, files on the host,
//! processes and exit codes. The project and the hidden directories live
//! outside `/tmp` (which the sandbox replaces), so it is the hides that keep
//! them away, except where a test wants the project under `/tmp`.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use corral_e2e::harness::{text_of, workspace_bin, AgentProc, AgentSpawn, READ_TIMEOUT};
use corral_e2e::mock_llm::{MockLlm, Turn};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::process::Command;

const SECRET: &str = "other-project-secret-7431";

/// A projects root holding the project `a` and another project `b`, a
/// state directory for journals and a plain directory outside all of them.
struct Layout {
    root: TempDir,
}

impl Layout {
    fn new() -> Layout {
        let root = corral_e2e::dir_outside_tmp();
        for dir in ["projects/a", "projects/b", "state/sessions", "outside"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::write(root.path().join("projects/b/secret.txt"), SECRET).unwrap();
        std::fs::write(root.path().join("projects/a/README.md"), "project a\n").unwrap();
        Layout { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn show(&self, rel: &str) -> String {
        self.path(rel).display().to_string()
    }

    fn journal(&self) -> PathBuf {
        self.path("state/sessions/a.jsonl")
    }
}

/// `corral-agent rpc --sandbox` on the mock in project `a`, hiding the
/// projects root (as the gateway does); the journal's directory is hidden
/// by the agent itself.
async fn sandboxed_in(layout: &Layout, mock: &MockLlm, extra: &[&str]) -> AgentProc {
    spawn_sandboxed(layout, mock, extra, false).await
}

/// [`sandboxed_in`], started as a spare agent (`corral-agent spare`) and
/// assigned the same arguments when `spare`.
async fn spawn_sandboxed(
    layout: &Layout,
    mock: &MockLlm,
    extra: &[&str],
    spare: bool,
) -> AgentProc {
    let mut spawn = AgentSpawn::anthropic_mock(&mock.anthropic_base_url(), &["--sandbox"])
        .arg("--sandbox-hide")
        .arg(layout.show("projects"))
        .arg("--session")
        .arg(layout.journal().display().to_string())
        .cwd(&layout.path("projects/a"));
    for arg in extra {
        spawn = spawn.arg(*arg);
    }
    if spare {
        spawn = spawn.as_spare();
    }
    spawn.spawn().await
}

/// What one tool call returned: (is_error, text).
type ToolResult = (bool, String);

/// Scripts one tool call per model turn and a final reply, runs a prompt,
/// and returns every tool result in order and the reply text.
async fn run_tools(
    agent: &mut AgentProc,
    mock: &MockLlm,
    calls: &[(&str, Value)],
) -> (Vec<ToolResult>, String) {
    for (name, args) in calls {
        mock.push(Turn::tool_call(*name, args.clone()));
    }
    mock.push(Turn::text("all done"));
    agent
        .send(json!({"id":"p","type":"prompt","message":"work"}))
        .await;
    let frames = agent.recv_until(|f| f["type"] == "done").await;
    let results = frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| {
            let text = f["content"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n");
            (f["is_error"] == true, text)
        })
        .collect();
    (results, text_of(&frames))
}

fn bash(command: &str) -> (&'static str, Value) {
    ("bash", json!({ "command": command }))
}

#[tokio::test]
async fn files_outside_the_project_are_out_of_reach_and_real_work_runs() {
    out_of_reach_and_real_work(false).await;
}

/// The same sandbox when a spare agent, started before it knew its
/// project, is assigned one.
#[tokio::test]
async fn a_spare_agent_assigned_a_project_is_confined_the_same() {
    out_of_reach_and_real_work(true).await;
}

async fn out_of_reach_and_real_work(spare: bool) {
    corral_e2e::prerequisites::PYTHON3.require();
    let layout = Layout::new();
    let mock = MockLlm::start().await;
    let mut agent = spawn_sandboxed(&layout, &mock, &[], spare).await;
    let marker = format!("corral-sandbox-test-{}", std::process::id());
    let calls = [
        bash(&format!("cat {}", layout.show("projects/b/secret.txt"))),
        (
            "read",
            json!({"path": layout.show("projects/b/secret.txt")}),
        ),
        (
            "read",
            json!({"path": layout.show("state/sessions/a.jsonl")}),
        ),
        bash(&format!("cat {}", layout.show("state/sessions/a.jsonl"))),
        (
            "write",
            json!({"path": layout.show("outside/w.txt"), "content": "x"}),
        ),
        bash(&format!("echo x > {}", layout.show("outside/b.txt"))),
        (
            "write",
            json!({"path": layout.show("projects/b/w.txt"), "content": "x"}),
        ),
        ("write", json!({"path": "notes.txt", "content": "inside\n"})),
        bash("ls /proc"),
        bash(&format!(
            "ls -A /tmp | wc -l; echo private > /tmp/{marker}; cat /tmp/{marker}"
        )),
        bash("python3 -c 'print(1)'"),
        bash(
            "git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm x \
             && git log --oneline | wc -l",
        ),
        bash("echo quiet > /dev/null && head -c 4 /dev/urandom | wc -c"),
        bash("grep -E '^(Cap(Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status"),
    ];
    let (results, reply) = run_tools(&mut agent, &mock, &calls).await;
    assert_eq!(results.len(), calls.len(), "{}", brief(&results));
    let [cat_other, read_other, read_journal, cat_journal, write_outside, bash_outside, write_other, write_inside, proc, tmp, python, git, devices, status] =
        <[ToolResult; 14]>::try_from(results).unwrap();

    for (name, (is_error, text)) in [
        ("bash cat of another project", &cat_other),
        ("read of another project", &read_other),
        ("read of the journal", &read_journal),
        ("bash cat of the journal", &cat_journal),
    ] {
        assert!(is_error, "{name} succeeded: {text}");
        assert!(!text.contains(SECRET), "{name} leaked: {text}");
        assert!(
            !text.contains("\"kind\""),
            "{name} leaked the journal: {text}"
        );
    }
    assert!(write_outside.0, "write outside: {}", write_outside.1);
    assert!(bash_outside.0, "bash write outside: {}", bash_outside.1);
    assert!(write_other.0, "write into b: {}", write_other.1);
    assert!(!layout.path("outside/w.txt").exists());
    assert!(!layout.path("outside/b.txt").exists());
    assert!(!layout.path("projects/b/w.txt").exists());

    assert!(!write_inside.0, "{}", write_inside.1);
    let notes = std::fs::read_to_string(layout.path("projects/a/notes.txt")).unwrap();
    assert_eq!(notes, "inside\n");

    assert!(!proc.0, "{}", proc.1);
    let pids: Vec<&str> = proc
        .1
        .split_whitespace()
        .filter(|e| e.chars().all(|c| c.is_ascii_digit()))
        .collect();
    assert!(pids.len() <= 6, "too many processes visible: {pids:?}");
    // The agent is pid 1; the rest are the tool's.
    assert!(pids.contains(&"1"), "{pids:?}");
    let me = std::process::id().to_string();
    assert!(
        !pids.contains(&me.as_str()),
        "the test's pid {me} is visible"
    );

    assert!(!tmp.0, "{}", tmp.1);
    assert_eq!(
        tmp.1.lines().collect::<Vec<_>>(),
        ["0", "private"],
        "/tmp starts empty"
    );
    assert!(!Path::new("/tmp").join(&marker).exists(), "/tmp is shared");

    assert_eq!(python, (false, "1".to_string()));
    assert_eq!(git, (false, "1".to_string()));
    assert!(layout.path("projects/a/.git").is_dir());
    assert_eq!(devices, (false, "4".to_string()));
    // Mapped to uid 0 (the tests run as root), a tool still holds nothing.
    assert!(!status.0, "{}", status.1);
    let fields: Vec<(&str, &str)> = status
        .1
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k, v.trim()))
        .collect();
    assert_eq!(fields.len(), 5, "{}", status.1);
    for (key, value) in fields {
        let want = if key == "NoNewPrivs" {
            "1"
        } else {
            "0000000000000000"
        };
        assert_eq!(value, want, "{key}");
    }

    assert_eq!(reply, "all done", "the model call after the tools");
    assert_eq!(mock.requests().len(), calls.len() + 1);

    agent.close_stdin();
    assert_eq!(agent.wait().await, Some(0), "outer exits like the agent");
    let journal = std::fs::read_to_string(layout.journal()).unwrap();
    assert!(journal.contains("all done"), "{journal}");
    assert!(journal.contains("notes.txt"), "{journal}");
}

/// Pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| parent(*p) == Some(pid))
        .collect()
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit(')')
        .next()?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// Every process below `pid`.
fn descendants(pid: u32) -> Vec<u32> {
    let mut all = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let kids = children(p);
        all.extend(&kids);
        todo.extend(kids);
    }
    all
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_string()
}

fn cmdline(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .replace('\0', " ")
}

/// Gone, or a zombie waiting to be reaped.
fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn tool_processes_die_with_the_agent() {
    let layout = Layout::new();
    let mock = MockLlm::start().await;
    mock.push(Turn::tool_call(
        "bash",
        json!({"command": "echo started; sleep 1000"}),
    ));
    let mut agent = sandboxed_in(&layout, &mock, &[]).await;
    agent
        .send(json!({"id":"1","type":"prompt","message":"sleep"}))
        .await;
    agent.recv_until(|f| f["type"] == "tool_progress").await;
    let outer = agent.child.id().unwrap();
    // The progress ("started") may come before bash forks the sleep.
    let sleep_below = || {
        descendants(outer)
            .into_iter()
            .find(|p| cmdline(*p).trim_end() == "sleep 1000")
    };
    wait_until("the sleep runs", || sleep_below().is_some()).await;
    let tree = descendants(outer);
    let names: Vec<String> = tree.iter().map(|p| comm(*p)).collect();
    // Two processes of ours: outer, and the agent as pid 1 of its pid
    // namespace; everything else below outer is the tool's.
    assert!(!names.contains(&"corral-init".to_string()), "{names:?}");
    assert!(names.contains(&"corral-agent-in".to_string()), "{names:?}");
    let sleep = sleep_below().unwrap_or_else(|| panic!("no sleep below {outer}: {names:?}"));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(outer as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    wait_until("the sleep is gone", || process_gone(sleep)).await;
    for pid in tree {
        wait_until("the whole tree is gone", || process_gone(pid)).await;
    }
}

#[tokio::test]
async fn the_agent_reaps_what_its_tools_leave_and_keeps_their_exit_statuses() {
    let layout = Layout::new();
    let mock = MockLlm::start().await;
    let mut agent = sandboxed_in(&layout, &mock, &[]).await;
    // Orphans that exit soon after their tool: one still in the tool's
    // group, one in a session of its own; then tools whose statuses the
    // agent must still see.
    let (results, _) = run_tools(
        &mut agent,
        &mock,
        &[
            bash("(sleep 0.2; exit 0) & setsid sh -c 'sleep 0.2' & echo left"),
            bash("exit 3"),
            bash("true && echo fine"),
            bash("cd /nowhere-at-all"),
        ],
    )
    .await;
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(results[0].1.contains("left"), "{results:?}");
    assert!(results[1].1.contains('3'), "exit 3 reported: {results:?}");
    assert!(
        !results[2].0 && results[2].1.contains("fine"),
        "{results:?}"
    );
    assert!(results[3].0, "a failing command is an error: {results:?}");
    let outer = agent.child.id().unwrap();
    let zombies = || {
        descendants(outer)
            .into_iter()
            .filter(|p| process_gone(*p))
            .collect::<Vec<_>>()
    };
    wait_until("the orphans are reaped", || zombies().is_empty()).await;
    // Only the agent is left below outer.
    let names: Vec<String> = descendants(outer).iter().map(|p| comm(*p)).collect();
    assert_eq!(names, ["corral-agent-in"]);
    let pong = agent.request(json!({"id":"2","type":"ping"})).await;
    assert_eq!(pong["success"], true);
}

#[tokio::test]
async fn outer_ends_with_the_agents_signal() {
    let layout = Layout::new();
    let mock = MockLlm::start().await;
    let mut agent = sandboxed_in(&layout, &mock, &[]).await;
    let pong = agent.request(json!({"id":"1","type":"ping"})).await;
    assert_eq!(pong["success"], true);
    let outer = agent.child.id().unwrap();
    let inner = descendants(outer)
        .into_iter()
        .find(|p| comm(*p) == "corral-agent-in")
        .unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(inner as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let status = tokio::time::timeout(READ_TIMEOUT, agent.child.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.signal(), Some(9), "{status:?}");
}

#[tokio::test]
async fn tool_network_off_cuts_tools_off_but_not_the_model() {
    corral_e2e::prerequisites::PYTHON3.require();
    let mock = MockLlm::start().await;
    let port = mock.addr().port();
    // The project under /tmp: the private /tmp covers it and it is bound back.
    let mut agent = AgentSpawn::anthropic_mock(
        &mock.anthropic_base_url(),
        &["--sandbox", "--tool-network", "off"],
    )
    .spawn()
    .await;
    let connect = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2); print('connected')\""
    );
    let curl = format!("curl -sS -m 2 http://127.0.0.1:{port}/ && echo reached");
    let loopback = "python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); \
                    s.listen(); c=socket.create_connection(s.getsockname()); print('lo ok')\"";
    let (results, reply) = run_tools(
        &mut agent,
        &mock,
        &[
            bash(&connect),
            bash(&curl),
            bash(loopback),
            bash("echo hi > f.txt && cat f.txt"),
        ],
    )
    .await;
    assert!(
        results[0].0 && !results[0].1.contains("connected"),
        "{:?}",
        results[0]
    );
    assert!(
        results[1].0 && !results[1].1.contains("reached"),
        "{:?}",
        results[1]
    );
    assert_eq!(results[2], (false, "lo ok".to_string()));
    assert_eq!(results[3], (false, "hi".to_string()));
    assert!(
        agent.cwd.join("f.txt").exists(),
        "the project under /tmp is the real one"
    );
    assert_eq!(reply, "all done", "the agent's own model call still works");
}

/// Runs `corral-agent ARGS` in `cwd` to its end: (exit code, stdout, stderr).
async fn run_agent(
    args: &[&str],
    cwd: &Path,
    env: &[(&str, &str)],
) -> (Option<i32>, String, String) {
    let mut command = Command::new(workspace_bin("corral-agent"));
    command
        .args(args)
        .current_dir(cwd)
        .env_remove("CORRAL_SANDBOX_SIMULATE_MISSING")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for (key, value) in env {
        command.env(key, value);
    }
    let output = tokio::time::timeout(READ_TIMEOUT, command.output())
        .await
        .expect("corral-agent did not exit")
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_missing_feature_exits_78_with_the_reason() {
    let layout = Layout::new();
    let project = layout.path("projects/a");
    for (feature, says) in [("landlock", "Landlock"), ("userns", "user namespaces")] {
        let env = [("CORRAL_SANDBOX_SIMULATE_MISSING", feature)];
        for args in [
            &["rpc", "--provider", "echo", "--sandbox"][..],
            &["sandbox-probe"][..],
        ] {
            let (code, stdout, stderr) = run_agent(args, &project, &env).await;
            assert_eq!(code, Some(78), "{args:?} {feature}: {stderr}");
            assert!(stdout.is_empty(), "{stdout}");
            assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
            assert!(stderr.contains(says), "{stderr}");
            assert!(stderr.contains("without --sandbox"), "{stderr}");
        }
    }
    let (code, _, stderr) = run_agent(
        &["rpc", "--provider", "echo", "--sandbox"],
        Path::new("/"),
        &[],
    )
    .await;
    assert_eq!(code, Some(78), "{stderr}");
    assert!(stderr.contains("nothing would be confined"), "{stderr}");
    let (code, _, stderr) = run_agent(
        &["rpc", "--provider", "echo", "--tool-network", "off"],
        &project,
        &[],
    )
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--sandbox"), "{stderr}");
}

/// Starts `corral-agent spare`, waits for its ready bytes, gives it
/// `argv` (after the program) and `env` as its assignment, closes its
/// stdin and waits for its end: (exit code, stderr).
async fn assign_spare(argv: &[&str], env: &[&str]) -> (Option<i32>, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut child = Command::new(workspace_bin("corral-agent"))
        .arg("spare")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut ready = [0u8; 4];
    tokio::time::timeout(READ_TIMEOUT, stdout.read_exact(&mut ready))
        .await
        .expect("no ready bytes in time")
        .unwrap();
    assert_eq!(&ready, corral_protocol::template::SPARE_READY);
    let mut stdin = child.stdin.take().unwrap();
    let argv = std::iter::once("corral-agent")
        .chain(argv.iter().copied())
        .map(|a| a.as_bytes().to_vec())
        .collect();
    let env = env.iter().map(|e| e.as_bytes().to_vec()).collect();
    let assignment = corral_protocol::template::encode_assignment(argv, env);
    stdin.write_all(&assignment).await.unwrap();
    drop(stdin);
    let output = tokio::time::timeout(READ_TIMEOUT, child.wait_with_output())
        .await
        .expect("the spare did not exit")
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_spare_agent_refuses_what_it_would_not_confine() {
    let layout = Layout::new();
    let project = layout.show("projects/a");
    let rpc = ["rpc", "--provider", "echo", "--sandbox", "--cwd", &project];
    // A model broker's socket: with it the agent gets no host network,
    // which a spare started without --without-host-network still has.
    let broker = layout.show("broker.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&broker).unwrap();
    // The spare's own refusals (79), apart from a sandbox this host cannot
    // give (78).
    const REFUSED: i32 = corral_protocol::template::SPARE_REFUSED_EXIT;
    let cases: [(&[&str], &[&str], i32, &str); 6] = [
        (&rpc[..3], &[], REFUSED, "--sandbox"),
        (
            &[&rpc[..], &["--sandbox-hide", "state"]].concat(),
            &[],
            REFUSED,
            "--sandbox-hide paths must be absolute",
        ),
        (
            &["rpc", "--provider", "echo", "--sandbox"],
            &[],
            REFUSED,
            "absolute --cwd",
        ),
        (
            &["egress-relay", "--socket-fd", "3", "--", "true"],
            &[],
            REFUSED,
            "rpc or run",
        ),
        (
            &rpc,
            &["CORRAL_SANDBOX_SIMULATE_MISSING=landlock"],
            78,
            "Landlock",
        ),
        (
            &[
                &rpc[..],
                &["--model-socket", &broker, "--tool-network", "off"],
            ]
            .concat(),
            &[],
            REFUSED,
            "prepared with the host's network",
        ),
    ];
    for (argv, env, code, says) in cases {
        let (exit, stderr) = assign_spare(argv, env).await;
        assert_eq!(exit, Some(code), "{argv:?}: {stderr}");
        assert!(stderr.contains(says), "{argv:?}: {stderr}");
    }
    // Assigned and then told its stdin is closed: the agent ends as usual.
    let (exit, stderr) = assign_spare(&rpc, &[]).await;
    assert_eq!(exit, Some(0), "{stderr}");
}

#[tokio::test]
async fn a_spare_agent_without_an_assignment_ends_quietly() {
    let child = Command::new(workspace_bin("corral-agent"))
        .arg("spare")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let output = tokio::time::timeout(READ_TIMEOUT, child.wait_with_output())
        .await
        .expect("the spare did not exit")
        .unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(output.stdout, corral_protocol::template::SPARE_READY);
    assert!(
        output.stderr.is_empty(),
        "{:?}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[tokio::test]
async fn the_probe_reports_ok() {
    let layout = Layout::new();
    for extra in [&[][..], &["--tool-network", "off"][..]] {
        let mut args = vec!["sandbox-probe", "--sandbox-hide"];
        let projects = layout.show("projects");
        args.push(&projects);
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = run_agent(&args, &layout.path("projects"), &[]).await;
        assert_eq!(code, Some(0), "{stderr}");
        let report: Value = serde_json::from_str(stdout.trim()).unwrap();
        assert_eq!(report["sandbox"], "ok", "{report}");
        assert!(report["landlock_abi"].as_u64().unwrap() >= 1, "{report}");
        assert!(report["scoped"].is_boolean(), "{report}");
    }
}
