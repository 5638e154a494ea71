//! The headers of a brokered request and its answer: the placeholder key
//! a child presents, and the rewriting both ways (hop-by-hop headers
//! dropped, the placeholder replaced by the real key). Pure: no I/O.

use axum::http::header::{
    HeaderName, HeaderValue, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_LENGTH, HOST,
};
use axum::http::HeaderMap;

use super::upstream::Provider;
use crate::auth::Secret;

/// Anthropic's key header.
const X_API_KEY: HeaderName = HeaderName::from_static("x-api-key");

/// The placeholder key a request presents in its provider's key header:
/// `x-api-key` for Anthropic, `Authorization: Bearer` for OpenAI.
pub fn presented_key(provider: Provider, headers: &HeaderMap) -> Option<&str> {
    match provider {
        Provider::Anthropic => headers.get(X_API_KEY)?.to_str().ok(),
        Provider::OpenAi => {
            let value = headers.get(AUTHORIZATION)?.to_str().ok()?;
            let (scheme, token) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        }
    }
}

/// Request headers that would choose the account a key spends from.
const ACCOUNT_HEADERS: [&str; 2] = ["openai-organization", "openai-project"];

/// The headers sent upstream: the child's, without hop-by-hop headers,
/// `Host` and `Content-Length` (the client sets both), any credential and
/// `Accept-Encoding` (the broker reads the usage in answers, so it asks
/// for them uncompressed), with the real `key` in the provider's key
/// header.
pub fn upstream(provider: Provider, incoming: &HeaderMap, key: &Secret) -> HeaderMap {
    let mut headers = end_to_end(incoming);
    for name in [
        HOST,
        CONTENT_LENGTH,
        AUTHORIZATION,
        X_API_KEY,
        ACCEPT_ENCODING,
    ] {
        headers.remove(name);
    }
    // Which account pays is the operator's: with a key that reaches
    // several OpenAI organisations or projects, an agent must not choose.
    for name in ACCOUNT_HEADERS {
        headers.remove(name);
    }
    let value = match provider {
        Provider::Anthropic => HeaderValue::from_str(key.expose()),
        Provider::OpenAi => HeaderValue::from_str(&format!("Bearer {}", key.expose())),
    };
    // Checked at start (`Upstreams::from_env`); a key that still will not
    // fit is left out, and the provider answers 401.
    if let Ok(mut value) = value {
        value.set_sensitive(true);
        let name = match provider {
            Provider::Anthropic => X_API_KEY,
            Provider::OpenAi => AUTHORIZATION,
        };
        headers.insert(name, value);
    }
    headers
}

/// The headers of the provider's answer passed to the child: without
/// hop-by-hop headers and `Content-Length` (the body is passed on as it
/// comes, and framed again).
pub fn downstream(answer: &HeaderMap) -> HeaderMap {
    let mut headers = end_to_end(answer);
    headers.remove(CONTENT_LENGTH);
    headers
}

/// `headers` without the hop-by-hop ones.
fn end_to_end(headers: &HeaderMap) -> HeaderMap {
    let mut out = headers.clone();
    crate::hop_by_hop::strip(&mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(
                HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    #[test]
    fn the_placeholder_is_read_from_the_providers_header() {
        let h = map(&[("x-api-key", "abc"), ("authorization", "Bearer def")]);
        assert_eq!(presented_key(Provider::Anthropic, &h), Some("abc"));
        assert_eq!(presented_key(Provider::OpenAi, &h), Some("def"));
        let h = map(&[("authorization", "bearer  xyz ")]);
        assert_eq!(presented_key(Provider::OpenAi, &h), Some("xyz"));
        assert_eq!(presented_key(Provider::Anthropic, &h), None);
        for bad in ["Basic xyz", "Bearer", "xyz"] {
            let h = map(&[("authorization", bad)]);
            assert_eq!(presented_key(Provider::OpenAi, &h), None, "{bad}");
        }
    }

    #[test]
    fn upstream_headers_carry_the_real_key_and_nothing_hop_by_hop() {
        let key = Secret::new("sk-real");
        let incoming = map(&[
            ("host", "corral-broker"),
            ("x-api-key", "placeholder"),
            ("authorization", "Bearer placeholder"),
            ("anthropic-version", "2023-06-01"),
            ("content-type", "application/json"),
            ("content-length", "12"),
            ("connection", "keep-alive, x-private"),
            ("x-private", "hop"),
            ("keep-alive", "timeout=5"),
            ("transfer-encoding", "chunked"),
            ("proxy-authorization", "Basic eA=="),
            ("accept", "text/event-stream"),
            ("accept-encoding", "gzip, br"),
        ]);
        let out = upstream(Provider::Anthropic, &incoming, &key);
        let mut names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(
            names,
            ["accept", "anthropic-version", "content-type", "x-api-key"]
        );
        assert_eq!(out["x-api-key"], "sk-real");
        assert!(out["x-api-key"].is_sensitive());

        let out = upstream(Provider::OpenAi, &incoming, &key);
        assert_eq!(out["authorization"], "Bearer sk-real");
        assert!(out.get("x-api-key").is_none());
    }

    #[test]
    fn downstream_headers_keep_the_answers_own() {
        let answer = map(&[
            ("content-type", "text/event-stream"),
            ("content-length", "100"),
            ("transfer-encoding", "chunked"),
            ("request-id", "req_1"),
            ("retry-after", "2"),
            ("connection", "close"),
        ]);
        let out = downstream(&answer);
        let mut names: Vec<&str> = out.keys().map(HeaderName::as_str).collect();
        names.sort_unstable();
        assert_eq!(names, ["content-type", "request-id", "retry-after"]);
    }
}
