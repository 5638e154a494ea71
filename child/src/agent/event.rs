//! What the agent reports while it works, independent of any wire dialect.
//!
//! Each RPC front-end maps these to its own frames; they follow the zut RPC
//! event table closely because that is the richest of the dialects.

use std::time::Duration;

use corral_protocol::zut::{Stop, Usage};
use serde_json::Value;

use super::permission::{Outcome, PermissionAsk};
use crate::tools::PlanUpdate;
use crate::transcript::{Block, Message};

/// One notification from a run (a prompt or a compaction).
#[derive(Clone, Debug, PartialEq)]
pub enum AgentEvent {
    /// The prompt was added to the transcript.
    UserMessage(Message),
    /// A model call (one step of the loop) begins.
    TurnStart {
        step: u32,
    },
    /// An attempt at a provider request begins.
    RequestStarted {
        provider: &'static str,
        model: String,
        attempt: u32,
        max_attempts: u32,
    },
    /// Prompt-cache routing state of the request about to be sent.
    CacheDiagnostics {
        eligible: bool,
        mode: &'static str,
        continuation: bool,
    },
    /// The next attempt waits `delay` first.
    RetryScheduled {
        attempt: u32,
        max_attempts: u32,
        delay: Duration,
    },
    /// The provider accepted the request; streaming begins.
    AssistantStart,
    TextDelta(String),
    ThinkingDelta(String),
    ToolUseStart {
        id: String,
        name: String,
    },
    ToolUseArgs {
        id: String,
        delta: String,
    },
    ToolUseEnd {
        id: String,
    },
    ToolCall {
        id: String,
        name: String,
        args: Value,
    },
    /// A tool call waits for the client's permission (mode `ask`).
    PermissionRequest(PermissionAsk),
    /// A permission request was answered, or ended unanswered.
    PermissionResolved {
        /// The request's id.
        id: String,
        call_id: String,
        outcome: Outcome,
    },
    ToolExecutionStarted {
        id: String,
        name: String,
    },
    ToolProgress {
        id: String,
        text: String,
    },
    PlanUpdate {
        id: String,
        update: PlanUpdate,
    },
    ToolResult {
        id: String,
        is_error: bool,
        content: Vec<Block>,
    },
    /// The assistant message of the step, as added to the transcript.
    AssistantMessage(Message),
    Usage {
        turn: Usage,
        cumulative: Usage,
    },
    /// The model declined to answer (the provider's `refusal` or
    /// `content_filter` stop); its `turn_end` follows.
    Refused,
    TurnEnd {
        stop: Stop,
        error: Option<String>,
    },
    TurnRecovery {
        reason: &'static str,
        attempt: u32,
    },
    /// A problem worth telling the user that does not end the run by itself.
    Error(String),
    CompactDone {
        summary: String,
    },
    /// The run is over (always the last event of a run, exactly once).
    Done,
}
