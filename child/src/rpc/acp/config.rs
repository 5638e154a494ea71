//! The session's config options (`configOptions` of `session/new`,
//! `session/load` and `session/resume`, `session/set_config_option`):
//! `mode` (the permission mode, kept in step with `modes`), `model` (the
//! models the catalogue knows for the provider, and the current one) and
//! `reasoning` (offered when the current model can reason). Pure.

use corral_protocol::acp::{ConfigKind, ConfigOption, ConfigValue};
use corral_protocol::permission::{PermissionMode, PERMISSION_MODES};
use corral_protocol::zut::ReasoningLevel;
use serde_json::Value;

use super::rpc::RpcError;
use crate::provider::catalogue;

pub const MODE: &str = "mode";
pub const MODEL: &str = "model";
pub const REASONING: &str = "reasoning";

/// What the options are computed from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    pub provider: &'static str,
    pub model: String,
    pub reasoning: ReasoningLevel,
    pub mode: PermissionMode,
}

/// A change `session/set_config_option` asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Change {
    Mode(PermissionMode),
    Model(String),
    Reasoning(ReasoningLevel),
}

/// Every option with its current value.
pub fn options(settings: &Settings) -> Vec<ConfigOption> {
    let mut options = vec![mode_option(settings.mode), model_option(settings)];
    if reasons(settings.provider, &settings.model) {
        options.push(reasoning_option(settings.reasoning));
    }
    options
}

/// Reads a `session/set_config_option` request against the options
/// offered now; an unknown option or value is `-32602`.
pub fn change(settings: &Settings, config_id: &str, value: &Value) -> Result<Change, RpcError> {
    let offered = options(settings);
    let Some(option) = offered.iter().find(|o| o.id == config_id) else {
        let ids: Vec<&str> = offered.iter().map(|o| o.id.as_str()).collect();
        return Err(RpcError::invalid_params(format!(
            "unknown config option {config_id:?}; this session offers {}",
            ids.join(", ")
        )));
    };
    let Some(value) = value.as_str() else {
        return Err(RpcError::invalid_params(format!(
            "config option {config_id:?} takes one of its values (a string)"
        )));
    };
    let ConfigKind::Select { options, .. } = &option.kind;
    if !options.iter().any(|o| o.value == value) {
        let values: Vec<&str> = options.iter().map(|o| o.value.as_str()).collect();
        return Err(RpcError::invalid_params(format!(
            "{value:?} is no value of {config_id:?}; expected one of {}",
            values.join(", ")
        )));
    }
    let unreadable = |e: String| RpcError::invalid_params(e);
    Ok(match config_id {
        MODE => Change::Mode(value.parse().map_err(
            |e: corral_protocol::permission::UnknownPermissionMode| unreadable(e.to_string()),
        )?),
        MODEL => Change::Model(value.to_string()),
        _ => Change::Reasoning(
            ReasoningLevel::from_alias(value)
                .ok_or_else(|| unreadable(format!("unknown reasoning level {value:?}")))?,
        ),
    })
}

/// Whether reasoning levels are offered: the catalogue says the model
/// reasons, or does not know it (a custom endpoint) and the provider is
/// one that can.
fn reasons(provider: &str, model: &str) -> bool {
    match catalogue::find(provider, model) {
        Some(info) => info.reasoning,
        None => matches!(provider, "anthropic" | "openai"),
    }
}

fn select(
    id: &str,
    name: &str,
    category: &str,
    current: String,
    values: Vec<ConfigValue>,
) -> ConfigOption {
    ConfigOption {
        id: id.to_string(),
        name: name.to_string(),
        description: None,
        category: Some(category.to_string()),
        kind: ConfigKind::Select {
            current_value: current,
            options: values,
        },
    }
}

fn value(value: &str, name: &str, description: Option<String>) -> ConfigValue {
    ConfigValue {
        value: value.to_string(),
        name: name.to_string(),
        description,
    }
}

