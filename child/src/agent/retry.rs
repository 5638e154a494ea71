//! Retry policy for provider requests: exponential backoff with jitter,
//! honouring the provider's `retry-after` within a cap.

use std::time::Duration;

/// How many attempts one model call gets, the first included.
pub const MAX_ATTEMPTS: u32 = 4;
/// Delay before the second attempt when the provider gives no hint.
pub const BASE_DELAY: Duration = Duration::from_millis(500);
/// No single wait is longer than this, whatever the provider asks.
pub const MAX_DELAY: Duration = Duration::from_secs(60);

/// The wait before attempt `next_attempt` (2 for the first retry).
/// `jitter` is a number in `[0, 1)`; it spreads computed delays by ±20 %.
pub fn delay(next_attempt: u32, retry_after: Option<Duration>, jitter: f64) -> Duration {
    if let Some(hint) = retry_after {
        return hint.min(MAX_DELAY);
    }
    let exponent = next_attempt.saturating_sub(2).min(16);
    let base = BASE_DELAY.saturating_mul(1u32 << exponent);
    let factor = 0.8 + 0.4 * jitter.clamp(0.0, 1.0);
    base.mul_f64(factor).min(MAX_DELAY)
}

/// A cheap jitter source: the sub-second part of the clock. Good enough to
/// keep many children from retrying in lockstep.
pub fn jitter() -> f64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    f64::from(nanos % 1_000_000) / 1_000_000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_exponentially_within_jitter_bounds() {
        assert_eq!(delay(2, None, 0.5), Duration::from_millis(500));
        assert_eq!(delay(3, None, 0.5), Duration::from_millis(1000));
        assert_eq!(delay(4, None, 0.5), Duration::from_millis(2000));
        assert_eq!(delay(2, None, 0.0), Duration::from_millis(400));
        assert!(delay(2, None, 0.999) < Duration::from_millis(600));
        assert_eq!(delay(40, None, 1.0), MAX_DELAY);
    }

    #[test]
    fn honours_retry_after_up_to_the_cap() {
        assert_eq!(
            delay(2, Some(Duration::from_secs(3)), 0.9),
            Duration::from_secs(3)
        );
        assert_eq!(delay(2, Some(Duration::from_secs(0)), 0.9), Duration::ZERO);
        assert_eq!(delay(2, Some(Duration::from_secs(3600)), 0.9), MAX_DELAY);
    }
}
