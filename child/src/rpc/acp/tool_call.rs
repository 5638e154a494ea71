//! How this agent's tool calls look in ACP: a title, a kind, the files
//! they touch (locations, absolute paths), the diff of an `edit` or a
//! `write`, and their results as content. Pure, from the call's name and
//! arguments.

use std::path::Path;

use corral_protocol::acp::{
    ContentBlock, ToolCall, ToolCallContent, ToolCallLocation, ToolCallStatus, ToolKind,
};
use serde_json::Value;

use crate::tools::{cut_line, resolve_path, PlanItem};
use crate::transcript::Block;

/// Characters of a command shown in a title.
const TITLE_COMMAND_CHARS: usize = 80;

fn arg<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// `path` resolved against the cwd, as the absolute path ACP wants.
fn absolute(cwd: &Path, path: &str) -> String {
    resolve_path(cwd, path).to_string_lossy().into_owned()
}

/// The kind of a call; an MCP tool's is `other` (a server's `readOnlyHint`
/// says nothing of what the tool does, and kinds only pick an icon).
pub fn kind(name: &str) -> ToolKind {
    match name {
        "read" => ToolKind::Read,
        "write" | "edit" => ToolKind::Edit,
        "bash" => ToolKind::Execute,
        "ls" | "find" | "grep" => ToolKind::Search,
        "plan" => ToolKind::Think,
        _ => ToolKind::Other,
    }
}

pub fn title(name: &str, args: &Value) -> String {
    let path = arg(args, "path");
    let pattern = arg(args, "pattern").unwrap_or("");
    match name {
        "read" => format!("Read {}", path.unwrap_or("a file")),
        "write" => format!("Write {}", path.unwrap_or("a file")),
        "edit" => format!("Edit {}", path.unwrap_or("a file")),
        "bash" => {
            let command = arg(args, "command").unwrap_or("");
            let first = command.lines().next().unwrap_or("");
            let shown = cut_line(first, TITLE_COMMAND_CHARS);
            let more = if shown.len() < command.len() {
                " …"
            } else {
                ""
            };
            format!("Run `{shown}`{more}")
        }
        "ls" => format!("List {}", path.unwrap_or(".")),
        "find" => format!("Find {pattern}"),
        "grep" => format!("Search for {pattern}"),
        "plan" => "Update the plan".to_string(),
        other => match crate::mcp::names::split(other) {
            Some((server, tool)) => format!("{tool} (MCP server `{server}`)"),
            None => other.to_string(),
        },
    }
}

pub fn locations(name: &str, args: &Value, cwd: &Path) -> Vec<ToolCallLocation> {
    let Some(path) = arg(args, "path") else {
        return Vec::new();
    };
    let line = match name {
        "read" => args
            .get("offset")
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok()),
        "write" | "edit" | "ls" | "find" | "grep" => None,
        _ => return Vec::new(),
    };
    vec![ToolCallLocation {
        path: absolute(cwd, path),
        line,
    }]
}

/// The change an `edit` or `write` call makes: the replaced text and its
/// replacement, or a whole new file.
pub fn diff(name: &str, args: &Value, cwd: &Path) -> Option<ToolCallContent> {
    let path = absolute(cwd, arg(args, "path")?);
    match name {
        "edit" => Some(ToolCallContent::Diff {
            path,
            old_text: Some(arg(args, "old_text")?.to_string()),
            new_text: arg(args, "new_text")?.to_string(),
        }),
        "write" => Some(ToolCallContent::Diff {
            path,
            old_text: None,
            new_text: arg(args, "content")?.to_string(),
        }),
        _ => None,
    }
}

/// The `tool_call` that announces a call.
pub fn announce(id: &str, name: &str, args: &Value, cwd: &Path) -> ToolCall {
    ToolCall {
        tool_call_id: id.to_string(),
        title: title(name, args),
        kind: kind(name),
        status: ToolCallStatus::Pending,
        content: diff(name, args, cwd).into_iter().collect(),
        locations: locations(name, args, cwd),
        raw_input: Some(args.clone()),
        meta: Some(serde_json::json!({"corral": {"tool": name}})),
    }
}

