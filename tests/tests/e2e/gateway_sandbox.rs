//! End-to-end: the sandbox of the gateway's children. Project A's tools,
//! driven by the mock LLM, try what a prompt-injected model would: read the
//! gateway's tokens (from its flags, environment, token files, config file
//! or memory), project B's files and journal, the audit log, and write
//! outside A. All of it fails, while real work in A (git, python, the file
//! tools, model calls, streamed tool output) runs as before.
//!
//! The projects root, state directory and secret files live under
//! `/var/tmp`, not under `/tmp` (which the sandbox replaces with a private
//! one anyway), so that the explicit hiding is what is tested.

#![allow(clippy::unwrap_used)]

use corral_e2e::brief;
use corral_e2e::harness::is_done;
use std::path::{Path, PathBuf};

use corral_e2e::gateway::{serve_exit, Gateway, GatewaySpawn, Ws, ADMIN_TOKEN};
use corral_e2e::mock_llm::{MockLlm, Turn};
use corral_e2e::terminals;
use serde_json::{json, Value};

const FLAG_TOKEN: &str = "flag-client-token-0123456789abcdef";
const FILE_TOKEN: &str = "file-client-token-0123456789abcdef";
const ENV_OBSERVER_TOKEN: &str = "env-observer-token-0123456789abcdef";
const CONFIG_ADMIN_TOKEN: &str = "config-admin-token-0123456789abcdef";
const B_FILE_SECRET: &str = "beta-file-secret-4711";
const B_CHAT_SECRET: &str = "beta-conversation-secret-0815";

fn work_dir() -> tempfile::TempDir {
    corral_e2e::dir_outside_tmp()
}

/// The text of every `tool_result` among `frames`, in order.
fn tool_results(frames: &[Value]) -> Vec<(bool, String)> {
    frames
        .iter()
        .filter(|f| f["type"] == "tool_result")
        .map(|f| {
            let text = f["content"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|block| block["text"].as_str())
                .collect::<Vec<_>>()
                .join("");
            (f["is_error"] == true, text)
        })
        .collect()
}

/// Runs one prompt in which the model calls `tool` with `args`, then
/// answers "ok"; returns every frame of the run.
async fn tool_run(ws: &mut Ws, mock: &MockLlm, tool: &str, args: Value) -> Vec<Value> {
    mock.push(Turn::tool_call(tool, args));
    mock.push(Turn::text("ok"));
    ws.send(json!({"id":"run","type":"prompt","message":"go"}))
        .await;
    ws.recv_until(is_done).await
}

/// Runs `command` in the bash tool; returns its output (stdout and stderr).
async fn bash(ws: &mut Ws, mock: &MockLlm, command: &str) -> String {
    let frames = tool_run(ws, mock, "bash", json!({"command": command, "timeout": 60})).await;
    let results = tool_results(&frames);
    assert_eq!(results.len(), 1, "one tool result: {}", brief(&frames));
    results[0].1.clone()
}

/// The value printed as `name=VALUE` on a line of `output`.
fn field<'a>(output: &'a str, name: &str) -> &'a str {
    let prefix = format!("{name}=");
    output
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name}= in:\n{output}"))
}

/// Gives project B a running agent, a file and a conversation in its journal.
async fn occupy_beta(gateway: &Gateway, mock: &MockLlm, token: &str) -> Ws {
    std::fs::write(gateway.root.join("beta/secret.txt"), B_FILE_SECRET).unwrap();
    let (mut beta, hello) = gateway.client_with("beta", token, None).await;
    assert_eq!(hello["success"], true, "{hello}");
    mock.push(Turn::text(B_CHAT_SECRET));
    beta.send(json!({"id":"b","type":"prompt","message":"remember this"}))
        .await;
    beta.recv_until(is_done).await;
    let journal = gateway.state.join("sessions/beta.jsonl");
    let on_disk = std::fs::read_to_string(&journal).unwrap();
    assert!(
        on_disk.contains(B_CHAT_SECRET),
        "B's journal holds the secret"
    );
    beta
}

