//! The ACP encoder: agent events become `session/update` notifications
//! (message and thought chunks, tool calls and their updates, the plan),
//! a permission request becomes a `session/request_permission` request,
//! and a run's `done` becomes the answer to its `session/prompt`, with the
//! stop reason the run's events imply. After each model call a
//! `usage_update` reports the context used, the model's window and the
//! session's cost so far (USD, since the process started: a restarted
//! agent counts afresh). A run's frames to the client carry its trace
//! context in `params._meta`. The front-end steers it with private
//! frames, written in order with the events.

use std::collections::HashMap;
use std::path::PathBuf;

use corral_protocol::acp::{
    method, ContentBlock, Cost, PermissionOption as WireOption, PlanEntry, PlanEntryPriority,
    PlanEntryStatus, SessionUpdate, StopReason, ToolCallContent, ToolCallStatus, ToolCallUpdate,
};
use corral_protocol::permission::PERMISSION_OPTIONS;
use corral_protocol::zut::{Stop, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::rpc::{self, RpcError};
use super::tool_call;
use crate::agent::permission::PermissionAsk;
use crate::agent::{AgentEvent, Output};
use crate::provider::catalogue;
use crate::rpc::trace_context::{self, TraceContext};
use crate::rpc::{line_of, Encoder};
use crate::tools::PlanItem;

/// The key of a private frame (never written).
const PRIVATE: &str = "__corral_acp";
/// What a `/compact` run says before its summary streams.
const COMPACTING: &str = "Compacting the conversation; it will continue from this summary:\n\n";
/// Bytes of a command's progress output shown in its tool call.
const MAX_PROGRESS_BYTES: usize = 64 * 1024;

/// What the front-end tells the encoder, in order with the events.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "private", rename_all = "snake_case")]
pub enum Private {
    /// The session every notification names.
    Session { id: String },
    /// A run starts; its answer goes to `request`.
    RunStart {
        request: Value,
        /// A `/compact` run (its answer follows the compaction's outcome).
        #[serde(default)]
        compact: bool,
        /// Written in `params._meta` of the run's frames to the client.
        #[serde(default)]
        trace: Option<TraceContext>,
    },
    /// A queued prompt was cancelled before it started.
    Discarded { request: Value },
    /// `session/cancel`: the run in flight ends `cancelled`.
    Cancel,
}

impl Private {
    pub fn to_frame(&self) -> Value {
        json!({ PRIVATE: self })
    }
}

/// A session update as a `session/update` notification.
pub fn update_frame(session: &str, update: &SessionUpdate) -> Value {
    rpc::notification(
        method::SESSION_UPDATE,
        json!({"sessionId": session, "update": update}),
    )
}

/// A plan as ACP plan entries.
pub fn plan_update(items: &[PlanItem]) -> SessionUpdate {
    let entries = items
        .iter()
        .map(|item| PlanEntry {
            content: item.step.clone(),
            priority: PlanEntryPriority::Medium,
            status: match item.status.as_str() {
                "completed" => PlanEntryStatus::Completed,
                "in_progress" => PlanEntryStatus::InProgress,
                _ => PlanEntryStatus::Pending,
            },
        })
        .collect();
    SessionUpdate::Plan { entries }
}

/// What decides a prompt's answer.
#[derive(Debug, Default)]
struct Run {
    request: Value,
    /// A compaction: it succeeded when `compacted`, else failed with
    /// the last `error`.
    compact: bool,
    compacted: bool,
    error: Option<String>,
    trace: Option<TraceContext>,
    cancelled: bool,
    refused: bool,
    /// The stop of the last step.
    last_stop: Option<Stop>,
    /// Why the run failed (a model call that failed for good).
    failed: Option<String>,
}

impl Run {
    fn answer(&self) -> Result<StopReason, RpcError> {
        if self.cancelled || self.last_stop == Some(Stop::Aborted) {
            return Ok(StopReason::Cancelled);
        }
        if self.compact && !self.compacted {
            let error = self.error.as_deref().unwrap_or("the compaction failed");
            return Err(RpcError::internal(error));
        }
        if let Some(error) = &self.failed {
            return Err(RpcError::internal(error.clone()));
        }
        Ok(match self.last_stop {
            _ if self.refused => StopReason::Refusal,
            Some(Stop::Length) => StopReason::MaxTokens,
            // The loop wanted another step but was out of them.
            Some(Stop::ToolUse | Stop::Continue) => StopReason::MaxTurnRequests,
            _ => StopReason::EndTurn,
        })
    }
}

/// A tool call in flight.
#[derive(Debug)]
struct Call {
    name: String,
    args: Value,
    progress: String,
}

/// ACP frames for one agent.
#[derive(Debug)]
pub struct AcpEncoder {
    /// Tool paths resolve against it (ACP wants absolute paths).
    cwd: PathBuf,
    session: String,
    run: Option<Run>,
    calls: HashMap<String, Call>,
    /// The provider and model of the latest model call (for the context
    /// window `usage_update` reports).
    model: Option<(&'static str, String)>,
}

impl AcpEncoder {
    pub fn new(cwd: PathBuf) -> AcpEncoder {
        AcpEncoder {
            cwd,
            session: String::new(),
            run: None,
            calls: HashMap::new(),
            model: None,
        }
    }

    fn private(&mut self, private: Private) -> Vec<Value> {
        match private {
            Private::Session { id } => self.session = id,
            Private::RunStart {
                request,
                compact,
                trace,
            } => {
                self.run = Some(Run {
                    request,
                    compact,
                    trace,
                    ..Run::default()
                });
                // The summary streams as the agent's message; say what it is.
                if compact {
                    return self.update(SessionUpdate::AgentMessageChunk {
                        content: ContentBlock::text(COMPACTING),
                    });
                }
            }
            Private::Discarded { request } => {
                return vec![rpc::result(
                    &request,
                    json!({"stopReason": StopReason::Cancelled}),
                )]
            }
            Private::Cancel => {
                if let Some(run) = &mut self.run {
                    run.cancelled = true;
                }
            }
        }
        Vec::new()
    }

    fn update(&self, update: SessionUpdate) -> Vec<Value> {
        vec![update_frame(&self.session, &update)]
    }

    fn call_update(&self, update: ToolCallUpdate) -> Vec<Value> {
        self.update(SessionUpdate::ToolCallUpdate(update))
    }

    fn event(&mut self, event: AgentEvent) -> Vec<Value> {
        let text = |text: String| ContentBlock::Text { text };
        match event {
            AgentEvent::TextDelta(delta) => self.update(SessionUpdate::AgentMessageChunk {
                content: text(delta),
            }),
            AgentEvent::ThinkingDelta(delta) => self.update(SessionUpdate::AgentThoughtChunk {
                content: text(delta),
            }),
            AgentEvent::ToolCall { id, name, args } => {
                let call = tool_call::announce(&id, &name, &args, &self.cwd);
                self.calls.insert(
                    id,
                    Call {
                        name,
                        args,
                        progress: String::new(),
                    },
                );
                self.update(SessionUpdate::ToolCall(call))
            }
            AgentEvent::PermissionRequest(ask) => vec![self.permission_request(&ask)],
            AgentEvent::ToolExecutionStarted { id, .. } => self.call_update(ToolCallUpdate {
                tool_call_id: id,
                status: Some(ToolCallStatus::InProgress),
                ..ToolCallUpdate::default()
            }),
            AgentEvent::ToolProgress { id, text: line } => {
                let Some(call) = self.calls.get_mut(&id) else {
                    return Vec::new();
                };
                if call.progress.len() + line.len() + 1 > MAX_PROGRESS_BYTES {
                    return Vec::new();
                }
                call.progress.push_str(&line);
                call.progress.push('\n');
                let content = vec![ToolCallContent::Content {
                    content: text(call.progress.clone()),
                }];
                self.call_update(ToolCallUpdate {
                    tool_call_id: id,
                    content: Some(content),
                    ..ToolCallUpdate::default()
                })
            }
            AgentEvent::PlanUpdate { update, .. } => self.update(plan_update(&update.plan)),
            AgentEvent::ToolResult {
                id,
                is_error,
                content,
            } => {
                let call = self.calls.remove(&id);
                let (name, args) = call
                    .as_ref()
                    .map_or(("", &Value::Null), |c| (c.name.as_str(), &c.args));
                let content = tool_call::result_content(name, args, &self.cwd, is_error, &content);
                let status = if is_error {
                    ToolCallStatus::Failed
                } else {
                    ToolCallStatus::Completed
                };
                self.call_update(ToolCallUpdate {
                    tool_call_id: id,
                    status: Some(status),
                    content: Some(content),
                    ..ToolCallUpdate::default()
                })
            }
            AgentEvent::Refused => {
                if let Some(run) = &mut self.run {
                    run.refused = true;
                }
                Vec::new()
            }
            AgentEvent::TurnEnd { stop, error } => {
                if let Some(run) = &mut self.run {
                    run.last_stop = Some(stop);
                    if stop == Stop::Error {
                        run.failed = Some(error.unwrap_or_else(|| "the model call failed".into()));
                    }
                }
                Vec::new()
            }
            AgentEvent::Error(message) => {
                tracing::warn!(message, "agent error");
                if let Some(run) = &mut self.run {
                    run.error = Some(message);
                }
                Vec::new()
            }
            AgentEvent::RequestStarted {
                provider, model, ..
            } => {
                self.model = Some((provider, model));
                Vec::new()
            }
            AgentEvent::Usage { turn, cumulative } => {
                self.update(self.usage_update(&turn, &cumulative))
            }
            AgentEvent::CompactDone { .. } => {
                if let Some(run) = &mut self.run {
                    run.compacted = true;
                }
                Vec::new()
            }
            AgentEvent::Done => {
                self.calls.clear();
                let Some(run) = self.run.take() else {
                    return Vec::new();
                };
                vec![match run.answer() {
                    Ok(stop) => rpc::result(&run.request, json!({"stopReason": stop})),
                    Err(error) => rpc::error(&run.request, &error),
                }]
            }
            AgentEvent::UserMessage(_)
            | AgentEvent::TurnStart { .. }
            | AgentEvent::CacheDiagnostics { .. }
            | AgentEvent::RetryScheduled { .. }
            | AgentEvent::AssistantStart
            | AgentEvent::ToolUseStart { .. }
            | AgentEvent::ToolUseArgs { .. }
            | AgentEvent::ToolUseEnd { .. }
            | AgentEvent::PermissionResolved { .. }
            | AgentEvent::AssistantMessage(_)
            | AgentEvent::TurnRecovery { .. } => Vec::new(),
        }
    }

    /// The context after a model call (its prompt and its answer), the
    /// model's window (0 when the catalogue does not know the model) and
    /// the session's cost so far.
    fn usage_update(&self, turn: &Usage, total: &Usage) -> SessionUpdate {
        let used = turn.input + turn.cache_read + turn.cache_write + turn.output;
        let size = self
            .model
            .as_ref()
            .and_then(|(provider, model)| catalogue::find(provider, model))
            .map_or(0, |info| info.context_window);
        SessionUpdate::UsageUpdate {
            used,
            size,
            cost: Some(Cost {
                amount: total.cost_usd,
                currency: "USD".into(),
            }),
        }
    }

    /// `session/request_permission` for a call; the request's id is the
    /// permission request's, so the answer finds its way back.
    fn permission_request(&self, ask: &PermissionAsk) -> Value {
        let call = tool_call::announce(&ask.call_id, &ask.tool, &ask.args, &self.cwd);
        let tool_call = ToolCallUpdate {
            tool_call_id: call.tool_call_id,
            title: Some(call.title),
            kind: Some(call.kind),
            status: Some(ToolCallStatus::Pending),
            content: Some(call.content).filter(|c| !c.is_empty()),
            locations: Some(call.locations).filter(|l| !l.is_empty()),
            raw_input: call.raw_input,
            raw_output: None,
        };
        let options: Vec<WireOption> = PERMISSION_OPTIONS
            .into_iter()
            .map(|option| WireOption {
                option_id: option.as_str().to_string(),
                name: option.label().to_string(),
                kind: option,
            })
            .collect();
        rpc::request(
            &ask.id,
            method::SESSION_REQUEST_PERMISSION,
            json!({"sessionId": self.session, "toolCall": tool_call, "options": options}),
        )
    }
}

impl Encoder for AcpEncoder {
    fn encode(&mut self, output: Output, lines: &mut Vec<Vec<u8>>) {
        let frames = match output {
            Output::Frame(frame) => match frame.get(PRIVATE) {
                Some(private) => match serde_json::from_value(private.clone()) {
                    Ok(private) => self.private(private),
                    Err(e) => {
                        tracing::error!(error = %e, "unreadable private frame");
                        Vec::new()
                    }
                },
                None => vec![frame],
            },
            Output::Event(event) => self.event(event),
        };
        let trace = self.run.as_ref().and_then(|run| run.trace.as_ref());
        for mut frame in frames {
            if let Some(trace) = trace {
                trace_context::put_in_meta(&mut frame, trace);
            }
            lines.extend(line_of(&frame));
        }
    }
}

#[cfg(test)]
#[path = "encoder_tests.rs"]
mod tests;
