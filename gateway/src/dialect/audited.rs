//! What a client frame means to the audit log ([`Audited`]): each
//! dialect's [`super::DialectRules::audited`] names the action a prompt,
//! abort, clear, compact, mode change or permission answer is in its own
//! wire words, with the few details worth keeping and, when asked for,
//! the prompt's text. Pure, no I/O.

use serde_json::{Map, Value};

use crate::audit::Action;

/// A client frame as the audit log records it.
#[derive(Debug, Clone, PartialEq)]
pub struct Audited {
    pub action: Action,
    /// Small values worth keeping (`option`, `mode`, `delivery`); never a
    /// secret.
    pub detail: Vec<(&'static str, Value)>,
    /// The prompt's text, only when the caller asked for it.
    pub prompt: Option<String>,
}

impl Audited {
    pub fn new(action: Action) -> Audited {
        Audited {
            action,
            detail: Vec::new(),
            prompt: None,
        }
    }

    /// Adds `key` when `value` is a string (anything else a client sent
    /// there is not worth keeping).
    pub fn detail(mut self, key: &'static str, value: Option<&Value>) -> Audited {
        if let Some(text @ Value::String(_)) = value {
            self.detail.push((key, text.clone()));
        }
        self
    }

    /// A prompt whose text, if `wanted`, is `text()`.
    pub fn prompt(wanted: bool, text: impl FnOnce() -> Option<String>) -> Audited {
        Audited {
            prompt: if wanted { text() } else { None },
            ..Audited::new(Action::Prompt)
        }
    }
}

/// The string field `key` of `fields`, as text.
pub fn text_field(fields: &Map<String, Value>, key: &str) -> Option<String> {
    fields.get(key).and_then(Value::as_str).map(str::to_string)
}
