//! Where MCP servers come from: the `{"mcpServers": {NAME: …}}` files of
//! `--mcp-config` and, when allowed, the project's own `.mcp.json`. A
//! server is a command run over stdio (`command`, `args`, `env`) or a
//! streamable HTTP endpoint (`"type": "http"`, `url`, `headers`). Pure
//! parsing and validation; reading the files is [`load`].

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

/// Largest config file read, in bytes.
pub const MAX_CONFIG_BYTES: u64 = 1024 * 1024;
/// Most servers one agent runs.
pub const MAX_SERVERS: usize = 32;
/// Longest server name: `mcp__NAME__TOOL` must stay within the providers'
/// 64-character tool names.
pub const MAX_NAME_CHARS: usize = 24;
/// Largest per-server `timeout`, in seconds.
pub const MAX_TIMEOUT_SECS: u64 = 3600;

/// One configured server.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// `[A-Za-z0-9_-]`, without `__`: the middle part of its tools' names.
    pub name: String,
    pub transport: Transport,
    /// Per-call timeout, overriding `--mcp-timeout`.
    pub timeout: Option<Duration>,
    /// Started with the agent (`"default"` absent or `true`), or only once
    /// selected (`"default": false`: `_corral/mcp/select`, `mcp_select`).
    pub starts: bool,
}

/// How the agent reaches a server.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        /// Added to the few variables a server inherits (see `spawn`).
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP; `headers` go with every request.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// Header values and environment values may be secrets: never shown.
impl std::fmt::Debug for ServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("ServerConfig");
        s.field("name", &self.name).field("starts", &self.starts);
        match &self.transport {
            Transport::Stdio { command, args, env } => s
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>()),
            Transport::Http { url, headers } => s
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>()),
        };
        s.finish()
    }
}

/// Why a config cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: larger than {MAX_CONFIG_BYTES} bytes")]
    TooLarge { path: PathBuf },
    #[error("{path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The wire shape of one entry, every field optional so the checks can
/// name what is wrong.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(rename = "type")]
    kind: Option<String>,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    timeout: Option<u64>,
    /// `false`: defined, but started only once selected.
    #[serde(default = "yes")]
    default: bool,
    /// Claude Code's and others' extra keys that change nothing here.
    #[serde(default, rename = "disabled")]
    disabled: bool,
    #[serde(default, rename = "description")]
    _description: Option<Value>,
}

fn yes() -> bool {
    true
}

