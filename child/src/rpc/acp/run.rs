//! `session/prompt`: a slash command the agent runs itself (`/clear`
//! at once, `/compact` as a run), or a run of the model. A run's frames
//! carry its trace context: the run's own span when traces are exported,
//! else the caller's context unchanged.

use corral_protocol::acp::{ContentBlock, PromptParams, SessionUpdate};
use serde_json::{json, Value};

use super::commands::{self, Command};
use super::encoder::Private;
use super::rpc::RpcError;
use super::trace_context::TraceContext;
use super::{prompt, AcpServer};
use crate::agent::trace::RunSpans;
use crate::agent::{RunKind, RunRequest};

impl AcpServer {
    /// A prompt: a slash command the agent runs itself, or a run of the
    /// model.
    pub(super) async fn prompt(
        &mut self,
        id: &Value,
        params: PromptParams,
    ) -> Result<Option<Value>, RpcError> {
        let kind = match commands::parse(&params.prompt)? {
            Some(Command::Clear) => {
                self.idle_for("/clear")?;
                self.agent
                    .session()
                    .clear()
                    .map_err(|e| RpcError::internal(e.to_string()))?;
                let done = SessionUpdate::AgentMessageChunk {
                    content: ContentBlock::text("The conversation was cleared."),
                };
                self.notify(&done).await;
                return Ok(Some(json!({"stopReason": "end_turn"})));
            }
            Some(Command::Compact) => RunKind::Compact,
            None => {
                let prompt = prompt::convert(params.prompt)?;
                RunKind::Prompt {
                    text: prompt.text,
                    images: prompt.images,
                }
            }
        };
        let incoming = self.trace.take();
        let spans = RunSpans::open(&kind, incoming.as_ref().map(|t| t.traceparent.as_str()));
        // The run's own span when traces are exported; else the caller's
        // context passes through unchanged.
        let trace = match corral_telemetry::traceparent(&spans.run) {
            Some(own) => Some(TraceContext {
                traceparent: own,
                tracestate: incoming.and_then(|t| t.tracestate),
            }),
            None => incoming,
        };
        let run = RunRequest {
            started: Some(
                Private::RunStart {
                    request: id.clone(),
                    compact: matches!(kind, RunKind::Compact),
                    trace,
                }
                .to_frame(),
            ),
            discarded: Some(
                Private::Discarded {
                    request: id.clone(),
                }
                .to_frame(),
            ),
            kind,
            traceparent: None,
        };
        self.agent
            .submit_traced(run, spans)
            .map_err(|e| RpcError::internal(e.to_string()))?;
        Ok(None)
    }
}
