//! The session's settings as a client changes them: `session/set_mode`
//! and `session/set_config_option`. Every change is announced with a
//! `config_option_update` (the whole set), and a mode change also with a
//! `current_mode_update`, so clients of either API (and every client of
//! a shared session) stay in step. A model or reasoning change applies
//! from the next model call on, also inside a running prompt.

use corral_protocol::acp::{ConfigOption, SessionUpdate, SetConfigOptionParams, SetModeParams};
use corral_protocol::permission::PermissionMode;
use serde_json::{json, Value};

use super::config::{self, Change};
use super::rpc::{self, RpcError};
use super::AcpServer;

impl AcpServer {
    pub(super) async fn set_mode(&mut self, name: &str, params: Value) -> Result<Value, RpcError> {
        let params: SetModeParams = rpc::params(name, params)?;
        self.check_open(&params.session_id)?;
        let mode: PermissionMode = params.mode_id.parse().map_err(
            |e: corral_protocol::permission::UnknownPermissionMode| {
                RpcError::invalid_params(e.to_string())
            },
        )?;
        self.apply(Change::Mode(mode)).await;
        Ok(json!({}))
    }

    pub(super) async fn set_config_option(
        &mut self,
        name: &str,
        params: Value,
    ) -> Result<Value, RpcError> {
        let params: SetConfigOptionParams = rpc::params(name, params)?;
        self.check_open(&params.session_id)?;
        let change = config::change(&self.config_settings(), &params.config_id, &params.value)?;
        self.apply(change).await;
        Ok(json!({ "configOptions": self.config_options() }))
    }

    /// Every config option with its current value.
    pub(super) fn config_options(&self) -> Vec<ConfigOption> {
        config::options(&self.config_settings())
    }

    fn config_settings(&self) -> config::Settings {
        let session = self.agent.session();
        config::Settings {
            provider: self.agent.provider().name(),
            model: session.model.clone(),
            reasoning: session.reasoning,
            mode: self.agent.permissions().mode(),
        }
    }

    async fn apply(&self, change: Change) {
        match &change {
            Change::Mode(mode) => self.agent.permissions().set_mode(*mode),
            Change::Model(model) => self.agent.session().model = model.clone(),
            Change::Reasoning(level) => self.agent.session().reasoning = *level,
        }
        if let Change::Mode(mode) = change {
            let update = SessionUpdate::CurrentModeUpdate {
                current_mode_id: mode.as_str().to_string(),
            };
            self.notify(&update).await;
        }
        let update = SessionUpdate::ConfigOptionUpdate {
            config_options: self.config_options(),
        };
        self.notify(&update).await;
    }
}
