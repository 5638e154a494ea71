//! `corral-agent mcp-http-bridge` (hidden): how a sandboxed agent reaches
//! a streamable HTTP MCP server with `--tool-network proxy`. The agent runs
//! it like a stdio server, behind the egress relay in a network namespace
//! of its own, so its only way out is the gateway's egress proxy (the
//! agent's own network is never used). It reads MCP messages from stdin,
//! one per line, posts them to the server, and writes what the server
//! sends on stdout. The server's URL and headers come in [`SERVER_ENV`],
//! which it removes at start; like every `corral-agent`, it is undumpable.

use std::collections::BTreeMap;
use std::ffi::OsString;

use corral_protocol::ndjson::FrameReader;
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::{StreamableHttpClientTransport, Transport};
use rmcp::RoleClient;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncWriteExt, BufReader};

use super::http;

/// The environment variable holding the server (JSON: `url`, `headers`).
pub const SERVER_ENV: &str = "CORRAL_MCP_HTTP_SERVER";
/// The hidden command's name.
pub const SUBCOMMAND: &str = "mcp-http-bridge";
/// Longest message read from the agent, in bytes.
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;
/// Exit code when the bridge cannot start (its reason on stderr).
pub const EXIT_UNUSABLE: u8 = 2;

/// The server the bridge reaches.
#[derive(Serialize, Deserialize)]
pub struct Bridged {
    pub url: String,
    pub headers: BTreeMap<String, String>,
}

/// The value of [`SERVER_ENV`] for `url` and `headers`.
pub fn server_env(url: &str, headers: &BTreeMap<String, String>) -> String {
    serde_json::to_string(&Bridged {
        url: url.to_string(),
        headers: headers.clone(),
    })
    .unwrap_or_default()
}

/// Runs the bridge until either side closes; returns the exit code.
pub fn run(server: Option<OsString>) -> u8 {
    let Some(bridged) = server
        .and_then(|s| s.into_string().ok())
        .and_then(|s| serde_json::from_str::<Bridged>(&s).ok())
    else {
        eprintln!("corral-agent: {SUBCOMMAND}: {SERVER_ENV} is missing or malformed");
        return EXIT_UNUSABLE;
    };
    // The relay exempts loopback from the proxy; the server's loopback is
    // not this namespace's, so everything goes through the proxy.
    for name in ["NO_PROXY", "no_proxy"] {
        std::env::remove_var(name);
    }
    let config = match http::transport_config(&bridged.url, &bridged.headers) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("corral-agent: {SUBCOMMAND}: {e}");
            return EXIT_UNUSABLE;
        }
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("corral-agent: {SUBCOMMAND}: cannot start its async runtime: {e}");
            return EXIT_UNUSABLE;
        }
    };
    // The transport starts its worker task at once: inside the runtime.
    runtime.block_on(async { pump(StreamableHttpClientTransport::from_config(config)).await });
    0
}

/// Carries messages both ways until stdin closes or the server goes away.
async fn pump(mut server: impl Transport<RoleClient>) {
    let mut input = FrameReader::with_max_line(BufReader::new(tokio::io::stdin()), MAX_MESSAGE);
    let mut output = tokio::io::stdout();
    loop {
        tokio::select! {
            line = input.next_object() => match line {
                None => break,
                Some(Err(e)) if !e.is_recoverable() => {
                    eprintln!("corral-agent: {SUBCOMMAND}: stdin: {e}");
                    break;
                }
                Some(Err(e)) => eprintln!("corral-agent: {SUBCOMMAND}: dropped a message: {e}"),
                Some(Ok(object)) => {
                    match serde_json::from_value::<ClientJsonRpcMessage>(object.into()) {
                        Ok(message) => {
                            let sent = server.send(message);
                            tokio::spawn(async move {
                                if let Err(e) = sent.await {
                                    eprintln!("corral-agent: {SUBCOMMAND}: {e}");
                                }
                            });
                        }
                        Err(e) => eprintln!("corral-agent: {SUBCOMMAND}: not an MCP message: {e}"),
                    }
                }
            },
            message = server.receive() => match message {
                Some(message) => {
                    if !write(&mut output, &message).await {
                        break;
                    }
                }
                None => break,
            },
        }
    }
    let _ = server.close().await;
}

/// Writes one message as a line; `false` once stdout is closed.
async fn write(output: &mut tokio::io::Stdout, message: &ServerJsonRpcMessage) -> bool {
    let Ok(mut line) = serde_json::to_vec(message) else {
        return true;
    };
    line.push(b'\n');
    output.write_all(&line).await.is_ok() && output.flush().await.is_ok()
}

/// The program and arguments that start the bridge: the agent's own
/// executable (the link works where the sandbox hides the binary's path).
pub fn command() -> (&'static str, [&'static str; 1]) {
    (crate::egress::SELF_EXE, [SUBCOMMAND])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_travels_as_json_and_a_bad_one_is_refused() {
        let headers = BTreeMap::from([("Authorization".to_string(), "Bearer s".to_string())]);
        let env = server_env("http://example.test/mcp", &headers);
        let back: Bridged = serde_json::from_str(&env).unwrap();
        assert_eq!(back.url, "http://example.test/mcp");
        assert_eq!(back.headers, headers);
        assert_eq!(run(None), EXIT_UNUSABLE);
        assert_eq!(run(Some("{".into())), EXIT_UNUSABLE);
    }
}
