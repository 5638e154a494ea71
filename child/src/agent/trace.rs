//! The spans of a run that become OpenTelemetry traces (exported only with
//! `--otlp-endpoint`): the run itself, its wait in the queue, each model
//! call (tokens, cost, attempts), each tool call and each permission wait.
//! Attributes are names, counts and status only, never prompt text, tool
//! arguments or file contents.

use corral_protocol::zut::Usage;
use corral_telemetry::TARGET;
use tracing::field::Empty;
use tracing::Span;

use super::permission::Outcome;
use super::RunKind;

/// A run's span and the span of its wait in the queue, opened when the run
/// is submitted.
pub(crate) struct RunSpans {
    pub run: Span,
    pub queued: Span,
}

impl RunSpans {
    /// Opens the run's span, a child of the caller's span named by
    /// `traceparent` (the gateway's), or the root of a new trace.
    pub fn open(kind: &RunKind, traceparent: Option<&str>) -> RunSpans {
        let run = match kind {
            RunKind::Prompt { .. } => tracing::info_span!(target: TARGET, parent: None, "prompt"),
            RunKind::Compact => tracing::info_span!(target: TARGET, parent: None, "compact"),
        };
        corral_telemetry::continue_trace(&run, traceparent);
        let queued = tracing::info_span!(target: TARGET, parent: &run, "queued");
        RunSpans { run, queued }
    }
}

/// One model call, retries included; inside the run's span.
pub(crate) fn model_call(model: &str, step: u32) -> Span {
    tracing::info_span!(
        target: TARGET,
        "model_call",
        gen_ai.request.model = model,
        corral.step = i64::from(step),
        corral.attempts = 1i64,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        corral.usage.cache_read_tokens = Empty,
        corral.usage.cache_write_tokens = Empty,
        corral.cost_usd = Empty,
        otel.status_code = Empty,
    )
}

/// Records a finished call's counters on its span.
pub(crate) fn record_usage(span: &Span, usage: &Usage) {
    span.record("gen_ai.usage.input_tokens", count(usage.input));
    span.record("gen_ai.usage.output_tokens", count(usage.output));
    span.record("corral.usage.cache_read_tokens", count(usage.cache_read));
    span.record("corral.usage.cache_write_tokens", count(usage.cache_write));
    span.record("corral.cost_usd", usage.cost_usd);
}

/// Records the attempts a model call has made so far.
pub(crate) fn record_attempts(span: &Span, attempts: u32) {
    span.record("corral.attempts", i64::from(attempts));
}

/// A count as OTLP's integer (unsigned values would be sent as text).
fn count(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// Marks a span failed (the call or tool did not succeed).
pub(crate) fn record_error(span: &Span) {
    span.record("otel.status_code", "ERROR");
}

/// One tool call, permission wait included.
pub(crate) fn tool_call(name: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "tool_call",
        corral.tool = name,
        otel.status_code = Empty,
    )
}

/// Records how a permission wait ended: `allowed`, `rejected` or `cancelled`.
pub(crate) fn record_outcome(span: &Span, outcome: &Outcome) {
    let outcome = match outcome {
        Outcome::Selected(option) if option.allows() => "allowed",
        Outcome::Selected(_) => "rejected",
        Outcome::Cancelled => "cancelled",
    };
    span.record("corral.outcome", outcome);
}

/// The wait for the client's permission answer.
pub(crate) fn permission_wait(tool: &str) -> Span {
    tracing::info_span!(
        target: TARGET,
        "permission_wait",
        corral.tool = tool,
        corral.outcome = Empty,
    )
}
