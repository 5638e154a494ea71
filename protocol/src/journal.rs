//! The session journal's line format: one [`Entry`] per LF-terminated JSON
//! line, replayed in order with [`apply`]; and [`scan`], which reads a
//! journal up to the first line that is not a whole entry. The agent replays
//! with it, `corral journal check` and `repair` judge files with it, so both
//! binaries agree on what a good line is.

use std::io::{self, BufRead};

use serde::{Deserialize, Serialize};

use crate::transcript::{Block, Message, Role};

/// One transcript change.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// A message was appended.
    Message { message: Message },
    /// One tool result: added to the trailing tool message, or the first of
    /// a new one (written as each tool finishes, so a crash loses no result
    /// of a tool that completed).
    ToolResult {
        call_id: String,
        is_error: bool,
        content: Vec<Block>,
        /// When the result arrived; a new tool message takes this time.
        time: String,
    },
    /// The transcript was emptied.
    Clear,
    /// The transcript was replaced by a compaction summary message.
    Compact { summary: String, message: Message },
}

/// Applies one entry to a transcript.
pub fn apply(messages: &mut Vec<Message>, entry: Entry) {
    match entry {
        Entry::Message { message } => messages.push(message),
        Entry::ToolResult {
            call_id,
            is_error,
            content,
            time,
        } => {
            let block = Block::ToolResult {
                call_id,
                is_error,
                content,
            };
            match messages.last_mut() {
                Some(last) if last.role == Role::Tool => last.content.push(block),
                _ => messages.push(Message {
                    time,
                    ..Message::new(Role::Tool, vec![block])
                }),
            }
        }
        Entry::Clear => messages.clear(),
        Entry::Compact { message, .. } => {
            messages.clear();
            messages.push(message);
        }
    }
}

/// Where a journal stops being a sequence of whole entries.
#[derive(Clone, Debug, PartialEq)]
pub enum Damage {
    /// The last line has no LF: a write that never finished. The agent
    /// drops such a line when it opens the journal.
    Torn { line: usize },
    /// Line `line` (1-based) is not a journal entry; the agent refuses to
    /// open the journal.
    Bad { line: usize, message: String },
}

impl Damage {
    /// The 1-based number of the first line that is not a whole entry.
    pub fn line(&self) -> usize {
        match self {
            Damage::Torn { line } | Damage::Bad { line, .. } => *line,
        }
    }
}

impl std::fmt::Display for Damage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Damage::Torn { line } => write!(f, "line {line} is incomplete (no end of line)"),
            Damage::Bad { line, message } => {
                write!(f, "line {line} is not a journal entry: {message}")
            }
        }
    }
}

/// What [`scan`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct Scan {
    /// Whole entries before the damage (or in the file).
    pub entries: usize,
    /// Bytes of those entries: the valid prefix.
    pub valid_len: u64,
    /// The first line that is not a whole entry, if any.
    pub damage: Option<Damage>,
}

/// Reads entries until the end or the first line that is not a whole
/// entry, handing each good one to `on_entry`. Reading stops at the damage:
/// nothing after it is judged.
pub fn scan<R: BufRead>(mut reader: R, mut on_entry: impl FnMut(Entry)) -> io::Result<Scan> {
    let mut scan = Scan {
        entries: 0,
        valid_len: 0,
        damage: None,
    };
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader.read_until(b'\n', &mut line)?;
        if read == 0 {
            return Ok(scan);
        }
        let line_no = scan.entries + 1;
        if line.last() != Some(&b'\n') {
            scan.damage = Some(Damage::Torn { line: line_no });
            return Ok(scan);
        }
        match serde_json::from_slice::<Entry>(&line) {
            Ok(entry) => on_entry(entry),
            Err(e) => {
                scan.damage = Some(Damage::Bad {
                    line: line_no,
                    message: e.to_string(),
                });
                return Ok(scan);
            }
        }
        scan.entries += 1;
        scan.valid_len += read as u64;
    }
}

/// One entry as a journal line, LF included.
pub fn to_line(entry: &Entry) -> Result<Vec<u8>, serde_json::Error> {
    let mut line = serde_json::to_vec(entry)?;
    line.push(b'\n');
    Ok(line)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(text: &str) -> Message {
        Message::new(Role::User, vec![Block::text(text)])
    }

    fn line(entry: &Entry) -> Vec<u8> {
        to_line(entry).unwrap()
    }

    fn result(id: &str) -> Entry {
        Entry::ToolResult {
            call_id: id.into(),
            is_error: false,
            content: vec![Block::text("ok")],
            time: "2024-01-01T00:00:00Z".into(),
        }
    }

    #[test]
    fn whole_file_scans_clean_and_replays() {
        let mut bytes = line(&Entry::Message { message: msg("a") });
        bytes.extend(line(&result("t1")));
        bytes.extend(line(&result("t2")));
        let mut messages = Vec::new();
        let scan = scan(&bytes[..], |e| apply(&mut messages, e)).unwrap();
        assert_eq!(scan.entries, 3);
        assert_eq!(scan.valid_len, bytes.len() as u64);
        assert_eq!(scan.damage, None);
        // Two results make one tool message.
        assert_eq!(messages.len(), 2);
        assert_eq!(messages[1].role, Role::Tool);
        assert_eq!(messages[1].content.len(), 2);
    }

    #[test]
    fn a_tool_result_after_a_non_tool_message_starts_a_new_one() {
        let mut messages = vec![msg("a")];
        apply(&mut messages, result("t1"));
        apply(&mut messages, Entry::Message { message: msg("b") });
        apply(&mut messages, result("t2"));
        let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Tool, Role::User, Role::Tool]);
        assert_eq!(messages[1].time, "2024-01-01T00:00:00Z");
    }

    #[test]
    fn torn_tail_is_reported_after_the_valid_prefix() {
        let mut bytes = line(&Entry::Clear);
        let good = bytes.len() as u64;
        bytes.extend_from_slice(b"{\"kind\":\"cle");
        let scan = scan(&bytes[..], |_| {}).unwrap();
        assert_eq!(scan.valid_len, good);
        assert_eq!(scan.damage, Some(Damage::Torn { line: 2 }));
    }

    #[test]
    fn a_torn_line_glued_to_the_next_entry_is_bad_and_stops_the_scan() {
        let mut bytes = line(&Entry::Clear);
        let good = bytes.len() as u64;
        bytes.extend_from_slice(b"{\"kind\":\"mess");
        bytes.extend(line(&Entry::Clear));
        bytes.extend(line(&Entry::Clear));
        let mut seen = 0;
        let scan = scan(&bytes[..], |_| seen += 1).unwrap();
        assert_eq!(seen, 1);
        assert_eq!(scan.valid_len, good);
        let damage = scan.damage.unwrap();
        assert_eq!(damage.line(), 2);
        assert!(
            damage
                .to_string()
                .starts_with("line 2 is not a journal entry"),
            "{damage}"
        );
    }

    #[test]
    fn unknown_kinds_and_foreign_json_are_bad() {
        for text in ["{\"kind\":\"nope\"}\n", "[1,2]\n", "\n"] {
            let scan = scan(text.as_bytes(), |_| {}).unwrap();
            assert!(
                matches!(scan.damage, Some(Damage::Bad { line: 1, .. })),
                "{text:?}"
            );
        }
    }
}