/// Reads and parses the config file at `path`.
pub fn load(path: &Path) -> Result<Vec<ServerConfig>, ConfigError> {
    let read = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    if meta.len() > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(read)?;
    parse(&text).map_err(|message| ConfigError::Invalid {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses a config's text; servers come out in name order.
pub fn parse(text: &str) -> Result<Vec<ServerConfig>, String> {
    let root: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let Some(servers) = root.get("mcpServers") else {
        return Err("no \"mcpServers\" object".into());
    };
    let Some(servers) = servers.as_object() else {
        return Err("\"mcpServers\" is not an object".into());
    };
    if servers.len() > MAX_SERVERS {
        return Err(format!("more than {MAX_SERVERS} servers"));
    }
    let mut out = Vec::new();
    for (name, entry) in servers {
        check_name(name)?;
        let entry: Entry =
            serde_json::from_value(entry.clone()).map_err(|e| format!("server {name:?}: {e}"))?;
        if entry.disabled {
            continue;
        }
        out.push(server(name, entry).map_err(|e| format!("server {name:?}: {e}"))?);
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

pub(crate) fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains("__");
    match ok {
        true => Ok(()),
        false => Err(format!(
            "server name {name:?}: use 1 to {MAX_NAME_CHARS} of A-Z a-z 0-9 _ - (no `__`)"
        )),
    }
}

fn server(name: &str, entry: Entry) -> Result<ServerConfig, String> {
    let timeout = match entry.timeout {
        None => None,
        Some(secs) if (1..=MAX_TIMEOUT_SECS).contains(&secs) => Some(Duration::from_secs(secs)),
        Some(_) => return Err(format!("timeout must be 1 to {MAX_TIMEOUT_SECS} seconds")),
    };
    let transport = match (entry.kind.as_deref(), entry.command, entry.url) {
        (None | Some("stdio"), Some(command), None) if !command.is_empty() => Transport::Stdio {
            command,
            args: entry.args,
            env: entry.env,
        },
        (None | Some("http" | "streamable-http" | "streamableHttp"), None, Some(url)) => {
            let parsed = reqwest::Url::parse(&url).map_err(|e| format!("url: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err("url must be http or https".into());
            }
            for (key, value) in &entry.headers {
                reqwest::header::HeaderName::from_bytes(key.as_bytes())
                    .map_err(|_| format!("header name {key:?} is not valid"))?;
                reqwest::header::HeaderValue::from_str(value)
                    .map_err(|_| format!("header {key:?}: the value is not valid"))?;
            }
            Transport::Http {
                url,
                headers: entry.headers,
            }
        }
        (Some("sse"), _, _) => {
            return Err(
                "SSE-only servers (the 2024 transport) are not supported; use the \
                 server's streamable HTTP endpoint (\"type\": \"http\") or run it over stdio"
                    .into(),
            )
        }
        (Some(other), _, _)
            if !matches!(
                other,
                "stdio" | "http" | "streamable-http" | "streamableHttp"
            ) =>
        {
            return Err(format!("unknown type {other:?} (stdio or http)"))
        }
        _ => return Err("give either \"command\" (stdio) or \"url\" (http)".into()),
    };
    Ok(ServerConfig {
        name: name.to_string(),
        transport,
        timeout,
        starts: entry.default,
    })
}

/// `first` with the servers of `more` whose names it lacks added (the
/// earlier source wins a name).
pub fn merge(mut first: Vec<ServerConfig>, more: Vec<ServerConfig>) -> Vec<ServerConfig> {
    for server in more {
        if first.iter().any(|s| s.name == server.name) {
            tracing::warn!(server = %server.name, "MCP server defined twice; the first definition is used");
        } else {
            first.push(server);
        }
    }
    first.truncate(MAX_SERVERS);
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stdio_and_http_servers_parse_in_name_order() {
        let servers = parse(
            r#"{"mcpServers": {
                "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"Authorization": "Bearer s3cret"}},
                "fs": {"command": "npx", "args": ["-y", "x"], "env": {"TOKEN": "t0k"}, "timeout": 5},
                "off": {"command": "x", "disabled": true}
            }}"#,
        )
        .unwrap();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "fs");
        assert_eq!(servers[0].timeout, Some(Duration::from_secs(5)));
        assert!(
            matches!(&servers[0].transport, Transport::Stdio { command, args, env }
            if command == "npx" && args.len() == 2 && env["TOKEN"] == "t0k")
        );
        assert!(
            matches!(&servers[1].transport, Transport::Http { url, headers }
            if url.ends_with("/mcp") && headers.contains_key("Authorization"))
        );
        let shown = format!("{servers:?}");
        assert!(
            !shown.contains("s3cret") && !shown.contains("t0k"),
            "{shown}"
        );
    }

    #[test]
    fn bad_entries_are_refused_with_the_reason() {
        let cases = [
            (r#"{}"#, "mcpServers"),
            (r#"{"mcpServers": []}"#, "not an object"),
            (r#"{"mcpServers": {"a__b": {"command": "x"}}}"#, "no `__`"),
            (
                r#"{"mcpServers": {"a b": {"command": "x"}}}"#,
                "server name",
            ),
            (
                r#"{"mcpServers": {"s": {"type": "sse", "url": "http://x/sse"}}}"#,
                "SSE-only",
            ),
            (
                r#"{"mcpServers": {"s": {"url": "file:///etc/passwd"}}}"#,
                "http or https",
            ),
            (r#"{"mcpServers": {"s": {}}}"#, "either"),
            (
                r#"{"mcpServers": {"s": {"command": "x", "url": "http://x"}}}"#,
                "either",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x", "timeout": 0}}}"#,
                "timeout",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x", "bogus": 1}}}"#,
                "bogus",
            ),
            (
                r#"{"mcpServers": {"s": {"url": "http://x", "headers": {"A": "x\ny"}}}}"#,
                "not valid",
            ),
        ];
        for (text, expected) in cases {
            let err = parse(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn the_first_source_wins_a_name() {
        let a = parse(r#"{"mcpServers": {"x": {"command": "a"}}}"#).unwrap();
        let b = parse(r#"{"mcpServers": {"x": {"command": "b"}, "y": {"command": "c"}}}"#).unwrap();
        let merged = merge(a, b);
        assert_eq!(merged.len(), 2);
        assert!(matches!(&merged[0].transport, Transport::Stdio { command, .. } if command == "a"));
    }
}
