//! What the agent reports of its MCP servers, as the gateway keeps it for
//! the admin API and the metrics: each server's state (from its
//! `mcp_status` events, always the full list) and the MCP tool calls in
//! flight (from the dialect's tool events, a call's server read off its
//! `mcp__SERVER__TOOL` name). Only the operator's server names are kept
//! or counted, so a label value is never something the agent made up;
//! everything is bounded.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;
use serde_json::Value;

use super::operator::{OperatorServers, MAX_SERVERS};

/// Tool calls tracked at once; more are not timed.
pub const MAX_CALLS: usize = 256;
/// Longest error kept per server, in characters.
pub const MAX_ERROR_CHARS: usize = 512;
/// Most tools counted per server (the agent keeps at most 128).
const MAX_TOOLS: u64 = 10_000;
/// Longest call id kept.
const MAX_CALL_ID: usize = 256;
/// The states a server may be in.
pub const STATES: [&str; 4] = ["connected", "connecting", "failed", "disabled"];

/// One server as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerStatus {
    pub name: String,
    /// One of [`STATES`].
    pub state: &'static str,
    pub tools: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What one line of the agent says about MCP, read by its dialect.
#[derive(Debug, Clone, PartialEq)]
pub enum McpNews {
    /// The state of every configured server (raw items).
    Status(Vec<Value>),
    /// A tool call announced or started, with its tool's name.
    ToolStarted { id: String, name: String },
    /// A call announced before is now running (ACP's `in_progress`).
    ToolRunning { id: String },
    /// A call ended.
    ToolEnded { id: String, failed: bool },
}

/// What changed, for the hub to publish or count.
#[derive(Debug, Clone, PartialEq)]
pub enum Tracked {
    Nothing,
    /// The server list changed.
    Servers,
    /// An MCP call of an operator server ended after `seconds`.
    CallEnded {
        server: String,
        ok: bool,
        seconds: f64,
    },
}

/// One project's MCP servers and calls in flight.
#[derive(Debug, Default)]
pub struct McpTracker {
    servers: Vec<ServerStatus>,
    /// Call id → (operator server, started).
    calls: HashMap<String, (String, Instant)>,
}

/// The operator server of a tool named `mcp__SERVER__TOOL`, if `known`.
pub fn server_of<'a>(tool: &'a str, known: &OperatorServers) -> Option<&'a str> {
    let rest = tool.strip_prefix("mcp__")?;
    let (server, _) = rest.split_once("__")?;
    known.contains(server).then_some(server)
}

impl McpTracker {
    /// The servers as last reported.
    pub fn servers(&self) -> &[ServerStatus] {
        &self.servers
    }

    /// Whether calls are being timed (their ends are worth reading).
    pub fn calls_open(&self) -> bool {
        !self.calls.is_empty()
    }

    /// The child is gone: its servers and calls with it.
    pub fn clear(&mut self) {
        self.servers.clear();
        self.calls.clear();
    }

    /// Takes one piece of news.
    pub fn take(&mut self, news: McpNews, known: &OperatorServers, now: Instant) -> Tracked {
        match news {
            McpNews::Status(items) => {
                let servers = statuses(&items, known);
                if servers == self.servers {
                    return Tracked::Nothing;
                }
                self.servers = servers;
                Tracked::Servers
            }
            McpNews::ToolStarted { id, name } => {
                let Some(server) = server_of(&name, known) else {
                    return Tracked::Nothing;
                };
                if id.len() <= MAX_CALL_ID
                    && (self.calls.len() < MAX_CALLS || self.calls.contains_key(&id))
                {
                    self.calls.insert(id, (server.to_string(), now));
                }
                Tracked::Nothing
            }
            McpNews::ToolRunning { id } => {
                if let Some((_, started)) = self.calls.get_mut(&id) {
                    *started = now;
                }
                Tracked::Nothing
            }
            McpNews::ToolEnded { id, failed } => match self.calls.remove(&id) {
                Some((server, started)) => Tracked::CallEnded {
                    server,
                    ok: !failed,
                    seconds: now.saturating_duration_since(started).as_secs_f64(),
                },
                None => Tracked::Nothing,
            },
        }
    }
}

