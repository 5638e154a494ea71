//! `session.get_state`, `session.get_messages`, `session.get_outcomes` and
//! `session.prompt`.
//!
//! Prompt delivery, as the reference's `AgentSession` does it:
//! - `direct`: idle → start a run; otherwise refused (`operation_failed`).
//! - `continue`: idle → start a run; running → a follow-up of the active
//!   run.
//! - `steer`: taken before the next model call of the active run, or of
//!   the next run when idle; `follow_up`: taken when the run would
//!   otherwise end. Both are listed in `queuedInputs` until taken, and
//!   neither starts a run.
//!
//! A prompt that starts or joins work (`direct`, `continue`, or any input
//! while running) advances the completion watch of its `completionId`, or
//! drops the watch when it has none.

use serde_json::{json, Value};

use super::frame::FailCode;
use super::message;
use super::request::{Request, MAX_COMPLETION_ID, MAX_PROMPT_BYTES, PAGE_COUNT};
use super::settings::{descriptor, level_name, supported_levels};
use super::state::CompletionWatch;
use super::{Reply, ZiServer};
use crate::agent::{Queue, RunKind};

/// Encoded bytes per message page.
pub const PAGE_BYTES: usize = 8 * 1024 * 1024;

/// `start` and `limit` (checked by the decoder).
fn page_bounds(request: &Request) -> Result<(u64, u64), Reply> {
    let start = request.u64_param("start")?.unwrap_or(0);
    let limit = request.u64_param("limit")?.unwrap_or(PAGE_COUNT);
    Ok((start, limit.min(PAGE_COUNT)))
}

/// The outcome page: this agent records no operation outcomes.
pub fn outcomes_page(request: &Request) -> Result<Value, Reply> {
    let (start, _) = page_bounds(request)?;
    Ok(json!({"start": start, "total": 0, "nextStart": null, "outcomes": []}))
}

/// The snapshot's `contextUsage`: the tokens of the context at the latest
/// model call, against the model's window when the catalogue knows it.
fn context_usage(tokens: Option<u64>, window: Option<u64>) -> Value {
    let Some(tokens) = tokens else {
        return json!({"type": "unavailable", "reason": "not_measured"});
    };
    let percent = window
        .filter(|w| *w > 0)
        .map(|w| (tokens as f64 * 1000.0 / w as f64).round() / 10.0);
    json!({"type": "available", "tokens": tokens, "contextWindow": window, "percent": percent})
}

impl ZiServer {
    /// The session snapshot of `ready` and `session.get_state`.
    pub(crate) fn snapshot(&self) -> Value {
        let idle = self.idle();
        let (steering, follow_up) = self.agent.queued_input();
        let session = self.agent.session();
        let provider = self.agent.provider().name();
        let model = descriptor(provider, &session.model);
        let levels: Vec<&str> = supported_levels(provider, &session.model)
            .into_iter()
            .map(level_name)
            .collect();
        let queued = |delivery: &str, texts: Vec<String>| -> Vec<Value> {
            texts
                .into_iter()
                .map(|text| json!({"delivery": delivery, "bytes": text.len(), "text": text, "images": []}))
                .collect()
        };
        let inner = self.connection.lock();
        json!({
            "sessionId": self.session_id,
            "activity": {"type": if idle { "idle" } else { "running" }},
            "model": {"type": "selected", "model": model},
            "thinkingLevel": level_name(session.reasoning),
            "supportedThinkingLevels": levels,
            "steeringMode": "one-at-a-time",
            "followUpMode": "one-at-a-time",
            "queuedInputs": {"steering": queued("steer", steering),
                "followUp": queued("followUp", follow_up)},
            "workPlan": {"revision": inner.plan.0, "steps": inner.plan.1},
            "messageCount": session.transcript().len(),
            "compaction": {"type": if inner.compacting { "running" } else { "idle" }},
            "retry": inner.retry.clone().unwrap_or_else(|| json!({"type": "idle"})),
            "contextUsage": context_usage(inner.context_tokens, model["contextWindow"].as_u64()),
        })
    }

