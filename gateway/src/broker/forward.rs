//! One brokered request: routed, its placeholder key checked, its
//! project's place among its open requests taken, its body read (at most
//! [`MAX_REQUEST_BYTES`], within [`BODY_TIMEOUT`], under the shared
//! [`MAX_BUFFERED_BYTES`]), sent upstream with the real key, and the
//! answer streamed back chunk by chunk as it arrives, its usage read on
//! the way and charged to the budgets (a model call of a spent budget is
//! answered 402 instead).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::StreamExt;

use axum::body::Body;
use axum::http::header::CONTENT_LENGTH;
use axum::http::{Request, Response, StatusCode};

use super::meter::{self, Call, Meter};
use super::route::{self, Refusal};
use super::tap::Api;
use super::upstream::Provider;
use super::{answer, headers, Broker, Outcome};

/// Largest request body forwarded: Anthropic's own limit for a Messages
/// request (32 MB). A model request is read whole before it is sent (the
/// answer is what streams).
pub const MAX_REQUEST_BYTES: usize = 32_000_000;

/// Time a request's body has to arrive whole (after its headers, which
/// have `HEADER_TIMEOUT`); a sender that stalls is answered 408.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Bytes of request bodies held at once over every request: a body is
/// read only once its size (its `Content-Length`, else the maximum) fits,
/// so many large or stalled bodies cannot take the gateway's memory.
pub const MAX_BUFFERED_BYTES: usize = 256 << 20;

/// Requests one project may have open at once (an agent makes one model
/// call at a time; a third-party agent a few); more are answered 429, so
/// one project cannot hold every connection of the broker.
pub const MAX_IN_FLIGHT_PER_PROJECT: usize = 16;

/// The open requests per project, shared with the answers' streams.
type OpenRequests = Arc<Mutex<HashMap<String, usize>>>;

/// A project's place among its open requests, freed on drop: held by the
/// answer's stream, so a request counts until its answer is passed on.
struct InFlight {
    open: OpenRequests,
    project: String,
}

impl InFlight {
    fn claim(open: &OpenRequests, project: &str) -> Option<InFlight> {
        let mut counts = open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = counts.entry(project.to_string()).or_default();
        if *count >= MAX_IN_FLIGHT_PER_PROJECT {
            return None;
        }
        *count += 1;
        Some(InFlight {
            open: open.clone(),
            project: project.to_string(),
        })
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut counts = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = counts.get_mut(&self.project) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.project);
            }
        }
    }
}

/// KiB permits of [`Broker::buffered`] for a body of `declared` bytes.
fn permits_for(declared: Option<usize>) -> u32 {
    let bytes = declared.unwrap_or(MAX_REQUEST_BYTES).min(MAX_REQUEST_BYTES);
    u32::try_from(bytes.div_ceil(1024).max(1)).unwrap_or(u32::MAX)
}

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
            "the gateway's model broker does not know this key: only the key a running agent was started with works",
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
    // Model calls are charged to the project and to the identity whose
    // run it is, and refused once either budget is spent.
    let api = Api::of_path(&route.rest);
    let payer = broker.ledger.payer_of(&project);
    if api.is_some() {
        if let Err(spent) = broker.ledger.check(&project, payer.as_ref()) {
            broker.count(Some(provider), Outcome::OverBudget);
            return answer::error(
                Some(provider),
                StatusCode::PAYMENT_REQUIRED,
                &spent.to_string(),
            );
        }
    }
    let Some(in_flight) = InFlight::claim(&broker.in_flight, &project) else {
        broker.count(Some(provider), Outcome::Busy);
        return answer::error(
            Some(provider),
            StatusCode::TOO_MANY_REQUESTS,
            &format!(
                "a project may have at most {MAX_IN_FLIGHT_PER_PROJECT} model calls open at once"
            ),
        );
    };
    let declared = parts
        .headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_REQUEST_BYTES) {
        broker.count(Some(provider), Outcome::TooLarge);
        return too_large(provider);
    }
    // The memory for the body first, then the body, both within the
    // deadline: a stalled sender holds neither a thread nor the gateway's
    // memory for long.
    let read = async {
        let permits = broker
            .buffered
            .clone()
            .acquire_many_owned(permits_for(declared))
            .await;
        let body = axum::body::to_bytes(body, MAX_REQUEST_BYTES).await;
        (permits, body)
    };
    let (_permits, body) = match tokio::time::timeout(broker.body_timeout, read).await {
        Ok((Ok(permits), Ok(body))) => (permits, body),
        Ok((_, Err(_))) => {
            broker.count(Some(provider), Outcome::TooLarge);
            return too_large(provider);
        }
        Ok((Err(_), _)) | Err(_) => {
            broker.count(Some(provider), Outcome::Slow);
            return answer::error(
                Some(provider),
                StatusCode::REQUEST_TIMEOUT,
                &format!(
                    "the request body did not arrive within {}s",
                    broker.body_timeout.as_secs()
                ),
            );
        }
    };
    let call = api.map(|api| Call {
        provider,
        api,
        requested: meter::requested_model(&body),
        project: project.clone(),
        payer,
    });
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
            let content_type = answer
                .headers()
                .get(axum::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            // Only a success is billed; the meter charges as it reads and
            // when the stream ends or is dropped.
            let mut meter = call
                .filter(|_| status.is_success())
                .and_then(|call| Meter::new(call, content_type, broker.ledger.clone()));
            let stream = answer.bytes_stream().map(move |chunk| {
                let _held = &in_flight;
                if let (Some(meter), Ok(bytes)) = (meter.as_mut(), &chunk) {
                    meter.observe(bytes);
                }
                chunk
            });
            let mut response = Response::new(Body::from_stream(stream));
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

fn too_large(provider: Provider) -> Response<Body> {
    answer::error(
        Some(provider),
        StatusCode::PAYLOAD_TOO_LARGE,
        &format!("a model request is at most {MAX_REQUEST_BYTES} bytes"),
    )
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