/// `grep -e` options for `tokens`, each split with `""` so that the
/// script's own command line (visible in /proc) does not contain them.
fn grep_patterns(tokens: &[&str]) -> String {
    tokens
        .iter()
        .map(|t| format!("-e \"{}\"\"{}\" ", &t[..4], &t[4..]))
        .collect()
}

/// What A's bash tool tries; prints `name=exit status` lines and dumps
/// whatever it could read, so the test can search the output for secrets.
fn attack_script(gateway: &Gateway, extra_files: &[&Path]) -> String {
    let root = gateway.root.display();
    let state = gateway.state.display();
    let gateway_pid = gateway.child.id().unwrap();
    let patterns = grep_patterns(&[
        FLAG_TOKEN,
        FILE_TOKEN,
        ENV_OBSERVER_TOKEN,
        CONFIG_ADMIN_TOKEN,
    ]);
    let mut script = format!(
        r#"
for f in /proc/[0-9]*/cmdline /proc/[0-9]*/environ; do tr '\0' ' ' < "$f"; echo; done 2>&1
echo "pids=$(ls /proc | grep -E '^[0-9]+$' | tr '\n' ' ')"
cat /proc/{gateway_pid}/environ 2>&1; echo "gateway-environ=$?"
kill -0 {gateway_pid} 2>&1; echo "signal-gateway=$?"
cat {root}/beta/secret.txt 2>&1; echo "read-beta=$?"
echo "list-root=$(ls -A {root} 2>&1 | tr '\n' ' ')"
cat {state}/sessions/beta.jsonl 2>&1; echo "read-beta-journal=$?"
echo "list-state=$(ls -RA {state} 2>&1 | tr '\n' ' ')"
grep -rs {patterns} {root} {state} /tmp /run /dev/shm 2>/dev/null; echo "grep-tokens=$?"
echo pwned > {root}/beta/pwned 2>&1; echo "write-beta=$?"
echo pwned > {root}/pwned 2>&1; echo "write-root=$?"
echo pwned > {state}/pwned 2>&1; echo "write-state=$?"
echo pwned >> {state}/sessions/beta.jsonl 2>&1; echo "append-beta-journal=$?"
"#
    );
    for (i, file) in extra_files.iter().enumerate() {
        script.push_str(&format!(
            "echo \"read-secret-{i}=[$(cat {} 2>&1)]\"\n",
            file.display()
        ));
    }
    script
}

/// Asserts that `output` (from A's tools) holds none of `secrets` and that
/// every attempt in [`attack_script`] failed; then checks the disk.
fn assert_contained(gateway: &Gateway, output: &str, secrets: &[&str], extra_files: usize) {
    for secret in secrets {
        assert!(
            !output.contains(secret),
            "{secret} reached project A's tools:\n{output}"
        );
    }
    // The agent's API key is neither in its tools' environment nor in its
    // own /proc entries (it is not dumpable).
    assert!(
        !output.contains("ANTHROPIC_API_KEY"),
        "the provider key reached a tool:\n{output}"
    );
    let pids: Vec<u32> = field(output, "pids")
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(
        pids.len() <= 8,
        "A sees only its own few processes: {pids:?}"
    );
    let mut outside = gateway.child_pids();
    outside.push(gateway.child.id().unwrap());
    for pid in outside {
        assert!(
            !pids.contains(&pid),
            "host pid {pid} visible in A: {pids:?}"
        );
    }
    for name in [
        "gateway-environ",
        "signal-gateway",
        "read-beta",
        "read-beta-journal",
        "write-beta",
        "write-root",
        "write-state",
        "append-beta-journal",
    ] {
        assert_ne!(field(output, name), "0", "{name} succeeded:\n{output}");
    }
    // Listing the root or the state directory shows nothing of theirs.
    for name in ["list-root", "list-state"] {
        assert!(!field(output, name).contains("beta"), "{name}:\n{output}");
    }
    assert_ne!(
        field(output, "grep-tokens"),
        "0",
        "a token was found:\n{output}"
    );
    // A hidden file reads as empty (covered by /dev/null) or not at all.
    for i in 0..extra_files {
        let read = field(output, &format!("read-secret-{i}"));
        assert!(
            read == "[]" || read.contains("No such file") || read.contains("denied"),
            "read-secret-{i}: {read}"
        );
    }
    for path in [
        gateway.root.join("beta/pwned"),
        gateway.root.join("pwned"),
        gateway.state.join("pwned"),
    ] {
        assert!(!path.exists(), "{} was written", path.display());
    }
    let journal = std::fs::read_to_string(gateway.state.join("sessions/beta.jsonl")).unwrap();
    assert!(!journal.contains("pwned"));
}

