//! A span processor that drops spans until it is given the real one: the
//! pipeline exists from the start of the process, the exporter's threads
//! only once the process is confined.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{BatchSpanProcessor, Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;

/// Forwards to the batch processor once [`Deferred::start`] set it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Deferred {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The resource the provider gave before the processor existed.
    resource: OnceLock<Resource>,
    batch: OnceLock<BatchSpanProcessor>,
}

impl Deferred {
    /// Installs the real processor; a second call is ignored.
    pub(crate) fn start(&self, mut batch: BatchSpanProcessor) {
        if let Some(resource) = self.inner.resource.get() {
            batch.set_resource(resource);
        }
        let _ = self.inner.batch.set(batch);
    }
}

impl SpanProcessor for Deferred {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        if let Some(batch) = self.inner.batch.get() {
            batch.on_start(span, cx);
        }
    }

    fn on_end(&self, span: SpanData) {
        if let Some(batch) = self.inner.batch.get() {
            batch.on_end(span);
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner
            .batch
            .get()
            .map_or(Ok(()), SpanProcessor::force_flush)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner
            .batch
            .get()
            .map_or(Ok(()), |batch| batch.shutdown_with_timeout(timeout))
    }

    fn set_resource(&mut self, resource: &Resource) {
        let _ = self.inner.resource.set(resource.clone());
    }
}
