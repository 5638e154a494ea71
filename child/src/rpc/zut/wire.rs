//! The mapping from the agent's events to zut wire shapes (the transcript's
//! own shape is [`crate::rpc::transcript_wire`]): `thinking_delta {delta}`
//! is the one extension event.

use corral_protocol::permission::{self, PermissionOption, PERMISSION_OPTIONS};
use corral_protocol::zut::{self, Event, Extra};
use serde_json::{json, Map, Value};

use crate::agent::AgentEvent;
use crate::rpc::transcript_wire::wire_blocks;

/// The extension event saying the model declined to answer.
pub const REFUSAL_EVENT: &str = "refusal";

/// An extension event (a type zut clients ignore unless they know it).
fn extension(frame: Value) -> Event {
    match frame {
        Value::Object(map) => Event::Unknown(map),
        _ => Event::Unknown(Map::new()),
    }
}

/// The zut frame for an agent event (every event has one).
pub fn wire_event(event: &AgentEvent) -> Event {
    let extra = Extra::new;
    match event {
        AgentEvent::UserMessage(m) => Event::UserMessage(zut::MessageEvent {
            content: wire_blocks(&m.content),
            time: m.time.clone(),
            extra: extra(),
        }),
        AgentEvent::AssistantMessage(m) => Event::AssistantMessage(zut::MessageEvent {
            content: wire_blocks(&m.content),
            time: m.time.clone(),
            extra: extra(),
        }),
        AgentEvent::TurnStart { step } => Event::TurnStart(zut::TurnStart {
            step: *step,
            extra: extra(),
        }),
        AgentEvent::RequestStarted {
            provider,
            model,
            attempt,
            max_attempts,
        } => Event::RequestStarted(zut::RequestStarted {
            provider: provider.to_string(),
            model: model.clone(),
            scope: "provider".into(),
            attempt: *attempt,
            max_attempts: *max_attempts,
            extra: extra(),
        }),
        AgentEvent::CacheDiagnostics {
            eligible,
            mode,
            continuation,
        } => Event::CacheDiagnostics(zut::CacheDiagnostics {
            eligible: *eligible,
            mode: mode.to_string(),
            transport: "sse".into(),
            continuation: *continuation,
            extra: extra(),
        }),
        AgentEvent::RetryScheduled {
            attempt,
            max_attempts,
            delay,
        } => Event::RetryScheduled(zut::RetryScheduled {
            scope: "provider".into(),
            attempt: *attempt,
            max_attempts: *max_attempts,
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            extra: extra(),
        }),
        AgentEvent::AssistantStart => Event::AssistantStart(zut::Empty::default()),
        AgentEvent::TextDelta(delta) => Event::TextDelta(zut::TextDelta {
            delta: delta.clone(),
            extra: extra(),
        }),
        AgentEvent::ThinkingDelta(delta) => {
            let mut map = Map::new();
            map.insert("type".into(), json!("thinking_delta"));
            map.insert("delta".into(), json!(delta));
            Event::Unknown(map)
        }
        AgentEvent::ToolUseStart { id, name } => Event::ToolUseStart(zut::ToolUseStart {
            id: id.clone(),
            name: name.clone(),
            extra: extra(),
        }),
        AgentEvent::ToolUseArgs { id, delta } => Event::ToolUseArgs(zut::ToolUseArgs {
            id: id.clone(),
            delta: delta.clone(),
            extra: extra(),
        }),
        AgentEvent::ToolUseEnd { id } => Event::ToolUseEnd(zut::ToolUseEnd {
            id: id.clone(),
            extra: extra(),
        }),
        AgentEvent::ToolCall { id, name, args } => Event::ToolCall(zut::ToolCall {
            id: id.clone(),
            name: name.clone(),
            args: args.clone(),
            extra: extra(),
        }),
        AgentEvent::ToolExecutionStarted { id, name } => {
            Event::ToolExecutionStarted(zut::ToolExecutionStarted {
                id: id.clone(),
                name: name.clone(),
                extra: extra(),
            })
        }
        AgentEvent::ToolProgress { id, text } => Event::ToolProgress(zut::ToolProgress {
            id: id.clone(),
            text: text.clone(),
            extra: extra(),
        }),
        AgentEvent::PlanUpdate { id, update } => Event::PlanUpdate(zut::PlanUpdate {
            id: Some(id.clone()).filter(|id| !id.is_empty()),
            explanation: update.explanation.clone(),
            plan: update
                .plan
                .iter()
                .map(|item| zut::PlanItem {
                    step: item.step.clone(),
                    status: item.status.clone(),
                })
                .collect(),
            extra: extra(),
        }),
        AgentEvent::ToolResult {
            id,
            is_error,
            content,
        } => Event::ToolResult(zut::ToolResult {
            id: id.clone(),
            is_error: *is_error,
            content: wire_blocks(content),
            extra: extra(),
        }),
        AgentEvent::Usage { turn, cumulative } => {
            Event::Usage(zut::UsageEvent::new(turn, cumulative))
        }
        AgentEvent::TurnEnd { stop, error } => Event::TurnEnd(zut::TurnEnd {
            stop: *stop,
            error: error.clone(),
            extra: extra(),
        }),
        AgentEvent::TurnRecovery { reason, attempt } => Event::TurnRecovery(zut::TurnRecovery {
            reason: reason.to_string(),
            attempt: *attempt,
            extra: extra(),
        }),
        AgentEvent::Error(message) => Event::Error(zut::ErrorEvent {
            message: message.clone(),
            extra: extra(),
        }),
        AgentEvent::CompactDone { summary } => Event::CompactDone(zut::CompactDone {
            summary: summary.clone(),
            extra: extra(),
        }),
        AgentEvent::Done => Event::Done(zut::Empty::default()),
        AgentEvent::PermissionRequest(ask) => extension(json!({
            "type": permission::REQUEST_EVENT,
            "request_id": ask.id,
            "id": ask.call_id,
            "name": ask.tool,
            "args": ask.args,
            "kind": ask.risk.as_str(),
            "options": PERMISSION_OPTIONS.map(PermissionOption::as_str),
        })),
        AgentEvent::PermissionResolved {
            id,
            call_id,
            outcome,
        } => extension(json!({
            "type": permission::RESOLVED_EVENT,
            "request_id": id,
            "id": call_id,
            "outcome": outcome.as_str(),
        })),
        AgentEvent::Refused => extension(json!({"type": REFUSAL_EVENT})),
    }
}