/// A tool result's content: the diff of a successful change first, then
/// the result's text and images.
pub fn result_content(
    name: &str,
    args: &Value,
    cwd: &Path,
    is_error: bool,
    blocks: &[Block],
) -> Vec<ToolCallContent> {
    let diff = (!is_error).then(|| diff(name, args, cwd)).flatten();
    diff.into_iter()
        .chain(blocks.iter().filter_map(|block| {
            let content = match block {
                Block::Text { text } => ContentBlock::text(text.clone()),
                Block::Image { mime_type, data } => ContentBlock::Image {
                    data: data.clone(),
                    mime_type: mime_type.clone(),
                    uri: None,
                },
                _ => return None,
            };
            Some(ToolCallContent::Content { content })
        }))
        .collect()
}

/// The plan a `plan` call set, read back from its arguments (for replay).
pub fn plan_items(args: &Value) -> Option<Vec<PlanItem>> {
    serde_json::from_value(args.get("plan")?.clone()).ok()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn edits_and_writes_carry_absolute_diffs_and_locations() {
        let cwd = Path::new("/p");
        let edit = announce(
            "t1",
            "edit",
            &json!({"path": "src/a.rs", "old_text": "x", "new_text": "y"}),
            cwd,
        );
        assert_eq!(
            (edit.title.as_str(), edit.kind),
            ("Edit src/a.rs", ToolKind::Edit)
        );
        assert_eq!(
            edit.content,
            [ToolCallContent::Diff {
                path: "/p/src/a.rs".into(),
                old_text: Some("x".into()),
                new_text: "y".into()
            }]
        );
        assert_eq!(edit.locations[0].path, "/p/src/a.rs");
        let write = diff(
            "write",
            &json!({"path": "/abs/n.txt", "content": "new"}),
            cwd,
        );
        assert_eq!(
            write,
            Some(ToolCallContent::Diff {
                path: "/abs/n.txt".into(),
                old_text: None,
                new_text: "new".into()
            })
        );
        let read = locations("read", &json!({"path": "r.txt", "offset": 40}), cwd);
        assert_eq!(
            read,
            [ToolCallLocation {
                path: "/p/r.txt".into(),
                line: Some(40)
            }]
        );
    }

    #[test]
    fn titles_and_kinds_name_what_the_call_does() {
        assert_eq!(
            title("bash", &json!({"command": "cargo test\necho done"})),
            "Run `cargo test` …"
        );
        assert_eq!(kind("bash"), ToolKind::Execute);
        assert_eq!(
            title("grep", &json!({"pattern": "fn main"})),
            "Search for fn main"
        );
        assert_eq!(kind("grep"), ToolKind::Search);
        assert_eq!(kind("plan"), ToolKind::Think);
        assert_eq!(title("edit", &json!({})), "Edit a file");
        assert!(diff("edit", &json!({"path": "a"}), Path::new("/")).is_none());
        assert_eq!(
            title("mcp__everything__echo", &json!({"message": "hi"})),
            "echo (MCP server `everything`)"
        );
        assert_eq!(kind("mcp__everything__echo"), ToolKind::Other);
        let call = announce(
            "c1",
            "mcp__fs__read_file",
            &json!({"path": "x"}),
            Path::new("/"),
        );
        assert_eq!(call.raw_input, Some(json!({"path": "x"})));
        assert!(call.locations.is_empty());
    }

    #[test]
    fn results_put_a_successful_change_first() {
        let args = json!({"path": "a", "old_text": "x", "new_text": "y"});
        let blocks = [Block::text("Replaced 1 occurrence in a")];
        let ok = result_content("edit", &args, Path::new("/p"), false, &blocks);
        assert!(matches!(ok[0], ToolCallContent::Diff { .. }));
        assert_eq!(
            ok[1],
            ToolCallContent::Content {
                content: ContentBlock::text("Replaced 1 occurrence in a")
            }
        );
        let failed = result_content("edit", &args, Path::new("/p"), true, &blocks);
        assert_eq!(failed.len(), 1, "no diff for a change that did not happen");
    }
}
