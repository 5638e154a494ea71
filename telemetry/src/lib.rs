//! OpenTelemetry traces for both binaries: a `tracing` layer that turns the
//! spans of [`TARGET`] into OTLP spans (HTTP, JSON bodies), exported once
//! [`Telemetry::start`] is called, and the W3C `traceparent` that carries a
//! trace from the gateway into a child. Off unless an endpoint is given.
//!
//! Span attributes carry names, counts, durations and status only: never
//! prompt text, tool arguments, file contents, tokens or keys.
//!
//! Also the stderr log filter both binaries share ([`log_filter`]), and
//! the gateway's audit log as OTLP log records ([`AuditExport`], from
//! [`Telemetry::audit_export`]).

mod audit;
mod deferred;
mod logs;

pub use audit::{AuditExport, AUDIT_SCOPE};
pub use logs::log_filter;

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use deferred::Deferred;

/// The `tracing` target of the spans that are exported; other spans and
/// all events stay in the logs only.
pub const TARGET: &str = "corral::trace";
/// The field of a frame (or of ACP's `_meta`) that carries the trace context.
pub const TRACEPARENT: &str = "traceparent";
/// How long finished spans (and audit records) wait to be sent in one batch.
const EXPORT_DELAY: Duration = Duration::from_secs(1);
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the process waits at exit for its last spans to be sent (an
/// unreachable collector must not hold up a stop).
const SHUTDOWN_WAIT: Duration = Duration::from_secs(3);

/// The exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("cannot export to {endpoint}: {reason}")]
pub struct TelemetryError {
    pub(crate) endpoint: String,
    pub(crate) reason: String,
}

/// The trace pipeline of one process. Spans are kept from the start but
/// exported only after [`Telemetry::start`], so no thread exists before
/// the process is confined; [`Telemetry::shutdown`] sends what is left.
pub struct Telemetry {
    provider: SdkTracerProvider,
    processor: Deferred,
    /// Where spans go: the endpoint's `/v1/traces`.
    traces_url: String,
    /// The base URL given, for the other signals' paths.
    endpoint: String,
    /// The `service.name` of everything this process sends.
    service: &'static str,
    /// The audit log's records, once [`Telemetry::audit_export`] asked.
    audit: OnceLock<audit::AuditPipeline>,
}

impl Telemetry {
    /// A pipeline for `service` (the `service.name` of its spans) that will
    /// export to the OTLP/HTTP `endpoint` (a base URL such as
    /// `http://127.0.0.1:4318`), and the layer that feeds it.
    pub fn new<S>(service: &'static str, endpoint: &str) -> (Telemetry, impl Layer<S>)
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        let processor = Deferred::default();
        let provider = SdkTracerProvider::builder()
            .with_resource(Resource::builder().with_service_name(service).build())
            .with_span_processor(processor.clone())
            .build();
        let layer = tracing_opentelemetry::layer()
            .with_tracer(provider.tracer(service))
            .with_location(false)
            .with_threads(false)
            .with_target(false)
            .with_tracked_inactivity(false)
            .with_filter(Targets::new().with_target(TARGET, tracing::Level::TRACE));
        let telemetry = Telemetry {
            provider,
            processor,
            traces_url: signal_url(endpoint, "traces"),
            endpoint: endpoint.to_string(),
            service,
            audit: OnceLock::new(),
        };
        (telemetry, layer)
    }

    /// [`Telemetry::new`] when an `endpoint` is configured; with none, no
    /// pipeline and no layer (tracing costs nothing).
    pub fn optional<S>(
        service: &'static str,
        endpoint: Option<&str>,
    ) -> (Option<Telemetry>, Option<impl Layer<S>>)
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a>,
    {
        match endpoint {
            Some(endpoint) => {
                let (telemetry, layer) = Telemetry::new(service, endpoint);
                (Some(telemetry), Some(layer))
            }
            None => (None, None),
        }
    }

    /// Starts exporting (this spawns the exporter's threads).
    pub fn start(&self) -> Result<(), TelemetryError> {
        let failed = |reason: String| TelemetryError {
            endpoint: self.traces_url.clone(),
            reason,
        };
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpJson)
            .with_endpoint(self.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let batch = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                BatchConfigBuilder::default()
                    .with_scheduled_delay(EXPORT_DELAY)
                    .build(),
            )
            .build();
        self.processor.start(batch);
        Ok(())
    }

    /// Where the audit log's entries go as log records (`ENDPOINT/v1/logs`):
    /// the first call starts that pipeline (its exporter's threads, so
    /// call it once the process is confined, like [`Telemetry::start`]);
    /// later calls share it.
    pub fn audit_export(&self) -> Result<AuditExport, TelemetryError> {
        if let Some(pipeline) = self.audit.get() {
            return Ok(pipeline.export());
        }
        let pipeline = audit::AuditPipeline::start(self.service, &self.endpoint)?;
        Ok(self.audit.get_or_init(|| pipeline).export())
    }

    /// Exports the spans and audit records not yet sent and stops the
    /// exporters. Blocks until done (a few seconds at most): call it
    /// outside async code.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown_with_timeout(SHUTDOWN_WAIT) {
            tracing::warn!(error = %e, "cannot send the last traces");
        }
        if let Some(audit) = self.audit.get() {
            audit.shutdown(SHUTDOWN_WAIT);
        }
    }
}

/// `ENDPOINT/v1/SIGNAL` (`traces`, `logs`), the OTLP/HTTP path of a
/// signal; an endpoint given with a signal's path has it replaced.
fn signal_url(endpoint: &str, signal: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    let base = ["/v1/traces", "/v1/logs"]
        .iter()
        .find_map(|path| base.strip_suffix(path))
        .unwrap_or(base);
    format!("{base}/v1/{signal}")
}

/// The W3C `traceparent` of `span`, to pass to another process; `None`
/// when the span is not exported (no pipeline, or filtered out).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes `span` (just created, not yet entered) a child of the remote span
/// named by `traceparent`. A missing or malformed value leaves `span` the
/// root of a trace of its own.
pub fn continue_trace(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(value) = traceparent else { return };
    let carrier = HashMap::from([(TRACEPARENT.to_string(), value.to_string())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        // Fails only when no pipeline runs, and then nothing is exported.
        let _ = span.set_parent(context);
    }
}

#[cfg(test)]
mod tests;