/// `DIR/secrets` holding a token file (FILE_TOKEN) and a config file (the
/// admin token CONFIG_ADMIN_TOKEN): the folder and both files.
fn secret_files(dir: &tempfile::TempDir) -> (PathBuf, PathBuf, PathBuf) {
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    let token_file = secrets.join("client.tokens");
    std::fs::write(&token_file, format!("{FILE_TOKEN}\n")).unwrap();
    let config_file = secrets.join("corral.toml");
    std::fs::write(
        &config_file,
        format!("admin_token = \"{CONFIG_ADMIN_TOKEN}\"\n"),
    )
    .unwrap();
    (secrets, token_file, config_file)
}

/// A gateway in `dir` on `mock` taking tokens from the flag, `token_file`
/// and `config_file`.
fn with_secret_files(
    mock: &MockLlm,
    dir: &tempfile::TempDir,
    token_file: &Path,
    config_file: &Path,
) -> GatewaySpawn {
    GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.path().join("projects"))
        .state_dir(dir.path().join("state"))
        .token_args(&[
            "--token",
            FLAG_TOKEN,
            "--token-file",
            token_file.to_str().unwrap(),
            "--config",
            config_file.to_str().unwrap(),
        ])
}

#[tokio::test]
async fn tokens_from_flags_files_environment_and_config_stay_out_of_reach() {
    let mock = MockLlm::start().await;
    let dir = work_dir();
    let (_, token_file, config_file) = secret_files(&dir);
    let gateway = with_secret_files(&mock, &dir, &token_file, &config_file)
        .env("CORRAL_OBSERVER_TOKENS", ENV_OBSERVER_TOKEN)
        .spawn()
        .await;
    let _beta = occupy_beta(&gateway, &mock, FLAG_TOKEN).await;
    let (mut alpha, hello) = gateway.client_with("alpha", FILE_TOKEN, None).await;
    assert_eq!(hello["success"], true, "{hello}");

    let script = attack_script(&gateway, &[&token_file, &config_file]);
    let output = bash(&mut alpha, &mock, &script).await;
    let all = [
        FLAG_TOKEN,
        FILE_TOKEN,
        ENV_OBSERVER_TOKEN,
        CONFIG_ADMIN_TOKEN,
        B_FILE_SECRET,
        B_CHAT_SECRET,
    ];
    assert_contained(&gateway, &output, &all, 2);

    // The agent's own file tools are confined the same way.
    for path in [
        gateway.root.join("beta/secret.txt"),
        gateway.state.join("sessions/beta.jsonl"),
        token_file.clone(),
        config_file.clone(),
    ] {
        let frames = tool_run(
            &mut alpha,
            &mock,
            "read",
            json!({"path": path.to_str().unwrap()}),
        )
        .await;
        let results = tool_results(&frames);
        let (is_error, text) = &results[0];
        assert!(
            *is_error || text.contains("is empty"),
            "read {} succeeded: {results:?}",
            path.display()
        );
        for secret in all {
            assert!(!results[0].1.contains(secret), "{results:?}");
        }
    }
    let frames = tool_run(
        &mut alpha,
        &mock,
        "write",
        json!({"path": gateway.root.join("beta/pwned").to_str().unwrap(), "content": "x"}),
    )
    .await;
    assert!(tool_results(&frames)[0].0, "write into B must fail");
    assert!(!gateway.root.join("beta/pwned").exists());
}

