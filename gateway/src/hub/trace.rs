//! The gateway's span of a run-starting request (exported as a trace with
//! `--otlp-endpoint`): opened when the request is forwarded, its W3C
//! `traceparent` put into the frame for the child, closed when its run ends
//! (a zut run, answered as it starts) or else when the request is answered
//! or fails (its [`Forwarded`](super::ids::Forwarded) entry goes). Attributes:
//! project, dialect and command only.

use corral_telemetry::TARGET;
use serde_json::{Map, Value};

use crate::dialect::DialectRules;

/// A request's span; ends when dropped. Compares equal to any other, so
/// the entry holding it keeps its plain equality.
#[derive(Debug, Clone)]
pub struct RequestSpan {
    /// Held only to be dropped: that ends the span.
    _span: tracing::Span,
}

impl Default for RequestSpan {
    /// No span: the request starts no run.
    fn default() -> RequestSpan {
        RequestSpan {
            _span: tracing::Span::none(),
        }
    }
}

impl PartialEq for RequestSpan {
    fn eq(&self, _other: &RequestSpan) -> bool {
        true
    }
}

impl RequestSpan {
    /// Opens the span of a forwarded run-starting request and passes its
    /// context to the child in `frame`, where the dialect has room for it.
    pub fn forward(
        project: &str,
        dialect: &dyn DialectRules,
        command: &str,
        frame: &mut Map<String, Value>,
    ) -> RequestSpan {
        let span = tracing::info_span!(
            target: TARGET,
            parent: None,
            "forward",
            corral.project = project,
            corral.dialect = dialect.name(),
            corral.command = command,
        );
        if let Some(traceparent) = corral_telemetry::traceparent(&span) {
            dialect.put_trace_context(frame, traceparent);
        }
        RequestSpan { _span: span }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::dialect::Dialect;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    #[test]
    fn without_a_pipeline_the_frame_is_untouched() {
        let mut frame = object(json!({"type": "prompt", "message": "m"}));
        let before = frame.clone();
        let _span = RequestSpan::forward("alpha", Dialect::default().rules(), "prompt", &mut frame);
        assert_eq!(frame, before);
    }
}