/// The reported items kept: operator servers only, each once, fields
/// checked and bounded.
fn statuses(items: &[Value], known: &OperatorServers) -> Vec<ServerStatus> {
    let mut out: Vec<ServerStatus> = Vec::new();
    for item in items.iter().take(MAX_SERVERS * 2) {
        let Some(name) = item.get("name").and_then(Value::as_str) else {
            continue;
        };
        if !known.contains(name) || out.iter().any(|s| s.name == name) {
            continue;
        }
        let reported = item.get("state").and_then(Value::as_str).unwrap_or("");
        let Some(state) = STATES.iter().copied().find(|s| *s == reported) else {
            continue;
        };
        let tools = item
            .get("tools")
            .and_then(Value::as_u64)
            .unwrap_or(0)
            .min(MAX_TOOLS);
        let error = item
            .get("error")
            .and_then(Value::as_str)
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.chars()
                    .filter(|c| !c.is_control())
                    .take(MAX_ERROR_CHARS)
                    .collect()
            });
        out.push(ServerStatus {
            name: name.to_string(),
            state,
            tools,
            error,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn known() -> OperatorServers {
        OperatorServers::parse(
            r#"{"mcpServers": {"everything": {"command": "x"}, "docs": {"command": "y", "default": false}}}"#,
        )
        .unwrap()
    }

    #[test]
    fn statuses_keep_operator_servers_only_and_bound_the_rest() {
        let mut tracker = McpTracker::default();
        let items = vec![
            json!({"name": "everything", "state": "connected", "tools": 11}),
            json!({"name": "docs", "state": "failed", "tools": 0, "error": format!("boom\n{}", "x".repeat(2000))}),
            json!({"name": "made-up", "state": "connected", "tools": 3}),
            json!({"name": "everything", "state": "failed"}),
            json!({"name": "docs", "state": "weird"}),
        ];
        let changed = tracker.take(McpNews::Status(items.clone()), &known(), Instant::now());
        assert_eq!(changed, Tracked::Servers);
        let servers = tracker.servers();
        assert_eq!(servers.len(), 2);
        assert_eq!(servers[0].name, "docs");
        assert_eq!(servers[0].state, "failed");
        let error = servers[0].error.as_deref().unwrap();
        assert_eq!(error.chars().count(), MAX_ERROR_CHARS);
        assert!(!error.contains('\n'));
        assert_eq!(servers[1].tools, 11);
        let again = tracker.take(McpNews::Status(items), &known(), Instant::now());
        assert_eq!(again, Tracked::Nothing);
        tracker.clear();
        assert!(tracker.servers().is_empty());
    }

    #[test]
    fn calls_of_operator_servers_are_timed_from_their_start() {
        let mut tracker = McpTracker::default();
        let t0 = Instant::now();
        let start = |id: &str, name: &str| McpNews::ToolStarted {
            id: id.into(),
            name: name.into(),
        };
        tracker.take(start("c1", "mcp__everything__echo"), &known(), t0);
        tracker.take(start("c2", "mcp__evil__echo"), &known(), t0);
        tracker.take(start("c3", "bash"), &known(), t0);
        let running = McpNews::ToolRunning { id: "c1".into() };
        tracker.take(running, &known(), t0 + Duration::from_secs(1));
        let end = |id: &str| McpNews::ToolEnded {
            id: id.into(),
            failed: true,
        };
        assert_eq!(
            tracker.take(end("c1"), &known(), t0 + Duration::from_secs(3)),
            Tracked::CallEnded {
                server: "everything".into(),
                ok: false,
                seconds: 2.0
            }
        );
        assert_eq!(tracker.take(end("c2"), &known(), t0), Tracked::Nothing);
        assert_eq!(tracker.take(end("c3"), &known(), t0), Tracked::Nothing);
        assert_eq!(server_of("mcp__docs__x__y", &known()), Some("docs"));
        assert_eq!(server_of("mcp__docs", &known()), None);
    }

    #[test]
    fn calls_in_flight_are_bounded() {
        let mut tracker = McpTracker::default();
        let t0 = Instant::now();
        for i in 0..MAX_CALLS + 10 {
            let news = McpNews::ToolStarted {
                id: format!("c{i}"),
                name: "mcp__docs__t".into(),
            };
            tracker.take(news, &known(), t0);
        }
        assert_eq!(tracker.calls.len(), MAX_CALLS);
    }
}
