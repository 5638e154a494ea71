//! The trace context a caller (the gateway) may put in a run-starting
//! frame: a W3C `traceparent` string, top-level in zut and letscode frames
//! and in `params._meta` in ACP. Taken out before the frame is decoded, so
//! strict decoders never see it.

use corral_telemetry::TRACEPARENT;
use serde_json::{Map, Value};

/// Longest `traceparent` accepted (version 00 has 55 characters; later
/// versions may append fields).
const MAX_LEN: usize = 256;

/// Removes `traceparent` from `object`; its value when it is a string of a
/// sane length.
pub(crate) fn take(object: &mut Map<String, Value>) -> Option<String> {
    match object.remove(TRACEPARENT)? {
        Value::String(value) if value.len() <= MAX_LEN => Some(value),
        _ => None,
    }
}

/// Removes `params._meta.traceparent` (ACP), leaving the rest of `_meta`.
pub(crate) fn take_from_meta(params: &mut Value) -> Option<String> {
    let meta = params.get_mut("_meta")?.as_object_mut()?;
    take(meta)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;
    use crate::agent::trace::RunSpans;
    use crate::agent::RunKind;

    const GATEWAY: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap()
    }

    fn trace_id(traceparent: &str) -> &str {
        traceparent.split('-').nth(1).unwrap()
    }

    /// The trace id of the run opened for a frame, with a pipeline that
    /// never exports.
    fn run_trace(mut frame: Map<String, Value>) -> String {
        let (_telemetry, layer) = corral_telemetry::Telemetry::new("test", "http://127.0.0.1:9");
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let parent = take(&mut frame);
            let spans = RunSpans::open(&RunKind::Compact, parent.as_deref());
            let own = corral_telemetry::traceparent(&spans.run).unwrap();
            trace_id(&own).to_string()
        })
    }

    #[test]
    fn takes_the_traceparent_out_of_the_frame() {
        let mut frame = object(json!({"type": "prompt", "traceparent": GATEWAY}));
        assert_eq!(take(&mut frame).as_deref(), Some(GATEWAY));
        assert_eq!(frame, object(json!({"type": "prompt"})));
        let mut odd = object(json!({"traceparent": 7}));
        assert_eq!(take(&mut odd), None);
        assert!(odd.is_empty());
    }

    #[test]
    fn takes_the_traceparent_out_of_acp_meta() {
        let mut params = json!({"sessionId": "s", "_meta": {"traceparent": GATEWAY, "x": 1}});
        assert_eq!(take_from_meta(&mut params).as_deref(), Some(GATEWAY));
        assert_eq!(params, json!({"sessionId": "s", "_meta": {"x": 1}}));
        assert_eq!(take_from_meta(&mut json!({"sessionId": "s"})), None);
    }

    #[test]
    fn a_frame_without_traceparent_starts_a_fresh_trace() {
        let first = run_trace(object(json!({"type": "prompt"})));
        let second = run_trace(object(json!({"type": "prompt"})));
        assert_ne!(first, trace_id(GATEWAY));
        assert_ne!(first, second);
    }

    #[test]
    fn a_frame_with_traceparent_continues_the_callers_trace() {
        let joined = run_trace(object(json!({"type": "prompt", "traceparent": GATEWAY})));
        assert_eq!(joined, trace_id(GATEWAY));
    }
}
