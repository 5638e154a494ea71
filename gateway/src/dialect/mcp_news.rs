//! What an agent's event says about its MCP servers, as each dialect
//! writes it ([`super::DialectRules::mcp_news`]): the servers' states
//! (`mcp_status`: ACP's `_corral/mcp_status` notification, the zut and
//! letscode event, Zi's session event) and tool calls starting and
//! ending, whose names tell MCP calls (`mcp__SERVER__TOOL`) apart. Pure,
//! no I/O; lines that cannot be news are not parsed.

use serde_json::Value;

use super::cost::mentions;
use crate::mcp::McpNews;

/// The mark of a status event in every dialect.
pub const STATUS: &str = "mcp_status";

/// Where a dialect keeps a tool event's fields.
pub struct ToolFields {
    /// The event types of a call starting and ending.
    pub start: &'static str,
    pub end: &'static str,
    /// The keys of the call's id, its tool's name, and whether it failed.
    pub id: &'static str,
    pub name: &'static str,
    pub failed: &'static str,
}

/// Whether `line` may be news: a status, an MCP tool starting, or (with
/// calls open) any call ending.
pub fn may_be_news(line: &[u8], end: &str, calls_open: bool) -> bool {
    mentions(line, STATUS.as_bytes())
        || mentions(line, b"mcp__")
        || (calls_open && mentions(line, end.as_bytes()))
}

/// The news of one event object whose type is at `type_key`.
pub fn of_event(event: &Value, fields: &ToolFields) -> Option<McpNews> {
    let kind = event.get("type").and_then(Value::as_str)?;
    let id = || {
        event
            .get(fields.id)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    match kind {
        STATUS => Some(McpNews::Status(servers(event.get("servers")))),
        k if k == fields.start => Some(McpNews::ToolStarted {
            id: id()?,
            name: event.get(fields.name)?.as_str()?.to_string(),
        }),
        k if k == fields.end => Some(McpNews::ToolEnded {
            id: id()?,
            failed: event
                .get(fields.failed)
                .and_then(Value::as_bool)
                .unwrap_or(false),
        }),
        _ => None,
    }
}

/// A status's server items.
pub fn servers(value: Option<&Value>) -> Vec<Value> {
    match value {
        Some(Value::Array(items)) => items.clone(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const ZUT: ToolFields = ToolFields {
        start: "tool_execution_started",
        end: "tool_result",
        id: "id",
        name: "name",
        failed: "is_error",
    };

    #[test]
    fn events_become_news() {
        let status = json!({"type": "mcp_status", "servers": [{"name": "a", "state": "connected", "tools": 2}]});
        assert!(matches!(of_event(&status, &ZUT), Some(McpNews::Status(s)) if s.len() == 1));
        let start = json!({"type": "tool_execution_started", "id": "t1", "name": "mcp__a__echo"});
        assert_eq!(
            of_event(&start, &ZUT),
            Some(McpNews::ToolStarted {
                id: "t1".into(),
                name: "mcp__a__echo".into()
            })
        );
        let end = json!({"type": "tool_result", "id": "t1", "is_error": true});
        assert_eq!(
            of_event(&end, &ZUT),
            Some(McpNews::ToolEnded {
                id: "t1".into(),
                failed: true
            })
        );
        assert_eq!(of_event(&json!({"type": "text_delta"}), &ZUT), None);
        assert!(may_be_news(start.to_string().as_bytes(), ZUT.end, false));
        assert!(!may_be_news(end.to_string().as_bytes(), ZUT.end, false));
        assert!(may_be_news(end.to_string().as_bytes(), ZUT.end, true));
    }
}
