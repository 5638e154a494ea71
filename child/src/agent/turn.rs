//! The prompt loop: model call, tool calls, repeat until the model answers,
//! the step limit is reached, something fails or the run is aborted.

use corral_protocol::zut::Stop;
use serde_json::Value;
use tokio::sync::mpsc;
use tracing::Instrument as _;

use super::call::{call_model, CallError};
use super::permission::{rejected, Gate, Outcome};
use super::{trace, usage, AgentEvent, RunCtx, ABORTED};
use crate::provider::{catalogue, ModelRequest, ModelResponse, ModelStop};
use crate::tools::{ToolContext, ToolOutput};
use crate::transcript::{Block, Message, Role, StopReason};

/// Output tokens requested per call when the catalogue does not know the
/// model, and the cap for known ones (longer answers come as more steps).
const DEFAULT_MAX_OUTPUT: u64 = 8192;
const MAX_OUTPUT_CAP: u64 = 32_000;

/// The error of a run whose prompt has neither text nor images.
pub(crate) const EMPTY_PROMPT: &str = "prompt is empty";

/// The continuation prompt appended when a step ends without an answer.
const RECOVERY_PROMPT: &str =
    "Your previous turn ended without a final answer. Please give your final answer to the user now.";

pub(crate) async fn run_prompt(ctx: &RunCtx<'_>, text: String, images: Vec<Block>) {
    // A prompt with nothing in it fails as a run (its `done` follows), so a
    // client that waits for `done` is not left waiting; nothing is recorded.
    if text.trim().is_empty() && images.is_empty() {
        ctx.emit(AgentEvent::Error(EMPTY_PROMPT.into())).await;
        return;
    }
    let mut content = Vec::with_capacity(1 + images.len());
    if !text.is_empty() {
        content.push(Block::text(text));
    }
    content.extend(images);
    let user = Message::new(Role::User, content);
    ctx.record(user.clone()).await;
    ctx.emit(AgentEvent::UserMessage(user)).await;
    steps(ctx).await;
}

/// Goes on with input that came after the run had decided to end (see
/// [`super::Agent::queue_input`]), as more steps of the same run.
pub(crate) async fn resume(ctx: &RunCtx<'_>) {
    if input_waits(ctx) {
        steps(ctx).await;
    }
}

/// Model calls and tool calls until the run ends.
async fn steps(ctx: &RunCtx<'_>) {
    let max_steps = ctx.shared.settings.max_steps;
    let mut recovered = false;
    // The MCP servers' tools are listed before the first model call.
    ctx.shared.tools.ready(&ctx.cancel).await;
    let system = ctx.shared.settings.system_prompt.assembled().await;
    for step in 1..=max_steps {
        take_steering(ctx).await;
        ctx.emit(AgentEvent::TurnStart { step }).await;
        let request = build_request(ctx, system.clone());
        let model = request.model.clone();
        let span = trace::model_call(&model, step);
        let called = call_model(ctx, request, step > 1)
            .instrument(span.clone())
            .await;
        let response = match called {
            Ok(response) => {
                let info = catalogue::find(ctx.shared.provider.name(), &model);
                trace::record_usage(&span, &usage::turn_usage(&response.usage, info));
                response
            }
            Err(CallError::Aborted { partial }) => {
                // What was streamed stays in context; an empty record does not.
                let content = if partial.is_empty() {
                    Vec::new()
                } else {
                    vec![Block::text(partial)]
                };
                let record = Message::failed_step(content, StopReason::Aborted, ABORTED.into());
                ctx.record(record).await;
                end_turn(ctx, Stop::Aborted, None).await;
                return;
            }
            Err(CallError::Failed(error)) => {
                trace::record_error(&span);
                let record = Message::failed_step(Vec::new(), StopReason::Error, error.clone());
                ctx.record(record).await;
                end_turn(ctx, Stop::Error, Some(error)).await;
                return;
            }
        };
        match finish_step(ctx, response, &model).await {
            StepEnd::Continue => continue,
            StepEnd::Aborted => return,
            StepEnd::Answered if input_waits(ctx) => continue,
            StepEnd::Answered => return,
            StepEnd::MissingAnswer if !recovered => {
                recovered = true;
                end_turn(ctx, Stop::Continue, None).await;
                ctx.emit(AgentEvent::TurnRecovery {
                    reason: "missing_answer",
                    attempt: 1,
                })
                .await;
                ctx.record(Message::new(Role::User, vec![Block::text(RECOVERY_PROMPT)]))
                    .await;
            }
            StepEnd::MissingAnswer => {
                end_turn(ctx, Stop::End, None).await;
                if !input_waits(ctx) {
                    return;
                }
            }
        }
    }
    ctx.emit(AgentEvent::Error(format!(
        "stopped after {max_steps} model calls (the --max-steps limit); send another prompt to continue"
    )))
    .await;
}

