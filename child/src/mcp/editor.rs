//! The servers an ACP editor names in `session/new`, `session/load` and
//! `session/resume` (`mcpServers`), as server configs: stdio `{name,
//! command, args, env: [{name, value}]}` and `{"type": "http", name, url,
//! headers: [{name, value}]}`. SSE servers are refused (this agent does not
//! advertise them). Names are the editor's, made fit for tool names and
//! kept apart from the servers the agent already has. Pure.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::config::{check_name, ServerConfig, Transport, MAX_NAME_CHARS, MAX_SERVERS};

/// One `{name, value}` pair of `env` or `headers`.
#[derive(Deserialize)]
struct Pair {
    name: String,
    value: String,
}

/// The wire shape of one entry, loosely read so the checks can say what is
/// wrong.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Entry {
    #[serde(rename = "type")]
    kind: Option<String>,
    name: String,
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: Vec<Pair>,
    url: Option<String>,
    #[serde(default)]
    headers: Vec<Pair>,
}

/// An editor's server this agent does not use, and why (told to the
/// editor as a session notice).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refused {
    pub name: String,
    pub reason: String,
}

/// The editor's `mcpServers` as configs, with the ones refused. `taken`
/// are the names already in use (the agent's own servers): an editor's
/// server of the same name gets a suffix, so it never replaces one of
/// them.
pub fn servers(entries: &[Value], taken: &[String]) -> (Vec<ServerConfig>, Vec<Refused>) {
    let mut names: Vec<String> = taken.to_vec();
    let mut out = Vec::new();
    let mut refused = Vec::new();
    for entry in entries {
        let shown = entry.get("name").and_then(Value::as_str).map_or_else(
            || "(unnamed)".to_string(),
            |n| crate::tools::cut_line(n, 64).into_owned(),
        );
        if out.len() + taken.len() >= MAX_SERVERS {
            refused.push(Refused {
                name: shown,
                reason: format!("more than {MAX_SERVERS} MCP servers"),
            });
            continue;
        }
        match server(entry, &names) {
            Ok(config) => {
                names.push(config.name.clone());
                out.push(config);
            }
            Err(reason) => refused.push(Refused {
                name: shown,
                reason,
            }),
        }
    }
    (out, refused)
}

fn server(entry: &Value, taken: &[String]) -> Result<ServerConfig, String> {
    let entry: Entry = serde_json::from_value(entry.clone()).map_err(|e| e.to_string())?;
    let pairs = |pairs: Vec<Pair>| -> BTreeMap<String, String> {
        pairs.into_iter().map(|p| (p.name, p.value)).collect()
    };
    let transport = match (entry.kind.as_deref(), entry.command, entry.url) {
        (None | Some("stdio"), Some(command), None) if !command.is_empty() => Transport::Stdio {
            command,
            args: entry.args,
            env: pairs(entry.env),
        },
        (Some("http"), None, Some(url)) => {
            let parsed = reqwest::Url::parse(&url).map_err(|e| format!("url: {e}"))?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err("url must be http or https".into());
            }
            let headers = pairs(entry.headers);
            for (key, value) in &headers {
                reqwest::header::HeaderName::from_bytes(key.as_bytes())
                    .map_err(|_| format!("header name {key:?} is not valid"))?;
                reqwest::header::HeaderValue::from_str(value)
                    .map_err(|_| format!("header {key:?}: the value is not valid"))?;
            }
            Transport::Http { url, headers }
        }
        (Some("sse"), _, _) => {
            return Err(
                "SSE servers are not supported (mcpCapabilities.sse is false); \
                 use the server's streamable HTTP endpoint"
                    .into(),
            )
        }
        (Some(other), _, _) if !matches!(other, "stdio" | "http") => {
            return Err(format!("unknown type {other:?}"))
        }
        _ => return Err("give either \"command\" (stdio) or \"url\" (http)".into()),
    };
    Ok(ServerConfig {
        name: unique_name(&sanitise(&entry.name), taken),
        transport,
        timeout: None,
        starts: true,
    })
}

/// `name` with characters outside `[A-Za-z0-9_-]` as `_`, runs of `_` as
/// one (a name must not hold `__`), cut to [`MAX_NAME_CHARS`]; `mcp` when
/// nothing is left.
pub fn sanitise(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        let c = match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' => c,
            _ => '_',
        };
        if c == '_' && out.ends_with('_') {
            continue;
        }
        out.push(c);
    }
    let out: String = out.chars().take(MAX_NAME_CHARS).collect();
    match out.trim_matches('_') {
        "" => "mcp".to_string(),
        trimmed => trimmed.to_string(),
    }
}

/// `name`, or `name-2`, `name-3`… (within [`MAX_NAME_CHARS`]), whichever
/// is not `taken`.
fn unique_name(name: &str, taken: &[String]) -> String {
    if !taken.iter().any(|t| t == name) {
        return name.to_string();
    }
    (2..)
        .map(|n| {
            let suffix = format!("-{n}");
            let keep: String = name.chars().take(MAX_NAME_CHARS - suffix.len()).collect();
            format!("{keep}{suffix}")
        })
        .find(|candidate| !taken.contains(candidate) && check_name(candidate).is_ok())
        .unwrap_or_else(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stdio_and_http_entries_become_configs_and_sse_is_refused() {
        let entries = [
            json!({"name": "fs", "command": "npx", "args": ["-y", "x"], "env": [{"name": "TOKEN", "value": "t"}]}),
            json!({"type": "http", "name": "web", "url": "http://127.0.0.1:9/mcp", "headers": [{"name": "Authorization", "value": "Bearer s"}]}),
            json!({"type": "sse", "name": "old", "url": "http://127.0.0.1:9/sse", "headers": []}),
            json!({"name": "bad", "url": "file:///etc/passwd", "type": "http", "headers": []}),
            json!({"nameless": true}),
        ];
        let (servers, refused) = servers(&entries, &[]);
        assert_eq!(servers.len(), 2);
        assert!(
            matches!(&servers[0].transport, Transport::Stdio { command, env, .. } if command == "npx" && env["TOKEN"] == "t")
        );
        assert!(
            matches!(&servers[1].transport, Transport::Http { headers, .. } if headers["Authorization"] == "Bearer s")
        );
        assert!(servers.iter().all(|s| s.starts));
        let reasons: Vec<(&str, &str)> = refused
            .iter()
            .map(|r| (r.name.as_str(), r.reason.as_str()))
            .collect();
        assert_eq!(reasons.len(), 3, "{reasons:?}");
        assert!(reasons[0].0 == "old" && reasons[0].1.contains("SSE"));
        assert!(reasons[1].0 == "bad" && reasons[1].1.contains("http or https"));
        assert_eq!(reasons[2].0, "(unnamed)");
    }

    #[test]
    fn names_are_sanitised_and_kept_apart_from_the_agents_own() {
        assert_eq!(sanitise("GitHub Issues"), "GitHub_Issues");
        assert_eq!(sanitise("a__b..c"), "a_b_c");
        assert_eq!(sanitise("///"), "mcp");
        assert_eq!(sanitise(&"x".repeat(100)).len(), MAX_NAME_CHARS);
        for name in ["GitHub Issues", "a__b", "é!", &"y".repeat(100)] {
            assert!(check_name(&sanitise(name)).is_ok(), "{name}");
        }
        let entries = [
            json!({"name": "fs", "command": "a"}),
            json!({"name": "fs", "command": "b"}),
        ];
        let (servers, _) = servers(&entries, &["fs".to_string()]);
        let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["fs-2", "fs-3"]);
    }
}
