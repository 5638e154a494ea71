//! The audit log's OpenTelemetry export: an entry handed to
//! `corral_telemetry::AuditExport` arrives at the collector's `/v1/logs` as
//! one log record, its body the action, its time the entry's, and every
//! other field an attribute of the same name.

use std::time::{Duration, UNIX_EPOCH};

use corral_e2e::otlp::OtlpReceiver;
use corral_telemetry::{Telemetry, AUDIT_SCOPE};
use serde_json::json;

/// Bound on the wait for records: the exporter sends every second.
const LOGS_WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_audit_entry_is_one_log_record_with_its_fields() {
    let receiver = OtlpReceiver::start().await;
    let (telemetry, _layer) =
        Telemetry::new::<tracing_subscriber::Registry>("corral", &receiver.endpoint());
    let export = telemetry.audit_export().expect("the logs exporter");
    let time = UNIX_EPOCH + Duration::from_millis(1_796_117_400_123);
    let entry = json!({
        "time": "2026-12-01T09:30:00.123Z",
        "actor": "alice",
        "actor_kind": "jwt",
        "source": "203.0.113.7",
        "action": "permission_answered",
        "project": "team-a-web",
        "outcome": "ok",
        "detail": {"option": "allow_once"},
    });
    export.emit(time, entry.as_object().expect("an object"));
    let logs = receiver.wait_for_logs(LOGS_WAIT, |l| !l.is_empty()).await;
    tokio::task::spawn_blocking(move || telemetry.shutdown())
        .await
        .expect("shutdown");
    assert_eq!(logs.len(), 1, "{logs:?}");
    let record = &logs[0];
    assert_eq!(record.service, "corral");
    assert_eq!(
        (record.scope.as_str(), record.event_name.as_str()),
        (AUDIT_SCOPE, AUDIT_SCOPE)
    );
    assert_eq!(record.body, "permission_answered");
    assert_eq!(record.time_unix_nano, 1_796_117_400_123_000_000);
    assert_eq!(record.severity_number, 9, "INFO");
    assert_eq!(record.string("actor"), Some("alice"));
    assert_eq!(record.string("actor_kind"), Some("jwt"));
    assert_eq!(record.string("source"), Some("203.0.113.7"));
    assert_eq!(record.string("project"), Some("team-a-web"));
    assert_eq!(record.string("outcome"), Some("ok"));
    assert!(record.attributes.get("action").is_none() && record.attributes.get("time").is_none());
    let detail = &record.attributes["detail"]["kvlistValue"]["values"];
    assert_eq!(
        detail,
        &json!([{"key": "option", "value": {"stringValue": "allow_once"}}]),
        "{record:?}"
    );
}
