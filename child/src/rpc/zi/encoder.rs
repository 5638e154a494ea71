//! The Zi encoder: stamps `version` and the connection-local `sequence` on
//! every server frame in output order, wraps agent events as
//! `session_event` frames (dropped under `connection.set_events none`,
//! which takes effect at its response's place in the output), sends
//! `agent_settled` after the `agent_end` that leaves no run active or
//! queued, and records what settlement needs: finished runs, completion
//! evidence (the latest assistant `message_end`, snapshotted at
//! `agent_settled`), the work plan and compaction summaries.

use serde_json::{json, Map, Value};

use super::event::{plan_steps, EventMapper};
use super::message::Latest;
use super::state::{Connection, Settled};
use crate::agent::{AgentEvent, Output};
use crate::rpc::{line_of, Encoder};

/// The `started` marker the frontend attaches to each run; the encoder
/// turns it into an `agent_start` session event.
pub const RUN_STARTED: &str = "zi.run_started";
/// The marker a run discarded before it started sends instead (an
/// interruption drops queued runs): it counts as finished, silently.
pub const RUN_DISCARDED: &str = "zi.run_discarded";
/// A field the frontend puts on the `connection.set_events` response: the
/// encoder applies the mode there, in output order, and strips the field.
pub const EVENTS_MODE: &str = "zi.events";
/// Longest output record, in bytes (without its LF).
pub const MAX_RECORD: usize = corral_protocol::ndjson::DEFAULT_MAX_LINE;

/// Reads the session's message count.
pub type MessageCount = Box<dyn Fn() -> usize + Send>;

/// Writes Zi frames.
pub struct ZiEncoder {
    connection: Connection,
    /// The session's message count, read when it settles.
    message_count: MessageCount,
    /// The last sequence written (the first frame gets 1).
    sequence: u64,
    mapper: EventMapper,
    /// `connection.set_events`: false drops `session_event` frames.
    events: bool,
}

impl ZiEncoder {
    pub fn new(connection: Connection, message_count: MessageCount) -> ZiEncoder {
        ZiEncoder {
            connection,
            message_count,
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
            Some(line) if line.len() > MAX_RECORD + 1 => {
                let stand_in = oversized(stamped, line.len() - 1);
                match line_of(&stand_in) {
                    Some(line) => lines.push(line),
                    None => self.sequence -= 1,
                }
            }
            Some(line) => lines.push(line),
            // Keep the sequence gap-free when a frame cannot be encoded.
            None => self.sequence -= 1,
        }
    }

    /// Updates settlement state before the event is written.
    fn observe(&mut self, event: &AgentEvent) {
        let mut inner = self.connection.lock();
        self.mapper.compacting = inner.compacting;
        match event {
            AgentEvent::PlanUpdate { update, .. } => {
                inner.plan.0 += 1;
                inner.plan.1 = plan_steps(update);
            }
            AgentEvent::CompactDone { summary } => {
                inner.last_summary = Some(summary.clone());
                inner.compacting = false;
                inner.context_tokens = None;
            }
            AgentEvent::RetryScheduled {
                attempt,
                max_attempts,
                delay,
            } => {
                let delay = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
                inner.retry = Some(json!({"type": "waiting", "attempt": attempt,
                    "maxAttempts": max_attempts, "delayMs": delay}));
            }
            AgentEvent::RequestStarted { .. } => inner.retry = None,
            AgentEvent::Usage { turn, .. } => {
                let tokens = turn.input + turn.cache_read + turn.cache_write + turn.output;
                inner.context_tokens = Some(tokens);
            }
            AgentEvent::Done => {
                inner.retry = None;
                inner.compacting = false;
            }
            _ => {}
        }
    }

    /// An assistant `message_end` becomes the watch's latest evidence.
    fn watch_message(&mut self, event: &Value) {
        let message = &event["message"];
        if event["type"] != "message_end" || message["role"] != "assistant" {
            return;
        }
        if let Some(watch) = self.connection.lock().watch.as_mut() {
            watch.latest = Some(Latest::of(message));
        }
    }

    /// After a run's `agent_end`: when no run is left, `agent_settled` and
    /// the watch's settled snapshot. The count of finished runs goes up
    /// last, so idle waiters (and new prompts) come after both.
    fn run_ended(&mut self, lines: &mut Vec<Vec<u8>>) {
        let completed = self.connection.completed() + 1;
        if completed >= self.connection.submitted() {
            let message_count = (self.message_count)();
            if let Some(watch) = self.connection.lock().watch.as_mut() {
                watch.settled = Some(Settled {
                    revision: watch.revision,
                    latest: watch.latest.clone(),
                    message_count,
                });
            }
            self.push(session_event(json!({"type": "agent_settled"})), lines);
        }
        self.connection.completed.send_modify(|n| *n = completed);
    }
}

