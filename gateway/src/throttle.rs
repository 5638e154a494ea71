//! Limits failed authentication per source address without ever slowing
//! a token that works. Pure logic: the caller passes the time and the
//! check itself.
//!
//! Each source (an IPv4 address, or the /64 of an IPv6 one) has a
//! **failure budget**: a token bucket of `burst` units refilled at `rate`
//! per second. An attempt takes one unit *before* its token is checked
//! (so 1,000 parallel sockets get no more checks than one), and gets it
//! back if the token is right: a success never adds to the budget, it
//! only returns what it borrowed. With the budget empty, an attempt is
//! refused at once without being checked (`throttled`, with the time
//! until the next unit) — nothing sleeps, nothing queues.
//!
//! Each source also remembers the last [`ThrottlePolicy::remembered`]
//! credentials that succeeded from it, as keyed SHA-256 fingerprints
//! (HMAC with a key made at start, so they mean nothing outside the
//! process; never the token). An attempt whose token is one of them is
//! checked whatever the budget, so a client that was working from an
//! address keeps working while someone at the same address guesses.
//! Guessing there can only ever confirm a token already used from that
//! address, which the guesser would need to have guessed anyway.
//!
//! A *first* success from a source whose budget is empty is not possible
//! without an oracle: whatever tells a right token from a wrong one is a
//! check, and checks are what the budget counts (a deferred check that
//! remembers a right token for next time is an oracle in two requests).
//! So a new client at an address that is being flooded waits for the
//! budget like the flood does; `--proxy-listen` gives every client behind
//! a balancer its own address, and other addresses are never affected.
//!
//! An IPv6 client usually holds a whole /48 (65,536 /64s), so each /48
//! also has a budget of its own, [`PREFIX_FACTOR`] times the burst and the
//! rate of one source, that every attempt from inside it spends too: a
//! network cannot multiply its checks by the /64s it owns, nor churn the
//! table with them (a /48 with an empty budget makes no new entries).
//!
//! The table holds at most `max_sources` sources (about 400 bytes each
//! with a full set of fingerprints). To make room it first drops sources
//! whose budget has refilled and that remember nothing (they are as good
//! as new), then the eighth that was seen longest ago.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use ring::hmac;
use subtle::ConstantTimeEq;

use crate::auth::RandomError;

/// The throttle's numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottlePolicy {
    /// Failure units a source regains per second.
    pub rate: f64,
    /// Failure units a source has at most (and at first).
    pub burst: u32,
    /// Most sources remembered at once.
    pub max_sources: usize,
    /// Credentials remembered per source.
    pub remembered: usize,
}

/// Defaults of [`ThrottlePolicy`].
pub mod defaults {
    pub const RATE: f64 = 1.0;
    pub const BURST: u32 = 10;
    pub const MAX_SOURCES: usize = 10_000;
    pub const REMEMBERED: usize = 8;
}

impl Default for ThrottlePolicy {
    fn default() -> Self {
        ThrottlePolicy {
            rate: defaults::RATE,
            burst: defaults::BURST,
            max_sources: defaults::MAX_SOURCES,
            remembered: defaults::REMEMBERED,
        }
    }
}

/// What became of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checked<R> {
    /// The token is right. `remembered`: accepted with the source's
    /// budget empty, because the same credential succeeded there before.
    Accepted { value: R, remembered: bool },
    /// The token was checked and is wrong (one unit of the budget spent).
    Rejected,
    /// Refused without a check; the next unit comes after `retry_after`.
    Throttled { retry_after: Duration },
}

/// An IPv6 /48's budget, in sources' budgets: burst and rate of one /48
/// are this many times those of one source.
pub const PREFIX_FACTOR: u32 = 16;

/// What the table keeps a budget for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Key {
    /// One source ([`source_key`]).
    Source(IpAddr),
    /// The /48 around an IPv6 source.
    Prefix(IpAddr),
}

/// The keys an attempt from `ip` spends: its source, and for a (not
/// loopback) IPv6 address its /48.
fn keys(ip: IpAddr) -> (Key, Option<Key>) {
    let source = source_key(ip);
    let prefix = match source {
        IpAddr::V6(v6) if !v6.is_loopback() => {
            let bits = u128::from(v6) & !((1u128 << 80) - 1);
            Some(Key::Prefix(IpAddr::V6(bits.into())))
        }
        _ => None,
    };
    (Key::Source(source), prefix)
}

/// A keyed fingerprint of a presented token.
type Fingerprint = [u8; 32];