#[tokio::test]
async fn generated_tokens_stay_out_of_reach() {
    let mock = MockLlm::start().await;
    let dir = work_dir();
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.path().join("projects"))
        .state_dir(dir.path().join("state"))
        .token_args(&[])
        .spawn()
        .await;
    let generated: Vec<String> = gateway
        .startup
        .iter()
        .filter_map(|line| line.rsplit_once(": ").map(|(_, t)| t.trim().to_string()))
        .collect();
    assert_eq!(
        generated.len(),
        2,
        "client and admin: {:?}",
        gateway.startup
    );
    let client = generated[0].clone();
    let _beta = occupy_beta(&gateway, &mock, &client).await;
    let (mut alpha, hello) = gateway.client_with("alpha", &client, None).await;
    assert_eq!(hello["success"], true, "{hello}");

    // The gateway's memory is where a generated token lives.
    let gateway_pid = gateway.child.id().unwrap();
    let script = format!(
        "{}\ncat /proc/{gateway_pid}/mem > /dev/null 2>&1; echo \"read-gateway-mem=$?\"\n",
        attack_script(&gateway, &[])
    );
    let output = bash(&mut alpha, &mock, &script).await;
    let mut all: Vec<&str> = generated.iter().map(String::as_str).collect();
    all.extend([B_FILE_SECRET, B_CHAT_SECRET]);
    assert_contained(&gateway, &output, &all, 0);
    assert_ne!(field(&output, "read-gateway-mem"), "0", "{output}");
}

#[tokio::test]
async fn real_work_in_the_project_is_unchanged() {
    corral_e2e::prerequisites::PYTHON3.require();
    let mock = MockLlm::start().await;
    let dir = work_dir();
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.path().join("projects"))
        .state_dir(dir.path().join("state"))
        .spawn()
        .await;
    let alpha_dir: PathBuf = gateway.root.join("alpha");
    std::fs::write(alpha_dir.join("main.py"), "print(6 * 7)\n").unwrap();
    let mut alpha = gateway.client("alpha").await;

    let output = bash(
        &mut alpha,
        &mock,
        "git init -q && git add -A && git -c user.name=t -c user.email=t@example.com commit -qm first \
         && echo \"commits=$(git rev-list --count HEAD)\"; \
         echo \"python=$(python3 main.py)\"; \
         echo \"tmp=$(echo scratch > /tmp/scratch && cat /tmp/scratch)\"",
    )
    .await;
    assert_eq!(field(&output, "commits"), "1", "{output}");
    assert_eq!(field(&output, "python"), "42", "{output}");
    assert_eq!(field(&output, "tmp"), "scratch", "{output}");
    assert!(alpha_dir.join(".git/HEAD").exists());

    // The file tools read and write A's files.
    let frames = tool_run(
        &mut alpha,
        &mock,
        "write",
        json!({"path": "notes.txt", "content": "written by the agent\n"}),
    )
    .await;
    assert!(!tool_results(&frames)[0].0, "{}", brief(&frames));
    assert_eq!(
        std::fs::read_to_string(alpha_dir.join("notes.txt")).unwrap(),
        "written by the agent\n"
    );
    let frames = tool_run(&mut alpha, &mock, "read", json!({"path": "main.py"})).await;
    let (is_error, text) = &tool_results(&frames)[0];
    assert!(!is_error && text.contains("print(6 * 7)"), "{text}");

    // Output of a running command streams as tool_progress.
    let frames = tool_run(
        &mut alpha,
        &mock,
        "bash",
        json!({"command": "for i in 1 2 3; do echo line$i; sleep 0.2; done"}),
    )
    .await;
    let progress: String = frames
        .iter()
        .filter(|f| f["type"] == "tool_progress")
        .filter_map(|f| f["text"].as_str())
        .collect();
    assert!(progress.contains("line1"), "{}", brief(&frames));
    // Model calls went through: every scripted turn was served.
    assert_eq!(mock.remaining(), 0);
}

