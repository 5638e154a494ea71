//! An MCP `tools/call` result as the model sees it: text stays text
//! (bounded like the `bash` tool's output), images stay images, resource
//! links and embedded resources become text naming them, binary data and
//! audio are described rather than passed on, `structuredContent` is shown
//! as JSON when there is no other content, and `isError` makes an error
//! result. Works on the result's JSON (the spec's wire shape). Pure.

use serde_json::Value;

use crate::tools::{HeadTail, ToolOutput};
use crate::transcript::Block;

/// Text bytes and lines kept of one result (head and tail).
pub const MAX_TEXT_BYTES: usize = 50 * 1024;
pub const MAX_TEXT_LINES: usize = 2000;
/// Largest image passed on to the model, in bytes of base64.
pub const MAX_IMAGE_BASE64: usize = 5 * 1024 * 1024;
/// Most images one result passes on.
pub const MAX_IMAGES: usize = 4;
/// Image types the providers take.
const IMAGE_TYPES: [&str; 4] = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/// Maps a `CallToolResult` (as JSON) to the tool's output.
pub fn to_output(result: &Value) -> ToolOutput {
    let mut text = HeadTail::new(MAX_TEXT_BYTES, MAX_TEXT_LINES);
    let mut images = Vec::new();
    let push = |line: &str, text: &mut HeadTail| {
        for l in line.split('\n') {
            text.push_line(l);
        }
    };
    let content = result.get("content").and_then(Value::as_array);
    for item in content.into_iter().flatten() {
        let str_of = |key: &str| item.get(key).and_then(Value::as_str);
        match str_of("type").unwrap_or("") {
            "text" => push(str_of("text").unwrap_or(""), &mut text),
            "image" => {
                let mime = str_of("mimeType").unwrap_or("");
                let data = str_of("data").unwrap_or("");
                if IMAGE_TYPES.contains(&mime)
                    && data.len() <= MAX_IMAGE_BASE64
                    && images.len() < MAX_IMAGES
                {
                    images.push(Block::Image {
                        mime_type: mime.to_string(),
                        data: data.to_string(),
                    });
                } else {
                    push(
                        &format!("[image {mime}, {} bytes of base64, not shown]", data.len()),
                        &mut text,
                    );
                }
            }
            "audio" => push(
                &format!(
                    "[audio {}, {} bytes of base64, not shown]",
                    str_of("mimeType").unwrap_or("?"),
                    str_of("data").map_or(0, str::len)
                ),
                &mut text,
            ),
            "resource_link" => push(&resource_link(item), &mut text),
            "resource" => push(
                &embedded(item.get("resource").unwrap_or(&Value::Null)),
                &mut text,
            ),
            other => push(
                &format!("[content of type {other:?}, not shown]"),
                &mut text,
            ),
        }
    }
    let wrote = content.is_some_and(|c| !c.is_empty());
    if !wrote {
        match result.get("structuredContent") {
            Some(structured) if !structured.is_null() => {
                let json = serde_json::to_string_pretty(structured).unwrap_or_default();
                push(&json, &mut text);
            }
            _ => push("(no output)", &mut text),
        }
    }
    let mut blocks = Vec::new();
    let text = text.finish();
    if !text.is_empty() {
        blocks.push(Block::text(text));
    } else if images.is_empty() {
        blocks.push(Block::text("(no output)"));
    }
    blocks.extend(images);
    ToolOutput {
        content: blocks,
        is_error: result.get("isError").and_then(Value::as_bool) == Some(true),
        plan: None,
    }
}

fn resource_link(item: &Value) -> String {
    let s = |key: &str| item.get(key).and_then(Value::as_str);
    let mut line = format!(
        "Resource link: {} <{}>",
        s("name").unwrap_or("(unnamed)"),
        s("uri").unwrap_or("")
    );
    if let Some(mime) = s("mimeType") {
        line.push_str(&format!(" ({mime})"));
    }
    if let Some(description) = s("description") {
        line.push_str(&format!(": {description}"));
    }
    line
}

fn embedded(resource: &Value) -> String {
    let s = |key: &str| resource.get(key).and_then(Value::as_str);
    let uri = s("uri").unwrap_or("");
    match (s("text"), s("blob")) {
        (Some(text), _) => format!("Resource <{uri}>:\n{text}"),
        (None, Some(blob)) => format!(
            "[resource <{uri}> {}, {} bytes of base64, not shown]",
            s("mimeType").unwrap_or("binary"),
            blob.len()
        ),
        (None, None) => format!("[resource <{uri}>]"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::tools::test_support::text;

    #[test]
    fn text_images_links_and_resources_map() {
        let out = to_output(&json!({"content": [
            {"type": "text", "text": "Echo: hi"},
            {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="},
            {"type": "image", "mimeType": "image/x-icon", "data": "AAAA"},
            {"type": "resource_link", "uri": "file:///r/1", "name": "one", "mimeType": "text/plain", "description": "first"},
            {"type": "resource", "resource": {"uri": "mem://a", "text": "inline"}},
            {"type": "resource", "resource": {"uri": "mem://b", "blob": "AAAA", "mimeType": "application/zip"}},
            {"type": "audio", "mimeType": "audio/wav", "data": "AAAA"}
        ]}));
        assert!(!out.is_error);
        let t = text(&out);
        for part in [
            "Echo: hi",
            "[image image/x-icon, 4 bytes of base64, not shown]",
            "Resource link: one <file:///r/1> (text/plain): first",
            "Resource <mem://a>:\ninline",
            "[resource <mem://b> application/zip, 4 bytes of base64, not shown]",
            "[audio audio/wav",
        ] {
            assert!(t.contains(part), "{part}: {t}");
        }
        assert!(out
            .content
            .iter()
            .any(|b| matches!(b, Block::Image { mime_type, .. } if mime_type == "image/png")));
    }

    #[test]
    fn structured_content_shows_when_alone_and_is_error_carries() {
        let out =
            to_output(&json!({"content": [], "structuredContent": {"sum": 3}, "isError": true}));
        assert!(out.is_error);
        assert!(text(&out).contains("\"sum\": 3"), "{}", text(&out));
        let out = to_output(
            &json!({"content": [{"type": "text", "text": "3"}], "structuredContent": {"sum": 3}}),
        );
        assert_eq!(text(&out), "3");
        assert_eq!(text(&to_output(&json!({}))), "(no output)");
        let empty = json!({"content": [{"type": "text", "text": ""}]});
        assert_eq!(text(&to_output(&empty)), "(no output)");
    }

    #[test]
    fn long_text_is_cut() {
        let long = "line\n".repeat(10_000);
        let out = to_output(&json!({"content": [{"type": "text", "text": long}]}));
        assert!(text(&out).len() < MAX_TEXT_BYTES + 1024);
    }
}