/// What the table knows of one source.
#[derive(Debug, Clone)]
struct Source {
    /// Units left, as of `updated`.
    level: f64,
    updated: Instant,
    /// Last attempt from it, for choosing whom to forget.
    last_seen: Instant,
    /// Credentials that succeeded from it, most recent first.
    known: Vec<Fingerprint>,
}

impl Source {
    fn new(policy: &ThrottlePolicy, now: Instant) -> Source {
        Source {
            level: f64::from(policy.burst),
            updated: now,
            last_seen: now,
            known: Vec::new(),
        }
    }

    /// Adds what `rate` gave back since the last update.
    fn refill(&mut self, policy: &ThrottlePolicy, now: Instant) {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.level = (self.level + elapsed * policy.rate).min(f64::from(policy.burst));
        self.updated = self.updated.max(now);
    }

    fn knows(&self, fingerprint: &Fingerprint) -> bool {
        self.known
            .iter()
            .any(|known| bool::from(known.ct_eq(fingerprint)))
    }

    fn remember(&mut self, fingerprint: Fingerprint, most: usize) {
        self.known
            .retain(|known| !bool::from(known.ct_eq(&fingerprint)));
        self.known.insert(0, fingerprint);
        self.known.truncate(most);
    }

    /// Whether forgetting it loses nothing.
    fn as_good_as_new(&self, policy: &ThrottlePolicy) -> bool {
        self.known.is_empty() && self.level >= f64::from(policy.burst)
    }
}

/// The per-source failure budgets.
pub struct AuthThrottle {
    policy: ThrottlePolicy,
    key: hmac::Key,
    sources: Mutex<HashMap<Key, Source>>,
}

impl std::fmt::Debug for AuthThrottle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthThrottle")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// The key of a source: an IPv4 address, or the /64 of an IPv6 one (a
/// single host usually holds a whole /64). Every loopback address
/// (`127.0.0.0/8`, `::1`, and their mapped forms) is one source: any
/// program on the host may connect from any of the 16 million addresses
/// of `127.0.0.0/8`, so keying them apart would give a tool on the
/// gateway's host a fresh budget per address.
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        loopback if loopback.is_loopback() => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V6(v6) => {
            let bits = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(bits.into())
        }
        v4 => v4,
    }
}

impl AuthThrottle {
    /// A throttle with a fresh fingerprint key from the system's random
    /// source.
    pub fn new(policy: ThrottlePolicy) -> Result<AuthThrottle, RandomError> {
        let mut key = [0u8; 32];
        crate::auth::random_bytes(&mut key)?;
        Ok(AuthThrottle {
            policy,
            key: hmac::Key::new(hmac::HMAC_SHA256, &key),
            sources: Mutex::new(HashMap::new()),
        })
    }

    pub fn policy(&self) -> &ThrottlePolicy {
        &self.policy
    }

