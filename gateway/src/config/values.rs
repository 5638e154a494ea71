//! Value types of settings that have no module of their own: `on`/`off`
//! switches, token lists in the config file, and address ranges.

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use crate::auth::Secret;

/// `on` or `off` (TOML: also `true` / `false`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

impl OnOff {
    pub fn is_on(self) -> bool {
        self == OnOff::On
    }
}

impl<'de> Deserialize<'de> for OnOff {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct OnOffVisitor;

        impl Visitor<'_> for OnOffVisitor {
            type Value = OnOff;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"on\", \"off\", true or false")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<OnOff, E> {
                Ok(if v { OnOff::On } else { OnOff::Off })
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<OnOff, E> {
                match v.trim().to_ascii_lowercase().as_str() {
                    "on" | "true" => Ok(OnOff::On),
                    "off" | "false" => Ok(OnOff::Off),
                    _ => Err(E::custom(format!(
                        "expected \"on\" or \"off\", found {v:?}"
                    ))),
                }
            }
        }

        deserializer.deserialize_any(OnOffVisitor)
    }
}

/// How tool commands reach the network (`--tool-network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ToolNetwork {
    /// The host's network, unfiltered.
    On,
    /// None at all: an empty network namespace per command.
    Off,
    /// Only the gateway's egress proxy, which applies the egress policy.
    Proxy,
}

impl ToolNetwork {
    pub fn name(self) -> &'static str {
        match self {
            ToolNetwork::On => "on",
            ToolNetwork::Off => "off",
            ToolNetwork::Proxy => "proxy",
        }
    }
}

impl<'de> Deserialize<'de> for ToolNetwork {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ToolNetworkVisitor;

        impl Visitor<'_> for ToolNetworkVisitor {
            type Value = ToolNetwork;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("\"on\", \"off\", \"proxy\", true or false")
            }

            fn visit_bool<E: de::Error>(self, v: bool) -> Result<ToolNetwork, E> {
                Ok(if v { ToolNetwork::On } else { ToolNetwork::Off })
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<ToolNetwork, E> {
                match v.trim().to_ascii_lowercase().as_str() {
                    "on" | "true" => Ok(ToolNetwork::On),
                    "off" | "false" => Ok(ToolNetwork::Off),
                    "proxy" => Ok(ToolNetwork::Proxy),
                    _ => Err(E::custom(format!(
                        "expected \"on\", \"off\" or \"proxy\", found {v:?}"
                    ))),
                }
            }
        }

        deserializer.deserialize_any(ToolNetworkVisitor)
    }
}

/// A list of tokens: `["a", "b"]` or one string. Type errors do not echo
/// the value.
#[derive(Debug, Clone, Default)]
pub struct TokenList(pub Vec<Secret>);

impl<'de> Deserialize<'de> for TokenList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;

        impl<'de> Visitor<'de> for ListVisitor {
            type Value = TokenList;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of token strings")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<TokenList, E> {
                Ok(TokenList(vec![Secret::new(v)]))
            }

            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a number",
                ))
            }

            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a number",
                ))
            }

            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a number",
                ))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a boolean",
                ))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TokenList, A::Error> {
                let mut tokens = Vec::new();
                while let Some(token) = seq.next_element::<Secret>()? {
                    tokens.push(token);
                }
                Ok(TokenList(tokens))
            }
        }

        deserializer.deserialize_any(ListVisitor)
    }
}

/// An address range: `10.0.0.0/24`, `fd00::/8`, or one address (`10.0.0.5`).
pub fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is not an address or an address range such as 10.0.0.0/24"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_off_parses_words_and_booleans() {
        #[derive(Deserialize)]
        struct T {
            v: OnOff,
        }
        let parse = |text: &str| toml::from_str::<T>(text).map(|t| t.v);
        assert_eq!(parse("v = \"on\"").unwrap(), OnOff::On);
        assert_eq!(parse("v = \"OFF\"").unwrap(), OnOff::Off);
        assert_eq!(parse("v = false").unwrap(), OnOff::Off);
        let err = parse("v = \"maybe\"").unwrap_err().to_string();
        assert!(err.contains("expected \"on\" or \"off\""), "{err}");
    }
}
