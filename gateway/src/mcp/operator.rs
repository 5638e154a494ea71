//! `--mcp-servers FILE`: the MCP servers an operator allows, in the common
//! `{"mcpServers": {NAME: {...}}}` shape plus `"default": true|false`
//! (started for every project's agent, or only once a client selects
//! it). Read and checked once at start; what each child gets is
//! [`OperatorServers::child_file`]. Environment and header values are
//! secrets: never shown by `Debug`, never in an error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{json, Map, Value};

/// Largest file read, in bytes (the agent's own limit).
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// Most servers (the agent's own limit).
pub const MAX_SERVERS: usize = 32;
/// Longest server name: `mcp__NAME__TOOL` must stay within the providers'
/// 64-character tool names (the agent's own limit).
pub const MAX_NAME_CHARS: usize = 24;
/// Largest per-server `timeout`, in seconds (the agent's own limit).
pub const MAX_TIMEOUT_SECS: u64 = 3600;

/// The operator's servers, in name order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OperatorServers(Vec<OperatorServer>);

/// One server an operator defined.
#[derive(Clone, PartialEq, Eq)]
pub struct OperatorServer {
    /// `[A-Za-z0-9_-]`, 1 to 24 characters, without `__`.
    pub name: String,
    pub transport: Transport,
    /// Per-call timeout in seconds, passed to the agent.
    pub timeout: Option<u64>,
    /// Started with every project's agent (`true`, the default), or only
    /// once a client selects it.
    pub default: bool,
}

/// How the agent reaches a server.
#[derive(Clone, PartialEq, Eq)]
pub enum Transport {
    /// A command run over stdio inside the agent's sandbox.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// Streamable HTTP.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

/// Names of the secrets, never their values.
impl std::fmt::Debug for OperatorServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut s = f.debug_struct("OperatorServer");
        s.field("name", &self.name).field("default", &self.default);
        match &self.transport {
            Transport::Stdio { command, env, .. } => s
                .field("command", command)
                .field("env", &env.keys().collect::<Vec<_>>()),
            Transport::Http { headers, .. } => {
                s.field("headers", &headers.keys().collect::<Vec<_>>())
            }
        };
        s.finish_non_exhaustive()
    }
}

/// Why the operator's file cannot be used. Never holds a secret value.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: larger than {MAX_FILE_BYTES} bytes", path.display())]
    TooLarge { path: PathBuf },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
}

/// One entry as written; every field optional so the checks can name
/// what is wrong.
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
    default: Option<bool>,
    #[serde(default, rename = "description")]
    _description: Option<Value>,
}

