//! The broker's own answers (errors), in the error shape of the provider
//! the request was for, so the agent's provider code shows their message
//! as it would a provider's.

use axum::body::Body;
use axum::http::{header, HeaderValue, Response, StatusCode};
use serde_json::json;

use super::upstream::Provider;

/// An error answer with `status` and `message`.
pub fn error(provider: Option<Provider>, status: StatusCode, message: &str) -> Response<Body> {
    let kind = match status {
        StatusCode::UNAUTHORIZED => "authentication_error",
        StatusCode::PAYMENT_REQUIRED => "billing_error",
        StatusCode::FORBIDDEN => "permission_error",
        StatusCode::NOT_FOUND => "not_found_error",
        StatusCode::PAYLOAD_TOO_LARGE => "request_too_large",
        StatusCode::BAD_GATEWAY => "api_error",
        _ => "invalid_request_error",
    };
    let body = match provider {
        Some(Provider::Anthropic) => json!({
            "type": "error",
            "error": {"type": kind, "message": message},
        }),
        Some(Provider::OpenAi) => json!({
            "error": {"message": message, "type": kind, "code": null},
        }),
        None => json!({"error": {"message": message, "type": kind}}),
    };
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn body(response: Response<Body>) -> serde_json::Value {
        let bytes = axum::body::to_bytes(response.into_body(), 4096)
            .await
            .unwrap();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[tokio::test]
    async fn errors_take_the_providers_shape() {
        let r = error(Some(Provider::Anthropic), StatusCode::UNAUTHORIZED, "no");
        assert_eq!(r.status(), 401);
        assert_eq!(r.headers()["content-type"], "application/json");
        let b = body(r).await;
        assert_eq!(b["type"], "error");
        assert_eq!(b["error"]["type"], "authentication_error");
        assert_eq!(b["error"]["message"], "no");
        let b = body(error(Some(Provider::OpenAi), StatusCode::NOT_FOUND, "x")).await;
        assert_eq!(b["error"]["message"], "x");
        assert_eq!(b["error"]["type"], "not_found_error");
        let b = body(error(None, StatusCode::METHOD_NOT_ALLOWED, "y")).await;
        assert_eq!(b["error"]["message"], "y");
    }
}
