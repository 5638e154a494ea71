//! Durations as written on the command line and in the config file:
//! `250ms`, `10s`, `5m`, `2h`, `30d`, or a bare number of seconds (`30`).
//! In TOML a duration may also be an integer (seconds).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A duration that could not be parsed; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: {reason} (write e.g. 250ms, 10s, 5m, 2h, 30d, or a number of seconds)"
)]
pub struct DurationError {
    input: String,
    reason: &'static str,
}

/// Parses `250ms`, `10s`, `5m`, `2h`, `30d` or a bare number of seconds. Units are
/// case-insensitive; the number is a whole, non-negative integer.
pub fn parse_duration(input: &str) -> Result<Duration, DurationError> {
    let error = |reason| DurationError {
        input: input.to_string(),
        reason,
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(error("it is empty"));
    }
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    if digits.is_empty() {
        return Err(error("it does not start with a number"));
    }
    let value: u64 = digits
        .parse()
        .map_err(|_| error("the number is too large"))?;
    let millis_per_unit: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "ms" => 1,
        "" | "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(error("unknown unit")),
    };
    value
        .checked_mul(millis_per_unit)
        .map(Duration::from_millis)
        .ok_or_else(|| error("the number is too large"))
}

/// Formats a duration the way [`parse_duration`] reads it, in the largest
/// unit that represents it exactly (for help texts and logs).
pub fn format_duration(duration: Duration) -> String {
    let millis = duration.as_millis();
    match millis {
        0 => "0s".to_string(),
        m if m % 3_600_000 == 0 => format!("{}h", m / 3_600_000),
        m if m % 60_000 == 0 => format!("{}m", m / 60_000),
        m if m % 1_000 == 0 => format!("{}s", m / 1_000),
        m => format!("{m}ms"),
    }
}

/// A duration in the config file: a string for [`parse_duration`] or an
/// integer number of seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileDuration(pub Duration);

impl<'de> Deserialize<'de> for FileDuration {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct DurationVisitor;

        impl Visitor<'_> for DurationVisitor {
            type Value = FileDuration;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(
                    "a duration such as \"250ms\", \"10s\", \"5m\", \"2h\", or a number of seconds",
                )
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<FileDuration, E> {
                parse_duration(v).map(FileDuration).map_err(E::custom)
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FileDuration, E> {
                u64::try_from(v)
                    .map_err(|_| E::custom("a duration cannot be negative"))
                    .and_then(|secs| self.visit_u64(secs))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FileDuration, E> {
                Ok(FileDuration(Duration::from_secs(v)))
            }
        }

        deserializer.deserialize_any(DurationVisitor)
    }
}

impl From<FileDuration> for Duration {
    fn from(value: FileDuration) -> Duration {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration(" 10S "), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("10 s"), Ok(Duration::from_secs(10)));
    }

    #[test]
    fn errors_are_clear() {
        for (bad, reason) in [
            ("", "empty"),
            ("   ", "empty"),
            ("s", "does not start with a number"),
            ("-5s", "does not start with a number"),
            ("1.5s", "unknown unit"),
            ("10w", "unknown unit"),
            ("10sec", "unknown unit"),
            ("5m3s", "unknown unit"),
            ("99999999999999999999s", "too large"),
            ("18446744073709551615h", "too large"),
        ] {
            let msg = parse_duration(bad).unwrap_err().to_string();
            assert!(msg.contains(reason), "{bad:?}: {msg}");
            assert!(msg.contains("250ms, 10s, 5m, 2h"), "{msg}");
        }
    }

    #[test]
    fn format_round_trips() {
        for text in ["0s", "250ms", "1500ms", "10s", "90s", "5m", "2h"] {
            assert_eq!(format_duration(parse_duration(text).unwrap()), text);
        }
    }

    #[derive(Debug, Deserialize)]
    struct Doc {
        d: FileDuration,
    }

    #[test]
    fn toml_string_or_seconds() {
        let doc: Doc = toml::from_str("d = \"5m\"").unwrap();
        assert_eq!(doc.d.0, Duration::from_secs(300));
        let doc: Doc = toml::from_str("d = 45").unwrap();
        assert_eq!(doc.d.0, Duration::from_secs(45));
        let err = toml::from_str::<Doc>("d = \"soon\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("invalid duration \"soon\""), "{err}");
        let err = toml::from_str::<Doc>("d = -3").unwrap_err().to_string();
        assert!(err.contains("negative"), "{err}");
        let err = toml::from_str::<Doc>("d = 1.5").unwrap_err().to_string();
        assert!(err.contains("a duration such as"), "{err}");
    }
}
