//! Token and cost accounting: one provider call's counters become the wire
//! `Usage`, and runs add up into the session total.

use corral_protocol::zut::Usage;

use crate::provider::catalogue::{self, ModelInfo};
use crate::provider::TokenUsage;

/// The wire counters of one model call, priced with the catalogue entry.
pub fn turn_usage(tokens: &TokenUsage, model: Option<&ModelInfo>) -> Usage {
    let (measured_prompt, measured_read) = if tokens.cache_reported {
        (
            tokens.input + tokens.cache_read + tokens.cache_write,
            tokens.cache_read,
        )
    } else {
        (0, 0)
    };
    Usage {
        input: tokens.input,
        output: tokens.output,
        reasoning: tokens.reasoning,
        cache_read: tokens.cache_read,
        cache_write: tokens.cache_write,
        cache_measured_prompt: measured_prompt,
        cache_measured_read: measured_read,
        cost_usd: catalogue::cost_usd(model, tokens),
    }
}

/// Adds one call's counters to a running total. `reasoning` stays `null`
/// until some call reports it.
pub fn accumulate(total: &mut Usage, turn: &Usage) {
    total.input += turn.input;
    total.output += turn.output;
    total.reasoning = match (total.reasoning, turn.reasoning) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    };
    total.cache_read += turn.cache_read;
    total.cache_write += turn.cache_write;
    total.cache_measured_prompt += turn.cache_measured_prompt;
    total.cache_measured_read += turn.cache_measured_read;
    total.cost_usd += turn.cost_usd;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_fields_count_only_reported_cache() {
        let reported = TokenUsage {
            input: 10,
            output: 5,
            reasoning: None,
            cache_read: 100,
            cache_write: 20,
            cache_reported: true,
        };
        let usage = turn_usage(&reported, None);
        assert_eq!(
            (usage.cache_measured_prompt, usage.cache_measured_read),
            (130, 100)
        );
        let silent = TokenUsage {
            cache_reported: false,
            ..reported
        };
        let usage = turn_usage(&silent, None);
        assert_eq!(
            (usage.cache_measured_prompt, usage.cache_measured_read),
            (0, 0)
        );
    }

    #[test]
    fn totals_add_up_and_reasoning_stays_null_until_reported() {
        let mut total = Usage::default();
        let a = Usage {
            input: 1,
            output: 2,
            cost_usd: 0.5,
            ..Usage::default()
        };
        accumulate(&mut total, &a);
        assert_eq!(total.reasoning, None);
        let b = Usage {
            reasoning: Some(7),
            ..a.clone()
        };
        accumulate(&mut total, &b);
        assert_eq!(
            (total.input, total.output, total.reasoning),
            (2, 4, Some(7))
        );
        assert!((total.cost_usd - 1.0).abs() < 1e-9);
    }
}
