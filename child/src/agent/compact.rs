//! Compaction: the model summarises the transcript, which is then replaced
//! by one synthetic user message holding the summary. Nothing is kept
//! verbatim; the summary is asked to carry what the work needs.

use corral_protocol::zut::{ReasoningLevel, Stop};

use super::call::{call_model, CallError};
use super::turn::build_request;
use super::{usage, AgentEvent, RunCtx};
use crate::provider::catalogue;
use crate::transcript::{Block, Message, Role};

/// Output budget of the summary.
const SUMMARY_MAX_OUTPUT: u32 = 8192;

const COMPACT_SYSTEM: &str = "You summarise coding-agent conversations so the work can continue \
from the summary alone. Do not call tools.";

const COMPACT_INSTRUCTION: &str = "Summarise the conversation above for continuing the work. \
Include: the user's goals and constraints, decisions made, files read or changed (with paths), \
commands run and their outcomes, the current state, and the next steps. Be concise but keep \
every detail needed to continue. Reply with the summary only.";

pub(crate) async fn run_compact(ctx: &RunCtx<'_>) {
    let mut request = build_request(ctx, COMPACT_SYSTEM.to_string());
    if request.messages.is_empty() {
        ctx.emit(AgentEvent::Error(
            "nothing to compact: the transcript is empty".into(),
        ))
        .await;
        return;
    }
    request.reasoning = ReasoningLevel::Off;
    request.max_output = request.max_output.min(SUMMARY_MAX_OUTPUT);
    request.messages.push(Message::new(
        Role::User,
        vec![Block::text(COMPACT_INSTRUCTION)],
    ));
    let model = request.model.clone();
    match call_model(ctx, request, false).await {
        Ok(response) => {
            let summary = Message::new(Role::Assistant, response.content).text();
            let summary = summary.trim();
            if summary.is_empty() {
                ctx.emit(AgentEvent::Error(
                    "compaction failed: the model returned no summary".into(),
                ))
                .await;
                return;
            }
            let info = catalogue::find(ctx.shared.provider.name(), &model);
            let turn = usage::turn_usage(&response.usage, info);
            let result = {
                let mut session = ctx.shared.session();
                usage::accumulate(&mut session.usage, &turn);
                session.compact(summary)
            };
            if let Err(e) = result {
                ctx.emit(AgentEvent::Error(e.to_string())).await;
            }
            ctx.emit(AgentEvent::CompactDone {
                summary: summary.to_string(),
            })
            .await;
        }
        Err(CallError::Aborted { .. }) => {
            ctx.emit(AgentEvent::TurnEnd {
                stop: Stop::Aborted,
                error: None,
            })
            .await;
        }
        Err(CallError::Failed(error)) => {
            ctx.emit(AgentEvent::Error(format!("compaction failed: {error}")))
                .await;
        }
    }
}
