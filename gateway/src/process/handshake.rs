//! The gateway's handshake with a freshly spawned child: either the
//! token hello ([`token_hello`]), which proves the gateway holds the
//! child's `ZUTCORE_RPC_TOKEN` (the token itself is never logged), or,
//! for dialects that trust their stdio pipes, the child's own `ready`
//! line, checked by the dialect, or the dialect's own requests (a
//! [`ChildGreeter`]: ACP's `initialize` and session).

use std::time::Duration;

use bytes::Bytes;
use corral_protocol::ndjson::{encode_line, parse_object};
use serde_json::{Map, Value};
use tokio::sync::mpsc;

use super::child::{ChildOutput, ChildProcess, ExitInfo};
use crate::dialect::hub::{ChildGreeter, Greeting};
use crate::dialect::token_hello::{self, HelloFailure};

/// The `id` of the gateway's hello; clients never see it.
pub const HELLO_ID: &str = "corral-hello";

/// Why a child did not become ready.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HandshakeError {
    /// The child exited before answering (its `Exited` output was consumed).
    #[error("the child exited before answering hello ({0})")]
    Exited(ExitInfo),
    /// The child answered `success:false`.
    #[error("the child refused hello: {0}")]
    Refused(String),
    #[error("the child did not answer hello within {0:?}")]
    Timeout(Duration),
    /// The hello response could not be understood.
    #[error("malformed hello response: {0}")]
    Malformed(String),
}

/// Sends the hello with `token` and waits (at most `timeout`) for its
/// response, skipping any other output. Returns the response's `data`
/// object (empty if it has none).
pub async fn hello(
    child: &ChildProcess,
    output: &mut mpsc::Receiver<ChildOutput>,
    token: &str,
    timeout: Duration,
) -> Result<Map<String, Value>, HandshakeError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let request = token_hello::request(HELLO_ID, token);
    let line = encode_line(&request).map_err(|e| HandshakeError::Malformed(e.to_string()))?;
    // If stdin is already gone, the child's exit explains why: keep reading.
    if child.send(Bytes::from(line)).await.is_err() {
        tracing::debug!(pid = child.pid(), "child stdin closed before hello");
    }
    loop {
        let item = match tokio::time::timeout_at(deadline, output.recv()).await {
            Err(_) => return Err(HandshakeError::Timeout(timeout)),
            Ok(None) => return Err(HandshakeError::Exited(child.wait().await)),
            Ok(Some(item)) => item,
        };
        match item {
            ChildOutput::Exited(exit) => return Err(HandshakeError::Exited(exit)),
            ChildOutput::Invalid(why) => {
                tracing::debug!(pid = child.pid(), "skipping output before hello: {why}");
            }
            ChildOutput::Line(line) => match parse_object(&line) {
                Ok(frame) if is_hello_response(&frame) => return interpret(frame),
                Ok(frame) => {
                    let kind = frame.get("type").and_then(Value::as_str).unwrap_or("?");
                    tracing::debug!(
                        pid = child.pid(),
                        kind,
                        "skipping output before hello response"
                    );
                }
                Err(e) => {
                    tracing::debug!(pid = child.pid(), error = %e, "skipping output before hello response");
                }
            },
        }
    }
}

/// Waits (at most `timeout`) for the child's `ready` line, skipping
/// anything else, and returns it, once the dialect accepts it (a letscode
/// child must speak letscode-rpc/1).
pub async fn ready(
    child: &ChildProcess,
    output: &mut mpsc::Receiver<ChildOutput>,
    dialect: crate::dialect::Dialect,
    timeout: Duration,
) -> Result<Map<String, Value>, HandshakeError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let is_ready =
        |frame: &Map<String, Value>| frame.get("type").and_then(Value::as_str) == Some("ready");
    let frame = next_object(child, output, deadline, timeout, is_ready).await?;
    dialect
        .rules()
        .check_ready(&frame)
        .map_err(HandshakeError::Refused)?;
    Ok(frame)
}

/// The next object line `wanted` accepts, skipping anything else the child
/// writes, until `deadline` (`timeout` after the start) or its exit.
async fn next_object(
    child: &ChildProcess,
    output: &mut mpsc::Receiver<ChildOutput>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    wanted: impl Fn(&Map<String, Value>) -> bool,
) -> Result<Map<String, Value>, HandshakeError> {
    loop {
        let item = match tokio::time::timeout_at(deadline, output.recv()).await {
            Err(_) => return Err(HandshakeError::Timeout(timeout)),
            Ok(None) => return Err(HandshakeError::Exited(child.wait().await)),
            Ok(Some(item)) => item,
        };
        let line = match item {
            ChildOutput::Exited(exit) => return Err(HandshakeError::Exited(exit)),
            ChildOutput::Invalid(why) => {
                tracing::debug!(
                    pid = child.pid(),
                    "skipping output before the greeting: {why}"
                );
                continue;
            }
            ChildOutput::Line(line) => line,
        };
        match parse_object(&line) {
            Ok(frame) if wanted(&frame) => return Ok(frame),
            _ => tracing::debug!(
                pid = child.pid(),
                "skipping a line before the greeting's answer"
            ),
        }
    }
}

/// Greets the child with the dialect's requests (at most `timeout` in
/// all), skipping anything else it writes meanwhile (an ACP agent replays
/// a loaded session as notifications), and returns its hello data.
pub async fn requests(
    child: &ChildProcess,
    output: &mut mpsc::Receiver<ChildOutput>,
    greeter: &mut dyn ChildGreeter,
    timeout: Duration,
) -> Result<Map<String, Value>, HandshakeError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut next = greeter.start();
    loop {
        if child.send(Bytes::from(next)).await.is_err() {
            tracing::debug!(pid = child.pid(), "child stdin closed during the greeting");
        }
        let is_answer = |frame: &Map<String, Value>| greeter.is_answer(frame);
        let frame = next_object(child, output, deadline, timeout, is_answer).await?;
        match greeter.answer(&frame).map_err(HandshakeError::Refused)? {
            Greeting::Send(line) => next = line,
            Greeting::Ready(hello) => return Ok(hello),
        }
    }
}

fn is_hello_response(frame: &Map<String, Value>) -> bool {
    token_hello::is_answer(frame, HELLO_ID)
}

fn interpret(frame: Map<String, Value>) -> Result<Map<String, Value>, HandshakeError> {
    token_hello::data(frame).map_err(|failure| match failure {
        HelloFailure::Refused(error) => HandshakeError::Refused(error),
        HelloFailure::Malformed(error) => HandshakeError::Malformed(error),
    })
}

/// A fresh secret for one child: 32 bytes from the OS, as 64 hex digits.
///
/// # Panics
/// If the operating system's random source fails; without it the gateway
/// cannot authenticate children safely, and there is no sane fallback.
pub fn random_token() -> String {
    let mut bytes = [0u8; 32];
    if let Err(e) = getrandom::getrandom(&mut bytes) {
        panic!("the OS random source failed: {e}");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
