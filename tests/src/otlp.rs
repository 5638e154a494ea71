//! A small OTLP/HTTP trace receiver for tests: it accepts
//! `POST /v1/traces` with JSON bodies (the `http/json` protocol) on
//! `127.0.0.1:0` and keeps every span it is sent, flattened.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Map, Value};

/// One received span.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the process that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// Attribute name → OTLP `AnyValue` (`{"intValue": …}` and the like).
    pub attributes: Map<String, Value>,
}

impl ReceivedSpan {
    /// An attribute as an integer (OTLP JSON writes 64-bit ints as strings).
    pub fn int(&self, key: &str) -> Option<i64> {
        let value = self.attributes.get(key)?.get("intValue")?;
        value
            .as_i64()
            .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
    }

    /// An attribute as a string.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.attributes.get(key)?.get("stringValue")?.as_str()
    }
}

type Spans = Arc<Mutex<Vec<ReceivedSpan>>>;

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    spans: Spans,
    server: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    /// # Panics
    /// When no local port can be bound.
    pub async fn start() -> OtlpReceiver {
        let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .await
            .expect("bind the OTLP receiver");
        let addr = listener.local_addr().expect("receiver address");
        let spans = Spans::default();
        let app = Router::new()
            .route("/v1/traces", post(receive))
            .with_state(spans.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver {
            addr,
            spans,
            server,
        }
    }

    /// The base URL to give as `--otlp-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.spans
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `done` holds for the spans received, at most `limit`;
    /// returns them either way.
    pub async fn wait_for(
        &self,
        limit: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let spans = self.spans();
            if done(&spans) || tokio::time::Instant::now() >= deadline {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(State(spans): State<Spans>, Json(body): Json<Value>) -> (StatusCode, Json<Value>) {
    let received = flatten(&body);
    spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(received);
    (StatusCode::OK, Json(json!({})))
}

/// The spans of an `ExportTraceServiceRequest`, each with its service.
fn flatten(body: &Value) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in array(body, "resourceSpans") {
        let resource = attributes(resource_spans.get("resource").unwrap_or(&Value::Null));
        let service = resource
            .get("service.name")
            .and_then(|v| v.get("stringValue"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        for scope_spans in array(resource_spans, "scopeSpans") {
            for span in array(scope_spans, "spans") {
                let text = |key: &str| span[key].as_str().unwrap_or_default().to_string();
                out.push(ReceivedSpan {
                    service: service.clone(),
                    name: text("name"),
                    trace_id: text("traceId"),
                    span_id: text("spanId"),
                    parent_span_id: text("parentSpanId"),
                    attributes: attributes(span),
                });
            }
        }
    }
    out
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value
        .get(key)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `[{"key": k, "value": v}]` as a map.
fn attributes(value: &Value) -> Map<String, Value> {
    array(value, "attributes")
        .iter()
        .filter_map(|kv| Some((kv["key"].as_str()?.to_string(), kv["value"].clone())))
        .collect()
}
