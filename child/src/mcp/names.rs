//! How an MCP tool looks to the model: its name `mcp__SERVER__TOOL`
//! (within the providers' `[A-Za-z0-9_-]{1,64}`), its description and its
//! input schema, cut down to what every provider accepts. Pure.

use serde_json::{json, Map, Value};

/// What every MCP tool's name starts with.
pub const PREFIX: &str = "mcp__";
/// Longest tool name the providers accept.
pub const MAX_TOOL_NAME: usize = 64;
/// Longest description passed on, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 4 * 1024;
/// Largest input schema passed on, in bytes of JSON; a larger one becomes
/// "any object".
pub const MAX_SCHEMA_BYTES: usize = 32 * 1024;

/// The model's name for `tool` of `server`: characters outside
/// `[A-Za-z0-9_-]` become `_`, and the name is cut to [`MAX_TOOL_NAME`].
pub fn tool_name(server: &str, tool: &str) -> String {
    let mut name = format!("{PREFIX}{server}__");
    for c in tool.chars() {
        if name.len() >= MAX_TOOL_NAME {
            break;
        }
        name.push(match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '_' | '-' => c,
            _ => '_',
        });
    }
    name
}

/// `name` with a numeric suffix that makes it differ from every name in
/// `taken` (two tools whose names became the same).
pub fn unique(name: String, taken: &[String]) -> String {
    if !taken.contains(&name) {
        return name;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = name.len().min(MAX_TOOL_NAME - suffix.len());
            format!("{}{suffix}", &name[..keep])
        })
        .find(|candidate| !taken.contains(candidate))
        .unwrap_or(name)
}

/// The server a model-facing tool name belongs to, and the rest.
pub fn split(name: &str) -> Option<(&str, &str)> {
    name.strip_prefix(PREFIX)?.split_once("__")
}

/// The description shown to the model: the server's, cut, naming the
/// server.
pub fn description(server: &str, description: Option<&str>, title: Option<&str>) -> String {
    let text = description
        .filter(|d| !d.trim().is_empty())
        .or(title)
        .unwrap_or("(no description)");
    let text = crate::tools::cut_line(text, MAX_DESCRIPTION_CHARS);
    format!("{text}\n(MCP tool of the server `{server}`.)")
}

/// The input schema as every provider takes it: an object schema at the
/// top (without the combinators and `$schema` some providers refuse there),
/// with `properties`; one too large or not an object schema becomes "any
/// object".
pub fn input_schema(schema: &Map<String, Value>) -> Value {
    let any_object = || json!({"type": "object", "properties": {}});
    let size = serde_json::to_vec(schema).map_or(usize::MAX, |v| v.len());
    if size > MAX_SCHEMA_BYTES {
        return any_object();
    }
    match schema.get("type") {
        None => {}
        Some(Value::String(t)) if t == "object" => {}
        Some(_) => return any_object(),
    }
    let mut out = schema.clone();
    for key in [
        "$schema", "$id", "oneOf", "anyOf", "allOf", "not", "enum", "const",
    ] {
        out.remove(key);
    }
    out.insert("type".into(), Value::String("object".into()));
    if !out.get("properties").is_some_and(Value::is_object) {
        out.insert("properties".into(), json!({}));
    }
    if out.get("required").is_some_and(|r| !r.is_array()) {
        out.remove("required");
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_prefixed_sanitised_and_bounded() {
        assert_eq!(tool_name("fs", "read_file"), "mcp__fs__read_file");
        assert_eq!(
            tool_name("gh", "issues.list/all"),
            "mcp__gh__issues_list_all"
        );
        let long = tool_name("server", &"x".repeat(200));
        assert_eq!(long.len(), MAX_TOOL_NAME);
        assert_eq!(split("mcp__fs__read__file"), Some(("fs", "read__file")));
        assert_eq!(split("read"), None);
        let taken = vec!["mcp__a__b".to_string(), "mcp__a__b_2".to_string()];
        assert_eq!(unique("mcp__a__b".into(), &taken), "mcp__a__b_3");
        assert_eq!(unique("mcp__a__c".into(), &taken), "mcp__a__c");
        let full = vec![long.clone()];
        let other = unique(long, &full);
        assert_eq!(other.len(), MAX_TOOL_NAME);
        assert!(other.ends_with("_2"));
    }

    #[test]
    fn schemas_become_plain_object_schemas() {
        let schema = |v: Value| v.as_object().unwrap().clone();
        let out = input_schema(&schema(json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"message": {"type": "string"}},
            "required": ["message"],
            "anyOf": [{"required": ["message"]}]
        })));
        assert_eq!(
            out,
            json!({"type": "object", "properties": {"message": {"type": "string"}}, "required": ["message"]})
        );
        assert_eq!(
            input_schema(&schema(json!({}))),
            json!({"type": "object", "properties": {}})
        );
        assert_eq!(
            input_schema(&schema(json!({"type": "array"}))),
            json!({"type": "object", "properties": {}})
        );
        let huge = json!({"type": "object", "properties": {"x": {"description": "y".repeat(MAX_SCHEMA_BYTES)}}});
        assert_eq!(
            input_schema(&schema(huge)),
            json!({"type": "object", "properties": {}})
        );
    }

    #[test]
    fn descriptions_name_the_server_and_are_cut() {
        let d = description("fs", Some("Reads a file."), None);
        assert!(d.starts_with("Reads a file.") && d.contains("`fs`"), "{d}");
        assert!(description("fs", None, Some("Title")).starts_with("Title"));
        let long = description("fs", Some(&"z".repeat(10_000)), None);
        assert!(long.len() < MAX_DESCRIPTION_CHARS + 100);
    }
}
