//! Quantiles and the units the benchmark tables print. Pure logic.

use std::time::Duration;

/// The value at quantile `q` of sorted `values` (nearest rank); `None` when
/// there are none.
pub fn quantile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    if sorted.is_empty() {
        return None;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    Some(sorted[rank - 1])
}

/// Median, p90, p99 and max of a series of round trips.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    pub median: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub max: Duration,
}

impl Latency {
    /// `None` for an empty series.
    pub fn of(mut samples: Vec<Duration>) -> Option<Latency> {
        samples.sort();
        Some(Latency {
            median: quantile(&samples, 0.5)?,
            p90: quantile(&samples, 0.9)?,
            p99: quantile(&samples, 0.99)?,
            max: quantile(&samples, 1.0)?,
        })
    }
}

/// The middle element after sorting by `key` (the lower middle of an even
/// count); `None` when there are none.
pub fn median_by<T>(mut items: Vec<T>, key: impl Fn(&T) -> f64) -> Option<T> {
    items.sort_by(|a, b| key(a).total_cmp(&key(b)));
    let middle = items.len().checked_sub(1)? / 2;
    items.into_iter().nth(middle)
}

/// `12.3 µs`, or milliseconds from 1 ms on.
pub fn micros(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{us:.1} µs")
    }
}

/// A signed difference of two durations, in the same units as [`micros`].
pub fn micros_diff(later: Duration, earlier: Duration) -> String {
    match later.checked_sub(earlier) {
        Some(d) => format!("+{}", micros(d)),
        None => format!("-{}", micros(earlier - later)),
    }
}

/// Events per second with thousands separators: `123,456 ev/s`.
pub fn rate(per_second: f64) -> String {
    let digits = (per_second.round() as u64).to_string();
    let groups: Vec<&str> = digits
        .as_bytes()
        .rchunks(3)
        .rev()
        .filter_map(|group| std::str::from_utf8(group).ok())
        .collect();
    let out = groups.join(",");
    format!("{out} ev/s")
}

/// KiB as `12.3 MiB`.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_use_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(quantile(&v, 0.5), Some(50));
        assert_eq!(quantile(&v, 0.99), Some(99));
        assert_eq!(quantile(&v, 1.0), Some(100));
        assert_eq!(quantile(&[7], 0.9), Some(7));
        assert_eq!(quantile::<u32>(&[], 0.5), None);
    }

    #[test]
    fn latency_sorts_its_samples() {
        let ms = Duration::from_millis;
        let l = Latency::of(vec![ms(3), ms(1), ms(2)]).unwrap();
        assert_eq!((l.median, l.max), (ms(2), ms(3)));
        assert!(Latency::of(Vec::new()).is_none());
    }

    #[test]
    fn median_by_takes_the_middle_run() {
        assert_eq!(median_by(vec![5.0, 1.0, 3.0], |x| *x), Some(3.0));
        assert_eq!(median_by(vec![4.0, 1.0], |x| *x), Some(1.0));
        assert_eq!(median_by(Vec::<f64>::new(), |x| *x), None);
    }

    #[test]
    fn units_format() {
        assert_eq!(micros(Duration::from_nanos(12_340)), "12.3 µs");
        assert_eq!(micros(Duration::from_micros(1500)), "1.50 ms");
        let us = Duration::from_micros;
        assert_eq!(micros_diff(us(30), us(10)), "+20.0 µs");
        assert_eq!(micros_diff(us(10), us(30)), "-20.0 µs");
        assert_eq!(rate(1234567.4), "1,234,567 ev/s");
        assert_eq!(rate(999.0), "999 ev/s");
        assert_eq!(mib(1536), "1.5 MiB");
    }
}
