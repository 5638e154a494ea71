//! `session.get_state`, `session.get_messages`, `session.get_outcomes` and
//! `session.prompt`.
//!
//! Prompt delivery onto the agent's single run queue:
//! - `prompt` / `continue`: idle → start a run; running → queue a run after
//!   the active work (joins the cycle). When a run starts from idle, input
//!   parked by `steer`/`follow_up` follows it, steering first.
//! - `steer` / `follow_up` while running: queue a run after the active work
//!   (the agent cannot inject input into a running model call); while idle:
//!   parked in `queuedInputs` for the next direct prompt, revision kept.

use serde_json::{json, Value};

use super::frame::FailCode;
use super::request::Request;
use super::settings::descriptor;
use super::state::CompletionWatch;
use super::{Reply, ZiServer};
use crate::agent::RunKind;
use crate::rpc::zut::wire_message;

/// Messages (and outcomes) per page.
pub const PAGE_COUNT: u64 = 100;
/// Encoded bytes per message page.
pub const PAGE_BYTES: usize = 8 * 1024 * 1024;
/// Longest prompt text.
pub const MAX_PROMPT_BYTES: usize = 8 * 1024 * 1024;
/// Longest completion id.
pub const MAX_COMPLETION_ID: usize = 256;

/// `start` and `limit` (at most [`PAGE_COUNT`]).
fn page_bounds(request: &Request) -> Result<(u64, u64), Reply> {
    let start = request.u64_param("start")?.unwrap_or(0);
    let limit = request.u64_param("limit")?.unwrap_or(PAGE_COUNT);
    if limit == 0 {
        return Err(Reply::Protocol("`limit` must be at least 1".into()));
    }
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
        let session = self.agent.session();
        let provider = self.agent.provider().name();
        let model = descriptor(provider, &session.model);
        let levels = super::settings::supported_levels(provider, &session.model);
        let inner = self.connection.lock();
        json!({
            "sessionId": self.session_id,
            "activity": {"type": if idle { "idle" } else { "running" }},
            "model": {"type": "selected", "model": model},
            "thinkingLevel": session.reasoning,
            "supportedThinkingLevels": levels,
            "steeringMode": "one-at-a-time",
            "followUpMode": "one-at-a-time",
            "queuedInputs": {"steering": inner.steering, "followUp": inner.follow_up},
            "workPlan": {"revision": inner.plan.0, "steps": inner.plan.1},
            "messageCount": session.messages().len(),
            "compaction": {"type": if inner.compacting { "running" } else { "idle" }},
            "retry": inner.retry.clone().unwrap_or_else(|| json!({"type": "idle"})),
            "contextUsage": context_usage(inner.context_tokens, model["contextWindow"].as_u64()),
        })
    }

    pub(crate) fn messages_page(&self, request: &Request) -> Result<Value, Reply> {
        let (start, limit) = page_bounds(request)?;
        let session = self.agent.session();
        let all = session.messages();
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
            let value = json!(wire_message(message));
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
        let direct = match delivery {
            "prompt" | "continue" => true,
            "steer" | "follow_up" => false,
            other => {
                return Err(Reply::Protocol(format!(
                    "unknown delivery {other:?}: expected prompt, steer, follow_up or continue"
                )))
            }
        };
        let text = request.required_str("text", MAX_PROMPT_BYTES)?;
        if text.trim().is_empty() {
            return Err(Reply::Protocol("`text` is empty".into()));
        }
        let completion_id = request.str_param("completionId", MAX_COMPLETION_ID)?;
        let idle = self.idle();
        let admitted = if !direct && idle {
            let mut inner = self.connection.lock();
            if delivery == "steer" {
                inner.steering.push(text.to_string());
            } else {
                inner.follow_up.push(text.to_string());
            }
            "parked"
        } else {
            if !self.submit(prompt_run(text)) {
                return Err(Reply::Fail(
                    FailCode::Capacity,
                    "too many prompts are queued behind the active run".into(),
                ));
            }
            if idle {
                let (steering, follow_up) = {
                    let mut inner = self.connection.lock();
                    (
                        std::mem::take(&mut inner.steering),
                        std::mem::take(&mut inner.follow_up),
                    )
                };
                for parked in steering.into_iter().chain(follow_up) {
                    if !self.submit(prompt_run(&parked)) {
                        tracing::warn!("run queue full: dropping parked input");
                    }
                }
            }
            if idle {
                "started"
            } else {
                "queued"
            }
        };
        let mut inner = self.connection.lock();
        let joins_work = admitted != "parked";
        if joins_work {
            inner.revision += 1;
        }
        let revision = inner.revision;
        let mut result = json!({"delivery": delivery, "admitted": admitted});
        match completion_id {
            Some(id) => {
                match inner.watch.as_mut().filter(|w| w.id == id) {
                    Some(watch) if joins_work => watch.revision = revision,
                    Some(_) => {}
                    None => {
                        inner.watch = Some(CompletionWatch {
                            id: id.to_string(),
                            revision,
                            text: None,
                            error: None,
                        })
                    }
                }
                let watched = inner.watch.as_ref().map_or(revision, |w| w.revision);
                result["completionRevision"] = json!(watched);
            }
            None if joins_work => inner.watch = None,
            None => {}
        }
        Ok(result)
    }
}

fn prompt_run(text: &str) -> RunKind {
    RunKind::Prompt {
        text: text.to_string(),
        images: Vec::new(),
    }
}
