//! A small OTLP/HTTP receiver for tests: it accepts `POST /v1/traces` and
//! `POST /v1/logs` with JSON bodies (the `http/json` protocol) on
//! `127.0.0.1:0` and keeps every span and log record it is sent, flattened.

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

/// One received log record.
#[derive(Debug, Clone)]
pub struct ReceivedLog {
    /// `service.name` of the process that sent it.
    pub service: String,
    /// The instrumentation scope's name.
    pub scope: String,
    pub event_name: String,
    /// The body, when it is a string.
    pub body: String,
    /// `timeUnixNano`.
    pub time_unix_nano: u64,
    pub severity_number: i64,
    /// Attribute name → OTLP `AnyValue`.
    pub attributes: Map<String, Value>,
}

impl ReceivedLog {
    /// An attribute as a string.
    pub fn string(&self, key: &str) -> Option<&str> {
        self.attributes.get(key)?.get("stringValue")?.as_str()
    }
}

/// What the receiver was sent.
#[derive(Default)]
struct Received {
    spans: Mutex<Vec<ReceivedSpan>>,
    logs: Mutex<Vec<ReceivedLog>>,
}

type Shared = Arc<Received>;

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Shared,
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
        let received = Shared::default();
        let app = Router::new()
            .route("/v1/traces", post(receive_spans))
            .route("/v1/logs", post(receive_logs))
            .with_state(received.clone());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        OtlpReceiver {
            addr,
            received,
            server,
        }
    }

    /// The base URL to give as `--otlp-endpoint`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received
            .spans
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

    /// Every log record received so far.
    pub fn logs(&self) -> Vec<ReceivedLog> {
        self.received
            .logs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Waits until `done` holds for the log records received, at most
    /// `limit`; returns them either way.
    pub async fn wait_for_logs(
        &self,
        limit: Duration,
        done: impl Fn(&[ReceivedLog]) -> bool,
    ) -> Vec<ReceivedLog> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let logs = self.logs();
            if done(&logs) || tokio::time::Instant::now() >= deadline {
                return logs;
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

async fn receive_spans(
    State(received): State<Shared>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let spans = flatten_spans(&body);
    received
        .spans
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(spans);
    (StatusCode::OK, Json(json!({})))
}

async fn receive_logs(
    State(received): State<Shared>,
    Json(body): Json<Value>,
) -> (StatusCode, Json<Value>) {
    let logs = flatten_logs(&body);
    received
        .logs
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .extend(logs);
    (StatusCode::OK, Json(json!({})))
}

/// The `service.name` of a `resourceSpans` or `resourceLogs` entry.
fn service_of(resource_entry: &Value) -> String {
    attributes(resource_entry.get("resource").unwrap_or(&Value::Null))
        .get("service.name")
        .and_then(|v| v.get("stringValue"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The log records of an `ExportLogsServiceRequest`, each with its
/// service and scope.
fn flatten_logs(body: &Value) -> Vec<ReceivedLog> {
    let mut out = Vec::new();
    for resource_logs in array(body, "resourceLogs") {
        let service = service_of(resource_logs);
        for scope_logs in array(resource_logs, "scopeLogs") {
            let scope = scope_logs["scope"]["name"].as_str().unwrap_or_default();
            for record in array(scope_logs, "logRecords") {
                // OTLP JSON writes 64-bit integers as strings.
                let int = |v: &Value| v.as_i64().or_else(|| v.as_str()?.parse().ok());
                out.push(ReceivedLog {
                    service: service.clone(),
                    scope: scope.to_string(),
                    event_name: record["eventName"].as_str().unwrap_or_default().to_string(),
                    body: record["body"]["stringValue"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    time_unix_nano: int(&record["timeUnixNano"])
                        .and_then(|n| u64::try_from(n).ok())
                        .unwrap_or_default(),
                    severity_number: int(&record["severityNumber"]).unwrap_or_default(),
                    attributes: attributes(record),
                });
            }
        }
    }
    out
}

/// The spans of an `ExportTraceServiceRequest`, each with its service.
fn flatten_spans(body: &Value) -> Vec<ReceivedSpan> {
    let mut out = Vec::new();
    for resource_spans in array(body, "resourceSpans") {
        let service = service_of(resource_spans);
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
