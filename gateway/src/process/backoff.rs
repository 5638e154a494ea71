//! Restart policy, pure (no I/O, no clock): how long to wait before
//! restarting a crashed child, and when a crash loop marks it failed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// When and how often a crashed child is restarted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Delay after the first crash; doubles with each further recent crash.
    pub base: Duration,
    /// Longest delay between restarts.
    pub max: Duration,
    /// This many crashes within `window` mark the child failed.
    pub crash_limit: u32,
    /// How far back crashes count.
    pub window: Duration,
    /// How long a failed child stays failed before it may start again.
    pub cooldown: Duration,
}

/// A rejected [`RestartPolicy`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidPolicy {
    #[error("restart base delay must be greater than zero")]
    ZeroBase,
    #[error("restart max delay ({max:?}) must be at least the base delay ({base:?})")]
    MaxBelowBase { base: Duration, max: Duration },
    #[error("crash limit must be at least 1")]
    ZeroCrashLimit,
    #[error("crash window must be greater than zero")]
    ZeroWindow,
    #[error("failed-state cooldown must be greater than zero")]
    ZeroCooldown,
}

impl RestartPolicy {
    pub fn new(
        base: Duration,
        max: Duration,
        crash_limit: u32,
        window: Duration,
        cooldown: Duration,
    ) -> Result<Self, InvalidPolicy> {
        if base.is_zero() {
            return Err(InvalidPolicy::ZeroBase);
        }
        if max < base {
            return Err(InvalidPolicy::MaxBelowBase { base, max });
        }
        if crash_limit == 0 {
            return Err(InvalidPolicy::ZeroCrashLimit);
        }
        if window.is_zero() {
            return Err(InvalidPolicy::ZeroWindow);
        }
        if cooldown.is_zero() {
            return Err(InvalidPolicy::ZeroCooldown);
        }
        Ok(RestartPolicy {
            base,
            max,
            crash_limit,
            window,
            cooldown,
        })
    }
}

impl Default for RestartPolicy {
    /// 500 ms doubling up to 30 s; 5 crashes within 60 s → failed for 5 min.
    fn default() -> Self {
        RestartPolicy {
            base: Duration::from_millis(500),
            max: Duration::from_secs(30),
            crash_limit: 5,
            window: Duration::from_secs(60),
            cooldown: Duration::from_secs(5 * 60),
        }
    }
}

/// What to do after a crash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Start again after `after`; `restarts` counts the crashes within the
    /// window, this one included (1 after the first crash).
    Restart { after: Duration, restarts: u32 },
    /// Crash loop: stay down until `until` (or an admin restart).
    Failed { until: Instant },
}

/// The recent crashes of one project's child.
#[derive(Clone, Debug, Default)]
pub struct CrashHistory {
    /// Crash instants within the policy window, oldest first.
    crashes: VecDeque<Instant>,
}

impl CrashHistory {
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a crash at `now` and decides. `jitter` in `[0, 1)` spreads the
    /// delay by ±20 % (0.5 means none). A `Failed` decision clears the
    /// history, so after the cooldown the child gets a full crash budget.
    pub fn on_crash(&mut self, now: Instant, policy: &RestartPolicy, jitter: f64) -> Decision {
        while let Some(&oldest) = self.crashes.front() {
            if now.saturating_duration_since(oldest) >= policy.window {
                self.crashes.pop_front();
            } else {
                break;
            }
        }
        self.crashes.push_back(now);
        let recent = u32::try_from(self.crashes.len()).unwrap_or(u32::MAX);
        if recent >= policy.crash_limit {
            self.crashes.clear();
            // Only an absurd cooldown overflows `Instant`; then fail for the max delay.
            let until = now
                .checked_add(policy.cooldown)
                .or_else(|| now.checked_add(policy.max))
                .unwrap_or(now);
            return Decision::Failed { until };
        }
        Decision::Restart {
            after: delay(policy, recent, jitter),
            restarts: recent,
        }
    }

    /// Forgets every crash (after an admin restart).
    pub fn reset(&mut self) {
        self.crashes.clear();
    }

    /// Crashes currently remembered (those within the window at the last
    /// [`on_crash`](Self::on_crash)).
    pub fn recent_crashes(&self) -> usize {
        self.crashes.len()
    }
}

/// `base · 2^(recent-1)`, jittered by ±20 %, capped at `max`.
fn delay(policy: &RestartPolicy, recent: u32, jitter: f64) -> Duration {
    let jitter = if jitter.is_finite() {
        jitter.clamp(0.0, 1.0)
    } else {
        0.5
    };
    let exponent = recent.saturating_sub(1).min(62);
    let factor = (1u64 << exponent) as f64 * (0.8 + 0.4 * jitter);
    let secs = policy.base.as_secs_f64() * factor;
    if secs >= policy.max.as_secs_f64() {
        policy.max
    } else {
        Duration::from_secs_f64(secs)
    }
}

