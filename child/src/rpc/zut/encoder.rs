//! The zut encoder: agent events become zut frames one to one, except that
//! a run whose model call failed ends with `error {message}` just before
//! its `done`, as zut's own server ends one (an aborted run does not).

use corral_protocol::zut::Stop;

use super::wire_event;
use crate::agent::{AgentEvent, Output};
use crate::rpc::{line_of, Encoder};

/// The message of a failed run whose `turn_end` carried no error text.
const RUN_FAILED: &str = "the run failed";

/// zut frames; the front-end's own frames are written as they are.
#[derive(Debug, Default)]
pub struct ZutEncoder {
    /// The error of the run in flight when a `turn_end {stop:"error"}` said
    /// it failed: written as an `error` event before the run's `done`,
    /// which every zut example client waits for to report the failure.
    failed: Option<String>,
}

impl Encoder for ZutEncoder {
    fn encode(&mut self, output: Output, lines: &mut Vec<Vec<u8>>) {
        let event = match output {
            Output::Frame(frame) => {
                lines.extend(line_of(&frame));
                return;
            }
            Output::Event(event) => event,
        };
        match &event {
            AgentEvent::TurnEnd {
                stop: Stop::Error,
                error,
            } => {
                self.failed = Some(error.clone().unwrap_or_else(|| RUN_FAILED.into()));
            }
            AgentEvent::Done => {
                if let Some(message) = self.failed.take() {
                    lines.extend(line_of(&wire_event(&AgentEvent::Error(message))));
                }
            }
            _ => {}
        }
        lines.extend(line_of(&wire_event(&event)));
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn frames(events: Vec<AgentEvent>) -> Vec<Value> {
        let mut encoder = ZutEncoder::default();
        let mut lines = Vec::new();
        for event in events {
            encoder.encode(Output::Event(event), &mut lines);
        }
        lines
            .iter()
            .map(|line| serde_json::from_slice(line).expect("a JSON line"))
            .collect()
    }

    fn turn_end(stop: Stop, error: Option<&str>) -> AgentEvent {
        AgentEvent::TurnEnd {
            stop,
            error: error.map(str::to_string),
        }
    }

    #[test]
    fn a_failed_run_ends_with_error_then_done() {
        let out = frames(vec![
            AgentEvent::TurnStart { step: 1 },
            turn_end(Stop::Error, Some("provider down")),
            AgentEvent::Done,
        ]);
        assert_eq!(
            out[1..],
            [
                json!({"type":"turn_end","stop":"error","error":"provider down"}),
                json!({"type":"error","message":"provider down"}),
                json!({"type":"done"}),
            ]
        );
    }

    #[test]
    fn the_error_is_written_once_and_only_for_the_failed_run() {
        let out = frames(vec![
            turn_end(Stop::Error, None),
            AgentEvent::Done,
            turn_end(Stop::End, None),
            AgentEvent::Done,
        ]);
        let types: Vec<&str> = out.iter().filter_map(|f| f["type"].as_str()).collect();
        assert_eq!(types, ["turn_end", "error", "done", "turn_end", "done"]);
        assert_eq!(out[1]["message"], RUN_FAILED);
        let mut encoder = ZutEncoder::default();
        let mut lines = Vec::new();
        encoder.encode(Output::Event(turn_end(Stop::Error, Some("x"))), &mut lines);
        encoder.encode(Output::Event(AgentEvent::Done), &mut lines);
        assert!(
            lines[1].starts_with(b"{\"type\":\"error\""),
            "type leads, for the gateway's fast path"
        );
    }

    #[test]
    fn aborted_and_successful_runs_get_no_error() {
        for stop in [Stop::Aborted, Stop::End, Stop::Length] {
            let out = frames(vec![turn_end(stop, None), AgentEvent::Done]);
            assert!(
                out.iter().all(|f| f["type"] != "error"),
                "{stop:?}: {out:?}"
            );
        }
    }

    #[test]
    fn frontend_frames_pass_through() {
        let mut encoder = ZutEncoder::default();
        let mut lines = Vec::new();
        encoder.encode(
            Output::Frame(json!({"type":"response","id":"1"})),
            &mut lines,
        );
        assert_eq!(lines, [b"{\"type\":\"response\",\"id\":\"1\"}\n".to_vec()]);
    }
}
