//! The trace context a caller (the gateway) may put in a run-starting
//! frame: a W3C `traceparent` string, top-level in zut and letscode frames
//! and in `params._meta` in ACP (which reserves `traceparent` and
//! `tracestate` there). Taken out before the frame is decoded, so strict
//! decoders never see it. ACP frames the agent sends for a traced
//! request carry a trace context in `params._meta` too.

use corral_telemetry::TRACEPARENT;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest `traceparent` accepted (version 00 has 55 characters; later
/// versions may append fields).
const MAX_LEN: usize = 256;
/// The W3C vendor state that travels with a `traceparent`.
pub(crate) const TRACESTATE: &str = "tracestate";
/// Longest `tracestate` accepted (W3C: at most 32 members; 512 bytes is
/// what it asks propagators to keep at least).
const MAX_STATE_LEN: usize = 512;

/// A W3C trace context as ACP carries it in `_meta`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct TraceContext {
    pub traceparent: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracestate: Option<String>,
}

/// Removes `traceparent` from `object`; its value when it is a string of a
/// sane length.
pub(crate) fn take(object: &mut Map<String, Value>) -> Option<String> {
    match object.remove(TRACEPARENT)? {
        Value::String(value) if value.len() <= MAX_LEN => Some(value),
        _ => None,
    }
}

/// Removes `params._meta.traceparent` and `params._meta.tracestate`
/// (ACP); the context when `traceparent` is usable (a `tracestate`
/// without one means nothing and is dropped).
pub(crate) fn take_context_from_meta(params: &mut Value) -> Option<TraceContext> {
    let meta = params.get_mut("_meta")?.as_object_mut()?;
    let tracestate = match meta.remove(TRACESTATE) {
        Some(Value::String(state)) if state.len() <= MAX_STATE_LEN => Some(state),
        _ => None,
    };
    let traceparent = take(meta)?;
    Some(TraceContext {
        traceparent,
        tracestate,
    })
}

/// Writes `trace` into `params._meta` of a request or notification
/// (answers have no params and are left alone); a trace context already
/// there stays.
pub(crate) fn put_in_meta(frame: &mut Value, trace: &TraceContext) {
    if frame.get("method").is_none() {
        return;
    }
    let Some(params) = frame.get_mut("params").and_then(Value::as_object_mut) else {
        return;
    };
    let meta = params
        .entry("_meta")
        .or_insert_with(|| Value::Object(Map::new()));
    let Some(meta) = meta.as_object_mut() else {
        return;
    };
    if meta.contains_key(TRACEPARENT) {
        return;
    }
    meta.insert(TRACEPARENT.into(), Value::String(trace.traceparent.clone()));
    if let Some(state) = &trace.tracestate {
        meta.insert(TRACESTATE.into(), Value::String(state.clone()));
    }
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
        let trace = take_context_from_meta(&mut params).unwrap();
        assert_eq!(
            (trace.traceparent.as_str(), trace.tracestate),
            (GATEWAY, None)
        );
        assert_eq!(params, json!({"sessionId": "s", "_meta": {"x": 1}}));
        assert_eq!(take_context_from_meta(&mut json!({"sessionId": "s"})), None);
    }

    #[test]
    fn acp_meta_carries_traceparent_and_tracestate_both_ways() {
        let mut params = json!({"sessionId": "s",
            "_meta": {"traceparent": GATEWAY, "tracestate": "corral=1", "x": 1}});
        let trace = take_context_from_meta(&mut params).unwrap();
        assert_eq!(trace.traceparent, GATEWAY);
        assert_eq!(trace.tracestate.as_deref(), Some("corral=1"));
        assert_eq!(params, json!({"sessionId": "s", "_meta": {"x": 1}}));
        let mut lone_state = json!({"_meta": {"tracestate": "a=b"}});
        assert_eq!(take_context_from_meta(&mut lone_state), None);
        let mut oversized =
            json!({"_meta": {"traceparent": GATEWAY, "tracestate": "x".repeat(600)}});
        assert_eq!(
            take_context_from_meta(&mut oversized).unwrap().tracestate,
            None
        );

        let mut update =
            json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s"}});
        put_in_meta(&mut update, &trace);
        assert_eq!(
            update["params"]["_meta"],
            json!({"traceparent": GATEWAY, "tracestate": "corral=1"})
        );
        let mut answer = json!({"jsonrpc": "2.0", "id": 1, "result": {}});
        put_in_meta(&mut answer, &trace);
        assert_eq!(answer, json!({"jsonrpc": "2.0", "id": 1, "result": {}}));
        let own = "00-11111111111111111111111111111111-2222222222222222-01";
        let mut traced = json!({"method": "m", "params": {"_meta": {"traceparent": own}}});
        put_in_meta(&mut traced, &trace);
        assert_eq!(traced["params"]["_meta"], json!({"traceparent": own}));
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
