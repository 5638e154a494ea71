//! The model catalogue: context window, output limit, reasoning support and
//! prices of the models each provider knows, the token counters of one
//! model call ([`TokenUsage`]) and what they cost ([`cost_usd`]).
//!
//! Shared by the agent (which shows a run's cost) and the gateway (whose
//! model broker prices the usage a provider reports, for budgets), so both
//! put the same price on the same call. Prices are the providers' public
//! list prices (USD per million tokens) at the time of writing; they are
//! estimates, not invoices. A model missing here is priced 0.

/// Token counts of one model call, as the backend reported them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Uncached prompt tokens.
    pub input: u64,
    pub output: u64,
    /// Reasoning tokens, when the backend reports them separately.
    pub reasoning: Option<u64>,
    pub cache_read: u64,
    pub cache_write: u64,
    /// Whether the backend reported cache counters at all (the spec's
    /// "measured" cache fields only count calls where it did).
    pub cache_reported: bool,
}

/// What we know about one model.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ModelInfo {
    pub id: &'static str,
    pub provider: &'static str,
    pub context_window: u64,
    pub max_output: u64,
    /// Whether the model accepts a reasoning/thinking setting.
    pub reasoning: bool,
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    pub cache_read_per_mtok: f64,
    pub cache_write_per_mtok: f64,
}

#[allow(clippy::too_many_arguments)]
const fn model(
    provider: &'static str,
    id: &'static str,
    context_window: u64,
    max_output: u64,
    reasoning: bool,
    input_per_mtok: f64,
    output_per_mtok: f64,
    cache_read_per_mtok: f64,
    cache_write_per_mtok: f64,
) -> ModelInfo {
    ModelInfo {
        id,
        provider,
        context_window,
        max_output,
        reasoning,
        input_per_mtok,
        output_per_mtok,
        cache_read_per_mtok,
        cache_write_per_mtok,
    }
}

const A: &str = "anthropic";
const O: &str = "openai";

// One row per model: provider, id, context window, max output, reasoning,
// then USD per million tokens: input, output, cache read, cache write.
#[rustfmt::skip]
static MODELS: &[ModelInfo] = &[
    model(A, "claude-opus-4-5",   200_000, 64_000, true,  5.0,  25.0, 0.50, 6.25),
    model(A, "claude-sonnet-4-5", 200_000, 64_000, true,  3.0,  15.0, 0.30, 3.75),
    model(A, "claude-haiku-4-5",  200_000, 64_000, true,  1.0,  5.0,  0.10, 1.25),
    model(A, "claude-opus-4-1",   200_000, 32_000, true,  15.0, 75.0, 1.50, 18.75),
    model(A, "claude-sonnet-4",   200_000, 64_000, true,  3.0,  15.0, 0.30, 3.75),
    model(A, "claude-3-5-haiku",  200_000, 8_192,  false, 0.80, 4.0,  0.08, 1.00),
    // OpenAI caches automatically and does not charge for cache writes.
    model(O, "gpt-5",        400_000,   128_000, true,  1.25, 10.0, 0.125, 0.0),
    model(O, "gpt-5-mini",   400_000,   128_000, true,  0.25, 2.0,  0.025, 0.0),
    model(O, "gpt-5-nano",   400_000,   128_000, true,  0.05, 0.40, 0.005, 0.0),
    model(O, "gpt-4.1",      1_047_576, 32_768,  false, 2.0,  8.0,  0.50,  0.0),
    model(O, "gpt-4.1-mini", 1_047_576, 32_768,  false, 0.40, 1.60, 0.10,  0.0),
    model(O, "gpt-4o",       128_000,   16_384,  false, 2.50, 10.0, 1.25,  0.0),
    model(O, "gpt-4o-mini",  128_000,   16_384,  false, 0.15, 0.60, 0.075, 0.0),
    model(O, "o3",           200_000,   100_000, true,  2.0,  8.0,  0.50,  0.0),
    model(O, "o4-mini",      200_000,   100_000, true,  1.10, 4.40, 0.275, 0.0),
    model("echo", "echo", 1_000_000, 100_000, false, 0.0, 0.0, 0.0, 0.0),
];