#[tokio::test]
async fn tools_get_terminals_of_their_own_and_none_of_the_hosts() {
    terminals::require();
    let _host = terminals::host_terminal();
    let mock = MockLlm::start().await;
    let dir = work_dir();
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.path().join("projects"))
        .state_dir(dir.path().join("state"))
        .spawn()
        .await;
    let mut alpha = gateway.client("alpha").await;
    let output = bash(&mut alpha, &mock, terminals::CHECK).await;
    terminals::assert_private(&output);
}

const NEW_FILE_TOKEN: &str = "replaced-client-token-0123456789abcdef";
const NEW_CONFIG_ADMIN_TOKEN: &str = "replaced-admin-token-0123456789abcdef";

/// What A sees of the directory `secrets` and the files in it, from its
/// bash tool and its read tool; asserts that it is none of the tokens the
/// files held or hold, and that the directory looks empty.
async fn assert_secrets_unseen(ws: &mut Ws, mock: &MockLlm, secrets: &Path, files: &[&Path]) {
    let tokens = [
        FILE_TOKEN,
        NEW_FILE_TOKEN,
        CONFIG_ADMIN_TOKEN,
        NEW_CONFIG_ADMIN_TOKEN,
    ];
    let dir = secrets.display();
    let mut script = format!(
        "echo \"list=[$(ls -A {dir} 2>&1)]\"\n\
         grep -rs {} {dir} /proc/self/mountinfo; echo \"grep-tokens=$?\"\n",
        grep_patterns(&tokens)
    );
    for (i, file) in files.iter().enumerate() {
        script.push_str(&format!(
            "echo \"read-{i}=[$(cat {} 2>&1)]\"\n",
            file.display()
        ));
    }
    let output = bash(ws, mock, &script).await;
    for token in tokens {
        assert!(
            !output.contains(token),
            "{token} reached A's tools:\n{output}"
        );
    }
    let list = field(&output, "list");
    assert!(list == "[]" || list.contains("No such file"), "{output}");
    assert_ne!(field(&output, "grep-tokens"), "0", "{output}");
    for i in 0..files.len() {
        let read = field(&output, &format!("read-{i}"));
        assert!(read.contains("No such file"), "read-{i}: {read}");
    }
    for file in files {
        let frames = tool_run(ws, mock, "read", json!({"path": file.to_str().unwrap()})).await;
        let results = tool_results(&frames);
        assert!(
            results[0].0,
            "read {} succeeded: {results:?}",
            file.display()
        );
        for token in tokens {
            assert!(!results[0].1.contains(token), "{results:?}");
        }
    }
}

/// Replaces `file` the way most tools do: a new file renamed over it.
fn replace_by_rename(file: &Path, text: &str) {
    let new = file.with_extension("new");
    std::fs::write(&new, text).unwrap();
    std::fs::rename(&new, file).unwrap();
}

/// Replaces `from` by `to` in `file` with `sed -i` (which renames a new
/// file over it too).
fn replace_by_sed(file: &Path, from: &str, to: &str) {
    let status = std::process::Command::new("sed")
        .arg("-i")
        .arg(format!("s/{from}/{to}/"))
        .arg(file)
        .status()
        .unwrap();
    assert!(status.success());
    assert!(std::fs::read_to_string(file).unwrap().contains(to));
}

