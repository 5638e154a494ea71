//! The mutable state of the one session a child serves: transcript, model,
//! reasoning level and usage totals, with every transcript change written
//! through to the journal when one is configured.

use corral_protocol::zut::{ReasoningLevel, Usage};

use super::journal::{Entry, Journal, JournalError};
use crate::transcript::{Block, Message, Role};

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

    /// Attaches a journal and the transcript it held.
    pub fn with_journal(mut self, journal: Journal, messages: Vec<Message>) -> Session {
        self.messages = messages;
        self.journal = Some(journal);
        self
    }

    pub fn messages(&self) -> &[Message] {
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

/// The text of the message that replaces a compacted transcript.
pub fn summary_message(summary: &str) -> String {
    format!(
        "The conversation so far was compacted to save context. Summary of everything before this point:\n\n{summary}"
    )
}
