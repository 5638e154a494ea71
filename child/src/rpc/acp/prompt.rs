//! A `session/prompt`'s content blocks as the agent's prompt: text in
//! order, resource links as Markdown links, embedded text resources as
//! `<context>` sections, images (and image blobs) as image blocks. Pure.

use base64::Engine as _;
use corral_protocol::acp::{ContentBlock, EmbeddedResource};

use super::rpc::RpcError;
use crate::transcript::Block;

/// The prompt's text and images.
#[derive(Debug, Default, PartialEq)]
pub struct Prompt {
    pub text: String,
    pub images: Vec<Block>,
}

/// Converts the blocks; an unsupported or malformed one is `-32602`.
pub fn convert(blocks: Vec<ContentBlock>) -> Result<Prompt, RpcError> {
    let mut prompt = Prompt::default();
    for (i, block) in blocks.into_iter().enumerate() {
        match block {
            ContentBlock::Text { text } => prompt.text.push_str(&text),
            ContentBlock::Image {
                data, mime_type, ..
            } => prompt.images.push(image(i, mime_type, data)?),
            ContentBlock::Audio { .. } => {
                return Err(RpcError::invalid_params(format!(
                    "prompt[{i}]: audio is not supported (promptCapabilities.audio is false)"
                )))
            }
            ContentBlock::ResourceLink { uri, name, .. } => {
                prompt.text.push_str(&format!("[{name}]({uri})"));
            }
            ContentBlock::Resource {
                resource: EmbeddedResource::Text { uri, text, .. },
            } => {
                let newline = if text.ends_with('\n') { "" } else { "\n" };
                prompt.text.push_str(&format!(
                    "\n<context uri=\"{uri}\">\n{text}{newline}</context>\n"
                ));
            }
            ContentBlock::Resource {
                resource:
                    EmbeddedResource::Blob {
                        uri,
                        blob,
                        mime_type,
                    },
            } => match mime_type {
                Some(mime) if mime.starts_with("image/") => {
                    prompt.images.push(image(i, mime, blob)?);
                }
                other => {
                    let mime = other.unwrap_or_else(|| "unknown type".into());
                    prompt.text.push_str(&format!(
                        "\n[binary resource {uri} ({mime}) not included]\n"
                    ));
                }
            },
        }
    }
    if prompt.text.trim().is_empty() && prompt.images.is_empty() {
        return Err(RpcError::invalid_params(
            "the prompt is empty: it needs text, a resource or an image",
        ));
    }
    Ok(prompt)
}

fn image(i: usize, mime_type: String, data: String) -> Result<Block, RpcError> {
    if !mime_type.starts_with("image/") {
        return Err(RpcError::invalid_params(format!(
            "prompt[{i}]: mimeType {mime_type:?} is not an image type"
        )));
    }
    base64::engine::general_purpose::STANDARD
        .decode(data.as_bytes())
        .map_err(|e| RpcError::invalid_params(format!("prompt[{i}]: data is not base64: {e}")))?;
    Ok(Block::Image { mime_type, data })
}

#[cfg(test)]
mod tests {
    use corral_protocol::acp::error_code;
    use serde_json::json;

    use super::*;

    fn blocks(value: serde_json::Value) -> Vec<ContentBlock> {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn text_links_and_resources_become_one_text_in_order() {
        let prompt = convert(blocks(json!([
            {"type": "text", "text": "look at "},
            {"type": "resource_link", "uri": "file:///p/a.rs", "name": "a.rs"},
            {"type": "text", "text": " and this:"},
            {"type": "resource", "resource": {"uri": "file:///p/b.rs", "text": "fn b() {}"}},
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
        ])))
        .unwrap();
        assert_eq!(
            prompt.text,
            "look at [a.rs](file:///p/a.rs) and this:\n<context uri=\"file:///p/b.rs\">\nfn b() {}\n</context>\n"
        );
        assert_eq!(
            prompt.images,
            [Block::Image {
                mime_type: "image/png".into(),
                data: "iVBORw0KGgo=".into()
            }]
        );
    }

    #[test]
    fn bad_blocks_and_empty_prompts_are_invalid_params() {
        for bad in [
            json!([{"type": "audio", "data": "AA==", "mimeType": "audio/wav"}]),
            json!([{"type": "image", "data": "not base64!", "mimeType": "image/png"}]),
            json!([{"type": "image", "data": "AA==", "mimeType": "text/plain"}]),
            json!([{"type": "text", "text": "  "}]),
            json!([]),
        ] {
            let error = convert(blocks(bad.clone())).unwrap_err();
            assert_eq!(error.code, error_code::INVALID_PARAMS, "{bad}");
        }
        let blob = convert(blocks(json!([
            {"type": "text", "text": "see"},
            {"type": "resource", "resource": {"uri": "file:///x.bin", "blob": "AA=="}}
        ])))
        .unwrap();
        assert!(blob.text.contains("x.bin (unknown type) not included"));
    }
}
