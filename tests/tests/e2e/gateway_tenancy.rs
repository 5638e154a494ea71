//! People confined too: scoped credentials from the config file and the
//! admin API, one answer for a project outside a scope whether it exists
//! or not, revocation closing every socket (on every gateway sharing the
//! state directory), and no usable secret at rest.

#![allow(clippy::unwrap_used)]

use std::path::Path;
use std::time::{Duration, Instant};

use corral_e2e::gateway::{Gateway, GatewaySpawn, Ws, ADMIN_TOKEN};
use serde_json::{json, Value};

const ALICE: &str = "alice-secret-token-0123456789";
const BOB: &str = "bob-secret-token-0123456789ab";
const WATCHER: &str = "watcher-secret-token-012345678";
const OPS_A: &str = "ops-a-secret-token-0123456789";

/// The SHA-256 of `secret` as the config file writes it.
fn sha256(secret: &str) -> String {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    digest.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// A config file with four scoped tokens, written to `dir`.
fn config_file(dir: &Path) -> std::path::PathBuf {
    let entry = |name: &str, secret: &str, role: &str, projects: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nhash = \"sha256:{}\"\nrole = \"{role}\"\nprojects = [{projects}]\n\n",
            sha256(secret)
        )
    };
    let text = [
        entry("alice", ALICE, "client", "\"a-*\""),
        entry("bob", BOB, "client", "\"b-*\""),
        entry("watcher", WATCHER, "observer", "\"a-*\""),
        entry("ops-a", OPS_A, "admin", "\"a-*\""),
    ]
    .concat();
    let path = dir.join("corral.toml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn scoped_gateway(config: &Path) -> Gateway {
    GatewaySpawn::default()
        .echo()
        .projects(&["a-1", "b-1"])
        .arg("--config")
        .arg(config.display().to_string())
        .spawn()
        .await
}

/// The hello's answer, with the project's name replaced by `P`.
async fn hello_answer(gateway: &Gateway, project: &str, token: &str) -> (Value, Option<u16>) {
    let (mut ws, reply) = gateway.client_with(project, token, None).await;
    let code = match reply["success"] == true {
        true => None,
        false => ws.closed().await.map(|(code, _)| code),
    };
    let text = reply.to_string().replace(project, "P");
    (serde_json::from_str(&text).unwrap(), code)
}

#[tokio::test]
async fn scoped_tokens_open_their_projects_and_get_one_answer_for_any_other() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = &scoped_gateway(&config_file(dir.path())).await;
    for (token, mine, theirs) in [(ALICE, "a-1", "b-1"), (BOB, "b-1", "a-1")] {
        let (reply, code) = hello_answer(gateway, mine, token).await;
        assert_eq!(reply["success"], true, "{reply}");
        assert_eq!(code, None);
        // The other's project, existing or not: the same refusal.
        let existing = hello_answer(gateway, theirs, token).await;
        let missing = hello_answer(gateway, &format!("{theirs}-nope"), token).await;
        assert_eq!(existing, missing);
        assert_eq!(existing.0["success"], false);
        assert_eq!(existing.1, Some(1008));
        let error = existing.0["error"].as_str().unwrap();
        assert!(error.contains("does not cover project"), "{error}");
        // The same through the upgrade's Authorization header.
        let header = |project: String| async move {
            let (status, body) = gateway
                .http_get(&format!("/v1/projects/{project}/rpc"), Some(token))
                .await;
            (status, body.replace(&project, "P"))
        };
        let existing = header(theirs.to_string()).await;
        assert_eq!(existing.0, 403, "{existing:?}");
        assert_eq!(existing, header(format!("{theirs}-nope")).await);
    }

    // The observer observes its projects only.
    let (reply, _) = hello_answer(gateway, "a-1", WATCHER).await;
    assert_eq!(reply["success"], true, "{reply}");
    let refused = hello_answer(gateway, "b-1", WATCHER).await;
    assert_eq!(refused, hello_answer(gateway, "b-nope", WATCHER).await);
    assert_eq!(refused.1, Some(1008));

    // The scoped admin: only its projects, the same answer for others.
    let (status, body) = gateway.http_get("/v1/projects?all=true", Some(OPS_A)).await;
    assert_eq!(status, 200, "{body}");
    let listed: Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = listed["projects"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["project"].as_str())
        .collect();
    assert_eq!(names, ["a-1"]);
    let (status, _) = gateway.http_get("/v1/projects/a-1", Some(OPS_A)).await;
    assert_eq!(status, 200);
    let other = |project: &'static str| async move {
        let (status, body) = gateway
            .http_post(&format!("/v1/projects/{project}/restart"), Some(OPS_A))
            .await;
        (status, body.replace(project, "P"))
    };
    let existing = other("b-1").await;
    assert_eq!(existing.0, 403, "{existing:?}");
    assert_eq!(existing, other("b-nope").await);
    // Gateway-wide views need an admin of every project.
    for path in ["/v1/stats", "/metrics"] {
        let (status, _) = gateway.http_get(path, Some(OPS_A)).await;
        assert_eq!(status, 403, "{path}");
        let (status, _) = gateway.http_get(path, Some(ADMIN_TOKEN)).await;
        assert_eq!(status, 200, "{path}");
    }
    // Clients are not admins, whatever their scope.
    let (status, _) = gateway.http_get("/v1/projects", Some(ALICE)).await;
    assert_eq!(status, 403);
    let log = gateway.log_text();
    for secret in [ALICE, BOB, WATCHER, OPS_A] {
        assert!(!log.contains(secret), "a token is in the log");
    }
}