impl OperatorServers {
    /// Reads and checks the file at `path`.
    pub fn load(path: &Path) -> Result<OperatorServers, OperatorError> {
        let read = |source| OperatorError::Read {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(read)?;
        if meta.len() > MAX_FILE_BYTES {
            return Err(OperatorError::TooLarge {
                path: path.to_path_buf(),
            });
        }
        let text = std::fs::read_to_string(path).map_err(read)?;
        OperatorServers::parse(&text).map_err(|message| OperatorError::Invalid {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses and checks a file's text.
    pub fn parse(text: &str) -> Result<OperatorServers, String> {
        // A serde error may quote the text it choked on: say where only.
        let root: Value = serde_json::from_str(text)
            .map_err(|e| format!("not JSON (line {}, column {})", e.line(), e.column()))?;
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
            let entry: Entry = serde_json::from_value(entry.clone())
                .map_err(|e| format!("server {name:?}: {}", without_values(&e)))?;
            out.push(server(name, entry).map_err(|e| format!("server {name:?}: {e}"))?);
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(OperatorServers(out))
    }

    pub fn iter(&self) -> impl Iterator<Item = &OperatorServer> {
        self.0.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `name` is one of the operator's servers.
    pub fn contains(&self, name: &str) -> bool {
        self.0.iter().any(|s| s.name == name)
    }

    /// The server named `name`, if the operator defined it.
    pub fn get(&self, name: &str) -> Option<&OperatorServer> {
        self.0.iter().find(|s| s.name == name)
    }

    /// The config file a `corral-agent` child reads with `--mcp-config`:
    /// every server under the operator's name, `"default": false` on
    /// those started only once selected.
    pub fn child_file(&self) -> String {
        let mut servers = Map::new();
        for server in &self.0 {
            let mut entry = match &server.transport {
                Transport::Stdio { command, args, env } => {
                    json!({"command": command, "args": args, "env": env})
                }
                Transport::Http { url, headers } => {
                    json!({"type": "http", "url": url, "headers": headers})
                }
            };
            if let Some(timeout) = server.timeout {
                entry["timeout"] = json!(timeout);
            }
            if !server.default {
                entry["default"] = json!(false);
            }
            servers.insert(server.name.clone(), entry);
        }
        format!("{}\n", json!({ "mcpServers": servers }))
    }
}

/// A serde error's message without the value it quotes (`invalid type:
/// string "…"` would show a secret given in the wrong place).
fn without_values(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.find(['"', '`']) {
        Some(at) if !text.starts_with("unknown field") => {
            format!("{} (line {})", text[..at].trim_end(), error.line())
        }
        _ => text,
    }
}

fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME_CHARS
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        && !name.contains("__");
    match ok {
        true => Ok(()),
        false => Err(format!(
            "server name {:?}: use 1 to {MAX_NAME_CHARS} of A-Z a-z 0-9 _ - (no `__`)",
            name.chars().take(40).collect::<String>()
        )),
    }
}

fn server(name: &str, entry: Entry) -> Result<OperatorServer, String> {
    let timeout = match entry.timeout {
        None => None,
        Some(secs) if (1..=MAX_TIMEOUT_SECS).contains(&secs) => Some(secs),
        Some(_) => return Err(format!("timeout must be 1 to {MAX_TIMEOUT_SECS} seconds")),
    };
    let transport = match (entry.kind.as_deref(), entry.command, entry.url) {
        (None | Some("stdio"), Some(command), None) if !command.trim().is_empty() => {
            if !entry.headers.is_empty() {
                return Err(
                    "\"headers\" are for http servers; a stdio server takes \"env\"".into(),
                );
            }
            for key in entry.env.keys() {
                if key.is_empty() || key.contains(['=', '\0']) {
                    return Err(format!("env name {key:?} is not a variable name"));
                }
            }
            if entry.env.values().any(|v| v.contains('\0')) {
                return Err("an env value holds a NUL byte".into());
            }
            Transport::Stdio {
                command,
                args: entry.args,
                env: entry.env,
            }
        }
        (None | Some("http" | "streamable-http" | "streamableHttp"), None, Some(url)) => {
            let parsed = reqwest::Url::parse(&url).map_err(|e| format!("url: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err("url must be http or https".into());
            }
            if !entry.args.is_empty() || !entry.env.is_empty() {
                return Err(
                    "\"args\" and \"env\" are for stdio servers; an http server takes \"headers\""
                        .into(),
                );
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
                "SSE-only servers are not supported; use the server's streamable HTTP \
                 endpoint (\"type\": \"http\") or run it over stdio"
                    .into(),
            )
        }
        (Some(other), _, _)
            if !matches!(
                other,
                "stdio" | "http" | "streamable-http" | "streamableHttp"
            ) =>
        {
            return Err(format!(
                "unknown type {:?} (stdio or http)",
                other.chars().take(40).collect::<String>()
            ))
        }
        _ => return Err("give either \"command\" (stdio) or \"url\" (http)".into()),
    };
    Ok(OperatorServer {
        name: name.to_string(),
        transport,
        timeout,
        default: entry.default.unwrap_or(true),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"{"mcpServers": {
        "tracker": {"type": "http", "url": "https://mcp.example.com/mcp",
                    "headers": {"Authorization": "Bearer hdr-s3cret"}, "default": false},
        "docs": {"command": "npx", "args": ["-y", "docs-mcp"], "env": {"TOKEN": "env-s3cret"},
                 "timeout": 30}
    }}"#;

    #[test]
    fn servers_parse_in_name_order_with_their_default() {
        let servers = OperatorServers::parse(FILE).unwrap();
        let names: Vec<_> = servers
            .iter()
            .map(|s| (s.name.as_str(), s.default))
            .collect();
        assert_eq!(names, [("docs", true), ("tracker", false)]);
        assert_eq!(servers.get("docs").unwrap().timeout, Some(30));
        let shown = format!("{servers:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }

    #[test]
    fn the_child_file_keeps_the_definitions_and_marks_selectable_ones() {
        let servers = OperatorServers::parse(FILE).unwrap();
        let file: Value = serde_json::from_str(&servers.child_file()).unwrap();
        let docs = &file["mcpServers"]["docs"];
        assert_eq!(docs["command"], "npx");
        assert_eq!(docs["env"]["TOKEN"], "env-s3cret");
        assert_eq!(docs["timeout"], 30);
        assert!(
            docs.get("default").is_none(),
            "a default server is written as before"
        );
        let tracker = &file["mcpServers"]["tracker"];
        assert_eq!(tracker["type"], "http");
        assert_eq!(tracker["default"], false);
        assert_eq!(tracker["headers"]["Authorization"], "Bearer hdr-s3cret");
    }

    #[test]
    fn bad_files_are_refused_with_the_reason_and_no_secret() {
        let cases = [
            (r#"{}"#, "mcpServers"),
            (r#"{"mcpServers": []}"#, "not an object"),
            (r#"{"mcpServers": {"a__b": {"command": "x"}}}"#, "no `__`"),
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
                r#"{"mcpServers": {"s": {"command": "x", "timeout": 0}}}"#,
                "timeout",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x", "bogus": 1}}}"#,
                "bogus",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x", "default": "no"}}}"#,
                "invalid type",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x", "env": {"A": 7}}}}"#,
                "invalid type",
            ),
            (
                r#"{"mcpServers": {"s": {"url": "http://x", "headers": {"A": "x\ny"}}}}"#,
                "not valid",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x", "headers": {"A": "b"}}}}"#,
                "stdio server takes",
            ),
        ];
        for (text, expected) in cases {
            let err = OperatorServers::parse(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
        let err = OperatorServers::parse(
            r#"{"mcpServers": {"s": {"command": "x", "env": {"TOKEN": ["env-s3cret"]}}}}"#,
        )
        .unwrap_err();
        assert!(!err.contains("s3cret"), "{err}");
        let many: Map<String, Value> = (0..=MAX_SERVERS)
            .map(|i| (format!("s{i}"), json!({"command": "x"})))
            .collect();
        let err = OperatorServers::parse(&json!({ "mcpServers": many }).to_string()).unwrap_err();
        assert!(err.contains("more than"), "{err}");
    }
}