#[tokio::test]
async fn secret_files_replaced_while_agents_run_stay_hidden() {
    let mock = MockLlm::start().await;
    let dir = work_dir();
    let (secrets, token_file, config_file) = secret_files(&dir);
    let config = |admin: &str| format!("admin_token = \"{admin}\"\n");
    let gateway = with_secret_files(&mock, &dir, &token_file, &config_file)
        .spawn()
        .await;
    let (mut alpha, hello) = gateway.client_with("alpha", FILE_TOKEN, None).await;
    assert_eq!(hello["success"], true, "{hello}");
    let files = [token_file.as_path(), config_file.as_path()];
    assert_secrets_unseen(&mut alpha, &mock, &secrets, &files).await;

    // The operator replaces both while A's agent runs: by rename and sed -i.
    replace_by_rename(&token_file, &format!("{NEW_FILE_TOKEN}\n"));
    replace_by_sed(&config_file, CONFIG_ADMIN_TOKEN, NEW_CONFIG_ADMIN_TOKEN);
    assert_secrets_unseen(&mut alpha, &mock, &secrets, &files).await;
    // And the other way round.
    replace_by_sed(&token_file, NEW_FILE_TOKEN, FILE_TOKEN);
    replace_by_rename(&config_file, &config(CONFIG_ADMIN_TOKEN));
    assert_secrets_unseen(&mut alpha, &mock, &secrets, &files).await;

    // A restarted agent sees no more (the gateway read its tokens at start).
    let (status, body) = gateway
        .http_post("/v1/projects/alpha/restart", Some(CONFIG_ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202, "{body}");
    alpha.recv_until(|f| f["type"] == "child_started").await;
    replace_by_rename(&token_file, &format!("{NEW_FILE_TOKEN}\n"));
    assert_secrets_unseen(&mut alpha, &mock, &secrets, &files).await;
}

/// Writes `token` into a new version directory `name` of a secret volume.
fn secret_version(secrets: &Path, name: &str, token: &str) {
    std::fs::create_dir(secrets.join(name)).unwrap();
    std::fs::write(secrets.join(name).join("tokens"), format!("{token}\n")).unwrap();
}

/// A token file in a Kubernetes secret volume (`tokens -> ..data/tokens`,
/// `..data -> ..VERSION`), updated the way the kubelet does while A's agent
/// runs: a new version directory, `..data` swapped to it by rename, the old
/// one deleted. A's tools see neither version.
#[tokio::test]
async fn a_secret_volume_updated_by_a_link_swap_stays_hidden() {
    let mock = MockLlm::start().await;
    let dir = work_dir();
    let secrets = dir.path().join("secrets");
    std::fs::create_dir(&secrets).unwrap();
    secret_version(&secrets, "..2024_a", FILE_TOKEN);
    std::os::unix::fs::symlink("..2024_a", secrets.join("..data")).unwrap();
    std::os::unix::fs::symlink("..data/tokens", secrets.join("tokens")).unwrap();
    let token_file = secrets.join("tokens");
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.path().join("projects"))
        .state_dir(dir.path().join("state"))
        .token_args(&["--token-file", token_file.to_str().unwrap()])
        .spawn()
        .await;
    let (mut alpha, hello) = gateway.client_with("alpha", FILE_TOKEN, None).await;
    assert_eq!(hello["success"], true, "{hello}");
    let files = [token_file.as_path()];
    assert_secrets_unseen(&mut alpha, &mock, &secrets, &files).await;

    secret_version(&secrets, "..2024_b", NEW_FILE_TOKEN);
    std::os::unix::fs::symlink("..2024_b", secrets.join("..data_tmp")).unwrap();
    std::fs::rename(secrets.join("..data_tmp"), secrets.join("..data")).unwrap();
    std::fs::remove_dir_all(secrets.join("..2024_a")).unwrap();
    assert!(std::fs::read_to_string(&token_file)
        .unwrap()
        .contains(NEW_FILE_TOKEN));
    assert_secrets_unseen(&mut alpha, &mock, &secrets, &files).await;
}

#[tokio::test]
async fn a_state_directory_overlapping_the_projects_root_refuses_to_start() {
    let dir = work_dir();
    let root = dir.path().join("projects");
    std::fs::create_dir_all(root.join("alpha")).unwrap();
    let root = root.canonicalize().unwrap();
    let inside = root.join("corral-state");
    let (code, stderr) = serve_exit(
        &[
            "--projects-root".as_ref(),
            root.as_os_str(),
            "--state-dir".as_ref(),
            inside.as_os_str(),
        ],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the state directory {} is inside the projects root {}",
            inside.display(),
            root.display()
        )),
        "{stderr}"
    );
    assert!(!inside.exists(), "nothing was created");

    let (code, stderr) = serve_exit(
        &[
            "--projects-root".as_ref(),
            root.as_os_str(),
            "--state-dir".as_ref(),
            dir.path().as_os_str(),
        ],
        &[],
    )
    .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the projects root {} is inside the state directory",
            root.display()
        )),
        "{stderr}"
    );
}

