//! Which provider path a request to the broker names, and where it goes
//! upstream. Pure: no I/O.
//!
//! A child's base URLs name the broker: `…/anthropic` stands for
//! `ANTHROPIC_BASE_URL` and `…/openai/v1` for `OPENAI_BASE_URL` (which,
//! like the agent's, includes `/v1`). What follows the prefix is appended
//! to the upstream base unchanged, query included, and must be one of the
//! provider's model paths: the broker is no general proxy.

use axum::http::Method;

use super::upstream::Provider;

/// The path standing for `ANTHROPIC_BASE_URL`.
pub const ANTHROPIC_PREFIX: &str = "/anthropic";
/// The path standing for `OPENAI_BASE_URL` (which includes `/v1`).
pub const OPENAI_PREFIX: &str = "/openai/v1";

/// The paths (after the prefix) and methods forwarded, per provider:
/// model calls, token counts and the model list.
const ANTHROPIC_PATHS: [(&str, Method); 3] = [
    ("/v1/messages", Method::POST),
    ("/v1/messages/count_tokens", Method::POST),
    ("/v1/models", Method::GET),
];
const OPENAI_PATHS: [(&str, Method); 3] = [
    ("/chat/completions", Method::POST),
    ("/responses", Method::POST),
    ("/models", Method::GET),
];

/// A request the broker forwards.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    pub provider: Provider,
    /// The path after the prefix, with `?query` if any.
    pub rest: String,
}

impl Route {
    /// The upstream URL: `base` (no trailing `/`) followed by the rest.
    pub fn url(&self, base: &str) -> String {
        format!("{base}{}", self.rest)
    }
}

/// Why a request is not forwarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not a provider path (404).
    NotFound(Option<Provider>),
    /// A provider path with another method (405).
    Method(Provider),
}

/// The route of `method path?query`, or why there is none.
pub fn route(method: &Method, path: &str, query: Option<&str>) -> Result<Route, Refusal> {
    let (provider, rest, allowed) = if let Some(rest) = under(path, OPENAI_PREFIX) {
        (Provider::OpenAi, rest, &OPENAI_PATHS)
    } else if let Some(rest) = under(path, ANTHROPIC_PREFIX) {
        (Provider::Anthropic, rest, &ANTHROPIC_PATHS)
    } else {
        return Err(Refusal::NotFound(None));
    };
    let mut known = allowed.iter().filter(|(p, _)| *p == rest).peekable();
    if known.peek().is_none() {
        return Err(Refusal::NotFound(Some(provider)));
    }
    if !known.any(|(_, m)| m == method) {
        return Err(Refusal::Method(provider));
    }
    let rest = match query {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_string(),
    };
    Ok(Route { provider, rest })
}

/// The part of `path` after `prefix` when `prefix` is a whole leading
/// segment run (`/openai/v1/x`, not `/openai/v1x`).
fn under<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    path.strip_prefix(prefix)
        .filter(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provider_paths_map_onto_the_upstream_base() {
        let r = route(&Method::POST, "/anthropic/v1/messages", None).unwrap();
        assert_eq!(r.provider, Provider::Anthropic);
        assert_eq!(
            r.url("https://api.anthropic.com"),
            "https://api.anthropic.com/v1/messages"
        );
        let r = route(&Method::POST, "/anthropic/v1/messages", Some("beta=true")).unwrap();
        assert_eq!(
            r.url("http://127.0.0.1:9"),
            "http://127.0.0.1:9/v1/messages?beta=true"
        );
        // OPENAI_BASE_URL holds /v1 already, as the child's base does.
        let r = route(&Method::POST, "/openai/v1/chat/completions", None).unwrap();
        assert_eq!(r.provider, Provider::OpenAi);
        assert_eq!(
            r.url("https://api.openai.com/v1"),
            "https://api.openai.com/v1/chat/completions"
        );
        assert_eq!(
            route(&Method::GET, "/openai/v1/models", None)
                .unwrap()
                .url("http://h:1/compat/v1"),
            "http://h:1/compat/v1/models"
        );
        let r = route(&Method::GET, "/anthropic/v1/models", None).unwrap();
        assert_eq!(r.rest, "/v1/models");
    }

    #[test]
    fn anything_else_is_refused() {
        for path in [
            "/",
            "/v1/messages",
            "/anthropicx/v1/messages",
            "/openai/chat/completions",
            "/openai/v1x/chat/completions",
            "/otlp/v1/traces",
            "http://evil.example/",
        ] {
            assert_eq!(
                route(&Method::POST, path, None),
                Err(Refusal::NotFound(None)),
                "{path}"
            );
        }
        for (path, provider) in [
            ("/anthropic/v1/messages/../../admin", Provider::Anthropic),
            ("/anthropic/v1/complete", Provider::Anthropic),
            ("/anthropic/", Provider::Anthropic),
            ("/openai/v1/files", Provider::OpenAi),
            ("/openai/v1/chat/completions/", Provider::OpenAi),
        ] {
            assert_eq!(
                route(&Method::POST, path, None),
                Err(Refusal::NotFound(Some(provider))),
                "{path}"
            );
        }
        assert_eq!(
            route(&Method::GET, "/anthropic/v1/messages", None),
            Err(Refusal::Method(Provider::Anthropic))
        );
        assert_eq!(
            route(&Method::DELETE, "/openai/v1/models", None),
            Err(Refusal::Method(Provider::OpenAi))
        );
    }
}
