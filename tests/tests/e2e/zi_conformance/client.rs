//! The Zi reference client's flow (`examples/rpc/client.ts` in igorsheg/zi),
//! recreated from reading it: wait for `ready`, `session.prompt` (delivery
//! `direct`), `session.await_idle` (no params), page `session.get_messages`
//! until `nextStart` is null, close stdin and require exit code 0; the
//! answer is the text of the last assistant message, and its
//! `errorMessage` when it stopped with `error` or `aborted`.
//!
//! Every frame is checked as the reference checks it: a JSON object with
//! `version` 1 and `sequence` 1, 2, 3… without gaps; `ready` first and only
//! once; `session_event` with an `event` object; a `response` answers the
//! one pending request with its `id` and `method`, and a failed one has a
//! string `error.message`; a `protocol_error` or any other frame type is
//! fatal.

use std::time::Duration;

use serde_json::{json, Value};

use super::peer::Peer;

/// How long the reference waits for `ready`, and for the exit.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Pages it follows at most.
const MAX_PAGES: u64 = 1024;

/// A connected client; errors are the messages the reference would print.
pub struct RpcClient {
    peer: Peer,
    /// The `sequence` the next frame must carry.
    next_sequence: u64,
    ready: bool,
    /// The last request id (`"1"`, `"2"`, …).
    counter: u64,
    /// Session events, in order.
    pub events: Vec<Value>,
}

impl RpcClient {
    /// Waits for `ready`.
    pub async fn start(peer: Peer) -> Result<RpcClient, String> {
        let mut client = RpcClient {
            peer,
            next_sequence: 1,
            ready: false,
            counter: 0,
            events: Vec::new(),
        };
        let first = tokio::time::timeout(READY_TIMEOUT, client.frame())
            .await
            .map_err(|_| "Zi RPC did not become ready within 10000ms".to_string())??;
        if first["type"] != "ready" || !first["state"].is_object() {
            return Err(format!(
                "Zi RPC emitted an invalid ready transition: {first}"
            ));
        }
        client.ready = true;
        Ok(client)
    }

    /// The next frame, with the checks every frame gets.
    async fn frame(&mut self) -> Result<Value, String> {
        let Some(line) = self.peer.line().await else {
            return Err("Zi RPC stdout closed before the client".into());
        };
        let frame: Value = serde_json::from_str(line.trim_end_matches('\r'))
            .map_err(|_| "Zi RPC emitted invalid JSONL".to_string())?;
        if !frame.is_object() || frame["version"] != 1 || !frame["sequence"].is_u64() {
            return Err(format!("Zi RPC emitted an invalid server frame: {frame}"));
        }
        let sequence = frame["sequence"].as_u64().unwrap_or_default();
        if sequence != self.next_sequence {
            return Err(format!(
                "RPC server sequence gap: expected {}, received {sequence}",
                self.next_sequence
            ));
        }
        self.next_sequence += 1;
        Ok(frame)
    }

    /// Sends one request and waits for its response: `Ok(result)`, or the
    /// failure's `error.message`, or a fatal protocol violation.
    pub async fn request(&mut self, method: &str, params: Option<Value>) -> Result<Value, String> {
        self.counter += 1;
        let id = self.counter.to_string();
        let mut request = json!({"version": 1, "id": id, "method": method});
        if let Some(params) = params {
            request["params"] = params;
        }
        self.peer.send_raw(format!("{request}\n").as_bytes()).await;
        loop {
            let frame = self.frame().await?;
            match frame["type"].as_str() {
                Some("ready") => {
                    return Err(format!(
                        "Zi RPC emitted an invalid ready transition: {frame}"
                    ))
                }
                Some("session_event") if frame["event"].is_object() => self.events.push(frame),
                Some("response") => {
                    if frame["id"] != id.as_str() || frame["method"] != method {
                        return Err(format!("Zi RPC emitted an uncorrelated response: {frame}"));
                    }
                    if frame["ok"] == true {
                        return Ok(frame["result"].clone());
                    }
                    return match frame["error"]["message"].as_str() {
                        Some(message) => Err(message.to_string()),
                        None => Err(format!(
                            "Zi RPC emitted an invalid failure response: {frame}"
                        )),
                    };
                }
                Some("protocol_error") => {
                    let message = frame["message"].as_str().unwrap_or("protocol error");
                    return Err(format!(
                        "Zi RPC rejected the reference client request: {message}"
                    ));
                }
                other => {
                    return Err(format!(
                        "Zi RPC emitted an unknown frame type: {}",
                        other.unwrap_or("(none)")
                    ))
                }
            }
        }
    }

    /// Ends stdin and requires a clean exit.
    pub async fn close(mut self) -> Result<(), String> {
        self.peer.close_stdin();
        match self.peer.exit_within(CLOSE_TIMEOUT).await {
            Some(0) => Ok(()),
            Some(code) => Err(format!("Zi RPC exited with {code}")),
            None => Err("Zi RPC did not exit".into()),
        }
    }

    /// The last assistant message's text, or why the run did not succeed.
    pub async fn last_assistant_text(&mut self) -> Result<String, String> {
        let mut start = 0;
        let mut latest: Option<(String, String, Option<String>)> = None;
        for _ in 0..MAX_PAGES {
            let page = self
                .request(
                    "session.get_messages",
                    Some(json!({"start": start, "limit": 100})),
                )
                .await?;
            for message in page["messages"].as_array().into_iter().flatten() {
                if message["role"] == "assistant" {
                    latest = Some(assistant_outcome(message));
                }
            }
            let Some(next) = page["nextStart"].as_u64() else {
                let Some((text, stop, error)) = latest else {
                    return Err("RPC session completed without an assistant message".into());
                };
                if stop == "error" || stop == "aborted" {
                    return Err(error.unwrap_or(format!("RPC assistant stopped with {stop}")));
                }
                return Ok(text);
            };
            if next <= start {
                return Err("RPC message pagination did not advance".into());
            }
            start = next;
        }
        Err("RPC message pagination exceeded its page bound".into())
    }
}

/// `(text, stopReason, errorMessage)` of an assistant message.
fn assistant_outcome(message: &Value) -> (String, String, Option<String>) {
    let text = message["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|part| part["type"] == "text")
        .filter_map(|part| part["text"].as_str())
        .collect();
    let stop = message["stopReason"]
        .as_str()
        .unwrap_or("unknown")
        .to_string();
    let error = message["errorMessage"].as_str().map(str::to_string);
    (text, stop, error)
}

/// The whole flow of the reference CLI: the answer, or its error message.
pub async fn run_prompt(peer: Peer, prompt: &str) -> Result<String, String> {
    let mut client = RpcClient::start(peer).await?;
    let outcome = async {
        let params = json!({"delivery": "direct", "text": prompt});
        client.request("session.prompt", Some(params)).await?;
        client.request("session.await_idle", None).await?;
        client.last_assistant_text().await
    }
    .await;
    // The reference closes in a `finally`: a bad exit is the error even
    // after a failed run.
    client.close().await?;
    outcome
}
