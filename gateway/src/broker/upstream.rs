//! The two providers the broker forwards to, read once from the gateway's
//! environment at start: each one's base URL and API key. The keys live
//! here, as [`Secret`]s, and nowhere a child can read them.

use std::fmt;

use crate::auth::Secret;

/// The environment variables the broker reads (and `main` then masks and
/// removes): the keys and base URLs of both providers.
pub const ENV_VARS: [&str; 4] = [
    Provider::Anthropic.key_env(),
    Provider::Anthropic.base_env(),
    Provider::OpenAi.key_env(),
    Provider::OpenAi.base_env(),
];

/// A provider the broker knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// Anthropic Messages; the key goes in `x-api-key`.
    Anthropic,
    /// OpenAI (and compatible) APIs; the key goes in `Authorization: Bearer`.
    OpenAi,
}

impl Provider {
    pub const ALL: [Provider; 2] = [Provider::Anthropic, Provider::OpenAi];

    /// The `provider` label of `corral_broker_requests_total`.
    pub const fn label(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }

    pub const fn key_env(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_API_KEY",
            Provider::OpenAi => "OPENAI_API_KEY",
        }
    }

    pub const fn base_env(self) -> &'static str {
        match self {
            Provider::Anthropic => "ANTHROPIC_BASE_URL",
            Provider::OpenAi => "OPENAI_BASE_URL",
        }
    }

    /// The official endpoint, as the agent's providers default to it:
    /// Anthropic's without `/v1`, OpenAI's with it.
    pub const fn default_base(self) -> &'static str {
        match self {
            Provider::Anthropic => "https://api.anthropic.com",
            Provider::OpenAi => "https://api.openai.com/v1",
        }
    }
}

/// One provider's endpoint and key.
#[derive(Clone)]
pub struct Upstream {
    /// `http(s)://host[:port][/path]`, without a trailing `/`.
    pub base: String,
    /// `None`: the gateway holds no key for this provider, and the broker
    /// refuses its requests.
    pub key: Option<Secret>,
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Upstream")
            .field("base", &self.base)
            .field("key", &self.key.as_ref().map(|_| "***"))
            .finish()
    }
}

/// Both providers' endpoints and keys.
#[derive(Clone, Debug)]
pub struct Upstreams {
    anthropic: Upstream,
    openai: Upstream,
}

/// Why the broker's settings are refused.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error(
        "{var} must be an http:// or https:// URL without a query, e.g. {example}; found {found:?}"
    )]
    BadBase {
        var: &'static str,
        example: &'static str,
        found: String,
    },
    #[error("{0} holds a character that cannot go in an HTTP header")]
    BadKey(&'static str),
    #[error("neither ANTHROPIC_API_KEY nor OPENAI_API_KEY is set in the gateway's environment: the broker would have no key to add")]
    NoKey,
}

impl Upstreams {
    /// Reads both providers from `env`; at least one key must be set.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Upstreams, UpstreamError> {
        let one = |provider: Provider| -> Result<Upstream, UpstreamError> {
            let base = env(provider.base_env()).filter(|v| !v.trim().is_empty());
            let base = match base {
                Some(text) => checked_base(provider, &text)?,
                None => provider.default_base().to_string(),
            };
            let key = env(provider.key_env()).filter(|v| !v.is_empty());
            if let Some(key) = &key {
                if key.bytes().any(|b| b.is_ascii_control() || !b.is_ascii()) {
                    return Err(UpstreamError::BadKey(provider.key_env()));
                }
            }
            Ok(Upstream {
                base,
                key: key.map(Secret::new),
            })
        };
        let upstreams = Upstreams {
            anthropic: one(Provider::Anthropic)?,
            openai: one(Provider::OpenAi)?,
        };
        if Provider::ALL
            .iter()
            .all(|p| upstreams.get(*p).key.is_none())
        {
            return Err(UpstreamError::NoKey);
        }
        Ok(upstreams)
    }

    pub fn get(&self, provider: Provider) -> &Upstream {
        match provider {
            Provider::Anthropic => &self.anthropic,
            Provider::OpenAi => &self.openai,
        }
    }
}

/// `text` as a base URL: http or https, a host, no query or fragment;
/// returned without its trailing `/`.
fn checked_base(provider: Provider, text: &str) -> Result<String, UpstreamError> {
    let bad = || UpstreamError::BadBase {
        var: provider.base_env(),
        example: provider.default_base(),
        found: text.to_string(),
    };
    let text = text.trim();
    let url = reqwest::Url::parse(text).map_err(|_| bad())?;
    let usable = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some()
        && url.query().is_none()
        && url.fragment().is_none()
        && url.username().is_empty()
        && url.password().is_none();
    if !usable {
        return Err(bad());
    }
    Ok(text.trim_end_matches('/').to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn defaults_are_the_official_endpoints_and_one_key_suffices() {
        let up = Upstreams::from_env(&env(&[("ANTHROPIC_API_KEY", "sk-ant-1")])).unwrap();
        let anthropic = up.get(Provider::Anthropic);
        assert_eq!(anthropic.base, "https://api.anthropic.com");
        assert_eq!(anthropic.key.as_ref().unwrap().expose(), "sk-ant-1");
        assert_eq!(up.get(Provider::OpenAi).base, "https://api.openai.com/v1");
        assert!(up.get(Provider::OpenAi).key.is_none());
        assert!(!format!("{up:?}").contains("sk-ant-1"));
    }

    #[test]
    fn base_urls_are_checked_and_trimmed() {
        let up = Upstreams::from_env(&env(&[
            ("OPENAI_API_KEY", "k"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/"),
        ]))
        .unwrap();
        assert_eq!(up.get(Provider::OpenAi).base, "http://127.0.0.1:9/v1");
        for bad in [
            "ftp://x",
            "api.example.com",
            "http://x/v1?a=b",
            "http://u:p@x",
        ] {
            let err =
                Upstreams::from_env(&env(&[("OPENAI_API_KEY", "k"), ("OPENAI_BASE_URL", bad)]))
                    .unwrap_err();
            assert!(err.to_string().contains("OPENAI_BASE_URL"), "{bad}: {err}");
        }
    }

    #[test]
    fn no_key_or_a_bad_key_is_refused_without_echoing_it() {
        let err = Upstreams::from_env(&env(&[])).unwrap_err();
        assert!(matches!(err, UpstreamError::NoKey), "{err}");
        let err = Upstreams::from_env(&env(&[("ANTHROPIC_API_KEY", "zzkey\nx")])).unwrap_err();
        assert!(err.to_string().contains("ANTHROPIC_API_KEY"), "{err}");
        assert!(!err.to_string().contains("zzkey"), "{err}");
    }
}