/// Adds the steering messages sent since the last step to the transcript.
async fn take_steering(ctx: &RunCtx<'_>) {
    let pending = std::mem::take(&mut ctx.shared.steering().pending);
    for text in pending {
        let message = Message::new(Role::User, vec![Block::text(text)]);
        ctx.record(message.clone()).await;
        ctx.emit(AgentEvent::UserMessage(message)).await;
    }
}

/// Whether input waits for another step: steering, else the next queued
/// follow-up (which becomes steering, one per step). When nothing waits,
/// the run stops taking input, atomically, so that nothing sent later is
/// stranded: it waits for the next run instead.
fn input_waits(ctx: &RunCtx<'_>) -> bool {
    let mut input = ctx.shared.steering();
    if input.pending.is_empty() && !input.follow_up.is_empty() {
        let next = input.follow_up.remove(0);
        input.pending.push(next);
    }
    input.open = !input.pending.is_empty();
    input.open
}

enum StepEnd {
    /// Tool results were added; the model must be called again.
    Continue,
    /// The model gave its answer.
    Answered,
    /// The model stopped with neither text nor tool calls.
    MissingAnswer,
    Aborted,
}

/// Records the step's assistant message, runs its tool calls (each result
/// recorded as it arrives) and reports the step. The message is journaled
/// before any tool runs, so a crash mid-tool leaves the call on disk to be
/// answered "interrupted" on restart, never run again by itself.
async fn finish_step(ctx: &RunCtx<'_>, response: ModelResponse, model: &str) -> StepEnd {
    let stop = match response.stop {
        _ if has_tool_calls(&response.content) => StopReason::ToolUse,
        ModelStop::MaxTokens => StopReason::Length,
        _ => StopReason::Stop,
    };
    let assistant = Message::assistant(response.content, stop);
    let calls: Vec<(String, String, Value)> = assistant
        .tool_calls()
        .map(|(id, name, args)| (id.to_string(), name.to_string(), args.clone()))
        .collect();
    ctx.record(assistant.clone()).await;
    let mut aborted = false;
    for (id, name, args) in &calls {
        if aborted || ctx.cancel.is_cancelled() {
            aborted = true;
            let output = ToolOutput::error("not run: the prompt was aborted");
            ctx.record_tool_result(id, &output).await;
            continue;
        }
        ctx.emit(AgentEvent::ToolCall {
            id: id.clone(),
            name: name.clone(),
            args: args.clone(),
        })
        .await;
        let span = trace::tool_call(name);
        let output = execute_tool(ctx, id, name, args.clone())
            .instrument(span.clone())
            .await;
        if output.is_error {
            trace::record_error(&span);
        }
        aborted = ctx.cancel.is_cancelled();
        ctx.record_tool_result(id, &output).await;
        if let Some(update) = output.plan.clone() {
            ctx.emit(AgentEvent::PlanUpdate {
                id: id.clone(),
                update,
            })
            .await;
        }
        ctx.emit(AgentEvent::ToolResult {
            id: id.clone(),
            is_error: output.is_error,
            content: output.content.clone(),
        })
        .await;
    }

    let answered = !assistant.text().trim().is_empty();
    ctx.emit(AgentEvent::AssistantMessage(assistant)).await;
    report_usage(ctx, &response.usage, model).await;

    if aborted {
        let record = Message::failed_step(Vec::new(), StopReason::Aborted, ABORTED.into());
        ctx.record(record).await;
        end_turn(ctx, Stop::Aborted, None).await;
        return StepEnd::Aborted;
    }
    if !calls.is_empty() {
        end_turn(ctx, Stop::ToolUse, None).await;
        return StepEnd::Continue;
    }
    match response.stop {
        ModelStop::MaxTokens => {
            end_turn(ctx, Stop::Length, None).await;
            StepEnd::Answered
        }
        ModelStop::Other(ref reason) if is_refusal(reason) => {
            ctx.emit(AgentEvent::Refused).await;
            end_turn(ctx, Stop::End, None).await;
            StepEnd::Answered
        }
        _ if !answered => StepEnd::MissingAnswer,
        _ => {
            end_turn(ctx, Stop::End, None).await;
            StepEnd::Answered
        }
    }
}

