//! `--model-broker auto|on|off`: whether agents reach their model through
//! the gateway's model-key broker (`crate::broker`), and the providers'
//! keys and endpoints it forwards to, read from the gateway's environment.

use serde::{Deserialize, Deserializer};

use super::values::ToolNetwork;
use super::{ConfigError, Confinement};
use crate::broker::Upstreams;

/// `--model-broker`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BrokerMode {
    /// On where it can run and nothing asks otherwise: the sandbox on,
    /// tools off the host's network, a provider key in the environment,
    /// `corral-agent` as the child, no `--base-url`/`--api-key` in its
    /// arguments.
    Auto,
    On,
    Off,
}

impl<'de> Deserialize<'de> for BrokerMode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::values::deserialize_switch(deserializer)
    }
}

/// What the rest of the configuration says that the broker depends on.
pub(super) struct Context<'a> {
    pub confinement: &'a Confinement,
    /// A third-party agent (`--child-command`) is the child.
    pub third_party: bool,
    /// `-- CHILD_ARGS`.
    pub child_args: &'a [String],
}

/// The broker's decision: the providers it forwards to (`None`: off), and
/// with `auto`, why it is off.
pub(super) struct Decided {
    pub upstreams: Option<Upstreams>,
    pub off_because: Option<&'static str>,
}

/// `on` needs the sandbox (the agent runs without the host's network
/// inside it) and tools off the agent's network (with `--tool-network on`
/// they would share it, and so have none), and a provider key. `auto` is
/// on when all of that holds, the child is `corral-agent` (a third-party
/// agent is pointed at the broker by its own configuration, so only `on`
/// does that) and no `-- CHILD_ARGS` name the model endpoint or key
/// themselves (`--base-url`, `--api-key`: the operator chose them).
pub(super) fn resolve(
    mode: BrokerMode,
    context: &Context<'_>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Decided, ConfigError> {
    let off = |why: &'static str| {
        Ok(Decided {
            upstreams: None,
            off_because: Some(why),
        })
    };
    let confinement = context.confinement;
    match mode {
        BrokerMode::Off => return off("--model-broker off"),
        BrokerMode::Auto => {
            if !confinement.sandbox {
                return off("the sandbox is off");
            }
            if confinement.tool_network == ToolNetwork::On {
                return off("tools share the host's network (--tool-network on)");
            }
            if context.third_party {
                return off("the child is a third-party agent (--child-command); --model-broker on points it at the broker");
            }
            if context.child_args.iter().any(|arg| names_endpoint(arg)) {
                return off("-- CHILD_ARGS name the model endpoint or key (--base-url, --api-key)");
            }
            return match Upstreams::from_env(env) {
                Ok(upstreams) => Ok(Decided {
                    upstreams: Some(upstreams),
                    off_because: None,
                }),
                Err(_) => off("no provider key (ANTHROPIC_API_KEY, OPENAI_API_KEY) in the gateway's environment"),
            };
        }
        BrokerMode::On => {}
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
        .map(|upstreams| Decided {
            upstreams: Some(upstreams),
            off_because: None,
        })
        .map_err(|e| refused(e.to_string()))
}

/// Whether a child argument sets the model's endpoint or key itself.
fn names_endpoint(arg: &str) -> bool {
    ["--base-url", "--api-key"]
        .iter()
        .any(|flag| arg == *flag || arg.starts_with(&format!("{flag}=")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mode_takes_its_names_and_booleans() {
        #[derive(Deserialize)]
        struct T {
            broker: BrokerMode,
        }
        let parse = |text: &str| toml::from_str::<T>(text).map(|t| t.broker);
        assert_eq!(parse("broker = \"auto\"").unwrap(), BrokerMode::Auto);
        assert_eq!(parse("broker = \"false\"").unwrap(), BrokerMode::Off);
        assert_eq!(parse("broker = true").unwrap(), BrokerMode::On);
    }

    #[test]
    fn child_args_naming_the_endpoint_are_recognised() {
        assert!(names_endpoint("--base-url"));
        assert!(names_endpoint("--api-key=x"));
        assert!(!names_endpoint("--base-urls"));
        assert!(!names_endpoint("--model"));
    }
}