    fn sources(&self) -> MutexGuard<'_, HashMap<Key, Source>> {
        self.sources.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn fingerprint(&self, token: &str) -> Fingerprint {
        let tag = hmac::sign(&self.key, token.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Checks `token` from `ip` at `now` with `check` (`Some` when right),
    /// if the source's budget or memory allows a check at all.
    pub fn check<R>(
        &self,
        ip: IpAddr,
        token: &str,
        now: Instant,
        check: impl FnOnce(&str) -> Option<R>,
    ) -> Checked<R> {
        let (source, prefix) = keys(ip);
        let fingerprint = self.fingerprint(token);
        // Take the units (or see that the credential is known) first, so
        // parallel attempts cannot all see the same unit. Nothing is added
        // to the table for an attempt that is refused.
        let (known, over_budget) = {
            let mut sources = self.sources();
            let known = sources
                .get(&source)
                .is_some_and(|entry| entry.knows(&fingerprint));
            let source_level = self.level(&mut sources, source, now);
            let prefix_level =
                prefix.map_or(f64::INFINITY, |key| self.level(&mut sources, key, now));
            let over_budget = source_level < 1.0 || prefix_level < 1.0;
            if !known {
                if over_budget {
                    let retry_after = self
                        .until_next_unit(source_level, source)
                        .max(self.until_next_unit(prefix_level, prefix.unwrap_or(source)));
                    return Checked::Throttled { retry_after };
                }
                for key in std::iter::once(source).chain(prefix) {
                    self.entry(&mut sources, key, now).level -= 1.0;
                }
            }
            (known, over_budget)
        };
        let value = check(token);
        let mut sources = self.sources();
        match value {
            Some(value) => {
                if !known {
                    // Only what this attempt borrowed.
                    for key in std::iter::once(source).chain(prefix) {
                        let burst = f64::from(self.policy_of(key).burst);
                        let entry = self.entry(&mut sources, key, now);
                        entry.level = (entry.level + 1.0).min(burst);
                    }
                }
                self.entry(&mut sources, source, now)
                    .remember(fingerprint, self.policy.remembered);
                Checked::Accepted {
                    value,
                    remembered: known && over_budget,
                }
            }
            None => {
                if known {
                    // A credential that worked here no longer does: it
                    // counts, but was checked already.
                    for key in std::iter::once(source).chain(prefix) {
                        let entry = self.entry(&mut sources, key, now);
                        entry.level = (entry.level - 1.0).max(0.0);
                    }
                }
                Checked::Rejected
            }
        }
    }

    /// The budget of `key` at `now` (a full one if it has no entry),
    /// refilled and marked seen.
    fn level(&self, sources: &mut HashMap<Key, Source>, key: Key, now: Instant) -> f64 {
        let policy = self.policy_of(key);
        match sources.get_mut(&key) {
            Some(entry) => {
                entry.refill(&policy, now);
                entry.last_seen = now;
                entry.level
            }
            None => f64::from(policy.burst),
        }
    }

    /// The numbers of `key`'s budget: a source's, or [`PREFIX_FACTOR`]
    /// times them for a /48.
    fn policy_of(&self, key: Key) -> ThrottlePolicy {
        match key {
            Key::Source(_) => self.policy,
            Key::Prefix(_) => ThrottlePolicy {
                rate: self.policy.rate * f64::from(PREFIX_FACTOR),
                burst: self.policy.burst.saturating_mul(PREFIX_FACTOR),
                ..self.policy
            },
        }
    }

    /// Sources whose budget is empty at `now` (for a gauge).
    pub fn throttled_sources(&self, now: Instant) -> usize {
        let policy = self.policy;
        let mut sources = self.sources();
        let mut throttled = 0;
        for (key, source) in sources.iter_mut() {
            if let Key::Source(_) = key {
                source.refill(&policy, now);
                throttled += usize::from(source.level < 1.0);
            }
        }
        throttled
    }

    /// Sources in the table.
    pub fn sources_len(&self) -> usize {
        self.sources().len()
    }

    /// Time until `key`'s budget, now at `level`, has a whole unit.
    fn until_next_unit(&self, level: f64, key: Key) -> Duration {
        let seconds = ((1.0 - level) / self.policy_of(key).rate).max(0.0);
        Duration::try_from_secs_f64(seconds).unwrap_or(Duration::MAX)
    }

    /// The source at `key`, made (room first) if new.
    fn entry<'a>(
        &self,
        sources: &'a mut HashMap<Key, Source>,
        key: Key,
        now: Instant,
    ) -> &'a mut Source {
        if !sources.contains_key(&key) && sources.len() >= self.policy.max_sources {
            self.make_room(sources, now);
        }
        sources
            .entry(key)
            .or_insert_with(|| Source::new(&self.policy_of(key), now))
    }

