//! Charges a brokered model call to its budgets: a [`Tap`] reads the
//! usage in the provider's answer as it passes, the catalogue prices it
//! (a model it does not know costs $0, counted and logged once), and each
//! increase is charged at once to the project and to the identity whose
//! run it is. What was read when the answer ends, or is dropped half-way
//! (an aborted run), is charged too: the provider bills it.

use std::sync::Arc;

use corral_protocol::catalogue;
use serde::Deserialize;

use super::tap::{Api, Framing, Tap};
use super::upstream::Provider;
use crate::spend::{Ledger, Payer, Source};

/// The usage of one brokered call, charged as it is read.
pub struct Meter {
    tap: Tap,
    provider: Provider,
    /// The model the request named, for an answer that names none.
    requested: Option<String>,
    project: String,
    payer: Option<Payer>,
    ledger: Arc<Ledger>,
    /// What this call was charged so far.
    charged_usd: f64,
    /// The model was found unpriced (noted once per call).
    unpriced: bool,
}

/// What a metered request says of itself.
pub struct Call {
    pub provider: Provider,
    pub api: Api,
    pub requested: Option<String>,
    pub project: String,
    pub payer: Option<Payer>,
}

/// The `model` a request body names, if it is JSON with one.
pub fn requested_model(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Named {
        model: Option<String>,
    }
    serde_json::from_slice::<Named>(body).ok()?.model
}

impl Meter {
    /// A meter for an answer with `content_type`; `None` when there is
    /// nothing to read (not JSON nor an event stream).
    pub fn new(call: Call, content_type: &str, ledger: Arc<Ledger>) -> Option<Meter> {
        let framing = Framing::of_content_type(content_type)?;
        Some(Meter {
            tap: Tap::new(call.api, framing),
            provider: call.provider,
            requested: call.requested,
            project: call.project,
            payer: call.payer,
            ledger,
            charged_usd: 0.0,
            unpriced: false,
        })
    }

    /// Reads a copy of a chunk passing to the agent.
    pub fn observe(&mut self, chunk: &[u8]) {
        if self.tap.feed(chunk) {
            self.settle();
        }
    }

    /// Charges what the usage read so far costs beyond what was charged.
    fn settle(&mut self) {
        let Some(usage) = self.tap.usage() else {
            return;
        };
        let model = self
            .tap
            .model()
            .or(self.requested.as_deref())
            .unwrap_or_default();
        let info = catalogue::find(self.provider.label(), model);
        if info.is_none() && !self.unpriced {
            self.unpriced = true;
            self.ledger.unpriced(self.provider.label(), model);
        }
        let cost = catalogue::cost_usd(info, usage);
        let more = cost - self.charged_usd;
        if more > 0.0 {
            self.charged_usd = cost;
            self.ledger
                .charge(&self.project, self.payer.as_ref(), Source::Broker, more);
        }
    }
}

impl Drop for Meter {
    fn drop(&mut self) {
        if self.tap.finish() {
            self.settle();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Metrics;
    use crate::spend::Scope;

    fn call(payer: Option<Payer>) -> Call {
        Call {
            provider: Provider::Anthropic,
            api: Api::Messages,
            requested: Some("claude-sonnet-4-5".into()),
            project: "alpha".into(),
            payer,
        }
    }

    #[test]
    fn a_call_is_charged_as_its_usage_is_read() {
        let ledger = Arc::new(Ledger::detached(None, Arc::new(Metrics::new().unwrap())));
        let payer = Payer {
            name: "alice".into(),
            budget_usd: None,
        };
        let mut meter = Meter::new(call(Some(payer)), "text/event-stream", ledger.clone()).unwrap();
        // 1M input tokens of claude-sonnet-4-5: $3; the answer names no model.
        meter.observe(b"data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1000000}}}\n");
        assert!((ledger.view(Scope::Project, "alpha").spent_usd - 3.0).abs() < 1e-9);
        // 100k output tokens: $1.50 more, charged when the stream is dropped.
        meter.observe(b"data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":100000}}");
        drop(meter);
        assert!((ledger.view(Scope::Project, "alpha").spent_usd - 4.5).abs() < 1e-9);
        assert!((ledger.view(Scope::Identity, "alice").spent_usd - 4.5).abs() < 1e-9);
    }

    #[test]
    fn an_unknown_model_costs_nothing_and_is_counted() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let ledger = Arc::new(Ledger::detached(None, metrics.clone()));
        let mut unknown = call(None);
        unknown.requested = Some("claude-next".into());
        let mut meter = Meter::new(unknown, "application/json", ledger.clone()).unwrap();
        meter.observe(br#"{"usage":{"input_tokens":5,"output_tokens":5}}"#);
        drop(meter);
        assert_eq!(ledger.view(Scope::Project, "alpha").total_usd, 0.0);
        assert_eq!(metrics.budget_unpriced_calls.get(), 1);
        assert!(Meter::new(call(None), "text/plain", ledger).is_none());
    }

    #[test]
    fn the_request_names_its_model() {
        assert_eq!(
            requested_model(br#"{"max_tokens":10,"model":"gpt-5","messages":[]}"#).as_deref(),
            Some("gpt-5")
        );
        assert_eq!(requested_model(b"not json"), None);
        assert_eq!(requested_model(br#"{"model":7}"#), None);
    }
}
