//! `connection.set_events`, `command.list`, `model.list`, `model.select`,
//! `thinking.list` and `thinking.select`.
//!
//! Model descriptors carry only the public fields (`provider`, `id`,
//! `name`, `reasoning`, `input`, `contextWindow`, `maxTokens`); the
//! catalogue adds `configured` (true for the running provider, whose
//! credentials were resolved at start). Only models of the running
//! provider can be selected. Thinking levels are Zi's names (`minimal` is
//! the agent's `minimum`) and apply to this session: there is no settings
//! store, so `scope` (default `global`) is echoed but nothing is persisted.
//! Event mode `activity` sends every event, as `all` does: this server
//! never drops one.

use corral_protocol::zut::ReasoningLevel;
use serde_json::{json, Value};

use super::encoder::EVENTS_MODE;
use super::frame::{self, FailCode};
use super::request::{Request, MAX_MODEL_FIELD};
use super::{Reply, ZiServer};
use crate::provider::catalogue;

/// The public descriptor of a model (catalogue values when known).
pub fn descriptor(provider: &str, id: &str) -> Value {
    let info = catalogue::find(provider, id);
    json!({
        "provider": provider,
        "id": id,
        "name": id,
        "reasoning": info.is_some_and(|m| m.reasoning),
        "input": ["text", "image"],
        "contextWindow": info.map(|m| m.context_window),
        "maxTokens": info.map(|m| m.max_output),
    })
}

/// Levels the model accepts: all for reasoning models, else `off`.
pub fn supported_levels(provider: &str, id: &str) -> Vec<ReasoningLevel> {
    if catalogue::find(provider, id).is_some_and(|m| m.reasoning) {
        ReasoningLevel::ALL.to_vec()
    } else {
        vec![ReasoningLevel::Off]
    }
}

/// Zi's name for a reasoning level.
pub fn level_name(level: ReasoningLevel) -> &'static str {
    match level {
        ReasoningLevel::Minimum => "minimal",
        other => other.as_str(),
    }
}

/// A reasoning level from Zi's name (checked by the decoder).
fn parse_level(name: &str) -> Option<ReasoningLevel> {
    match name {
        "minimal" => Some(ReasoningLevel::Minimum),
        other => other.parse().ok(),
    }
}

/// Applies in output order: the encoder switches at this response.
pub fn set_events(request: &Request) -> Value {
    let mode = match request.required_str("mode", 16) {
        Ok(mode) => mode,
        Err(message) => {
            let code = frame::ProtocolCode::InvalidRequest;
            return frame::protocol_error(Some(&request.id), code, message);
        }
    };
    let mut response = frame::ok(&request.id, request.method, json!({"mode": mode}));
    response[EVENTS_MODE] = json!(mode != "none");
    response
}

/// The built-in commands.
pub fn command_list() -> Value {
    json!({"commands": [
        {"name": "compact", "description": "Summarise the transcript into one message"},
        {"name": "clear", "description": "Drop the whole transcript"},
    ]})
}

impl ZiServer {
    pub(crate) fn model_list(&self) -> Value {
        let provider = self.agent.provider().name();
        let current = self.agent.session().model.clone();
        let mut models: Vec<Value> = catalogue::models(provider)
            .map(|m| descriptor(provider, m.id))
            .collect();
        if catalogue::find(provider, &current).is_none() {
            models.push(descriptor(provider, &current));
        }
        for model in &mut models {
            model["configured"] = json!(true);
        }
        json!({"models": models})
    }

    pub(crate) fn model_select(&mut self, request: &Request) -> Result<Value, Reply> {
        let provider = request.required_str("provider", MAX_MODEL_FIELD)?;
        let id = request.required_str("id", MAX_MODEL_FIELD)?;
        let running = self.agent.provider().name();
        if provider != running {
            return Err(Reply::Fail(
                FailCode::NotFound,
                format!("provider {provider:?} is not configured (running {running})"),
            ));
        }
        if catalogue::find(provider, id).is_none() && !self.allow_unknown_models {
            return Err(Reply::Fail(
                FailCode::NotFound,
                format!("unknown model {id:?} for provider {provider}"),
            ));
        }
        self.agent.session().model = id.to_string();
        let model = descriptor(provider, id);
        let event = json!({"type": "model_changed", "model": model});
        let _ = self.out.try_send(crate::agent::Output::Frame(
            json!({"type": "session_event", "event": event}),
        ));
        Ok(json!({"model": model}))
    }

    pub(crate) fn thinking_list(&self) -> Value {
        let session = self.agent.session();
        let levels: Vec<&str> = supported_levels(self.agent.provider().name(), &session.model)
            .into_iter()
            .map(level_name)
            .collect();
        json!({"levels": levels, "current": level_name(session.reasoning)})
    }

    pub(crate) fn thinking_select(&mut self, request: &Request) -> Result<Value, Reply> {
        let level = request.required_str("level", 16)?;
        let requested = parse_level(level).ok_or("Unsupported thinking level".to_string())?;
        let scope = request.str_param("scope", 16)?.unwrap_or("global");
        let mut session = self.agent.session();
        let levels = supported_levels(self.agent.provider().name(), &session.model);
        let effective = if levels.contains(&requested) {
            requested
        } else {
            ReasoningLevel::Off
        };
        session.reasoning = effective;
        Ok(json!({"scope": scope, "requested": level_name(requested),
            "effective": level_name(effective)}))
    }
}
