//! Byte sizes as written on the command line and in the config file: a
//! number of bytes (`1048576`) or a number with a binary unit (`64KiB`,
//! `8MiB`, `1GiB`). Decimal units (`MB`) are refused as ambiguous.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// A size that could not be parsed; the message says what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid size {input:?}: {reason} (write a number of bytes, or use KiB, MiB or GiB, e.g. 8MiB)"
)]
pub struct SizeError {
    input: String,
    reason: &'static str,
}

/// Parses a byte size: bare bytes, or `B`, `KiB`, `MiB`, `GiB`
/// (case-insensitive).
pub fn parse_bytes(input: &str) -> Result<usize, SizeError> {
    let error = |reason| SizeError {
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
    let value: usize = digits
        .parse()
        .map_err(|_| error("the number is too large"))?;
    let multiplier: usize = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "k" | "kb" | "m" | "mb" | "g" | "gb" => {
            return Err(error("decimal or bare units are ambiguous"))
        }
        _ => return Err(error("unknown unit")),
    };
    value
        .checked_mul(multiplier)
        .ok_or_else(|| error("the number is too large"))
}

/// Formats a size in the largest binary unit that represents it exactly.
pub fn format_bytes(bytes: usize) -> String {
    match bytes {
        0 => "0".to_string(),
        b if b % (1 << 30) == 0 => format!("{}GiB", b >> 30),
        b if b % (1 << 20) == 0 => format!("{}MiB", b >> 20),
        b if b % (1 << 10) == 0 => format!("{}KiB", b >> 10),
        b => b.to_string(),
    }
}

/// A byte size in the config file: an integer or a string for [`parse_bytes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileBytes(pub usize);

impl<'de> Deserialize<'de> for FileBytes {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct BytesVisitor;

        impl Visitor<'_> for BytesVisitor {
            type Value = FileBytes;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a size such as 1048576 or \"8MiB\"")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<FileBytes, E> {
                parse_bytes(v).map(FileBytes).map_err(E::custom)
            }

            fn visit_i64<E: de::Error>(self, v: i64) -> Result<FileBytes, E> {
                usize::try_from(v)
                    .map(FileBytes)
                    .map_err(|_| E::custom("a size cannot be negative"))
            }

            fn visit_u64<E: de::Error>(self, v: u64) -> Result<FileBytes, E> {
                usize::try_from(v)
                    .map(FileBytes)
                    .map_err(|_| E::custom("the size is too large"))
            }
        }

        deserializer.deserialize_any(BytesVisitor)
    }
}

impl From<FileBytes> for usize {
    fn from(value: FileBytes) -> usize {
        value.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        assert_eq!(parse_bytes("512B"), Ok(512));
        assert_eq!(parse_bytes("64KiB"), Ok(64 << 10));
        assert_eq!(parse_bytes("8mib"), Ok(8 << 20));
        assert_eq!(parse_bytes(" 1 GiB "), Ok(1 << 30));
    }

    #[test]
    fn errors_are_clear() {
        for (bad, reason) in [
            ("", "empty"),
            ("MiB", "does not start with a number"),
            ("8MB", "ambiguous"),
            ("8M", "ambiguous"),
            ("8TiB", "unknown unit"),
            ("1.5MiB", "unknown unit"),
            ("99999999999999999999999", "too large"),
            ("18446744073709551615GiB", "too large"),
        ] {
            let msg = parse_bytes(bad).unwrap_err().to_string();
            assert!(msg.contains(reason), "{bad:?}: {msg}");
            assert!(msg.contains("8MiB"), "{msg}");
        }
    }

    #[test]
    fn format_round_trips() {
        for text in ["0", "100", "64KiB", "8MiB", "16MiB", "2GiB", "1536KiB"] {
            assert_eq!(format_bytes(parse_bytes(text).unwrap()), text);
        }
    }

    #[derive(Debug, Deserialize)]
    struct Doc {
        b: FileBytes,
    }

    #[test]
    fn toml_integer_or_string() {
        let doc: Doc = toml::from_str("b = 4096").unwrap();
        assert_eq!(doc.b.0, 4096);
        let doc: Doc = toml::from_str("b = \"8MiB\"").unwrap();
        assert_eq!(doc.b.0, 8 << 20);
        let err = toml::from_str::<Doc>("b = -1").unwrap_err().to_string();
        assert!(err.contains("negative"), "{err}");
        let err = toml::from_str::<Doc>("b = \"8MB\"")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ambiguous"), "{err}");
    }
}
