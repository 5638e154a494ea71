//! Agent events as Zi `AgentSessionEvent`-like values. Pure; no I/O.
//!
//! | agent event                     | session event(s)                                   |
//! |---------------------------------|----------------------------------------------------|
//! | run start (`started` marker)    | `agent_start`                                      |
//! | `Done`                          | `agent_end`                                        |
//! | `UserMessage`                   | `message_start` + `message_end` (role `user`)      |
//! | `TurnStart{step}`               | `turn_start {step}`                                |
//! | `AssistantStart`                | `message_start` (empty assistant message)          |
//! | `TextDelta` / `ThinkingDelta`   | `message_update {assistantMessageEvent: {type: text_delta / thinking_delta, delta}}` |
//! | `ToolUseStart/Args/End`         | `message_update` `toolcall_start/toolcall_delta/toolcall_end` |
//! | `AssistantMessage`              | `message_end` (role `assistant`)                   |
//! | `ToolExecutionStarted`          | `tool_execution_start {toolCallId, toolName, args}`|
//! | `ToolProgress`                  | `tool_execution_update {toolCallId, toolName, partialResult}` |
//! | `ToolResult`                    | `tool_execution_end {toolCallId, toolName, result, isError}` |
//! | `PlanUpdate`                    | `work_plan_changed {plan}`                         |
//! | `TurnEnd`                       | `turn_end {stopReason, errorMessage?}`             |
//! | `RequestStarted`/`RetryScheduled` | `request_start` / `auto_retry_start`             |
//! | `Usage`                         | `usage {turn, cumulative}`                         |
//! | `TurnRecovery`                  | `turn_recovery {reason, attempt}`                  |
//! | `Error`                         | `error {message}`                                  |
//! | `CompactDone`                   | `compaction_end {summary}`                         |
//! | `ToolCall`, `CacheDiagnostics`  | nothing (folded into the above / internal)         |
//!
//! Messages use the transcript wire shape of [`super::super::zut::wire_message`].

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::agent::AgentEvent;
use crate::rpc::zut::{wire_blocks, wire_message};

/// Remembers tool calls so execution events can name their tool and args.
#[derive(Debug, Default)]
pub struct EventMapper {
    tools: HashMap<String, (String, Value)>,
}

impl EventMapper {
    /// The session events for one agent event, in order.
    pub fn map(&mut self, event: &AgentEvent) -> Vec<Value> {
        let update =
            |inner: Value| json!({"type": "message_update", "assistantMessageEvent": inner});
        match event {
            AgentEvent::UserMessage(m) => {
                let message = json!(wire_message(m));
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
            AgentEvent::AssistantStart => vec![json!({"type": "message_start",
                "message": {"role": "assistant", "content": []}})],
            AgentEvent::TextDelta(delta) => {
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
                vec![json!({"type": "message_end", "message": wire_message(m)})]
            }
            AgentEvent::Usage { turn, cumulative } => vec![json!({"type": "usage",
                "turn": turn, "cumulative": cumulative})],
            AgentEvent::TurnEnd { stop, error } => {
                let mut event = json!({"type": "turn_end", "stopReason": stop});
                if let Some(error) = error {
                    event["errorMessage"] = json!(error);
                }
                vec![event]
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
        }
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

/// The text blocks of a message, joined.
pub fn text_of(message: &crate::transcript::Message) -> String {
    message
        .content
        .iter()
        .filter_map(|block| match block {
            crate::transcript::Block::Text { text } => Some(text.as_str()),
            _ => None,
        })
        .collect::<Vec<_>>()
        .join("")
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
