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
        deserialize_switch(deserializer)
    }
}

/// Deserializes a switch-like choice: one of `T`'s names (any case, as on
/// the command line), or a TOML boolean (`true` is `on`, `false` is
/// `off`). An error lists the names.
pub(super) fn deserialize_switch<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: clap::ValueEnum,
{
    struct SwitchVisitor<T>(std::marker::PhantomData<T>);

    impl<T: clap::ValueEnum> SwitchVisitor<T> {
        /// `"a", "b" or "c"`.
        fn names() -> String {
            let names: Vec<String> = T::value_variants()
                .iter()
                .filter_map(|v| v.to_possible_value())
                .map(|v| format!("{:?}", v.get_name()))
                .collect();
            match names.split_last() {
                Some((last, [])) => last.clone(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            }
        }

        fn named<E: de::Error>(name: &str, found: &str) -> Result<T, E> {
            T::from_str(name, true)
                .map_err(|_| E::custom(format!("expected {}, found {found:?}", Self::names())))
        }
    }

    impl<T: clap::ValueEnum> Visitor<'_> for SwitchVisitor<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            write!(f, "{}, true or false", Self::names())
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<T, E> {
            let name = if v { "on" } else { "off" };
            Self::named(name, &v.to_string())
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            let name = match v.trim().to_ascii_lowercase().as_str() {
                "true" => "on".to_string(),
                "false" => "off".to_string(),
                other => other.to_string(),
            };
            Self::named(&name, v)
        }
    }

    deserializer.deserialize_any(SwitchVisitor(std::marker::PhantomData))
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
        deserialize_switch(deserializer)
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

    #[test]
    fn every_switch_takes_its_names_and_booleans() {
        #[derive(Deserialize)]
        struct T {
            network: ToolNetwork,
        }
        let parse = |text: &str| toml::from_str::<T>(text).map(|t| t.network);
        assert_eq!(parse("network = \"Proxy\"").unwrap(), ToolNetwork::Proxy);
        assert_eq!(parse("network = true").unwrap(), ToolNetwork::On);
        assert_eq!(parse("network = \"false\"").unwrap(), ToolNetwork::Off);
        let err = parse("network = \"lan\"").unwrap_err().to_string();
        assert!(
            err.contains("expected \"on\", \"off\" or \"proxy\""),
            "{err}"
        );
    }
}