/// `POST /v1/tokens` through `token`: (status, answer).
async fn create(gateway: &Gateway, token: &str, body: Value) -> (u16, Value) {
    let (status, text) = gateway
        .http_body("POST", "/v1/tokens", Some(token), &body.to_string())
        .await;
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// A client of `project` with `token`, whose hello succeeded.
async fn client(gateway: &Gateway, project: &str, token: &str) -> Ws {
    let (ws, reply) = gateway.client_with(project, token, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    ws
}

/// Every regular file under `dir`, read whole.
fn files_under(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            found.extend(files_under(&path));
        } else if kind.is_file() {
            if let Ok(bytes) = std::fs::read(&path) {
                found.push((path, bytes));
            }
        }
    }
    found
}

fn holds(bytes: &[u8], needle: &str) -> bool {
    bytes
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[tokio::test]
async fn a_revoked_token_closes_its_sockets_before_the_answer_and_survives_restarts_until_then() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = config_file(dir.path());
    let spawn = || {
        GatewaySpawn::default()
            .echo()
            .projects(&["a-1", "b-1"])
            .state_dir(state.clone())
            .arg("--config")
            .arg(config.display().to_string())
            .spawn()
    };
    let gateway = spawn().await;
    let (status, made) = create(
        &gateway,
        ADMIN_TOKEN,
        json!({"name": "ci-bot", "role": "client", "projects": ["a-*"], "expires_in": "1d"}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["token"].as_str().unwrap().to_string();
    assert_eq!(secret.len(), 64);
    // A scoped admin grants only within its own scope.
    let (status, refused) = create(
        &gateway,
        OPS_A,
        json!({"name": "wide", "role": "client", "projects": ["*"]}),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    // Without projects: a token that opens nothing.
    let (status, empty) = create(
        &gateway,
        ADMIN_TOKEN,
        json!({"name": "nothing", "role": "client"}),
    )
    .await;
    assert_eq!(status, 201);
    let (reply, _) = hello_answer(&gateway, "a-1", empty["token"].as_str().unwrap()).await;
    assert_eq!(reply["success"], false, "{reply}");

    // It survives a restart.
    drop(gateway);
    let gateway = spawn().await;
    let mut sockets = Vec::new();
    for _ in 0..3 {
        sockets.push(client(&gateway, "a-1", &secret).await);
    }
    let (status, listed) = gateway.http_get("/v1/tokens", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200);
    let listed: Value = serde_json::from_str(&listed).unwrap();
    let bot = listed["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "ci-bot")
        .unwrap()
        .clone();
    assert_eq!(bot["sessions"], 3, "{bot}");
    assert_eq!(bot["last_used"]["from"], "127.0.0.1", "{bot}");
    assert!(!listed.to_string().contains(&secret));
    // A scoped admin lists what is within its scope only.
    let (_, scoped) = gateway.http_get("/v1/tokens", Some(OPS_A)).await;
    assert!(
        scoped.contains("ci-bot") && !scoped.contains("\"bob\""),
        "{scoped}"
    );

    // No usable secret at rest.
    for (path, bytes) in files_under(&state)
        .into_iter()
        .chain([(config.clone(), std::fs::read(&config).unwrap())])
    {
        for secret in [secret.as_str(), ALICE, BOB, WATCHER, OPS_A] {
            assert!(!holds(&bytes, secret), "{} holds a token", path.display());
        }
    }

    // Revoked: the 3 sockets have their close before the answer comes.
    let (status, answer) = gateway
        .http("DELETE", "/v1/tokens/ci-bot", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(answer["sessions_closed"], 3);
    for ws in &mut sockets {
        let (code, reason) = ws.closed().await.expect("a close frame");
        assert_eq!(code, 4001, "{reason}");
        assert!(reason.contains("revoked"), "{reason}");
    }
    let (reply, code) = hello_answer(&gateway, "a-1", &secret).await;
    assert_eq!(reply["success"], false, "{reply}");
    assert_eq!(code, Some(1008));
    let (status, _) = gateway
        .http("DELETE", "/v1/tokens/ci-bot", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 404);
    // And after another restart it is still gone.
    drop(gateway);
    let gateway = spawn().await;
    let (reply, _) = hello_answer(&gateway, "a-1", &secret).await;
    assert_eq!(reply["success"], false, "{reply}");
}

#[tokio::test]
async fn a_token_made_on_one_gateway_works_on_another_and_its_revocation_closes_sockets_on_both() {
    let dir = tempfile::tempdir().unwrap();
    let spawn = || {
        GatewaySpawn::default()
            .echo()
            .projects(&["a-1", "a-2"])
            .projects_root(dir.path().join("projects"))
            .state_dir(dir.path().join("state"))
            .spawn()
    };
    let one = spawn().await;
    let two = spawn().await;
    // Each binds sockets of its own for its agents (egress proxy).
    let proxies = std::fs::read_dir(dir.path().join("state/egress"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("proxy-"))
        .count();
    assert_eq!(proxies, 2, "each gateway has its own egress socket");
    let (status, made) = create(
        &one,
        ADMIN_TOKEN,
        json!({"name": "shared", "role": "client", "projects": ["a-*"]}),
    )
    .await;
    assert_eq!(status, 201, "{made}");
    let secret = made["token"].as_str().unwrap().to_string();
    // The second gateway honours it once it has read the directory.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut on_two = loop {
        let (ws, reply) = two.client_with("a-2", &secret, None).await;
        if reply["success"] == true {
            break ws;
        }
        assert!(
            Instant::now() < deadline,
            "gateway 2 never accepted the token: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let mut on_one = client(&one, "a-1", &secret).await;

    // Revoked on the second: the socket on the first closes too.
    let revoked_at = Instant::now();
    let (status, answer) = two
        .http("DELETE", "/v1/tokens/shared", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(on_two.closed().await.map(|(code, _)| code), Some(4001));
    let closed = tokio::time::timeout(Duration::from_secs(30), on_one.closed())
        .await
        .expect("gateway 1 never closed the revoked token's socket");
    assert_eq!(closed.map(|(code, _)| code), Some(4001));
    eprintln!(
        "revocation reached the other gateway in {} ms",
        revoked_at.elapsed().as_millis()
    );
}

/// Two gateways on one state directory, the second started after the
/// first (so each polls the token directory at its own moments).
async fn two_gateways(dir: &Path) -> (Gateway, Gateway) {
    let spawn = || {
        GatewaySpawn::default()
            .echo()
            .projects(&["a-1", "a-2"])
            .projects_root(dir.join("projects"))
            .state_dir(dir.join("state"))
            .spawn()
    };
    (spawn().await, spawn().await)
}

/// A token made on one gateway can be revoked on another at once, before
/// that one has polled the directory: a 404 there would leave it working.
/// The revoking gateway refuses it from then on; the maker within its
/// poll.
#[tokio::test]
async fn a_token_made_on_one_gateway_is_revoked_on_another_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = two_gateways(dir.path()).await;
    for round in 0..3 {
        let name = format!("brief-{round}");
        let body = json!({"name": name, "role": "client", "projects": ["a-*"]});
        let (status, made) = create(&one, ADMIN_TOKEN, body).await;
        assert_eq!(status, 201, "{made}");
        let token = made["token"].as_str().unwrap();
        let (status, answer) = two
            .http("DELETE", &format!("/v1/tokens/{name}"), Some(ADMIN_TOKEN))
            .await;
        assert_eq!(status, 200, "round {round}: {answer}");
        let (reply, _) = hello_answer(&two, "a-1", token).await;
        assert_eq!(reply["success"], false, "{reply}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (reply, _) = hello_answer(&one, "a-1", token).await;
            if reply["success"] == false {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gateway 1 kept the token: {reply}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Rotating a token (revoke, then make the same name again) on one
/// gateway closes the old secret's sockets on the other, however soon
/// the new one is made.
#[tokio::test]
async fn a_token_rotated_on_one_gateway_closes_the_old_secrets_sockets_on_another() {
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = two_gateways(dir.path()).await;
    let body = json!({"name": "rotated", "role": "client", "projects": ["a-*"]});
    let (status, made) = create(&one, ADMIN_TOKEN, body.clone()).await;
    assert_eq!(status, 201, "{made}");
    let old = made["token"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut on_two = loop {
        let (ws, reply) = two.client_with("a-2", &old, None).await;
        if reply["success"] == true {
            break ws;
        }
        assert!(
            Instant::now() < deadline,
            "gateway 2 never accepted: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (status, _) = one
        .http("DELETE", "/v1/tokens/rotated", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200);
    let (status, made) = create(&one, ADMIN_TOKEN, body).await;
    assert_eq!(status, 201, "{made}");
    let closed = tokio::time::timeout(Duration::from_secs(30), on_two.closed())
        .await
        .expect("gateway 2 kept the old secret's socket open");
    assert_eq!(closed.map(|(code, _)| code), Some(4001));
    let (reply, _) = hello_answer(&two, "a-2", &old).await;
    assert_eq!(reply["success"], false, "{reply}");
}

/// `corral token ARGS` against `gateway` with the admin token in the
/// environment: (exit code, stdout, stderr).
async fn token_cli(gateway: &Gateway, args: &[&str]) -> (i32, String, String) {
    let output = tokio::process::Command::new(corral_e2e::harness::workspace_bin("corral"))
        .arg("token")
        .args(args)
        .env("CORRAL_URL", format!("http://{}", gateway.addr))
        .env("CORRAL_ADMIN_TOKEN", ADMIN_TOKEN)
        .output()
        .await
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_token_command_makes_lists_and_revokes() {
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["a-1"])
        .spawn()
        .await;
    let (code, out, err) = token_cli(
        &gateway,
        &[
            "create",
            "dev",
            "--role",
            "observer",
            "--project",
            "a-*",
            "--expires-in",
            "30d",
        ],
    )
    .await;
    assert_eq!(code, 0, "{err}");
    let secret = out.trim();
    assert_eq!(secret.len(), 64, "{out}");
    assert!(err.contains("shown once"), "{err}");
    let mut ws = client(&gateway, "a-1", secret).await;
    let (code, out, _) = token_cli(&gateway, &["list"]).await;
    assert_eq!(code, 0);
    let row = out.lines().find(|l| l.starts_with("dev\t")).expect(&out);
    assert!(row.contains("observer") && row.contains("a-*"), "{row}");
    assert!(!out.contains(secret));
    let (code, out, _) = token_cli(&gateway, &["revoke", "dev"]).await;
    assert_eq!(code, 0);
    assert!(out.contains("1 session(s) closed"), "{out}");
    assert_eq!(ws.closed().await.map(|(code, _)| code), Some(4001));
    let (code, _, err) = token_cli(&gateway, &["revoke", "dev"]).await;
    assert_eq!(code, 1);
    assert!(err.contains("404"), "{err}");
}

#[tokio::test]
async fn prompts_per_identity_are_rate_limited_in_the_dialect() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["a-1", "a-2", "b-1"])
        .arg("--config")
        .arg(config_file(dir.path()).display().to_string())
        .arg("--max-prompts-per-minute")
        .arg("2")
        .spawn()
        .await;
    // Two prompts of alice's, on two projects and two connections.
    let mut first = client(&gateway, "a-1", ALICE).await;
    let mut second = client(&gateway, "a-2", ALICE).await;
    for ws in [&mut first, &mut second] {
        let answer = ws
            .request(json!({"id":"p","type":"prompt","message":"hi"}))
            .await;
        assert_eq!(answer["success"], true, "{answer}");
        ws.recv_until(|f| f["type"] == "done").await;
    }
    // The third is refused, in zut's words, and reaches no agent.
    let refused = first
        .request(json!({"id":"q","type":"prompt","message":"again"}))
        .await;
    assert_eq!(refused["success"], false, "{refused}");
    let error = refused["error"].as_str().unwrap();
    assert!(error.contains("--max-prompts-per-minute"), "{error}");
    assert!(error.contains("alice"), "{error}");
    // Another identity is not affected.
    let mut other = client(&gateway, "b-1", BOB).await;
    let answer = other
        .request(json!({"id":"p","type":"prompt","message":"hi"}))
        .await;
    assert_eq!(answer["success"], true, "{answer}");
}
