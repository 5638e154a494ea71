//! Slows failed authentication per source address. Pure logic (the
//! caller passes the time and does the sleeping).
//!
//! A source's first [`ThrottlePolicy::free_failures`] failures cost
//! nothing. After that every attempt from it waits before its token is
//! checked: `base`, doubling with each further failure, capped at `max`.
//! Attempts from one source take turns, so parallel connections do not
//! multiply its rate; one that would wait longer than `max` is refused
//! without a check. A success forgets the source. Other sources are never
//! affected. The table holds at most `max_sources` sources, each
//! forgotten `forget_after` its last failure.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// The throttle's numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThrottlePolicy {
    /// Failures a source may have before its attempts wait.
    pub free_failures: u32,
    /// Wait after `free_failures` failures.
    pub base: Duration,
    /// Longest wait (and longest queue of one source).
    pub max: Duration,
    /// A source without a failure for this long is forgotten.
    pub forget_after: Duration,
    /// Most sources remembered at once.
    pub max_sources: usize,
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        ThrottlePolicy {
            free_failures: 5,
            base: Duration::from_millis(100),
            max: Duration::from_secs(5),
            forget_after: Duration::from_secs(600),
            max_sources: 10_000,
        }
    }
}

impl ThrottlePolicy {
    /// The wait of an attempt from a source with `failures` failures.
    pub fn delay(&self, failures: u32) -> Duration {
        if failures < self.free_failures {
            return Duration::ZERO;
        }
        let doublings = (failures - self.free_failures).min(31);
        self.base.saturating_mul(1 << doublings).min(self.max)
    }
}

/// What an attempt must do before its token is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    /// Check it now.
    Now,
    /// Wait this long, then check it.
    After(Duration),
    /// Too many attempts queued from this source: refuse without a check.
    Refused,
}

/// What the table knows of one source.
#[derive(Debug, Clone, Copy)]
struct Source {
    failures: u32,
    /// The source's attempts are checked one after another: the next one
    /// is checked no earlier than this.
    busy_until: Instant,
    last_failure: Instant,
}

/// The per-source failure table.
#[derive(Debug)]
pub struct AuthThrottle {
    policy: ThrottlePolicy,
    sources: Mutex<HashMap<IpAddr, Source>>,
}

/// The key of a source: an IPv4 address, or the /64 of an IPv6 one (a
/// single host usually holds a whole /64).
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

impl AuthThrottle {
    pub fn new(policy: ThrottlePolicy) -> AuthThrottle {
        AuthThrottle {
            policy,
            sources: Mutex::new(HashMap::new()),
        }
    }