/// Runs one tool, forwarding its progress lines, until it finishes or the
/// run is aborted (dropping the tool's future kills what it started).
async fn execute_tool(ctx: &RunCtx<'_>, id: &str, name: &str, args: Value) -> ToolOutput {
    if !ctx.shared.tools.has(name) {
        return ToolOutput::error(format!(
            "unknown tool `{name}`; available tools: {}",
            ctx.shared.tools.all_names().join(", ")
        ));
    }
    if let Err(refused) = permit(ctx, id, name, &args).await {
        return refused;
    }
    ctx.emit(AgentEvent::ToolExecutionStarted {
        id: id.to_string(),
        name: name.to_string(),
    })
    .await;
    let (progress, mut lines) = mpsc::unbounded_channel();
    let tool_ctx = ToolContext {
        cwd: ctx.shared.settings.cwd.clone(),
        confinement: ctx.shared.settings.tool_confinement.clone(),
        cancel: ctx.cancel.child_token(),
        progress,
        files: ctx.shared.client_files(),
    };
    let run = ctx.shared.tools.call(name, args, tool_ctx);
    tokio::pin!(run);
    let mut open = true;
    let output = loop {
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => break ToolOutput::error("aborted"),
            line = lines.recv(), if open => match line {
                Some(text) => ctx.emit(AgentEvent::ToolProgress { id: id.to_string(), text }).await,
                None => open = false,
            },
            output = &mut run => break output,
        }
    };
    while let Ok(text) = lines.try_recv() {
        ctx.emit(AgentEvent::ToolProgress {
            id: id.to_string(),
            text,
        })
        .await;
    }
    output
}

/// Passes the permission gate: at once, or after the client's answer
/// (mode `ask`), or not (the refusal is the tool's result). A run
/// cancelled while it waits stops waiting.
async fn permit(
    ctx: &RunCtx<'_>,
    call_id: &str,
    name: &str,
    args: &Value,
) -> Result<(), ToolOutput> {
    let class = ctx.shared.tools.class(name);
    let (ask, answer) = match ctx
        .shared
        .permissions
        .check_class(call_id, name, class, args)
    {
        Gate::Allow => return Ok(()),
        Gate::Refuse(message) => return Err(ToolOutput::error(message)),
        Gate::Ask(ask, answer) => (ask, answer),
    };
    let id = ask.id.clone();
    let span = trace::permission_wait(name);
    ctx.emit(AgentEvent::PermissionRequest(ask)).await;
    let outcome = async {
        tokio::select! {
            biased;
            _ = ctx.cancel.cancelled() => {
                ctx.shared.permissions.withdraw(&id);
                Outcome::Cancelled
            }
            answer = answer => answer.unwrap_or(Outcome::Cancelled),
        }
    }
    .instrument(span.clone())
    .await;
    trace::record_outcome(&span, &outcome);
    ctx.emit(AgentEvent::PermissionResolved {
        id,
        call_id: call_id.to_string(),
        outcome,
    })
    .await;
    match outcome {
        Outcome::Selected(option) if option.allows() => Ok(()),
        Outcome::Selected(option) => Err(ToolOutput::error(rejected(name, option.remembered()))),
        Outcome::Cancelled => Err(ToolOutput::error(
            "not run: the permission request was cancelled",
        )),
    }
}

/// Whether a provider's stop reason means the model declined to answer.
fn is_refusal(reason: &str) -> bool {
    matches!(reason, "refusal" | "content_filter")
}

async fn report_usage(ctx: &RunCtx<'_>, tokens: &crate::provider::TokenUsage, model: &str) {
    let info = catalogue::find(ctx.shared.provider.name(), model);
    let turn = usage::turn_usage(tokens, info);
    let cumulative = {
        let mut session = ctx.shared.session();
        usage::accumulate(&mut session.usage, &turn);
        session.usage.clone()
    };
    ctx.emit(AgentEvent::Usage { turn, cumulative }).await;
}

fn has_tool_calls(content: &[Block]) -> bool {
    content.iter().any(|b| matches!(b, Block::ToolCall { .. }))
}

async fn end_turn(ctx: &RunCtx<'_>, stop: Stop, error: Option<String>) {
    ctx.emit(AgentEvent::TurnEnd { stop, error }).await;
}

/// The request for the next model call with `system`, from the current
/// session state.
pub(crate) fn build_request(ctx: &RunCtx<'_>, system: String) -> ModelRequest {
    let session = ctx.shared.session();
    let max_output = catalogue::find(ctx.shared.provider.name(), &session.model)
        .map_or(DEFAULT_MAX_OUTPUT, |info| {
            info.max_output.min(MAX_OUTPUT_CAP)
        });
    ModelRequest {
        model: session.model.clone(),
        system,
        messages: session.messages().to_vec(),
        tools: ctx.shared.tools.specs(),
        reasoning: session.reasoning,
        max_output: u32::try_from(max_output).unwrap_or(u32::MAX),
    }
}
