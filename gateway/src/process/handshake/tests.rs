use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::process::child::SpawnSpec;
use crate::process::env::{child_env, TOKEN_VAR};
use crate::process::test_support::{next, sh};

/// A fake child that checks the token like `corral-agent rpc` does, after
/// printing some output the handshake must skip.
const FAKE_AGENT: &str = r#"
IFS= read -r line
echo '{"type":"log_noise"}'
echo 'not json'
echo '{"type":"response","id":"other","success":true}'
case "$line" in
  *'"type":"hello"'*'"token":"good"'*)
    echo '{"type":"response","id":"corral-hello","command":"hello","success":true,"data":{"protocol_version":1}}'
    cat >/dev/null ;;
  *)
    echo '{"type":"response","id":"corral-hello","command":"hello","success":false,"error":"authentication failed: wrong token"}'
    exit 1 ;;
esac
"#;

const PATIENCE: Duration = Duration::from_secs(10);

#[tokio::test]
async fn hello_with_the_right_token_returns_data() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), FAKE_AGENT))
        .await
        .unwrap();
    let data = hello(&child, &mut output, "good", PATIENCE).await.unwrap();
    assert_eq!(Value::Object(data), json!({"protocol_version": 1}));
    assert_eq!(child.exited(), None);
    let exit = child.stop(Duration::from_secs(2)).await;
    assert!(exit.success(), "{exit}");
}

#[tokio::test]
async fn wrong_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), FAKE_AGENT))
        .await
        .unwrap();
    let err = hello(&child, &mut output, "bad", PATIENCE)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        HandshakeError::Refused("authentication failed: wrong token".into())
    );
    assert_eq!(
        next(&mut output).await,
        ChildOutput::Exited(ExitInfo {
            code: Some(1),
            signal: None
        })
    );
}

#[tokio::test]
async fn child_that_exits_first_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "echo starting; exit 2"))
        .await
        .unwrap();
    let err = hello(&child, &mut output, "good", PATIENCE)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        HandshakeError::Exited(ExitInfo {
            code: Some(2),
            signal: None
        })
    );
    assert!(err.to_string().contains("exit code 2"), "{err}");
}

#[tokio::test]
async fn silent_child_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let (child, mut output) = ChildProcess::spawn(sh(dir.path(), "cat >/dev/null"))
        .await
        .unwrap();
    let timeout = Duration::from_millis(300);
    let err = hello(&child, &mut output, "good", timeout)
        .await
        .unwrap_err();
    assert_eq!(err, HandshakeError::Timeout(timeout));
}

#[test]
fn malformed_responses_are_classified() {
    let frame = |v: Value| v.as_object().unwrap().clone();
    let err = interpret(frame(
        json!({"type":"response","id":HELLO_ID,"success":"yes"}),
    ))
    .unwrap_err();
    assert!(matches!(err, HandshakeError::Malformed(_)), "{err:?}");
    let err = interpret(frame(json!({"success":true,"data":[1]}))).unwrap_err();
    assert!(matches!(err, HandshakeError::Malformed(_)), "{err:?}");
    assert_eq!(interpret(frame(json!({"success":true}))), Ok(Map::new()));
    assert_eq!(
        interpret(frame(json!({"success":false}))),
        Err(HandshakeError::Refused("no error message".into()))
    );
}

#[test]
fn tokens_are_long_hex_and_fresh() {
    let (a, b) = (random_token(), random_token());
    assert_eq!(a.len(), 64);
    assert!(a
        .bytes()
        .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
    assert_ne!(a, b);
}

/// The real child, when it has been built; skipped otherwise.
#[tokio::test]
async fn real_agent_accepts_its_token_and_refuses_others() {
    let agent = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../target/debug/corral-agent"
    ));
    if !agent.is_file() {
        eprintln!("skipped: {} is not built", agent.display());
        return;
    }
    for (given, accepted) in [(None, true), (Some("wrong"), false)] {
        let dir = tempfile::tempdir().unwrap();
        let token = random_token();
        let home = dir.path().display().to_string();
        let set = [
            (TOKEN_VAR.to_string(), token.clone()),
            ("HOME".to_string(), home.clone()),
            ("ZUT_HOME".to_string(), home.clone()),
            ("CORRAL_HOME".to_string(), home),
        ];
        let spec = SpawnSpec {
            program: agent.clone(),
            args: ["rpc", "--provider", "echo", "--no-context-files"]
                .map(Into::into)
                .to_vec(),
            cwd: dir.path().to_path_buf(),
            env: child_env(&[], &set, std::env::vars_os()),
            project: "real-agent".into(),
            max_line: 1 << 20,
            confine: Default::default(),
            stderr_log: None,
            template: false,
        };
        let (child, mut output) = ChildProcess::spawn(spec).await.unwrap();
        let result = hello(&child, &mut output, given.unwrap_or(&token), PATIENCE).await;
        if accepted {
            let data = result.unwrap();
            assert_eq!(data.get("protocol_version"), Some(&json!(1)), "{data:?}");
            let exit = child.stop(Duration::from_secs(5)).await;
            assert!(exit.success(), "{exit}");
        } else {
            assert!(
                matches!(result, Err(HandshakeError::Refused(ref e)) if e.contains("invalid token")),
                "{result:?}"
            );
            assert!(!child.wait().await.success());
        }
    }
}
