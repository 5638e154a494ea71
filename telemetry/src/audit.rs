//! The gateway's audit log as OpenTelemetry log records, sent over
//! OTLP/HTTP (JSON bodies) to `ENDPOINT/v1/logs` in batches from a thread
//! of their own ([`AuditExport`]). The gateway's audit file stays the
//! record; this export is best effort: a collector that is down or slow
//! loses records (at most [`QUEUE_RECORDS`] wait), it never holds up the
//! file.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::Key;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::logs::{
    BatchConfigBuilder, BatchLogProcessor, SdkLogger, SdkLoggerProvider,
};
use opentelemetry_sdk::Resource;
use serde_json::{Map, Value};

use crate::{signal_url, TelemetryError, EXPORT_DELAY, EXPORT_TIMEOUT};

/// The instrumentation scope and event name of every audit record.
pub const AUDIT_SCOPE: &str = "corral.audit";
/// Records waiting to be sent; more are dropped by the SDK. An entry
/// with its prompt is at most about 70 KiB, so the queue holds at most
/// about 35 MiB.
pub const QUEUE_RECORDS: usize = 512;

/// Sends audit entries as log records. Cheap to clone; [`emit`] never
/// blocks on the network.
///
/// [`emit`]: AuditExport::emit
#[derive(Debug, Clone)]
pub struct AuditExport {
    logger: SdkLogger,
}

impl AuditExport {
    /// One entry as a log record: `body` is the entry's `action`, its
    /// `time` the record's timestamp, and every other field an attribute
    /// of the same name (objects as maps, lists as arrays, `null`s left
    /// out).
    pub fn emit(&self, time: SystemTime, entry: &Map<String, Value>) {
        let mut record = self.logger.create_log_record();
        record.set_event_name(AUDIT_SCOPE);
        record.set_timestamp(time);
        record.set_severity_number(Severity::Info);
        record.set_severity_text("INFO");
        if let Some(action) = entry.get("action").and_then(Value::as_str) {
            record.set_body(AnyValue::String(action.to_string().into()));
        }
        record.add_attributes(attributes(entry));
        self.logger.emit(record);
    }
}

/// The attributes of an entry: every field but `action` and `time`.
fn attributes(entry: &Map<String, Value>) -> Vec<(Key, AnyValue)> {
    entry
        .iter()
        .filter(|(key, _)| !matches!(key.as_str(), "action" | "time"))
        .filter_map(|(key, value)| Some((Key::from(key.clone()), any_value(value)?)))
        .collect()
}

/// A JSON value as an OTLP `AnyValue`; `None` for `null`.
fn any_value(value: &Value) -> Option<AnyValue> {
    Some(match value {
        Value::Null => return None,
        Value::Bool(b) => AnyValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AnyValue::Int(i),
            None => AnyValue::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => AnyValue::String(s.clone().into()),
        Value::Array(items) => {
            AnyValue::ListAny(Box::new(items.iter().filter_map(any_value).collect()))
        }
        Value::Object(fields) => AnyValue::Map(Box::new(
            fields
                .iter()
                .filter_map(|(k, v)| Some((Key::from(k.clone()), any_value(v)?)))
                .collect::<HashMap<_, _>>(),
        )),
    })
}

/// The logs pipeline of one process, for the audit log.
#[derive(Debug)]
pub(crate) struct AuditPipeline {
    provider: SdkLoggerProvider,
}

impl AuditPipeline {
    /// A pipeline of `service` sending to `endpoint`'s `/v1/logs`; this
    /// spawns the exporter's threads.
    pub(crate) fn start(service: &'static str, endpoint: &str) -> Result<Self, TelemetryError> {
        let url = signal_url(endpoint, "logs");
        let exporter = opentelemetry_otlp::LogExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TelemetryError {
                endpoint: url,
                reason: e.to_string(),
            })?;
        let batch = BatchLogProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(EXPORT_DELAY)
                    .with_max_queue_size(QUEUE_RECORDS)
                    .with_max_export_batch_size(QUEUE_RECORDS)
                    .build(),
            )
            .build();
        let provider = SdkLoggerProvider::builder()
            .with_resource(Resource::builder().with_service_name(service).build())
            .with_log_processor(batch)
            .build();
        Ok(AuditPipeline { provider })
    }

    pub(crate) fn export(&self) -> AuditExport {
        AuditExport {
            logger: self.provider.logger(AUDIT_SCOPE),
        }
    }

    /// Sends what is left, waiting at most `wait`.
    pub(crate) fn shutdown(&self, wait: Duration) {
        if let Err(e) = self.provider.shutdown_with_timeout(wait) {
            tracing::warn!(error = %e, "cannot send the last audit records");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_become_attributes_and_the_action_is_left_to_the_body() {
        let entry = json!({
            "time": "2026-12-01T10:00:00.123Z",
            "actor": "alice",
            "action": "permission_answered",
            "source": null,
            "detail": {"option": "allow_once", "n": 2, "projects": ["a-*"]},
        });
        let got: HashMap<String, AnyValue> = attributes(entry.as_object().unwrap())
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(got.len(), 2, "{got:?}");
        assert_eq!(got["actor"], AnyValue::String("alice".into()));
        let AnyValue::Map(detail) = &got["detail"] else {
            panic!("{got:?}")
        };
        assert_eq!(
            detail[&Key::from("option")],
            AnyValue::String("allow_once".into())
        );
        assert_eq!(detail[&Key::from("n")], AnyValue::Int(2));
        assert_eq!(
            detail[&Key::from("projects")],
            AnyValue::ListAny(Box::new(vec![AnyValue::String("a-*".into())]))
        );
    }

    #[test]
    fn numbers_keep_their_kind() {
        assert_eq!(any_value(&json!(0.01)), Some(AnyValue::Double(0.01)));
        assert_eq!(any_value(&json!(-3)), Some(AnyValue::Int(-3)));
        assert_eq!(any_value(&json!(true)), Some(AnyValue::Boolean(true)));
        assert_eq!(any_value(&Value::Null), None);
    }
}
