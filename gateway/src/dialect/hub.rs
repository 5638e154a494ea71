//! What the hub and a dialect's rules share besides frames: the view of a
//! client's requests in flight a dialect's admission rules read
//! ([`ClientRequests`]), what a child's answer tells the hub
//! ([`ResponseNews`]), and the state machine of a child greeted with
//! requests ([`ChildGreeter`]). Pure, no I/O.

use serde_json::{Map, Value};

pub use super::acp::Greeting;

/// What a dialect's admission rules may ask of one client's requests in
/// flight.
pub trait ClientRequests {
    /// Whether the client has a request with this `id` in flight.
    fn has_id(&self, id: &Value) -> bool;
    /// How many of the client's requests are in flight, not counting
    /// those for `command`.
    fn count_except(&self, command: &str) -> usize;
}

/// What an answer of the child tells the hub besides its client's reply.
#[derive(Debug, Default, PartialEq)]
pub struct ResponseNews {
    /// The request started a run (a dialect without a start event).
    pub run_started: bool,
    /// The model the child now uses.
    pub model: Option<String>,
}

/// How a hub greets a child with requests of its own, as a pure state
/// machine the supervisor drives.
pub trait ChildGreeter: Send + Sync {
    /// The first line to send.
    fn start(&self) -> String;
    /// Whether `frame` answers the greeting's request in flight.
    fn is_answer(&self, frame: &Map<String, Value>) -> bool;
    /// Takes that answer: the next line, or the child's hello data.
    fn answer(&mut self, frame: &Map<String, Value>) -> Result<Greeting, String>;
}

#[cfg(test)]
#[path = "hub_tests.rs"]
mod tests;
