//! Agent events as Zi `AgentSessionEvent`-like values. Pure; no I/O.
//!
//! | agent event                     | session event(s)                                   |
//! |---------------------------------|----------------------------------------------------|
//! | run start (`started` marker)    | `agent_start`                                      |
//! | `Done`                          | `agent_end` (and `agent_settled`, from the encoder, when no run is left) |
//! | `UserMessage`                   | `message_start` + `message_end` (role `user`)      |
//! | `TurnStart{step}`               | `turn_start {step}`                                |
//! | `AssistantStart`                | `message_start` (empty assistant message)          |
//! | `TextDelta` / `ThinkingDelta`   | `message_update {assistantMessageEvent: {type: text_delta / thinking_delta, delta}}` |
//! | `ToolUseStart/Args/End`         | `message_update` `toolcall_start/toolcall_delta/toolcall_end` |
//! | `AssistantMessage`              | `message_end` (role `assistant`, with `stopReason`) |
//! | `ToolExecutionStarted`          | `tool_execution_start {toolCallId, toolName, args}`|
//! | `ToolProgress`                  | `tool_execution_update {toolCallId, toolName, partialResult}` |
//! | `ToolResult`                    | `tool_execution_end {toolCallId, toolName, result, isError}` |
//! | `PlanUpdate`                    | `work_plan_changed {plan}`                         |
//! | `TurnEnd` (failed or aborted step) | `message_start`? + `message_end` of the step's record (`stopReason` `error`/`aborted`, `errorMessage`), then `turn_end` |
//! | `TurnEnd`                       | `turn_end {stopReason, errorMessage?}`             |
//! | `RequestStarted`/`RetryScheduled` | `request_start` / `auto_retry_start`             |
//! | `Usage`                         | `usage {turn, cumulative}`                         |
//! | `TurnRecovery`                  | `turn_recovery {reason, attempt}`                  |
//! | `Error`                         | `error {message}`                                  |
//! | `CompactDone`                   | `compaction_end {summary}`                         |
//! | `ToolCall`, `CacheDiagnostics`  | nothing (folded into the above / internal)         |
//!
//! Messages are in the shape of [`super::message::message`].

use std::collections::HashMap;

use serde_json::{json, Value};

use corral_protocol::zut::Stop;

use super::message::{self, failed_step};
use crate::agent::{AgentEvent, ABORTED};
use crate::rpc::transcript_wire::wire_blocks;
use crate::transcript::StopReason;

/// Remembers tool calls so execution events can name their tool and args,
/// and the text the current step has streamed.
#[derive(Debug, Default)]
pub struct EventMapper {
    tools: HashMap<String, (String, Value)>,
    /// The streamed text of the step whose `message_start` went out and
    /// whose `message_end` has not.
    draft: Option<String>,
    /// A compaction runs: its failure is no assistant message.
    pub compacting: bool,
}

impl EventMapper {
    /// The session events for one agent event, in order.
    pub fn map(&mut self, event: &AgentEvent) -> Vec<Value> {
        let update =
            |inner: Value| json!({"type": "message_update", "assistantMessageEvent": inner});
        match event {
            AgentEvent::UserMessage(m) => {
                let message = message::message(m);
                vec![
                    json!({"type": "message_start", "message": message}),
                    json!({"type": "message_end", "message": message}),
                ]
            }
            AgentEvent::TurnStart { step } => vec![json!({"type": "turn_start", "step": step})],
            AgentEvent::RequestStarted {
                provider,
                model,
                attempt,
                max_attempts,
            } => vec![
                json!({"type": "request_start", "provider": provider.to_string(),
                "model": model, "attempt": attempt, "maxAttempts": max_attempts}),
            ],
            AgentEvent::CacheDiagnostics { .. } => vec![],
            AgentEvent::RetryScheduled {
                attempt,
                max_attempts,
                delay,
            } => vec![json!({"type": "auto_retry_start", "attempt": attempt,
                "maxAttempts": max_attempts,
                "delayMs": u64::try_from(delay.as_millis()).unwrap_or(u64::MAX)})],
            AgentEvent::AssistantStart => {
                self.draft = Some(String::new());
                vec![json!({"type": "message_start",
                    "message": {"role": "assistant", "content": []}})]
            }
            AgentEvent::TextDelta(delta) => {
                if let Some(draft) = self.draft.as_mut() {
                    draft.push_str(delta);
                }
                vec![update(json!({"type": "text_delta", "delta": delta}))]
            }
            AgentEvent::ThinkingDelta(delta) => {
                vec![update(json!({"type": "thinking_delta", "delta": delta}))]
            }
            AgentEvent::ToolUseStart { id, name } => vec![update(
                json!({"type": "toolcall_start", "toolCallId": id, "toolName": name}),
            )],
            AgentEvent::ToolUseArgs { id, delta } => vec![update(
                json!({"type": "toolcall_delta", "toolCallId": id, "delta": delta}),
            )],
            AgentEvent::ToolUseEnd { id } => {
                vec![update(json!({"type": "toolcall_end", "toolCallId": id}))]
            }
            AgentEvent::ToolCall { id, name, args } => {
                self.tools.insert(id.clone(), (name.clone(), args.clone()));
                vec![]
            }
            AgentEvent::ToolExecutionStarted { id, name } => {
                let args = self.tools.get(id).map(|(_, a)| a.clone());
                vec![json!({"type": "tool_execution_start", "toolCallId": id,
                    "toolName": name, "args": args.unwrap_or(Value::Null)})]
            }
            AgentEvent::ToolProgress { id, text } => vec![json!({"type": "tool_execution_update",
                "toolCallId": id, "toolName": self.tool_name(id),
                "partialResult": {"text": text}})],
            AgentEvent::PlanUpdate { id, update } => vec![json!({"type": "work_plan_changed",
                "toolCallId": id, "explanation": update.explanation,
                "plan": plan_steps(update)})],
            AgentEvent::ToolResult {
                id,
                is_error,
                content,
            } => {
                let name = self.tool_name(id);
                self.tools.remove(id);
                vec![
                    json!({"type": "tool_execution_end", "toolCallId": id, "toolName": name,
                    "result": {"content": wire_blocks(content)}, "isError": is_error}),
                ]
            }
            AgentEvent::AssistantMessage(m) => {
                self.draft = None;
                vec![json!({"type": "message_end", "message": message::message(m)})]
            }
            AgentEvent::Usage { turn, cumulative } => vec![json!({"type": "usage",
                "turn": turn, "cumulative": cumulative})],
            AgentEvent::TurnEnd { stop, error } => {
                let mut events = self.failed_step(*stop, error.as_deref());
                let mut event = json!({"type": "turn_end", "stopReason": stop});
                if let Some(error) = error {
                    event["errorMessage"] = json!(error);
                }
                events.push(event);
                events
            }
            AgentEvent::TurnRecovery { reason, attempt } => vec![json!({"type": "turn_recovery",
                "reason": reason.to_string(), "attempt": attempt})],
            AgentEvent::Error(message) => vec![json!({"type": "error", "message": message})],
            AgentEvent::CompactDone { summary } => {
                vec![json!({"type": "compaction_end", "summary": summary})]
            }
            AgentEvent::Done => {
                self.tools.clear();
                vec![json!({"type": "agent_end"})]
            }
            // Zi has no way to ask (ask mode is refused at start with this
            // dialect) and no refusal event.
            AgentEvent::PermissionRequest(_)
            | AgentEvent::PermissionResolved { .. }
            | AgentEvent::Refused => Vec::new(),
        }
    }

