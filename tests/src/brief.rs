//! Short failure messages: a list of frames (or anything printable) as one
//! line per item, each cut at [`LINE`] characters, and at most [`ITEMS`]
//! items (the first few and the last ones, where a failure usually shows).
//! A failing assertion prints what differs, not a dump of every frame.

use std::fmt::{self, Display};

use serde_json::Value;

/// Characters kept of each item.
pub const LINE: usize = 160;
/// Items shown: the first few, then the last ones.
pub const ITEMS: usize = 24;
const HEAD: usize = 6;

/// `items`, one short line each, for an assertion message:
/// `assert!(ok, "no done in {}", brief(&frames))`.
pub fn brief<T: Line>(items: &[T]) -> Brief<'_, T> {
    Brief(items)
}

/// See [`brief`].
pub struct Brief<'a, T>(&'a [T]);

impl<T: Line> Display for Brief<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items = self.0;
        write!(f, "{} item(s):", items.len())?;
        for (i, item) in items.iter().enumerate() {
            if items.len() > ITEMS && i == HEAD {
                write!(f, "\n  … {} more …", items.len() - ITEMS)?;
            }
            if items.len() > ITEMS && (HEAD..items.len() - (ITEMS - HEAD)).contains(&i) {
                continue;
            }
            write!(f, "\n  {i:>3}: {}", cut(&item.line()))?;
        }
        Ok(())
    }
}

/// An item as one line: a JSON value as compact JSON, a string as itself,
/// other test records as their `Debug`.
pub trait Line {
    fn line(&self) -> String;
}

impl Line for Value {
    fn line(&self) -> String {
        self.to_string()
    }
}

impl Line for String {
    fn line(&self) -> String {
        self.clone()
    }
}

impl Line for u32 {
    fn line(&self) -> String {
        self.to_string()
    }
}

impl<A: std::fmt::Debug, B: std::fmt::Debug> Line for (A, B) {
    fn line(&self) -> String {
        format!("{self:?}")
    }
}

impl Line for crate::otlp::ReceivedSpan {
    fn line(&self) -> String {
        format!("{self:?}")
    }
}

impl<T: Line + ?Sized> Line for &T {
    fn line(&self) -> String {
        (**self).line()
    }
}

fn cut(line: &str) -> String {
    match line.char_indices().nth(LINE) {
        Some((at, _)) => format!("{}…", &line[..at]),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_frame_is_one_cut_line() {
        let frames = vec![json!({"type": "a"}), json!({"text": "x".repeat(500)})];
        let text = brief(&frames).to_string();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains(r#"0: {"type":"a"}"#), "{text}");
        assert!(
            text.lines().all(|l| l.chars().count() < LINE + 12),
            "{text}"
        );
    }

    #[test]
    fn a_long_list_keeps_its_head_and_tail() {
        let frames: Vec<u32> = (0..100).collect();
        let text = brief(&frames).to_string();
        assert!(text.starts_with("100 item(s):"), "{text}");
        assert!(
            text.contains("  0: 0") && text.contains(" 99: 99"),
            "{text}"
        );
        assert!(
            text.contains("… 76 more …") && !text.contains(" 50: 50"),
            "{text}"
        );
    }
}
