//! The broker meters model calls: the usage in a provider's answer is
//! charged to the project and to the identity whose run it is, the
//! answer passing unaltered; a spent budget is answered 402 without a
//! call upstream.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::routing::post;

use super::*;
use crate::spend::{Ledger, Payer, Scope};

/// An Anthropic answer: 1M input tokens and 100k output tokens of
/// claude-sonnet-4-5, $3 + $1.50.
const ANSWER: &str = "event: message_start\n\
data: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5-20250929\",\"usage\":{\"input_tokens\":1000000,\"output_tokens\":1}}}\n\n\
event: content_block_delta\n\
data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"hi\"}}\n\n\
event: message_delta\n\
data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":100000}}\n\n\
event: message_stop\n\
data: {\"type\":\"message_stop\"}\n\n";

/// A provider answering every Messages call with [`ANSWER`]; returns its
/// base URL and how many calls it had.
async fn provider() -> (String, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = calls.clone();
    let app = axum::Router::new().route(
        "/v1/messages",
        post(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { ([("content-type", "text/event-stream")], ANSWER) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, calls)
}

async fn within<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(10), future)
        .await
        .unwrap()
}

/// A broker in front of `base` charging `ledger`; the socket's path, the
/// registry, the metrics and the dir (keep it).
fn broker(
    base: &str,
    ledger: Arc<Ledger>,
) -> (
    std::path::PathBuf,
    Arc<Registry>,
    Arc<Metrics>,
    tempfile::TempDir,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broker.sock");
    let base = base.to_string();
    let env = move |name: &str| match name {
        "ANTHROPIC_BASE_URL" => Some(base.clone()),
        "ANTHROPIC_API_KEY" => Some("sk-ant-real".to_string()),
        _ => None,
    };
    let registry = Arc::new(Registry::default());
    let metrics = Arc::new(Metrics::new().unwrap());
    let broker = Broker::new(
        registry.clone(),
        Upstreams::from_env(&env).unwrap(),
        metrics.clone(),
        ledger,
    )
    .unwrap();
    spawn(bind(&path).unwrap(), broker, CancellationToken::new()).unwrap();
    (path, registry, metrics, dir)
}

/// One Messages call through the broker: status and body.
async fn call(socket: &std::path::Path, key: &str) -> (u16, String) {
    let response = within(
        reqwest::Client::builder()
            .unix_socket(socket)
            .build()
            .unwrap()
            .post(format!("{BROKER_SOCKET_URL}{ANTHROPIC_PREFIX}/v1/messages"))
            .header("x-api-key", key)
            .body(r#"{"model":"claude-sonnet-4-5","stream":true}"#)
            .send(),
    )
    .await
    .unwrap();
    let status = response.status().as_u16();
    (status, within(response.text()).await.unwrap())
}

/// Waits until `project` was charged at least `usd` (the charge of an
/// answer's end lands as the broker's side of the stream ends).
async fn charged(ledger: &Ledger, project: &str, usd: f64) {
    within(async {
        while ledger.view(Scope::Project, project).total_usd < usd - 1e-9 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn a_call_is_charged_and_passes_unaltered() {
    let (base, _) = provider().await;
    let ledger = Arc::new(Ledger::detached(None, Arc::new(Metrics::new().unwrap())));
    let (socket, registry, _metrics, _dir) = broker(&base, ledger.clone());
    let secret = registry.register("alpha").unwrap();
    ledger.attribute(
        "alpha",
        Some(Payer {
            name: "alice".into(),
            budget_usd: None,
        }),
    );
    let (status, body) = call(&socket, &secret).await;
    assert_eq!(status, 200);
    assert_eq!(body, ANSWER);
    charged(&ledger, "alpha", 4.5).await;
    let view = ledger.view(Scope::Project, "alpha");
    assert!((view.total_usd - 4.5).abs() < 1e-9, "{view:?}");
    assert_eq!(view.source, Some("broker"));
    assert!((ledger.view(Scope::Identity, "alice").total_usd - 4.5).abs() < 1e-9);
}

#[tokio::test]
async fn a_spent_budget_is_answered_402_without_a_call_upstream() {
    let (base, calls) = provider().await;
    let ledger = Arc::new(Ledger::detached(
        Some(0.01),
        Arc::new(Metrics::new().unwrap()),
    ));
    let (socket, registry, metrics, _dir) = broker(&base, ledger.clone());
    let secret = registry.register("alpha").unwrap();
    // The call that crosses the budget goes through: its cost is known
    // only from its answer.
    assert_eq!(call(&socket, &secret).await.0, 200);
    charged(&ledger, "alpha", 4.5).await;
    let (status, body) = call(&socket, &secret).await;
    assert_eq!(status, 402);
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(error["type"], "error");
    assert_eq!(error["error"]["type"], "billing_error");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("the budget of project alpha ($0.01) is spent: $4.50 so far"),
        "{message}"
    );
    assert!(
        message.ends_with("PUT /v1/projects/alpha/budget"),
        "{message}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let over = metrics
        .broker_requests
        .with_label_values(&["anthropic", "over_budget"])
        .get();
    assert_eq!(over, 1);
    // Other projects are not concerned.
    let other = registry.register("beta").unwrap();
    assert_eq!(call(&socket, &other).await.0, 200);
}