    fn sources(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, Source>> {
        self.sources.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether and when an attempt from `ip` arriving at `now` is checked.
    pub fn admit(&self, ip: IpAddr, now: Instant) -> Admission {
        let mut sources = self.sources();
        let Some(source) = sources.get_mut(&source_key(ip)) else {
            return Admission::Now;
        };
        if now.duration_since(source.last_failure) >= self.policy.forget_after {
            sources.remove(&source_key(ip));
            return Admission::Now;
        }
        let delay = self.policy.delay(source.failures);
        if delay.is_zero() {
            return Admission::Now;
        }
        let start = source.busy_until.max(now);
        let check_at = start + delay;
        let wait = check_at.duration_since(now);
        if wait > self.policy.max {
            return Admission::Refused;
        }
        source.busy_until = check_at;
        Admission::After(wait)
    }

    /// Records a failed attempt from `ip` at `now`.
    pub fn failed(&self, ip: IpAddr, now: Instant) {
        let key = source_key(ip);
        let mut sources = self.sources();
        if !sources.contains_key(&key) && sources.len() >= self.policy.max_sources {
            self.make_room(&mut sources, now);
        }
        let source = sources.entry(key).or_insert(Source {
            failures: 0,
            busy_until: now,
            last_failure: now,
        });
        source.failures = source.failures.saturating_add(1);
        source.last_failure = now;
    }

    /// Forgets `ip` after a successful authentication.
    pub fn succeeded(&self, ip: IpAddr) {
        self.sources().remove(&source_key(ip));
    }

    /// Sources whose attempts currently wait (for a gauge).
    pub fn throttled_sources(&self) -> usize {
        let free = self.policy.free_failures;
        self.sources()
            .values()
            .filter(|s| s.failures >= free)
            .count()
    }

    /// Drops forgotten sources, then the eighth with the oldest failures.
    fn make_room(&self, sources: &mut HashMap<IpAddr, Source>, now: Instant) {
        let forget = self.policy.forget_after;
        sources.retain(|_, s| now.duration_since(s.last_failure) < forget);
        if sources.len() < self.policy.max_sources {
            return;
        }
        let mut ages: Vec<Instant> = sources.values().map(|s| s.last_failure).collect();
        let cut = (ages.len() / 8).max(1);
        let (_, nth, _) = ages.select_nth_unstable(cut - 1);
        let oldest_kept = *nth;
        sources.retain(|_, s| s.last_failure > oldest_kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn delays_double_up_to_the_cap() {
        let p = ThrottlePolicy::default();
        assert_eq!(p.delay(0), Duration::ZERO);
        assert_eq!(p.delay(4), Duration::ZERO);
        assert_eq!(p.delay(5), ms(100));
        assert_eq!(p.delay(6), ms(200));
        assert_eq!(p.delay(9), ms(1600));
        assert_eq!(p.delay(11), Duration::from_secs(5));
        assert_eq!(p.delay(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn failures_slow_only_their_source_until_a_success() {
        let t = AuthThrottle::new(ThrottlePolicy::default());
        let now = Instant::now();
        for _ in 0..5 {
            assert_eq!(t.admit(ip(1), now), Admission::Now);
            t.failed(ip(1), now);
        }
        assert_eq!(t.admit(ip(1), now), Admission::After(ms(100)));
        t.failed(ip(1), now + ms(100));
        assert_eq!(t.admit(ip(1), now + ms(100)), Admission::After(ms(200)));
        assert_eq!(t.admit(ip(2), now), Admission::Now);
        assert_eq!(t.throttled_sources(), 1);
        t.succeeded(ip(1));
        assert_eq!(t.admit(ip(1), now + ms(300)), Admission::Now);
    }

    #[test]
    fn parallel_attempts_take_turns_and_a_long_queue_is_refused() {
        let t = AuthThrottle::new(ThrottlePolicy::default());
        let now = Instant::now();
        for _ in 0..8 {
            t.failed(ip(1), now);
        }
        // 8 failures: 800 ms each, one after another.
        assert_eq!(t.admit(ip(1), now), Admission::After(ms(800)));
        assert_eq!(t.admit(ip(1), now), Admission::After(ms(1600)));
        for _ in 0..4 {
            t.admit(ip(1), now);
        }
        assert_eq!(t.admit(ip(1), now), Admission::Refused);
    }

    #[test]
    fn sources_are_forgotten_and_bounded() {
        let policy = ThrottlePolicy {
            max_sources: 16,
            ..ThrottlePolicy::default()
        };
        let t = AuthThrottle::new(policy);
        let now = Instant::now();
        for _ in 0..6 {
            t.failed(ip(1), now);
        }
        let later = now + policy.forget_after;
        assert_eq!(t.admit(ip(1), later), Admission::Now);
        for n in 0..=255u8 {
            t.failed(ip(n), now + ms(u64::from(n)));
            assert!(t.sources().len() <= 16);
        }
        // The newest sources are the ones kept.
        assert!(t.sources().contains_key(&ip(255)));
    }

    #[test]
    fn ipv6_sources_are_their_64() {
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(source_key(a), source_key(b));
        assert_ne!(source_key(a), source_key(c));
        let mapped: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(source_key(mapped), ip(1));
    }
}