    /// Drops sources that are as good as new, then if need be the eighth
    /// seen longest ago.
    fn make_room(&self, sources: &mut HashMap<Key, Source>, now: Instant) {
        sources.retain(|key, source| {
            let policy = self.policy_of(*key);
            source.refill(&policy, now);
            !source.as_good_as_new(&policy)
        });
        if sources.len() < self.policy.max_sources {
            return;
        }
        let mut seen: Vec<Instant> = sources.values().map(|s| s.last_seen).collect();
        let cut = (seen.len() / 8).max(1);
        let (_, nth, _) = seen.select_nth_unstable(cut - 1);
        let oldest_kept = *nth;
        sources.retain(|_, s| s.last_seen > oldest_kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RIGHT: &str = "the-right-token-0123456789";
    const OTHER: &str = "another-right-token-0123456789";

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn throttle(rate: f64, burst: u32) -> AuthThrottle {
        AuthThrottle::new(ThrottlePolicy {
            rate,
            burst,
            ..ThrottlePolicy::default()
        })
        .unwrap()
    }

    /// The gateway's check: two right tokens.
    fn right(token: &str) -> Option<()> {
        (token == RIGHT || token == OTHER).then_some(())
    }

    fn attempt(t: &AuthThrottle, from: IpAddr, token: &str, at: Instant) -> Checked<()> {
        t.check(from, token, at, right)
    }

    fn accepted(remembered: bool) -> Checked<()> {
        Checked::Accepted {
            value: (),
            remembered,
        }
    }

    #[test]
    fn failures_spend_the_budget_then_are_refused_unchecked() {
        let t = throttle(1.0, 3);
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(attempt(&t, ip(1), "wrong", now), Checked::Rejected);
        }
        let mut checks = 0;
        let refused = t.check(ip(1), "wrong", now, |_| {
            checks += 1;
            None::<()>
        });
        assert_eq!(
            refused,
            Checked::Throttled {
                retry_after: ms(1000)
            }
        );
        assert_eq!(checks, 0, "a throttled attempt is not checked");
        // Half a unit later: still refused, half a second to go.
        let later = now + ms(500);
        assert_eq!(
            attempt(&t, ip(1), "wrong", later),
            Checked::Throttled {
                retry_after: ms(500)
            }
        );
        // One unit per second after that.
        assert_eq!(
            attempt(&t, ip(1), "wrong", now + ms(1000)),
            Checked::Rejected
        );
        assert!(matches!(
            attempt(&t, ip(1), "wrong", now + ms(1000)),
            Checked::Throttled { .. }
        ));
        // Other sources are not affected.
        assert_eq!(attempt(&t, ip(2), "wrong", now), Checked::Rejected);
        assert_eq!(t.throttled_sources(now + ms(1000)), 1);
    }

    fn v6(prefix48: u16, subnet: u16, host: u16) -> IpAddr {
        IpAddr::from([0x2001, 0xdb8, prefix48, subnet, 0, 0, 0, host])
    }

    #[test]
    fn the_64s_of_one_48_share_its_budget_and_make_no_entries_once_it_is_spent() {
        let t = throttle(1.0, 2);
        let now = Instant::now();
        let prefix_burst = 2 * PREFIX_FACTOR;
        // Each /64 checks its own burst, until the /48's is spent.
        let mut checked = 0;
        for subnet in 0..100 {
            for _ in 0..2 {
                if attempt(&t, v6(1, subnet, 1), "wrong", now) == Checked::Rejected {
                    checked += 1;
                }
            }
        }
        assert_eq!(checked, prefix_burst);
        let entries = t.sources_len();
        for subnet in 100..1000 {
            assert!(matches!(
                attempt(&t, v6(1, subnet, 1), "wrong", now),
                Checked::Throttled { .. }
            ));
        }
        assert_eq!(t.sources_len(), entries, "refused attempts add nothing");
        // Another /48 has its own; a credential that worked inside the
        // spent one still passes.
        assert_eq!(attempt(&t, v6(2, 0, 1), "wrong", now), Checked::Rejected);
        let t = throttle(1.0, 2);
        assert_eq!(attempt(&t, v6(3, 7, 1), RIGHT, now), accepted(false));
        for subnet in 0..100 {
            attempt(&t, v6(3, subnet, 2), "wrong", now);
        }
        assert_eq!(attempt(&t, v6(3, 7, 1), RIGHT, now), accepted(true));
        // The /48 refills PREFIX_FACTOR times as fast as a source.
        let later = now + Duration::from_secs(1);
        let mut checked = 0;
        for subnet in 200..300 {
            if attempt(&t, v6(3, subnet, 1), "wrong", later) == Checked::Rejected {
                checked += 1;
            }
        }
        assert_eq!(checked, PREFIX_FACTOR);
    }

    #[test]
    fn a_credential_that_worked_from_a_source_passes_its_empty_budget() {
        let t = throttle(1.0, 3);
        let now = Instant::now();
        assert_eq!(attempt(&t, ip(1), RIGHT, now), accepted(false));
        for _ in 0..3 {
            assert_eq!(attempt(&t, ip(1), "wrong", now), Checked::Rejected);
        }
        for _ in 0..30 {
            assert_eq!(attempt(&t, ip(1), RIGHT, now), accepted(true));
        }
        // A right token never used from here waits like any other.
        assert!(matches!(
            attempt(&t, ip(1), OTHER, now),
            Checked::Throttled { .. }
        ));
        // What worked from one source does not pass another's budget.
        for _ in 0..3 {
            attempt(&t, ip(2), "wrong", now);
        }
        assert!(matches!(
            attempt(&t, ip(2), RIGHT, now),
            Checked::Throttled { .. }
        ));
    }

    #[test]
    fn successes_never_raise_the_number_of_checked_failures() {
        // Interleaving a right token with wrong ones, at any ratio: over
        // ten seconds at most burst + rate × 10 wrong ones are checked.
        let t = throttle(2.0, 5);
        let start = Instant::now();
        let mut checked_failures = 0;
        for step in 0..10_000u64 {
            let at = start + ms(step);
            let token = if step % 3 == 0 { RIGHT } else { "wrong" };
            if attempt(&t, ip(1), token, at) == Checked::Rejected {
                checked_failures += 1;
            }
        }
        assert!(checked_failures <= 5 + 2 * 10, "{checked_failures}");
        assert!(checked_failures >= 20, "{checked_failures}");
        // A first success borrows a unit and gives back only that one.
        let t = throttle(1.0, 2);
        assert_eq!(attempt(&t, ip(1), OTHER, start), accepted(false));
        assert_eq!(attempt(&t, ip(1), "wrong", start), Checked::Rejected);
        assert_eq!(attempt(&t, ip(1), "wrong", start), Checked::Rejected);
        assert!(matches!(
            attempt(&t, ip(1), "wrong", start),
            Checked::Throttled { .. }
        ));
    }

    #[test]
    fn parallel_attempts_share_one_budget() {
        // Checks that overlap (each holds its unit while it runs) cannot
        // see the same unit twice.
        let t = throttle(1.0, 3);
        let now = Instant::now();
        let mut inner = Vec::new();
        let outer = t.check(ip(1), "wrong", now, |_| {
            for _ in 0..5 {
                inner.push(attempt(&t, ip(1), "wrong", now));
            }
            None::<()>
        });
        assert_eq!(outer, Checked::Rejected);
        let rejected = inner.iter().filter(|c| **c == Checked::Rejected).count();
        assert_eq!(rejected, 2, "{inner:?}");
    }

    #[test]
    fn remembered_credentials_are_bounded_per_source() {
        let policy = ThrottlePolicy {
            rate: 1.0,
            burst: 20,
            remembered: 2,
            ..ThrottlePolicy::default()
        };
        let t = AuthThrottle::new(policy).unwrap();
        let tokens = ["token-a", "token-b", "token-c"];
        let check = |token: &str| tokens.contains(&token).then_some(());
        let now = Instant::now();
        for token in tokens {
            assert!(matches!(
                t.check(ip(1), token, now, check),
                Checked::Accepted { .. }
            ));
        }
        for _ in 0..20 {
            t.check(ip(1), "wrong", now, check);
        }
        // The two most recent are remembered, the first is not.
        for (token, remembered) in [("token-c", true), ("token-b", true), ("token-a", false)] {
            let accepted = matches!(t.check(ip(1), token, now, check), Checked::Accepted { .. });
            assert_eq!(accepted, remembered, "{token}");
        }
    }

    #[test]
    fn the_table_is_bounded_and_keeps_what_matters() {
        let policy = ThrottlePolicy {
            rate: 1.0,
            burst: 1,
            max_sources: 16,
            ..ThrottlePolicy::default()
        };
        let t = AuthThrottle::new(policy).unwrap();
        let now = Instant::now();
        for n in 0..=255u8 {
            attempt(&t, ip(n), "wrong", now + ms(u64::from(n)));
            assert!(t.sources_len() <= 16);
        }
        // The newest sources are the ones kept: still out of budget.
        assert!(matches!(
            attempt(&t, ip(255), "wrong", now + ms(255)),
            Checked::Throttled { .. }
        ));
        // Sources whose budget refilled are dropped first.
        let later = now + Duration::from_secs(60);
        attempt(&t, IpAddr::from([10, 0, 1, 1]), "wrong", later);
        assert_eq!(t.sources_len(), 1);
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

    #[test]
    fn every_loopback_address_is_one_source() {
        let one = source_key(IpAddr::from([127, 0, 0, 1]));
        for addr in [
            "127.0.0.2",
            "127.1.2.3",
            "127.255.255.254",
            "::1",
            "::ffff:127.0.0.9",
        ] {
            let addr: IpAddr = addr.parse().unwrap();
            assert_eq!(source_key(addr), one, "{addr}");
        }
        assert_ne!(source_key(ip(1)), one);
        // And so it shares one budget.
        let t = throttle(0.001, 2);
        let now = Instant::now();
        for last in 1..=2 {
            let addr = IpAddr::from([127, 0, 0, last]);
            assert_eq!(attempt(&t, addr, "wrong", now), Checked::Rejected);
        }
        assert!(matches!(
            attempt(&t, IpAddr::from([127, 0, 0, 3]), "wrong", now),
            Checked::Throttled { .. }
        ));
        assert!(matches!(
            attempt(&t, "::1".parse().unwrap(), "wrong", now),
            Checked::Throttled { .. }
        ));
    }
}
