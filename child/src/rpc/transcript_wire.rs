//! The transcript's wire shape, shared by every dialect that carries
//! messages as `corral_protocol`'s message and content-block types (zut's
//! events and `get_messages`, Zi's messages and tool results): images become
//! byte counts, reasoning blocks are left out. No dialect module owns it, so
//! none imports another's.

use corral_protocol::zut::{self, ContentBlock, Extra};

use crate::transcript::{Block, Message};

/// A transcript message in the wire message shape.
pub fn wire_message(message: &Message) -> zut::Message {
    zut::Message {
        role: serde_json::to_value(message.role)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        content: wire_blocks(&message.content),
        time: message.time.clone(),
        extra: Extra::new(),
    }
}

/// Content blocks in the wire shape: images become byte counts, reasoning is
/// left out.
pub fn wire_blocks(blocks: &[Block]) -> Vec<ContentBlock> {
    blocks
        .iter()
        .filter_map(|block| {
            Some(match block {
                Block::Text { text } => ContentBlock::text(text.clone()),
                Block::Image { mime_type, data } => ContentBlock::Image(zut::ImageBlock {
                    mime_type: mime_type.clone(),
                    bytes: base64_decoded_len(data),
                    extra: Extra::new(),
                }),
                Block::ToolCall { id, name, args } => ContentBlock::ToolCall(zut::ToolCallBlock {
                    id: id.clone(),
                    name: name.clone(),
                    args: args.clone(),
                    extra: Extra::new(),
                }),
                Block::ToolResult {
                    call_id,
                    is_error,
                    content,
                } => ContentBlock::ToolResult(zut::ToolResultBlock {
                    call_id: call_id.clone(),
                    is_error: *is_error,
                    content: wire_blocks(content),
                    extra: Extra::new(),
                }),
                Block::Thinking { .. } | Block::RedactedThinking { .. } => return None,
            })
        })
        .collect()
}

fn base64_decoded_len(data: &str) -> u64 {
    let trimmed = data.trim_end_matches('=');
    (trimmed.len() as u64 * 3) / 4
}