fn mode_option(current: PermissionMode) -> ConfigOption {
    let values = PERMISSION_MODES
        .into_iter()
        .map(|mode| value(mode.as_str(), mode.title(), Some(mode.description().into())))
        .collect();
    select(
        MODE,
        "Permission mode",
        "mode",
        current.as_str().into(),
        values,
    )
}

/// The catalogue's models for the provider, and the current model when
/// the catalogue does not know it (a custom endpoint's).
fn model_option(settings: &Settings) -> ConfigOption {
    let mut values: Vec<ConfigValue> = catalogue::models(settings.provider)
        .map(|m| {
            value(
                m.id,
                m.id,
                Some(format!("{} tokens of context", m.context_window)),
            )
        })
        .collect();
    if !values.iter().any(|v| v.value == settings.model) {
        values.insert(0, value(&settings.model, &settings.model, None));
    }
    select(MODEL, "Model", "model", settings.model.clone(), values)
}

fn reasoning_option(current: ReasoningLevel) -> ConfigOption {
    let values = ReasoningLevel::ALL
        .into_iter()
        .map(|level| value(level.as_str(), level.as_str(), None))
        .collect();
    select(
        REASONING,
        "Reasoning",
        "thought_level",
        current.as_str().into(),
        values,
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn settings(provider: &'static str, model: &str) -> Settings {
        Settings {
            provider,
            model: model.into(),
            reasoning: ReasoningLevel::Off,
            mode: PermissionMode::Ask,
        }
    }

    fn ids(options: &[ConfigOption]) -> Vec<&str> {
        options.iter().map(|o| o.id.as_str()).collect()
    }

    #[test]
    fn options_follow_the_provider_and_model() {
        let claude = options(&settings("anthropic", "claude-sonnet-4-5"));
        assert_eq!(ids(&claude), ["mode", "model", "reasoning"]);
        let wire = serde_json::to_value(&claude[1]).unwrap();
        assert_eq!(wire["type"], "select");
        assert_eq!(wire["category"], "model");
        assert_eq!(wire["currentValue"], "claude-sonnet-4-5");
        assert!(wire["options"]
            .as_array()
            .unwrap()
            .iter()
            .all(|o| !o["value"].as_str().unwrap().starts_with("gpt")));
        assert_eq!(
            serde_json::to_value(&claude[2]).unwrap()["currentValue"],
            "off"
        );
        // A model without reasoning, and one only a custom endpoint knows.
        assert_eq!(
            ids(&options(&settings("openai", "gpt-4.1"))),
            ["mode", "model"]
        );
        assert_eq!(ids(&options(&settings("echo", "echo"))), ["mode", "model"]);
        let custom = options(&settings("openai", "local-llama"));
        let wire = serde_json::to_value(&custom[1]).unwrap();
        assert_eq!(wire["options"][0]["value"], "local-llama");
        assert_eq!(ids(&custom), ["mode", "model", "reasoning"]);
    }

    #[test]
    fn changes_are_checked_against_what_is_offered() {
        let now = settings("anthropic", "claude-sonnet-4-5");
        assert_eq!(
            change(&now, "model", &json!("claude-haiku-4-5")),
            Ok(Change::Model("claude-haiku-4-5".into()))
        );
        assert_eq!(
            change(&now, "reasoning", &json!("high")),
            Ok(Change::Reasoning(ReasoningLevel::High))
        );
        assert_eq!(
            change(&now, "mode", &json!("read-only")),
            Ok(Change::Mode(PermissionMode::ReadOnly))
        );
        for (id, value) in [
            ("model", json!("gpt-5")),
            ("reasoning", json!("loud")),
            ("mode", json!(true)),
            ("colour", json!("red")),
        ] {
            let error = change(&now, id, &value).unwrap_err();
            assert_eq!(error.code, corral_protocol::acp::error_code::INVALID_PARAMS);
        }
        let flat = settings("openai", "gpt-4.1");
        assert!(change(&flat, "reasoning", &json!("high")).is_err());
    }
}
