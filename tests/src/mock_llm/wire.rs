//! The interface between the server and the two wire formats: [`Wire`]
//! dispatches to the `anthropic` and `openai` modules, which check requests
//! ([`Rejection`]) and render replies as timed SSE [`Frame`]s given a [`Ctx`].

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde_json::Value;

use super::turn::Reply;
use super::{anthropic, openai};

/// The two wire formats; each method dispatches to its module.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Anthropic,
    OpenAi,
}

impl Wire {
    /// The endpoint this format is served at.
    pub fn path(self) -> &'static str {
        match self {
            Wire::Anthropic => "/v1/messages",
            Wire::OpenAi => "/v1/chat/completions",
        }
    }

    /// The header carrying the API key.
    pub fn auth_header(self) -> &'static str {
        match self {
            Wire::Anthropic => "x-api-key",
            Wire::OpenAi => "authorization",
        }
    }

    /// The response header naming the request, as the real API sets it.
    pub fn request_id_header(self) -> &'static str {
        match self {
            Wire::Anthropic => "request-id",
            Wire::OpenAi => "x-request-id",
        }
    }

    /// Checks the key, headers and body; returns the body object.
    pub fn admit<'a>(
        self,
        headers: &HeaderMap,
        body: Option<&'a Value>,
        key: Option<&str>,
    ) -> Result<&'a Value, Rejection> {
        match self {
            Wire::Anthropic => anthropic::admit(headers, body, key),
            Wire::OpenAi => openai::admit(headers, body, key),
        }
    }

    /// The text of the last tool result in the request, for echoing.
    pub fn last_tool_result(self, body: &Value) -> Option<String> {
        match self {
            Wire::Anthropic => anthropic::last_tool_result(body),
            Wire::OpenAi => openai::last_tool_result(body),
        }
    }

    /// An error response in this format's JSON shape.
    pub fn error(self, status: StatusCode, message: &str) -> Response {
        match self {
            Wire::Anthropic => anthropic::error(status, message),
            Wire::OpenAi => openai::error(status, message),
        }
    }

    /// The timed SSE frames of a reply.
    pub fn render(self, reply: &Reply, ctx: &Ctx) -> Vec<Frame> {
        match self {
            Wire::Anthropic => anthropic::render(reply, ctx),
            Wire::OpenAi => openai::render(reply, ctx),
        }
    }
}

/// The 400 message for a request without `"stream": true`.
pub const STREAM_ONLY: &str = "mock-llm serves streaming requests only: set \"stream\": true";

/// Why a request is refused before it consumes a turn; the wire format
/// renders it in its error shape.
#[derive(Debug, PartialEq)]
pub struct Rejection {
    pub status: StatusCode,
    pub message: String,
}

impl Rejection {
    pub fn bad_request(message: impl Into<String>) -> Rejection {
        Rejection {
            status: StatusCode::BAD_REQUEST,
            message: message.into(),
        }
    }

    pub fn unauthorized(message: impl Into<String>) -> Rejection {
        Rejection {
            status: StatusCode::UNAUTHORIZED,
            message: message.into(),
        }
    }
}

/// What rendering a reply needs to know about its request.
pub struct Ctx<'a> {
    /// 1-based request number, unique per mock; used in generated ids.
    pub seq: usize,
    /// How many replies this wire format served before this one.
    pub nth: usize,
    /// The request body (an object, checked by `admit`).
    pub body: &'a Value,
    /// Request body length in bytes, the base of the token counts.
    pub body_len: usize,
    /// Unix seconds, for OpenAI's `created`.
    pub created: u64,
    /// Token counts a test set with [`super::MockLlm::report_usage`], in
    /// place of the ones derived from the sizes.
    pub usage: Option<ReportedUsage>,
}

/// Token counts the mock reports for every reply, whatever its size, so a
/// test knows what a call costs (e.g. to cross a budget with one prompt).
/// No cache tokens are reported with them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportedUsage {
    /// Prompt tokens (Anthropic `input_tokens`, OpenAI `prompt_tokens`).
    pub input: u64,
    /// Output tokens (Anthropic `output_tokens`, OpenAI `completion_tokens`).
    pub output: u64,
}

impl Ctx<'_> {
    /// A plausible prompt token count: a quarter of the request bytes.
    pub fn prompt_tokens(&self) -> u64 {
        (self.body_len as u64 / 4).max(1)
    }

    /// The model the request named, echoed in the response.
    pub fn model(&self) -> &str {
        self.body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("mock")
    }
}

/// One piece of a streamed response: wait `delay`, then send `text`.
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    pub delay: Duration,
    pub text: String,
}

impl Frame {
    pub fn now(text: String) -> Frame {
        Frame {
            delay: Duration::ZERO,
            text,
        }
    }
}
