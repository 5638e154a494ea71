//! One brokered request: routed, its placeholder key checked, its body
//! read (at most [`MAX_REQUEST_BYTES`]), sent upstream with the real key,
//! and the answer streamed back chunk by chunk as it arrives.

use axum::body::Body;
use axum::http::{Request, Response, StatusCode};

use super::route::{self, Refusal};
use super::upstream::Provider;
use super::{answer, headers, Broker, Outcome};

/// Largest request body forwarded: Anthropic's own limit for a Messages
/// request (32 MB). A model request is read whole before it is sent (the
/// answer is what streams).
pub const MAX_REQUEST_BYTES: usize = 32_000_000;

/// Answers one request to the broker.
pub async fn handle(broker: &Broker, request: Request<Body>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let route = match route::route(&parts.method, parts.uri.path(), parts.uri.query()) {
        Ok(route) => route,
        Err(Refusal::NotFound(provider)) => {
            broker.count(provider, Outcome::Refused);
            return answer::error(
                provider,
                StatusCode::NOT_FOUND,
                "the gateway's model broker forwards only model calls of its providers",
            );
        }
        Err(Refusal::Method(provider)) => {
            broker.count(Some(provider), Outcome::Refused);
            return answer::error(
                Some(provider),
                StatusCode::METHOD_NOT_ALLOWED,
                "method not allowed on this path of the gateway's model broker",
            );
        }
    };
    let provider = route.provider;
    let project = headers::presented_key(provider, &parts.headers)
        .and_then(|secret| broker.registry.project_of(secret));
    let Some(project) = project else {
        broker.count(Some(provider), Outcome::Unauthorized);
        return answer::error(
            Some(provider),
            StatusCode::UNAUTHORIZED,
            "the gateway's model broker does not know this key: only the key a child was started with works, while that child runs",
        );
    };
    let upstream = broker.upstreams.get(provider);
    let Some(key) = &upstream.key else {
        broker.count(Some(provider), Outcome::NoKey);
        return answer::error(
            Some(provider),
            StatusCode::FORBIDDEN,
            &format!(
                "the gateway holds no {} for its model broker",
                provider.key_env()
            ),
        );
    };
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(body) => body,
        Err(_) => {
            broker.count(Some(provider), Outcome::TooLarge);
            return answer::error(
                Some(provider),
                StatusCode::PAYLOAD_TOO_LARGE,
                &format!("a model request is at most {MAX_REQUEST_BYTES} bytes"),
            );
        }
    };
    let sent = broker
        .client
        .request(parts.method, route.url(&upstream.base))
        .headers(headers::upstream(provider, &parts.headers, key))
        .body(body)
        .send()
        .await;
    match sent {
        Ok(answer) => {
            broker.count(Some(provider), Outcome::Forwarded);
            let status = answer.status();
            let headers = headers::downstream(answer.headers());
            let mut response = Response::new(Body::from_stream(answer.bytes_stream()));
            *response.status_mut() = status;
            *response.headers_mut() = headers;
            response
        }
        Err(e) => {
            broker.count(Some(provider), Outcome::UpstreamError);
            let reason = error_chain(&e);
            tracing::warn!(project, provider = provider.label(), error = %reason, "model broker: the provider cannot be reached");
            answer::error(
                Some(provider),
                StatusCode::BAD_GATEWAY,
                &format!("the gateway cannot reach {}: {reason}", label(provider)),
            )
        }
    }
}

/// The provider as people name it.
fn label(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "Anthropic",
        Provider::OpenAi => "OpenAI",
    }
}

/// An error with its sources, `: `-separated (reqwest's own message is
/// often only "error sending request").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
