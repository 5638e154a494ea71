//! Behaviour shared by both formats: one queue, recording, scripted
//! statuses, authentication, the empty script, pacing, hanging, and the
//! `mock-llm` binary.

use std::time::{Duration, Instant};

use corral_e2e::mock_llm::{MockLlm, Turn, NO_TURN_LEFT};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::*;

#[tokio::test]
async fn one_queue_serves_both_formats_in_order_and_records_requests() {
    let mock = MockLlm::start().await;
    mock.push_all([Turn::text("first"), Turn::text("second")]);
    let a = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;
    let o = openai_chunks(post_openai(&mock, &openai_body(hello())).await).await;
    assert_eq!(anthropic_text(&a), "first");
    assert_eq!(openai_text(&o), "second");

    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].auth.as_deref(), Some(KEY));
    assert_eq!(requests[0].headers["anthropic-version"], "2023-06-01");
    assert_eq!(requests[0].body, anthropic_body(hello()));
    assert_eq!(requests[1].path, "/v1/chat/completions");
    assert_eq!(requests[1].auth.as_deref(), Some("Bearer test-key"));
    assert_eq!(requests[1].body["messages"], hello());
}

#[tokio::test]
async fn empty_script_answers_with_a_visible_text() {
    let mock = MockLlm::start().await;
    let a = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;
    assert_eq!(anthropic_text(&a), NO_TURN_LEFT);
    let o = openai_chunks(post_openai(&mock, &openai_body(hello())).await).await;
    assert_eq!(openai_text(&o), NO_TURN_LEFT);
}

#[tokio::test]
async fn status_429_carries_retry_after_in_each_error_shape() {
    let mock = MockLlm::start().await;
    let limited = || Turn::Status {
        code: 429,
        retry_after: Some(3),
        body: "slow down".into(),
    };
    mock.push_all([limited(), limited(), Turn::text("after")]);

    let resp = post_anthropic(&mock, &anthropic_body(hello())).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    let body: Value = within(resp.json()).await.unwrap();
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}})
    );

    let resp = post_openai(&mock, &openai_body(hello())).await;
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "3");
    let body: Value = within(resp.json()).await.unwrap();
    assert_eq!(body["error"]["message"], "slow down");
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");

    let a = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;
    assert_eq!(anthropic_text(&a), "after");
}

#[tokio::test]
async fn wrong_key_gets_401_and_consumes_no_turn() {
    let mock = MockLlm::start().await;
    mock.set_api_key(Some("other-key".into()));
    mock.push(Turn::text("for the right key"));

    let resp = post_anthropic(&mock, &anthropic_body(hello())).await;
    assert_eq!(resp.status(), 401);
    let body: Value = within(resp.json()).await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error");
    assert!(body["error"]["message"].is_string());

    let resp = post_openai(&mock, &openai_body(hello())).await;
    assert_eq!(resp.status(), 401);
    let body: Value = within(resp.json()).await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert_eq!(body["error"]["code"], "invalid_api_key");
    assert!(body["error"]["message"].is_string());

    assert_eq!(mock.remaining(), 1);
    mock.set_api_key(Some(KEY.into()));
    let a = anthropic_events(post_anthropic(&mock, &anthropic_body(hello())).await).await;
    assert_eq!(anthropic_text(&a), "for the right key");
}

#[tokio::test]
async fn slow_turn_sends_one_chunk_per_delay() {
    let mock = MockLlm::start().await;
    let delay = Duration::from_millis(80);
    let chunks: Vec<String> = ["one ", "two ", "three"].map(String::from).to_vec();
    mock.push(Turn::Slow { chunks, delay });
    let started = Instant::now();
    let mut resp = post_openai(&mock, &openai_body(hello())).await;
    let mut arrivals = Vec::new();
    while let Some(bytes) = within(resp.chunk()).await.unwrap() {
        if String::from_utf8_lossy(&bytes).contains("\"content\":\"t") {
            arrivals.push(started.elapsed());
        }
    }
    assert_eq!(arrivals.len(), 2, "the chunks 'two ' and 'three'");
    assert!(
        arrivals[0] >= delay * 2 && arrivals[1] >= delay * 3,
        "{arrivals:?}"
    );
}

#[tokio::test]
async fn hang_sends_headers_then_nothing_until_dropped() {
    let mock = MockLlm::start().await;
    mock.push(Turn::Hang);
    let mut resp = post_anthropic(&mock, &anthropic_body(hello())).await;
    assert_eq!(resp.status(), 200);
    let quiet = tokio::time::timeout(Duration::from_millis(300), resp.chunk()).await;
    assert!(quiet.is_err(), "no event while hanging");
    drop(mock);
    let ended = within(resp.chunk()).await;
    assert!(
        !matches!(ended, Ok(Some(_))),
        "the stream ends when the mock is dropped"
    );
}

#[tokio::test]
async fn unknown_path_gets_a_helpful_404() {
    let mock = MockLlm::start().await;
    let url = format!("{}/v1/v1/messages", mock.anthropic_base_url());
    let resp = within(reqwest::Client::new().post(url).send())
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(within(resp.text()).await.unwrap().contains("/v1/messages"));
}

#[tokio::test]
async fn binary_serves_a_script_file() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let turns = json!([{"text": "from file"}, {"status": 429, "retry_after": 1}]);
    std::fs::write(&script, turns.to_string()).unwrap();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mock-llm"))
        .arg("--script")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = within(lines.next_line()).await.unwrap().unwrap();
    let base = line.strip_prefix("listening on ").expect("address line");

    let url = format!("{base}/v1/chat/completions");
    let send = reqwest::Client::new()
        .post(&url)
        .json(&openai_body(hello()))
        .send();
    let chunks = openai_chunks(within(send).await.unwrap()).await;
    assert_eq!(openai_text(&chunks), "from file");
    let send = reqwest::Client::new()
        .post(&url)
        .json(&openai_body(hello()))
        .send();
    let resp = within(send).await.unwrap();
    assert_eq!(resp.status(), 429);
    assert_eq!(resp.headers()["retry-after"], "1");
}