/// The models known for `provider` (none for an unknown provider).
pub fn models(provider: &str) -> impl Iterator<Item = &'static ModelInfo> + '_ {
    MODELS.iter().filter(move |m| m.provider == provider)
}

/// Looks a model up by exact id, or by a dated/aliased id such as
/// `claude-sonnet-4-5-20250929`, `gpt-4.1-2025-04-14` or
/// `claude-3-5-haiku-latest` (the longest catalogue id that is a prefix,
/// followed by `-` and a date or `latest`).
pub fn find(provider: &str, id: &str) -> Option<&'static ModelInfo> {
    if let Some(exact) = models(provider).find(|m| m.id == id) {
        return Some(exact);
    }
    models(provider)
        .filter(|m| {
            id.strip_prefix(m.id)
                .and_then(|rest| rest.strip_prefix('-'))
                .is_some_and(is_version_suffix)
        })
        .max_by_key(|m| m.id.len())
}

fn is_version_suffix(rest: &str) -> bool {
    rest == "latest" || (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit() || b == b'-'))
}

/// The model used when `--model` is not given (empty for an unknown provider).
pub fn default_model(provider: &str) -> &'static str {
    match provider {
        "anthropic" => "claude-sonnet-4-5",
        "openai" => "gpt-5",
        "echo" => "echo",
        _ => "",
    }
}

/// Estimated cost of one call in USD; 0 for a model not in the catalogue.
///
/// Reasoning tokens are billed as output tokens. Both backends already count
/// them inside `usage.output` (Anthropic's `output_tokens` includes thinking,
/// OpenAI's `completion_tokens` includes `reasoning_tokens`), so
/// `usage.reasoning` is informational and not added again.
pub fn cost_usd(info: Option<&ModelInfo>, usage: &TokenUsage) -> f64 {
    let Some(info) = info else {
        return 0.0;
    };
    let per_token = |count: u64, per_mtok: f64| count as f64 * per_mtok / 1_000_000.0;
    per_token(usage.input, info.input_per_mtok)
        + per_token(usage.output, info.output_per_mtok)
        + per_token(usage.cache_read, info.cache_read_per_mtok)
        + per_token(usage.cache_write, info.cache_write_per_mtok)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_in_the_catalogue() {
        for provider in ["anthropic", "openai", "echo"] {
            let id = default_model(provider);
            assert_eq!(find(provider, id).unwrap().id, id);
        }
        assert_eq!(models("nope").count(), 0);
        assert_eq!(models("anthropic").count(), 6);
        assert_eq!(models("openai").count(), 9);
    }

    #[test]
    fn dated_ids_match_the_longest_prefix() {
        let m = find("anthropic", "claude-sonnet-4-5-20250929").unwrap();
        assert_eq!(m.id, "claude-sonnet-4-5");
        assert_eq!(
            find("anthropic", "claude-sonnet-4-20250514").unwrap().id,
            "claude-sonnet-4"
        );
        assert_eq!(
            find("anthropic", "claude-3-5-haiku-latest").unwrap().id,
            "claude-3-5-haiku"
        );
        assert_eq!(find("openai", "gpt-4.1-2025-04-14").unwrap().id, "gpt-4.1");
        assert_eq!(
            find("openai", "gpt-4o-mini-2024-07-18").unwrap().id,
            "gpt-4o-mini"
        );
        assert!(find("openai", "gpt-4.1-nano").is_none());
        assert!(find("openai", "claude-sonnet-4-5").is_none());
        assert!(find("anthropic", "claude-sonnet-4-5x").is_none());
    }

    #[test]
    fn cost_counts_every_bucket_once() {
        let usage = TokenUsage {
            input: 1_000_000,
            output: 100_000,
            reasoning: Some(50_000),
            cache_read: 2_000_000,
            cache_write: 1_000_000,
            cache_reported: true,
        };
        let sonnet = find("anthropic", "claude-sonnet-4-5");
        let cost = cost_usd(sonnet, &usage);
        assert!((cost - (3.0 + 1.5 + 0.6 + 3.75)).abs() < 1e-9, "{cost}");
        assert_eq!(cost_usd(None, &usage), 0.0);
        assert_eq!(cost_usd(find("echo", "echo"), &usage), 0.0);
    }
}
