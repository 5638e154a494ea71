//! ACP and the gateway's MCP policy: the servers an editor names in
//! `session/new|load|resume` (`mcpServers`), read into the neutral
//! [`EditorServer`]s the policy matches; the agent's `_corral/mcp/select`
//! request for the servers matched; the `mcpCapabilities` the gateway's
//! `initialize` answer advertises (what it honours, not what the agent
//! offers); and the agent's MCP news (`_corral/mcp_status`, tool calls).

use serde_json::{json, Map, Value};

use super::JSONRPC;
use crate::dialect::cost::mentions;
use crate::dialect::mcp_news;
use crate::mcp::{EditorServer, McpNews};

/// The agent's request selecting servers by their operator names.
pub const SELECT: &str = "_corral/mcp/select";
/// The agent's notification of its servers' states.
pub const STATUS: &str = "_corral/mcp_status";

/// The servers of a `session/new|load|resume`'s `mcpServers` (stdio items
/// have no `type`; `http` and `sse` items do). Items beyond
/// [`crate::mcp::selection::MAX_ASKED`] are kept as unreadable ones, to
/// be refused.
pub fn editor_servers(params: Option<&Value>) -> Vec<EditorServer> {
    let Some(Value::Array(items)) = params.and_then(|p| p.get("mcpServers")) else {
        return Vec::new();
    };
    items
        .iter()
        .take(crate::mcp::selection::MAX_ASKED + 1)
        .map(editor_server)
        .collect()
}

fn editor_server(item: &Value) -> EditorServer {
    let text = |key: &str| item.get(key).and_then(Value::as_str).map(str::to_string);
    let name = text("name").unwrap_or_default();
    let kind = text("type");
    match (kind.as_deref(), text("command"), text("url")) {
        (None | Some("stdio"), Some(command), _) => {
            let args = match item.get("args") {
                Some(Value::Array(args)) => args
                    .iter()
                    .map(|a| a.as_str().map(str::to_string))
                    .collect::<Option<Vec<_>>>(),
                None => Some(Vec::new()),
                _ => None,
            };
            match args {
                Some(args) => EditorServer::Stdio {
                    name,
                    command,
                    args,
                },
                None => EditorServer::Other {
                    name,
                    kind: "stdio with unreadable args".into(),
                },
            }
        }
        (Some("http"), _, Some(url)) => EditorServer::Http { name, url },
        (kind, _, _) => EditorServer::Other {
            name,
            kind: kind.unwrap_or("unknown").to_string(),
        },
    }
}

/// The request that has the agent start `servers` (operator names).
pub fn select_line(gid: &str, servers: &[String]) -> String {
    let frame =
        json!({"jsonrpc": JSONRPC, "id": gid, "method": SELECT, "params": {"servers": servers}});
    format!("{frame}\n")
}

/// The servers' states in the agent's answer to a select, or the error
/// it answered with.
pub fn select_answer(line: &[u8]) -> Result<Vec<Value>, String> {
    let frame: Value =
        serde_json::from_slice(line).map_err(|_| "an answer that is not JSON".to_string())?;
    if let Some(error) = frame.get("error") {
        return Err(error
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or("an error without a message")
            .chars()
            .take(500)
            .collect());
    }
    Ok(mcp_news::servers(
        frame.get("result").and_then(|r| r.get("servers")),
    ))
}

/// The `initialize` answer's capabilities with `mcpCapabilities` set to
/// what the gateway honours: `http` only when an operator server reached
/// over HTTP is selectable; never `sse`.
pub fn honour_capabilities(hello: &mut Map<String, Value>, http: bool) {
    let Some(Value::Object(answer)) = hello.get_mut("initialize") else {
        return;
    };
    let capabilities = answer
        .entry("agentCapabilities")
        .or_insert_with(|| json!({}));
    if let Value::Object(capabilities) = capabilities {
        capabilities.insert(
            "mcpCapabilities".into(),
            json!({"http": http, "sse": false}),
        );
    }
}

