//! Keeping tool output within the model's budget: [`HeadTail`] streams lines
//! and keeps the first and last ones (half the budget each) with a note about
//! what was cut; [`cut_line`] shortens one over-long line.

use std::borrow::Cow;
use std::collections::VecDeque;

/// Streams lines, keeping at most `max_bytes` / `max_lines` of them: the
/// first half of the budget from the start, the second from the end. Memory
/// stays bounded by the budget however much is pushed.
#[derive(Debug)]
pub struct HeadTail {
    max_bytes: usize,
    max_lines: usize,
    head: Vec<String>,
    head_bytes: usize,
    /// The most recent lines once the head is full; oldest evicted first.
    tail: VecDeque<String>,
    tail_bytes: usize,
    omitted_lines: usize,
    omitted_bytes: usize,
}

impl HeadTail {
    pub fn new(max_bytes: usize, max_lines: usize) -> HeadTail {
        HeadTail {
            max_bytes: max_bytes.max(2),
            max_lines: max_lines.max(2),
            head: Vec::new(),
            head_bytes: 0,
            tail: VecDeque::new(),
            tail_bytes: 0,
            omitted_lines: 0,
            omitted_bytes: 0,
        }
    }

    /// Adds one line (without its newline). Lines longer than half the byte
    /// budget are cut.
    pub fn push_line(&mut self, line: &str) {
        let half_bytes = self.max_bytes / 2;
        let line = cut_bytes(line, half_bytes.saturating_sub(32).max(1));
        let cost = line.len() + 1;
        let head_fits =
            self.head.len() < self.max_lines / 2 && self.head_bytes + cost <= half_bytes;
        if self.tail.is_empty() && head_fits {
            self.head_bytes += cost;
            self.head.push(line.into_owned());
            return;
        }
        self.tail_bytes += cost;
        self.tail.push_back(line.into_owned());
        let tail_lines = self.max_lines - self.max_lines / 2;
        let tail_bytes = self.max_bytes - half_bytes;
        while self.tail.len() > tail_lines || self.tail_bytes > tail_bytes {
            let Some(old) = self.tail.pop_front() else {
                break;
            };
            self.tail_bytes -= old.len() + 1;
            self.omitted_lines += 1;
            self.omitted_bytes += old.len() + 1;
        }
    }

    /// Whether any line was dropped.
    pub fn is_truncated(&self) -> bool {
        self.omitted_lines > 0
    }

    /// Whether nothing was pushed.
    pub fn is_empty(&self) -> bool {
        self.head.is_empty() && self.tail.is_empty() && self.omitted_lines == 0
    }

    /// The kept lines, with a note in the middle where lines were dropped.
    pub fn finish(&self) -> String {
        let mut out = self.head.join("\n");
        if self.omitted_lines > 0 {
            out.push_str(&format!(
                "\n\n... [{} lines ({} bytes) omitted] ...\n",
                self.omitted_lines, self.omitted_bytes
            ));
        }
        if !self.tail.is_empty() {
            if !out.is_empty() {
                out.push('\n');
            }
            for (i, line) in self.tail.iter().enumerate() {
                if i > 0 {
                    out.push('\n');
                }
                out.push_str(line);
            }
        }
        out
    }
}

/// `text` cut to its first and last lines within the budget (see
/// [`HeadTail`]).
pub fn truncate_text(text: &str, max_bytes: usize, max_lines: usize) -> String {
    let mut kept = HeadTail::new(max_bytes, max_lines);
    for line in text.lines() {
        kept.push_line(line);
    }
    kept.finish()
}

/// `line` cut to `max_chars` characters, with a marker saying how many were
/// dropped.
pub fn cut_line(line: &str, max_chars: usize) -> Cow<'_, str> {
    match line.char_indices().nth(max_chars) {
        None => Cow::Borrowed(line),
        Some((at, _)) => {
            let dropped = line[at..].chars().count();
            Cow::Owned(format!("{}... [{dropped} more chars]", &line[..at]))
        }
    }
}

/// `line` cut to at most `max_bytes` bytes (at a char boundary) plus a marker.
fn cut_bytes(line: &str, max_bytes: usize) -> Cow<'_, str> {
    if line.len() <= max_bytes {
        return Cow::Borrowed(line);
    }
    let mut at = max_bytes;
    while !line.is_char_boundary(at) {
        at -= 1;
    }
    Cow::Owned(format!(
        "{}... [{} more bytes]",
        &line[..at],
        line.len() - at
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept_whole() {
        let text = "a\nb\nc";
        assert_eq!(truncate_text(text, 1000, 100), text);
    }

    #[test]
    fn long_output_keeps_head_and_tail_within_budget() {
        let text: String = (1..=10_000).map(|i| format!("line {i}\n")).collect();
        let out = truncate_text(&text, 50 * 1024, 100);
        assert!(out.starts_with("line 1\nline 2\n"));
        assert!(out.ends_with("line 9999\nline 10000"));
        assert!(out.contains("[9900 lines ("), "{out}");
        assert!(!out.contains("line 51\n"));
        assert!(out.lines().count() <= 104);

        let out = truncate_text(&text, 1000, 10_000);
        assert!(out.len() < 1200, "{}", out.len());
        assert!(out.ends_with("line 10000"));
    }

    #[test]
    fn a_huge_single_line_is_cut() {
        let line = "x".repeat(100_000);
        let out = truncate_text(&line, 1000, 10);
        assert!(out.len() < 600);
        assert!(out.contains("more bytes]"));
    }

    #[test]
    fn cut_line_counts_chars_not_bytes() {
        assert_eq!(cut_line("héllo", 10), "héllo");
        assert_eq!(cut_line("héllo", 2), "hé... [3 more chars]");
        assert_eq!(cut_bytes("héllo", 2), "h... [5 more bytes]");
    }
}
