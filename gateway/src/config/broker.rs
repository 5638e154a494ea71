//! `--model-broker on|off`: whether agents reach their model through the
//! gateway's model-key broker (`crate::broker`), and the providers' keys
//! and endpoints it forwards to, read from the gateway's environment.

use super::values::{OnOff, ToolNetwork};
use super::{ConfigError, Confinement};
use crate::broker::Upstreams;

/// The providers the broker forwards to, with it on; `None` with it off.
/// On needs the sandbox (the agent runs without the host's network inside
/// it) and tools off the agent's network (with `--tool-network on` they
/// would share it, and so have none).
pub(super) fn resolve(
    setting: OnOff,
    confinement: &Confinement,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Upstreams>, ConfigError> {
    if !setting.is_on() {
        return Ok(None);
    }
    let refused = |reason: String| ConfigError::Invalid {
        setting: "--model-broker on / model_broker".into(),
        reason,
    };
    if !confinement.sandbox {
        return Err(refused(
            "the broker takes the host's network from the agent, which only the sandbox can do; drop --sandbox off, or turn the broker off".into(),
        ));
    }
    if confinement.tool_network == ToolNetwork::On {
        return Err(refused(
            "with --tool-network on, tool commands would share the agent's network, which the broker takes away; use --tool-network proxy (the default) or off".into(),
        ));
    }
    Upstreams::from_env(env)
        .map(Some)
        .map_err(|e| refused(e.to_string()))
}