/// The MCP news in a line of the agent.
pub fn mcp_news(line: &[u8], calls_open: bool) -> Option<McpNews> {
    let may_be = mentions(line, STATUS.as_bytes())
        || mentions(line, b"mcp__")
        || (calls_open && mentions(line, b"tool_call_update"));
    if !may_be {
        return None;
    }
    let frame: Value = serde_json::from_slice(line).ok()?;
    let params = frame.get("params")?;
    match frame.get("method").and_then(Value::as_str)? {
        STATUS => Some(McpNews::Status(mcp_news::servers(params.get("servers")))),
        super::method::SESSION_UPDATE => {
            let update = params.get("update")?;
            let id = update.get("toolCallId")?.as_str()?.to_string();
            match update.get("sessionUpdate")?.as_str()? {
                // corral-agent names the tool in `_meta.corral.tool` (its
                // title is for people); other agents may only title it.
                "tool_call" => Some(McpNews::ToolStarted {
                    id,
                    name: update
                        .pointer("/_meta/corral/tool")
                        .or_else(|| update.get("title"))?
                        .as_str()?
                        .to_string(),
                }),
                "tool_call_update" => match update.get("status")?.as_str()? {
                    "in_progress" => Some(McpNews::ToolRunning { id }),
                    "completed" => Some(McpNews::ToolEnded { id, failed: false }),
                    "failed" => Some(McpNews::ToolEnded { id, failed: true }),
                    _ => None,
                },
                _ => None,
            }
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn editor_servers_are_read_by_transport() {
        let params = json!({"cwd": "/", "mcpServers": [
            {"name": "fs", "command": "node", "args": ["/srv/fs.js", "/tmp"], "env": [{"name": "A", "value": "b"}]},
            {"type": "http", "name": "web", "url": "https://x/mcp", "headers": []},
            {"type": "sse", "name": "old", "url": "https://x/sse", "headers": []},
            {"name": "odd", "command": "x", "args": [1]},
        ]});
        let servers = editor_servers(Some(&params));
        assert_eq!(
            servers[0],
            EditorServer::Stdio {
                name: "fs".into(),
                command: "node".into(),
                args: vec!["/srv/fs.js".into(), "/tmp".into()]
            }
        );
        assert_eq!(
            servers[1],
            EditorServer::Http {
                name: "web".into(),
                url: "https://x/mcp".into()
            }
        );
        assert!(matches!(&servers[2], EditorServer::Other { kind, .. } if kind == "sse"));
        assert!(matches!(&servers[3], EditorServer::Other { .. }));
        assert!(editor_servers(Some(&json!({}))).is_empty());
    }

    #[test]
    fn capabilities_say_what_the_gateway_honours() {
        let mut hello = Map::new();
        hello.insert(
            "initialize".into(),
            json!({"agentCapabilities": {"mcpCapabilities": {"http": true, "sse": true}, "loadSession": true}}),
        );
        honour_capabilities(&mut hello, false);
        assert_eq!(
            hello["initialize"]["agentCapabilities"]["mcpCapabilities"],
            json!({"http": false, "sse": false})
        );
        assert_eq!(
            hello["initialize"]["agentCapabilities"]["loadSession"],
            true
        );
    }

    #[test]
    fn news_of_the_agent() {
        let status = json!({"jsonrpc": "2.0", "method": STATUS, "params": {"servers": [{"name": "a", "state": "connected", "tools": 1}]}});
        assert!(
            matches!(mcp_news(status.to_string().as_bytes(), false), Some(McpNews::Status(s)) if s.len() == 1)
        );
        let call = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s",
            "update": {"sessionUpdate": "tool_call", "toolCallId": "t1", "title": "mcp__a__echo", "status": "pending"}}});
        assert_eq!(
            mcp_news(call.to_string().as_bytes(), false),
            Some(McpNews::ToolStarted {
                id: "t1".into(),
                name: "mcp__a__echo".into()
            })
        );
        // corral-agent's title is for people; its `_meta` names the tool.
        let titled = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s",
            "update": {"sessionUpdate": "tool_call", "toolCallId": "t2", "status": "pending",
                "title": "echo (MCP server `a`)", "_meta": {"corral": {"tool": "mcp__a__echo"}}}}});
        assert_eq!(
            mcp_news(titled.to_string().as_bytes(), false),
            Some(McpNews::ToolStarted {
                id: "t2".into(),
                name: "mcp__a__echo".into()
            })
        );
        let done = json!({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s",
            "update": {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "failed"}}});
        let done = done.to_string();
        assert_eq!(mcp_news(done.as_bytes(), false), None);
        assert_eq!(
            mcp_news(done.as_bytes(), true),
            Some(McpNews::ToolEnded {
                id: "t1".into(),
                failed: true
            })
        );
        assert_eq!(
            select_answer(
                br#"{"jsonrpc":"2.0","id":"x","error":{"code":-32602,"message":"unknown server"}}"#
            ),
            Err("unknown server".into())
        );
        let line = select_line("corral-mcp-1", &["a".into()]);
        let frame: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(frame["method"], SELECT);
        assert_eq!(frame["params"]["servers"], json!(["a"]));
    }
}
