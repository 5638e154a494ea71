//! The mutable state of the one session a child serves: transcript, model,
//! reasoning level and usage totals, with every transcript change written
//! through to the journal when one is configured.

use corral_protocol::zut::{ReasoningLevel, Usage};

use super::interrupted::{unanswered_calls, INTERRUPTED};
use super::journal::{apply, Entry, Journal, JournalError};
use crate::transcript::{now_rfc3339, Block, Message, Role};

/// Session state. Lives behind a mutex that is never held across an await.
#[derive(Debug)]
pub struct Session {
    messages: Vec<Message>,
    /// Cumulative usage since the process started.
    pub usage: Usage,
    pub model: String,
    pub reasoning: ReasoningLevel,
    /// Where transcript changes are persisted (`--session`).
    journal: Option<Journal>,
}

impl Session {
    pub fn new(model: String, reasoning: ReasoningLevel) -> Session {
        Session {
            messages: Vec::new(),
            usage: Usage::default(),
            model,
            reasoning,
            journal: None,
        }
    }

    /// Attaches a journal and the transcript it held. Tool calls that a
    /// crash interrupted get an error result (journaled too), so the model
    /// is told and nothing runs a second time by itself.
    pub fn with_journal(mut self, journal: Journal, messages: Vec<Message>) -> Session {
        self.messages = messages;
        self.journal = Some(journal);
        for call_id in unanswered_calls(&self.messages) {
            tracing::warn!(call_id, "tool call interrupted by a restart");
            let text = vec![Block::text(INTERRUPTED)];
            if let Err(e) = self.push_tool_result(call_id, true, text) {
                tracing::error!(error = %e, "journal write failed");
            }
        }
        self
    }

    /// The conversation: every message except the records of failed or
    /// aborted steps ([`Message::is_failure_record`]). This is what the
    /// model is sent, and what the zut and letscode front-ends show (their
    /// references keep no such records).
    pub fn messages(&self) -> Conversation<'_> {
        Conversation(&self.messages)
    }

    /// Every message, failure records included (Zi pages them: its
    /// clients read a run's outcome from its last assistant message).
    pub fn transcript(&self) -> &[Message] {
        &self.messages
    }

    /// Appends a message. The message is kept in memory even when the
    /// journal write fails; the error is returned so it can be reported.
    pub fn push(&mut self, message: Message) -> Result<(), JournalError> {
        let result = self.write(Entry::Message {
            message: message.clone(),
        });
        self.messages.push(message);
        result
    }

    /// Adds one tool result to the trailing tool message (starting one
    /// when the last message is not a tool message), exactly as replaying
    /// the journal entry does. Kept in memory even when the write fails.
    pub fn push_tool_result(
        &mut self,
        call_id: String,
        is_error: bool,
        content: Vec<Block>,
    ) -> Result<(), JournalError> {
        let entry = Entry::ToolResult {
            call_id,
            is_error,
            content,
            time: now_rfc3339(),
        };
        let result = self.write(entry.clone());
        apply(&mut self.messages, entry);
        result
    }

    /// Where the journal is, when there is one.
    pub fn journal_path(&self) -> Option<&std::path::Path> {
        self.journal.as_ref().map(Journal::path)
    }

    pub fn clear(&mut self) -> Result<(), JournalError> {
        self.messages.clear();
        self.write(Entry::Clear)
    }

    /// Replaces the transcript with one synthetic user message holding the
    /// summary.
    pub fn compact(&mut self, summary: &str) -> Result<(), JournalError> {
        let message = Message::new(Role::User, vec![Block::text(summary_message(summary))]);
        self.messages.clear();
        self.messages.push(message.clone());
        self.write(Entry::Compact {
            summary: summary.to_string(),
            message,
        })
    }

    fn write(&mut self, entry: Entry) -> Result<(), JournalError> {
        match &mut self.journal {
            Some(journal) => journal.append(&entry),
            None => Ok(()),
        }
    }
}

/// The transcript without its failure records (see [`Session::messages`]).
#[derive(Clone, Copy, Debug)]
pub struct Conversation<'a>(&'a [Message]);

impl<'a> Conversation<'a> {
    pub fn iter(&self) -> impl Iterator<Item = &'a Message> + 'a {
        self.0.iter().filter(|m| !m.is_failure_record())
    }

    pub fn len(&self) -> usize {
        self.iter().count()
    }

    pub fn is_empty(&self) -> bool {
        self.iter().next().is_none()
    }

    pub fn to_vec(&self) -> Vec<Message> {
        self.iter().cloned().collect()
    }
}

/// The text of the message that replaces a compacted transcript.
pub fn summary_message(summary: &str) -> String {
    format!(
        "The conversation so far was compacted to save context. Summary of everything before this point:\n\n{summary}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transcript::StopReason;
    use serde_json::json;

    fn open(path: &std::path::Path) -> Session {
        let (journal, messages) = Journal::open(path).unwrap();
        Session::new("m".into(), ReasoningLevel::default()).with_journal(journal, messages)
    }

    fn results(session: &Session) -> Vec<(String, bool, String)> {
        session
            .transcript()
            .iter()
            .flat_map(|m| &m.content)
            .filter_map(|b| match b {
                Block::ToolResult {
                    call_id,
                    is_error,
                    content,
                } => Some((
                    call_id.clone(),
                    *is_error,
                    Message::new(Role::Tool, content.clone()).text(),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn failure_records_stay_out_of_the_conversation() {
        let mut session = Session::new("m".into(), ReasoningLevel::default());
        session
            .push(Message::new(Role::User, vec![Block::text("hi")]))
            .unwrap();
        let failed = Message::failed_step(Vec::new(), StopReason::Error, "down".into());
        session.push(failed).unwrap();
        assert_eq!(session.transcript().len(), 2);
        assert_eq!(session.messages().len(), 1);
        assert_eq!(session.messages().to_vec()[0].role, Role::User);
    }

    #[test]
    fn a_restart_answers_interrupted_calls_once_and_journals_the_answer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.jsonl");
        let mut session = open(&path);
        session
            .push(Message::new(Role::User, vec![Block::text("run it")]))
            .unwrap();
        let call = |id: &str| Block::ToolCall {
            id: id.into(),
            name: "bash".into(),
            args: json!({"command": "true"}),
        };
        session
            .push(Message::new(
                Role::Assistant,
                vec![call("done"), call("cut")],
            ))
            .unwrap();
        session
            .push_tool_result("done".into(), false, vec![Block::text("ok")])
            .unwrap();
        drop(session); // the crash, as far as the file is concerned

        let session = open(&path);
        let expected = vec![
            ("done".to_string(), false, "ok".to_string()),
            ("cut".to_string(), true, INTERRUPTED.to_string()),
        ];
        assert_eq!(results(&session), expected);
        assert_eq!(session.messages().len(), 3, "one tool message");
        let in_memory = session.transcript().to_vec();
        drop(session);

        let session = open(&path);
        assert_eq!(results(&session), expected, "answered once, not again");
        assert_eq!(session.transcript(), &in_memory[..], "journal == memory");
    }
}
