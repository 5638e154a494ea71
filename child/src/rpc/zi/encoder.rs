//! The Zi encoder: stamps `version` and the connection-local `sequence` on
//! every server frame in output order, wraps agent events as
//! `session_event` frames (dropped under `connection.set_events none`,
//! which takes effect at its response's place in the output), and
//! records what settlement needs: finished runs, completion evidence, the
//! work plan and compaction summaries.

use serde_json::{json, Map, Value};

use super::event::{plan_steps, text_of, EventMapper};
use super::state::Connection;
use crate::agent::{AgentEvent, Output};
use crate::rpc::{line_of, Encoder};

/// The `started` marker the frontend attaches to each run; the encoder
/// turns it into an `agent_start` session event.
pub const RUN_STARTED: &str = "zi.run_started";
/// A field the frontend puts on the `connection.set_events` response: the
/// encoder applies the mode there, in output order, and strips the field.
pub const EVENTS_MODE: &str = "zi.events";

/// Writes Zi frames.
pub struct ZiEncoder {
    connection: Connection,
    /// The last sequence written (the first frame gets 1).
    sequence: u64,
    mapper: EventMapper,
    /// `connection.set_events`: false drops `session_event` frames.
    events: bool,
}

impl ZiEncoder {
    pub fn new(connection: Connection) -> ZiEncoder {
        ZiEncoder {
            connection,
            sequence: 0,
            mapper: EventMapper::default(),
            events: true,
        }
    }

    /// Stamps and serialises one frame.
    fn push(&mut self, mut frame: Map<String, Value>, lines: &mut Vec<Vec<u8>>) {
        if let Some(mode) = frame.remove(EVENTS_MODE) {
            self.events = mode.as_bool().unwrap_or(true);
        }
        if frame.get("type").and_then(Value::as_str) == Some("session_event") && !self.events {
            return;
        }
        self.sequence += 1;
        let mut stamped = Map::with_capacity(frame.len() + 2);
        stamped.insert("version".into(), json!(1));
        stamped.insert("sequence".into(), json!(self.sequence));
        stamped.append(&mut frame);
        match line_of(&stamped) {
            Some(line) => lines.push(line),
            // Keep the sequence gap-free when a frame cannot be encoded.
            None => self.sequence -= 1,
        }
    }

    /// Updates settlement state before the event is written.
    fn observe(&mut self, event: &AgentEvent) {
        let mut inner = self.connection.lock();
        match event {
            AgentEvent::AssistantMessage(message) => {
                if let Some(watch) = inner.watch.as_mut() {
                    watch.text = Some(text_of(message));
                }
            }
            AgentEvent::TurnEnd {
                error: Some(error), ..
            } => {
                if let Some(watch) = inner.watch.as_mut() {
                    watch.error = Some(error.clone());
                }
            }
            AgentEvent::PlanUpdate { update, .. } => {
                inner.plan.0 += 1;
                inner.plan.1 = plan_steps(update);
            }
            AgentEvent::CompactDone { summary } => inner.last_summary = Some(summary.clone()),
            _ => {}
        }
    }
}

fn session_event(event: Value) -> Map<String, Value> {
    let mut frame = Map::new();
    frame.insert("type".into(), json!("session_event"));
    frame.insert("event".into(), event);
    frame
}

impl Encoder for ZiEncoder {
    fn encode(&mut self, output: Output, lines: &mut Vec<Vec<u8>>) {
        match output {
            Output::Event(event) => {
                self.observe(&event);
                for value in self.mapper.map(&event) {
                    self.push(session_event(value), lines);
                }
                if event == AgentEvent::Done {
                    // After the `agent_end` line: idle waiters respond after it.
                    self.connection.completed.send_modify(|n| *n += 1);
                }
            }
            Output::Frame(Value::String(marker)) if marker == RUN_STARTED => {
                self.push(session_event(json!({"type": "agent_start"})), lines);
            }
            Output::Frame(Value::Object(frame)) => self.push(frame, lines),
            Output::Frame(other) => {
                tracing::error!(frame = %other, "dropping a non-object frame");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn frames(lines: &[Vec<u8>]) -> Vec<Value> {
        lines
            .iter()
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect()
    }

    #[test]
    fn sequences_every_frame_and_suppresses_only_session_events() {
        let connection = Connection::new();
        let mut encoder = ZiEncoder::new(connection.clone());
        let mut lines = Vec::new();
        encoder.encode(Output::Frame(json!({"type": "ready"})), &mut lines);
        encoder.encode(Output::Event(AgentEvent::TextDelta("a".into())), &mut lines);
        let set = json!({"type": "response", EVENTS_MODE: false});
        encoder.encode(Output::Frame(set), &mut lines);
        encoder.encode(Output::Event(AgentEvent::TextDelta("b".into())), &mut lines);
        encoder.encode(Output::Event(AgentEvent::Done), &mut lines);
        let frames = frames(&lines);
        let seq: Vec<u64> = frames
            .iter()
            .map(|f| f["sequence"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, vec![1, 2, 3]);
        assert_eq!(
            frames[2],
            json!({"version": 1, "sequence": 3, "type": "response"})
        );
        assert!(frames.iter().all(|f| f["version"] == 1));
        assert_eq!(connection.completed(), 1);
    }
}
