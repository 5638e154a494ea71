use tracing_subscriber::layer::SubscriberExt;

use super::*;

const REMOTE: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The trace id and span id of a `traceparent`.
fn ids(traceparent: &str) -> (String, String) {
    let parts: Vec<&str> = traceparent.split('-').collect();
    (parts[1].to_string(), parts[2].to_string())
}

/// Runs `f` with a pipeline that is never started (nothing is sent).
fn with_pipeline(f: impl FnOnce()) {
    let (_telemetry, layer) = Telemetry::new("test", "http://127.0.0.1:9");
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, f);
}

#[test]
fn a_span_without_traceparent_starts_a_fresh_trace() {
    with_pipeline(|| {
        let span = tracing::info_span!(target: TARGET, "prompt");
        continue_trace(&span, None);
        let own = traceparent(&span).expect("an exported span has a context");
        let (trace, _) = ids(&own);
        assert_ne!(trace, ids(REMOTE).0);
        assert_ne!(trace, "0".repeat(32));
    });
}

#[test]
fn a_span_with_traceparent_joins_the_remote_trace() {
    with_pipeline(|| {
        let span = tracing::info_span!(target: TARGET, "prompt");
        continue_trace(&span, Some(REMOTE));
        let (trace, span_id) = ids(&traceparent(&span).expect("a context"));
        assert_eq!(trace, ids(REMOTE).0);
        assert_ne!(span_id, ids(REMOTE).1);
    });
}

#[test]
fn a_malformed_traceparent_is_ignored() {
    with_pipeline(|| {
        let span = tracing::info_span!(target: TARGET, "prompt");
        continue_trace(&span, Some("00-not-a-trace-01"));
        assert!(traceparent(&span).is_some());
    });
}

#[test]
fn spans_of_other_targets_are_not_exported() {
    with_pipeline(|| {
        let span = tracing::info_span!("request");
        assert_eq!(traceparent(&span), None);
    });
}

#[test]
fn the_endpoint_is_a_base_url() {
    assert_eq!(
        signal_url("http://127.0.0.1:4318/", "traces"),
        "http://127.0.0.1:4318/v1/traces"
    );
    assert_eq!(
        signal_url("http://collector/v1/traces", "traces"),
        "http://collector/v1/traces"
    );
    assert_eq!(
        signal_url("http://collector/v1/traces", "logs"),
        "http://collector/v1/logs"
    );
    assert_eq!(
        signal_url("http://collector:4318", "logs"),
        "http://collector:4318/v1/logs"
    );
}