    /// The assistant message a failed or aborted step leaves in the
    /// transcript, as `message_end` (after a `message_start` when none
    /// is open); nothing for other steps.
    fn failed_step(&mut self, stop: Stop, error: Option<&str>) -> Vec<Value> {
        let draft = self.draft.take();
        let stop = match stop {
            Stop::Error => StopReason::Error,
            Stop::Aborted => StopReason::Aborted,
            _ => return Vec::new(),
        };
        if self.compacting {
            return Vec::new();
        }
        let streamed = draft.as_deref().unwrap_or_default();
        let message = failed_step(streamed, stop, error.unwrap_or(ABORTED));
        let mut events = Vec::with_capacity(2);
        if draft.is_none() {
            let start = json!({"role": "assistant", "content": []});
            events.push(json!({"type": "message_start", "message": start}));
        }
        events.push(json!({"type": "message_end", "message": message}));
        events
    }

    fn tool_name(&self, id: &str) -> Value {
        self.tools
            .get(id)
            .map_or(Value::Null, |(name, _)| json!(name))
    }
}

/// A checklist as work-plan steps.
pub fn plan_steps(update: &crate::tools::PlanUpdate) -> Vec<Value> {
    update
        .plan
        .iter()
        .map(|item| json!({"step": item.step, "status": item.status}))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_execution_names_its_tool_and_args() {
        let mut mapper = EventMapper::default();
        let call = AgentEvent::ToolCall {
            id: "t1".into(),
            name: "read".into(),
            args: json!({"path": "a"}),
        };
        assert!(mapper.map(&call).is_empty());
        let started = mapper.map(&AgentEvent::ToolExecutionStarted {
            id: "t1".into(),
            name: "read".into(),
        });
        assert_eq!(started[0]["args"], json!({"path": "a"}));
        let end = mapper.map(&AgentEvent::ToolResult {
            id: "t1".into(),
            is_error: false,
            content: vec![],
        });
        assert_eq!(end[0]["type"], "tool_execution_end");
        assert_eq!(end[0]["toolName"], "read");
    }

    #[test]
    fn a_failed_step_ends_with_its_record() {
        let mut mapper = EventMapper::default();
        let failed = AgentEvent::TurnEnd {
            stop: Stop::Error,
            error: Some("provider down".into()),
        };
        let events = mapper.map(&failed);
        let kinds: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
        assert_eq!(kinds, ["message_start", "message_end", "turn_end"]);
        assert_eq!(events[1]["message"]["stopReason"], "error");
        assert_eq!(events[1]["message"]["errorMessage"], "provider down");

        mapper.map(&AgentEvent::AssistantStart);
        mapper.map(&AgentEvent::TextDelta("so far".into()));
        let aborted = AgentEvent::TurnEnd {
            stop: Stop::Aborted,
            error: None,
        };
        let events = mapper.map(&aborted);
        assert_eq!(events[0]["type"], "message_end", "{events:?}");
        assert_eq!(events[0]["message"]["content"][0]["text"], "so far");
        assert_eq!(events[0]["message"]["stopReason"], "aborted");
        assert_eq!(events[0]["message"]["errorMessage"], ABORTED);

        let ended = AgentEvent::TurnEnd {
            stop: Stop::End,
            error: None,
        };
        assert_eq!(mapper.map(&ended).len(), 1);
    }

    #[test]
    fn deltas_are_message_updates() {
        let mut mapper = EventMapper::default();
        let events = mapper.map(&AgentEvent::TextDelta("hi".into()));
        assert_eq!(
            events,
            vec![json!({"type": "message_update",
                "assistantMessageEvent": {"type": "text_delta", "delta": "hi"}})]
        );
    }
}
