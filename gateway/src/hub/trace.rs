//! The gateway's span of a run-starting request (exported as a trace with
//! `--otlp-endpoint`): opened when the request is forwarded, its W3C
//! `traceparent` put into the frame for the child, closed when its run ends
//! (a zut run, answered as it starts) or else when the request is answered
//! or fails (its [`Pending`](super::ids::Pending) entry goes). Attributes:
//! project, dialect and command only.

use corral_telemetry::TARGET;
use serde_json::{Map, Value};

use crate::dialect::Dialect;

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
        dialect: Dialect,
        command: &str,
        frame: &mut Map<String, Value>,
    ) -> RequestSpan {
        let span = tracing::info_span!(
            target: TARGET,
            parent: None,
            "forward",
            corral.project = project,
            corral.dialect = dialect.as_str(),
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

    const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    fn with_context(dialect: Dialect, frame: Value) -> Value {
        let mut frame = object(frame);
        dialect.put_trace_context(&mut frame, PARENT.into());
        Value::Object(frame)
    }

    #[test]
    fn each_dialect_carries_the_context_where_its_agent_reads_it() {
        let zut = with_context(Dialect::Zut, json!({"type": "prompt", "message": "m"}));
        assert_eq!(zut["traceparent"], PARENT);
        let letscode = with_context(Dialect::Letscode, json!({"cmd": "prompt", "text": "t"}));
        assert_eq!(letscode["traceparent"], PARENT);
        let acp = json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
            "params": {"sessionId": "s", "_meta": {"x": 1}}});
        let acp = with_context(Dialect::Acp, acp);
        assert_eq!(
            acp["params"]["_meta"],
            json!({"x": 1, "traceparent": PARENT})
        );
        let bare = json!({"jsonrpc": "2.0", "id": 1, "method": "session/prompt",
            "params": {"sessionId": "s"}});
        let bare = with_context(Dialect::Acp, bare);
        assert_eq!(bare["params"]["_meta"]["traceparent"], PARENT);
        // Zi refuses unknown fields: its records stay as they are.
        let zi = json!({"version": 1, "id": "1", "method": "prompt", "params": {}});
        assert_eq!(with_context(Dialect::Zi, zi.clone()), zi);
    }

    #[test]
    fn without_a_pipeline_the_frame_is_untouched() {
        let mut frame = object(json!({"type": "prompt", "message": "m"}));
        let before = frame.clone();
        let _span = RequestSpan::forward("alpha", Dialect::Zut, "prompt", &mut frame);
        assert_eq!(frame, before);
    }
}
