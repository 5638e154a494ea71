//! `--max-prompts-per-minute`: how many runs one identity may start per
//! minute, over all its connections and projects, so one credential (a
//! leaked one, a script in a loop) cannot keep every agent busy. A token
//! bucket per identity key: `per_minute` prompts at once, refilled evenly
//! over the minute. Pure: the caller passes the time.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Most identities remembered; beyond, those whose bucket is full again
/// are forgotten first (they are as good as new), then, if every one is
/// still counting, the eighth that prompted longest ago (each then gets a
/// fresh minute: a bounded leniency, where an unbounded table would be a
/// way to exhaust the gateway's memory with many JWT subjects).
const MAX_IDENTITIES: usize = 100_000;

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Prompts per identity per minute.
#[derive(Debug)]
pub struct PromptRate {
    per_minute: u32,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl PromptRate {
    /// `per_minute` prompts per identity; 0 = unlimited.
    pub fn new(per_minute: u32) -> PromptRate {
        PromptRate {
            per_minute,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    pub fn per_minute(&self) -> u32 {
        self.per_minute
    }

    /// Takes one prompt of `key`'s budget at `now`, or says how long until
    /// one is there.
    pub fn take(&self, key: &str, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let capacity = f64::from(self.per_minute);
        let per_sec = capacity / 60.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(PoisonError::into_inner);
        if buckets.len() >= MAX_IDENTITIES && !buckets.contains_key(key) {
            buckets.retain(|_, b| {
                b.tokens + now.saturating_duration_since(b.at).as_secs_f64() * per_sec < capacity
            });
            if buckets.len() >= MAX_IDENTITIES {
                forget_oldest_eighth(&mut buckets);
            }
        }
        let bucket = buckets.entry(key.to_string()).or_insert(Bucket {
            tokens: capacity,
            at: now,
        });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * per_sec;
        bucket.tokens = (bucket.tokens + refill).min(capacity);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        Err(Duration::from_secs_f64((1.0 - bucket.tokens) / per_sec))
    }
}

/// Forgets the eighth of `buckets` used longest ago.
fn forget_oldest_eighth(buckets: &mut HashMap<String, Bucket>) {
    let mut times: Vec<Instant> = buckets.values().map(|b| b.at).collect();
    let eighth = (times.len() / 8).max(1);
    let (_, cutoff, _) = times.select_nth_unstable(eighth - 1);
    let cutoff = *cutoff;
    let mut left = eighth;
    buckets.retain(|_, b| {
        let forget = left > 0 && b.at <= cutoff;
        left -= usize::from(forget);
        !forget
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_identity_has_its_own_minute() {
        let rate = PromptRate::new(3);
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(rate.take("managed:a", t0).is_ok());
        }
        let wait = rate.take("managed:a", t0).unwrap_err();
        assert_eq!(wait.as_secs(), 20);
        // Another identity is not affected.
        assert!(rate.take("managed:b", t0).is_ok());
        // A third of a minute brings one back.
        assert!(rate.take("managed:a", t0 + Duration::from_secs(20)).is_ok());
        assert!(rate
            .take("managed:a", t0 + Duration::from_secs(20))
            .is_err());
        // Unlimited.
        let open = PromptRate::new(0);
        for _ in 0..1000 {
            assert!(open.take("x", t0).is_ok());
        }
    }

    /// The table stays within its bound when every identity in it is
    /// still counting (none is as good as new to forget).
    #[test]
    fn the_table_is_bounded_when_every_identity_is_busy() {
        let rate = PromptRate::new(1);
        let t0 = Instant::now();
        for i in 0..=MAX_IDENTITIES + 10 {
            assert!(rate.take(&format!("jwt:user-{i}"), t0).is_ok());
        }
        let held = rate.buckets.lock().unwrap().len();
        assert!(held <= MAX_IDENTITIES, "{held} identities held");
        // The latest identities are still counted.
        let latest = format!("jwt:user-{}", MAX_IDENTITIES + 10);
        assert!(rate.take(&latest, t0).is_err());
    }
}