/// What goes out instead of a record over [`MAX_RECORD`] bytes: a failed
/// response for a response, an `error` session event for anything else.
fn oversized(mut frame: Map<String, Value>, bytes: usize) -> Map<String, Value> {
    let bound = MAX_RECORD >> 20;
    let kind = frame
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if kind == "response" {
        let message = format!("the result is {bytes} bytes, over the {bound} MiB record bound");
        frame.shift_remove("result");
        frame.insert("ok".into(), json!(false));
        frame.insert(
            "error".into(),
            json!({"code": "operation_failed", "message": message}),
        );
        return frame;
    }
    let what = match frame
        .get("event")
        .and_then(|e| e.get("type"))
        .and_then(Value::as_str)
    {
        Some(event) => format!("a `{event}` event"),
        None => format!("a `{kind}` frame"),
    };
    let message =
        format!("{what} of {bytes} bytes exceeded the {bound} MiB record bound and was left out");
    let mut stand_in = Map::new();
    for key in ["version", "sequence"] {
        stand_in.insert(key.into(), frame.shift_remove(key).unwrap_or(Value::Null));
    }
    stand_in.extend(session_event(json!({"type": "error", "message": message})));
    stand_in
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
                    self.watch_message(&value);
                    self.push(session_event(value), lines);
                }
                if event == AgentEvent::Done {
                    self.run_ended(lines);
                }
            }
            Output::Frame(Value::String(marker)) if marker == RUN_STARTED => {
                self.push(session_event(json!({"type": "agent_start"})), lines);
            }
            Output::Frame(Value::String(marker)) if marker == RUN_DISCARDED => {
                self.connection.completed.send_modify(|n| *n += 1);
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
        let mut encoder = ZiEncoder::new(connection.clone(), Box::new(|| 0));
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

    #[test]
    fn the_last_run_end_settles_the_session_and_the_watch() {
        let connection = Connection::new();
        connection
            .submitted
            .store(2, std::sync::atomic::Ordering::SeqCst);
        connection.lock().watch = Some(super::super::state::CompletionWatch::new("c"));
        let mut encoder = ZiEncoder::new(connection.clone(), Box::new(|| 7));
        let mut lines = Vec::new();
        let failed = AgentEvent::TurnEnd {
            stop: corral_protocol::zut::Stop::Error,
            error: Some("down".into()),
        };
        encoder.encode(Output::Event(failed), &mut lines);
        encoder.encode(Output::Event(AgentEvent::Done), &mut lines);
        assert_eq!(connection.completed(), 1);
        assert!(connection.lock().watch.as_ref().unwrap().settled.is_none());
        encoder.encode(Output::Event(AgentEvent::Done), &mut lines);
        let kinds: Vec<String> = frames(&lines)
            .iter()
            .map(|f| f["event"]["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(
            kinds,
            [
                "message_start",
                "message_end",
                "turn_end",
                "agent_end",
                "agent_end",
                "agent_settled"
            ]
        );
        let inner = connection.lock();
        let settled = inner.watch.as_ref().unwrap().settled.as_ref().unwrap();
        assert_eq!(settled.message_count, 7);
        assert_eq!(settled.result()["completion"]["error"], "down");
        assert_eq!(connection.completed(), 2);
    }

    #[test]
    fn a_scheduled_retry_shows_until_the_next_request() {
        let connection = Connection::new();
        let mut encoder = ZiEncoder::new(connection.clone(), Box::new(|| 0));
        let mut lines = Vec::new();
        let retry = AgentEvent::RetryScheduled {
            attempt: 2,
            max_attempts: 4,
            delay: std::time::Duration::from_millis(1500),
        };
        encoder.encode(Output::Event(retry), &mut lines);
        assert_eq!(
            connection.lock().retry,
            Some(json!({"type": "waiting", "attempt": 2, "maxAttempts": 4, "delayMs": 1500}))
        );
        let request = AgentEvent::RequestStarted {
            provider: "anthropic",
            model: "m".into(),
            attempt: 2,
            max_attempts: 4,
        };
        encoder.encode(Output::Event(request), &mut lines);
        assert_eq!(connection.lock().retry, None);
    }

    #[test]
    fn records_over_the_bound_are_replaced_in_place() {
        let mut encoder = ZiEncoder::new(Connection::new(), Box::new(|| 0));
        let mut lines = Vec::new();
        let huge = "x".repeat(MAX_RECORD);
        let response = json!({"type": "response", "id": "m", "method": "session.get_messages",
            "ok": true, "result": {"text": huge}});
        encoder.encode(Output::Frame(response), &mut lines);
        encoder.encode(Output::Event(AgentEvent::TextDelta(huge)), &mut lines);
        encoder.encode(Output::Event(AgentEvent::TextDelta("a".into())), &mut lines);
        assert!(lines.iter().all(|l| l.len() < 1024));
        let frames = frames(&lines);
        assert_eq!(frames[0]["sequence"], 1);
        assert_eq!(frames[0]["id"], "m");
        assert_eq!(frames[0]["ok"], false);
        assert_eq!(frames[0]["error"]["code"], "operation_failed");
        assert!(frames[0].get("result").is_none());
        assert_eq!(frames[1]["sequence"], 2);
        assert_eq!(frames[1]["event"]["type"], "error");
        let message = frames[1]["event"]["message"].as_str().unwrap();
        assert!(message.contains("`message_update` event"), "{message}");
        assert_eq!(frames[2]["sequence"], 3);
    }
}
