//! Stream notifications (`type` + fields, never an `id`), exactly as in the
//! spec's event table. Unknown event types and fields are preserved.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::message::{ContentBlock, Extra, PlanItem, Usage};
use super::tagged::tagged_enum;

tagged_enum! {
    /// Every event of zut RPC v1.
    pub enum Event {
        TurnStart(TurnStart) = "turn_start",
        RequestStarted(RequestStarted) = "request_started",
        CacheDiagnostics(CacheDiagnostics) = "cache_diagnostics",
        RetryScheduled(RetryScheduled) = "retry_scheduled",
        UserMessage(MessageEvent) = "user_message",
        AssistantStart(Empty) = "assistant_start",
        TextDelta(TextDelta) = "text_delta",
        ToolUseStart(ToolUseStart) = "tool_use_start",
        ToolUseArgs(ToolUseArgs) = "tool_use_args",
        ToolUseEnd(ToolUseEnd) = "tool_use_end",
        ToolCall(ToolCall) = "tool_call",
        ToolExecutionStarted(ToolExecutionStarted) = "tool_execution_started",
        ToolProgress(ToolProgress) = "tool_progress",
        PlanUpdate(PlanUpdate) = "plan_update",
        ToolResult(ToolResult) = "tool_result",
        AssistantMessage(MessageEvent) = "assistant_message",
        Usage(UsageEvent) = "usage",
        TurnEnd(TurnEnd) = "turn_end",
        TurnRecovery(TurnRecovery) = "turn_recovery",
        Done(Empty) = "done",
        Error(ErrorEvent) = "error",
        CompactDone(CompactDone) = "compact_done",
        ExtAlert(ExtAlert) = "ext_alert",
        ExtWidget(ExtWidget) = "ext_widget",
        ExtWidgetClear(ExtWidgetClear) = "ext_widget_clear",
        ExtChromeClear(ExtChromeClear) = "ext_chrome_clear",
    }
}

/// Events without fields of their own (`assistant_start`, `done`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Empty {
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnStart {
    pub step: u32,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RequestStarted {
    pub provider: String,
    pub model: String,
    /// `provider` or `agent`.
    pub scope: String,
    pub attempt: u32,
    pub max_attempts: u32,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheDiagnostics {
    pub eligible: bool,
    pub mode: String,
    pub transport: String,
    pub continuation: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RetryScheduled {
    pub scope: String,
    pub attempt: u32,
    pub max_attempts: u32,
    pub delay_ms: u64,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `user_message` and `assistant_message`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MessageEvent {
    pub content: Vec<ContentBlock>,
    pub time: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TextDelta {
    pub delta: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolUseStart {
    pub id: String,
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolUseArgs {
    pub id: String,
    pub delta: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolUseEnd {
    pub id: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub args: Value,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolExecutionStarted {
    pub id: String,
    pub name: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolProgress {
    pub id: String,
    pub text: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PlanUpdate {
    /// The tool call that produced the update; omitted when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Always present, possibly `null`.
    pub explanation: Option<String>,
    pub plan: Vec<PlanItem>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub id: String,
    pub is_error: bool,
    pub content: Vec<ContentBlock>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// Per-turn counters plus the running total.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UsageEvent {
    pub input: u64,
    pub output: u64,
    pub reasoning: Option<u64>,
    pub cache_read: u64,
    pub cache_write: u64,
    pub cache_measured_prompt: u64,
    pub cache_measured_read: u64,
    pub cost_usd: f64,
    pub cumulative: Usage,
    #[serde(flatten)]
    pub extra: Extra,
}

impl UsageEvent {
    pub fn new(turn: &Usage, cumulative: &Usage) -> UsageEvent {
        UsageEvent {
            input: turn.input,
            output: turn.output,
            reasoning: turn.reasoning,
            cache_read: turn.cache_read,
            cache_write: turn.cache_write,
            cache_measured_prompt: turn.cache_measured_prompt,
            cache_measured_read: turn.cache_measured_read,
            cost_usd: turn.cost_usd,
            cumulative: cumulative.clone(),
            extra: Extra::new(),
        }
    }
}

/// Why one model call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    End,
    Continue,
    ToolUse,
    Length,
    Error,
    Aborted,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnEnd {
    pub stop: Stop,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TurnRecovery {
    /// `missing_answer` or `commentary_only`.
    pub reason: String,
    pub attempt: u32,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorEvent {
    pub message: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CompactDone {
    pub summary: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExtAlert {
    pub extension: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExtWidget {
    pub extension: String,
    pub id: String,
    pub position: String,
    pub title: String,
    pub lines: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExtWidgetClear {
    pub extension: String,
    pub id: String,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExtChromeClear {
    pub extension: String,
    #[serde(flatten)]
    pub extra: Extra,
}