/// A uniform sample in `[0, 1)` from the OS random source, or from the
/// clock if that fails (jitter needs spread, not secrecy).
pub fn jitter() -> f64 {
    let mut bytes = [0u8; 8];
    let bits = match getrandom::getrandom(&mut bytes) {
        Ok(()) => u64::from_le_bytes(bytes),
        Err(_) => {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::from(d.subsec_nanos()) ^ d.as_secs())
                .unwrap_or_default();
            nanos.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        }
    };
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_JITTER: f64 = 0.5;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn after(decision: Decision) -> Duration {
        match decision {
            Decision::Restart { after, .. } => after,
            Decision::Failed { .. } => panic!("unexpected {decision:?}"),
        }
    }

    #[test]
    fn constructor_rejects_zero_and_inverted_values() {
        let ok = |b, m, l, w, c| RestartPolicy::new(ms(b), ms(m), l, ms(w), ms(c));
        assert_eq!(ok(0, 10, 1, 1, 1), Err(InvalidPolicy::ZeroBase));
        assert!(matches!(
            ok(20, 10, 1, 1, 1),
            Err(InvalidPolicy::MaxBelowBase { .. })
        ));
        assert_eq!(ok(1, 10, 0, 1, 1), Err(InvalidPolicy::ZeroCrashLimit));
        assert_eq!(ok(1, 10, 1, 0, 1), Err(InvalidPolicy::ZeroWindow));
        assert_eq!(ok(1, 10, 1, 1, 0), Err(InvalidPolicy::ZeroCooldown));
        assert!(ok(10, 10, 1, 1, 1).is_ok());
        let d = RestartPolicy::default();
        assert_eq!(
            RestartPolicy::new(d.base, d.max, d.crash_limit, d.window, d.cooldown),
            Ok(d)
        );
    }

    #[test]
    fn delay_doubles_then_caps() {
        let policy =
            RestartPolicy::new(ms(100), ms(1000), 100, Duration::from_secs(3600), ms(1)).unwrap();
        let mut history = CrashHistory::new();
        let t0 = Instant::now();
        let delays: Vec<_> = (0..6)
            .map(|i| after(history.on_crash(t0 + ms(i), &policy, NO_JITTER)))
            .collect();
        assert_eq!(
            delays,
            [ms(100), ms(200), ms(400), ms(800), ms(1000), ms(1000)]
        );
        // Far past any exponent: still capped, no overflow.
        for i in 0..200 {
            history.on_crash(t0 + ms(10 + i), &policy, NO_JITTER);
        }
        assert_eq!(
            after(history.on_crash(t0 + ms(999), &policy, 0.999)),
            ms(1000)
        );
    }

    #[test]
    fn jitter_spreads_by_twenty_percent() {
        let policy = RestartPolicy::default();
        let now = Instant::now();
        let low = after(CrashHistory::new().on_crash(now, &policy, 0.0));
        let high = after(CrashHistory::new().on_crash(now, &policy, 0.999_999));
        assert_eq!(low, ms(400));
        assert!(high > ms(599) && high < ms(600), "{high:?}");
        assert_eq!(
            after(CrashHistory::new().on_crash(now, &policy, f64::NAN)),
            ms(500)
        );
        for _ in 0..1000 {
            let j = jitter();
            assert!((0.0..1.0).contains(&j), "{j}");
        }
    }

    #[test]
    fn crash_loop_fails_and_old_crashes_expire() {
        let policy = RestartPolicy::default(); // 5 within 60 s
        let t0 = Instant::now();
        let mut history = CrashHistory::new();
        for i in 0..4u32 {
            let decision = history.on_crash(
                t0 + Duration::from_secs(u64::from(i) * 10),
                &policy,
                NO_JITTER,
            );
            assert!(matches!(decision, Decision::Restart { restarts, .. } if restarts == i + 1));
        }
        // The first crash (t0) is 60 s old by now: out of the window.
        let t5 = t0 + Duration::from_secs(60);
        assert!(matches!(
            history.on_crash(t5, &policy, NO_JITTER),
            Decision::Restart { restarts: 4, .. }
        ));
        let t6 = t5 + Duration::from_secs(1);
        assert_eq!(
            history.on_crash(t6, &policy, NO_JITTER),
            Decision::Failed {
                until: t6 + policy.cooldown
            }
        );
        // Failing cleared the history: after the cooldown, a fresh budget.
        let later = t6 + policy.cooldown;
        assert_eq!(
            history.on_crash(later, &policy, NO_JITTER),
            Decision::Restart {
                after: ms(500),
                restarts: 1
            }
        );
    }

    #[test]
    fn stable_run_and_reset_start_over() {
        let policy = RestartPolicy::default();
        let t0 = Instant::now();
        let mut history = CrashHistory::new();
        history.on_crash(t0, &policy, NO_JITTER);
        history.on_crash(t0 + ms(1), &policy, NO_JITTER);
        assert_eq!(history.recent_crashes(), 2);
        history.reset();
        assert_eq!(
            history.on_crash(t0 + ms(2), &policy, NO_JITTER),
            Decision::Restart {
                after: ms(500),
                restarts: 1
            }
        );
        let much_later = t0 + Duration::from_secs(3600);
        assert_eq!(
            history.on_crash(much_later, &policy, NO_JITTER),
            Decision::Restart {
                after: ms(500),
                restarts: 1
            }
        );
    }
}