    pub(crate) fn messages_page(&self, request: &Request) -> Result<Value, Reply> {
        let (start, limit) = page_bounds(request)?;
        let session = self.agent.session();
        let all = session.transcript();
        let total = all.len() as u64;
        let mut messages = Vec::new();
        let mut bytes = 0;
        for message in all
            .iter()
            .skip(usize::try_from(start).unwrap_or(usize::MAX))
        {
            if messages.len() as u64 >= limit {
                break;
            }
            let value = message::message(message);
            let size = serde_json::to_vec(&value).map_or(0, |v| v.len() + 1);
            if !messages.is_empty() && bytes + size > PAGE_BYTES {
                break;
            }
            bytes += size;
            messages.push(value);
        }
        let next = start + messages.len() as u64;
        let next_start = if next < total && !messages.is_empty() {
            json!(next)
        } else {
            Value::Null
        };
        Ok(json!({"start": start, "total": total, "nextStart": next_start, "messages": messages}))
    }

    pub(crate) fn prompt(&mut self, request: &Request) -> Result<Value, Reply> {
        let delivery = request.required_str("delivery", 32)?;
        let text = request.required_str("text", MAX_PROMPT_BYTES)?;
        let completion_id = request.str_param("completionId", MAX_COMPLETION_ID)?;
        let idle = self.idle();
        if let Some(refusal) = self.refusal(delivery, idle) {
            return Err(Reply::Fail(FailCode::OperationFailed, refusal.into()));
        }
        let joins_work = matches!(delivery, "direct" | "continue") || !idle;
        let previous = {
            let mut inner = self.connection.lock();
            let previous = inner.watch.clone();
            match completion_id {
                None if joins_work => inner.watch = None,
                None => {}
                Some(id) if joins_work => {
                    let watch = match inner.watch.take() {
                        Some(watch) if watch.id == id => watch,
                        _ => CompletionWatch::new(id),
                    };
                    let watch = inner.watch.insert(watch);
                    watch.revision += 1;
                    watch.settled = None;
                }
                Some(_) => {}
            }
            previous
        };
        match delivery {
            "direct" | "continue" if idle => {
                if !self.submit(prompt_run(text)) {
                    self.connection.lock().watch = previous;
                    return Err(Reply::Fail(
                        FailCode::Capacity,
                        "the run queue is full".into(),
                    ));
                }
            }
            "continue" => {
                // Running as far as this connection has seen; the run may
                // have ended a moment ago, and then `continue` starts one.
                if let Err(text) = self.agent.follow_up_active(text.to_string()) {
                    if !self.submit(prompt_run(&text)) {
                        self.connection.lock().watch = previous;
                        return Err(Reply::Fail(
                            FailCode::Capacity,
                            "the run queue is full".into(),
                        ));
                    }
                }
            }
            "steer" => self.agent.queue_input(Queue::Steering, text.to_string()),
            _ => self.agent.queue_input(Queue::FollowUp, text.to_string()),
        }
        let mut result = json!({"delivery": delivery});
        let inner = self.connection.lock();
        if let Some(watch) = inner
            .watch
            .as_ref()
            .filter(|w| Some(w.id.as_str()) == completion_id)
        {
            result["completionRevision"] = json!(watch.revision);
        }
        Ok(result)
    }

    /// Why the session cannot take this delivery now, in the reference's
    /// words.
    fn refusal(&self, delivery: &str, idle: bool) -> Option<&'static str> {
        let (compacting, aborting) = {
            let inner = self.connection.lock();
            (inner.compacting, inner.interrupt_reserved && !idle)
        };
        let direct = matches!(delivery, "direct" | "continue");
        match delivery {
            _ if aborting && direct => Some("Cannot prompt while the agent is aborting"),
            _ if aborting => Some("Cannot queue input while the agent is aborting"),
            _ if compacting && direct => Some("Cannot prompt while context compaction is active"),
            "direct" if !idle => Some("streamingBehavior is required while the agent is running"),
            _ => None,
        }
    }
}

fn prompt_run(text: &str) -> RunKind {
    RunKind::Prompt {
        text: text.to_string(),
        images: Vec::new(),
    }
}