#[tokio::test]
async fn a_planted_home_link_is_not_followed() {
    use std::os::unix::fs::PermissionsExt;
    let dir = work_dir();
    let state = dir.path().join("state");
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(state.join("homes")).unwrap();
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::set_permissions(&elsewhere, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&elsewhere, state.join("homes/alpha")).unwrap();
    let agent = corral_e2e::harness::workspace_bin("corral-agent");
    // The home is the gateway's work, with or without the sandbox; without
    // it, the agent runs from a checkout under /tmp as well (the sandbox
    // would give it a private /tmp without the binary).
    let gateway = GatewaySpawn::default()
        .projects_root(dir.path().join("projects"))
        .state_dir(state.clone())
        .arg("--sandbox")
        .arg("off")
        .arg("--dialect")
        .arg("acp")
        .arg("--child-command")
        .arg(format!(
            "{} rpc --dialect acp --provider echo",
            agent.display()
        ))
        .spawn()
        .await;

    let (status, body) = gateway
        .http_post("/v1/projects/alpha/start", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 502, "{body}");
    assert!(
        body.contains("cannot prepare the agent's home") && body.contains("symbolic link"),
        "{body}"
    );
    let mode = std::fs::metadata(&elsewhere).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o755, "the link's target was not chmodded");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);

    // Another project gets a real, private home; so does alpha once the
    // link is gone.
    let (status, body) = gateway
        .http_post("/v1/projects/beta/start", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    std::fs::remove_file(state.join("homes/alpha")).unwrap();
    let (status, body) = gateway
        .http_post("/v1/projects/alpha/start", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    for project in ["alpha", "beta"] {
        let home = std::fs::symlink_metadata(state.join("homes").join(project)).unwrap();
        assert!(home.is_dir(), "{project}");
        assert_eq!(home.permissions().mode() & 0o777, 0o700, "{project}");
    }
}

/// What the test plants in the audit log and its rotated file.
const AUDIT_MARKER: &str = "audit-entry-of-another-project-1234";

#[tokio::test]
async fn the_audit_log_and_its_rotated_files_stay_out_of_reach() {
    let mock = MockLlm::start().await;
    let dir = work_dir();
    let logs = dir.path().join("audit");
    std::fs::create_dir(&logs).unwrap();
    let audit = logs.join("audit.jsonl");
    let planted = format!("{{\"marker\":\"{AUDIT_MARKER}\"}}\n");
    std::fs::write(&audit, &planted).unwrap();
    std::fs::write(logs.join("audit.jsonl.1"), &planted).unwrap();
    let gateway = GatewaySpawn::default()
        .mock(&mock.anthropic_base_url())
        .projects_root(dir.path().join("projects"))
        .state_dir(dir.path().join("state"))
        .arg("--audit-log")
        .arg(audit.to_str().unwrap())
        .spawn()
        .await;
    let mut alpha = gateway.client("alpha").await;
    let file = audit.display();
    let script = format!(
        "cat {file} {file}.1 2>&1; ls -la {} 2>&1; echo forged >> {file} 2>&1; \
         mv {file} {file}.stolen 2>&1; echo done",
        logs.display()
    );
    let output = bash(&mut alpha, &mock, &script).await;
    assert!(output.contains("done"), "{output}");
    assert!(
        !output.contains(AUDIT_MARKER),
        "the audit log reached a tool:\n{output}"
    );
    // The gateway's own lines follow the planted one; nothing the tool
    // wrote does.
    let kept = std::fs::read_to_string(&audit).unwrap();
    assert!(kept.starts_with(&planted), "{kept}");
    assert!(!kept.contains("forged"), "{kept}");
    assert!(!logs.join("audit.jsonl.stolen").exists());
}
