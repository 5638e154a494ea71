//! `read {path, offset?, limit?}`: a text file with line numbers, a window of
//! at most [`DEFAULT_LIMIT`] lines and [`MAX_OUTPUT_BYTES`] bytes, lines cut at
//! [`MAX_LINE_CHARS`]. PNG/JPEG/GIF/WebP images up to [`MAX_IMAGE_BYTES`] come
//! back as an image block; other binary files are refused.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use base64::Engine;
use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{cut_line, display_path, resolve_path, Args, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;
use crate::transcript::Block;

/// Lines returned when the call gives no `limit`.
pub const DEFAULT_LIMIT: u64 = 2000;
/// Characters kept of one line.
pub const MAX_LINE_CHARS: usize = 2000;
/// Bytes of numbered text returned by one call; the rest needs another call.
pub const MAX_OUTPUT_BYTES: usize = 128 * 1024;
/// Largest image returned inline.
pub const MAX_IMAGE_BYTES: u64 = 5 * 1024 * 1024;
/// Bytes looked at to tell text from binary.
const SNIFF_BYTES: usize = 8192;

pub struct ReadTool;

impl Tool for ReadTool {
    fn name(&self) -> &'static str {
        "read"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Read a file. Text comes back with line numbers (`N<TAB>line`), at most \
                 {DEFAULT_LIMIT} lines per call; use `offset` (1-based first line) and `limit` \
                 to page through long files. Lines longer than {MAX_LINE_CHARS} characters are \
                 cut. PNG, JPEG, GIF and WebP images are returned as images. Relative paths \
                 resolve against the working directory."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File to read."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based). Default 1."},
                    "limit": {"type": "integer", "minimum": 1, "description": format!("Maximum number of lines. Default {DEFAULT_LIMIT}.")}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        Box::pin(async move {
            let request = match Request::parse(&args, &ctx) {
                Ok(request) => request,
                Err(out) => return out,
            };
            // Images are bytes, which the client's text files cannot carry.
            if let Some(client) = ctx
                .client_reader()
                .filter(|_| image_mime(&request.path, &[]).is_none())
            {
                return match client.read(request.path.clone()).await {
                    Ok(text) => request.read_text(text.as_bytes()),
                    Err(e) => ToolOutput::error(format!("cannot read {}: {e}", request.shown)),
                };
            }
            tokio::task::spawn_blocking(move || request.read())
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("read failed: {e}")))
        })
    }
}

/// A validated call.
struct Request {
    path: std::path::PathBuf,
    shown: String,
    offset: u64,
    limit: u64,
}

impl Request {
    fn parse(args: &Value, ctx: &ToolContext) -> Result<Request, ToolOutput> {
        let args = Args::new(args)?;
        let path = resolve_path(&ctx.cwd, args.non_empty("path")?);
        let offset = args.opt_u64("offset")?.unwrap_or(1).max(1);
        let limit = args.opt_u64("limit")?.unwrap_or(DEFAULT_LIMIT);
        if limit == 0 {
            return Err(ToolOutput::error("argument `limit` must be at least 1"));
        }
        let shown = display_path(&ctx.cwd, &path);
        Ok(Request {
            path,
            shown,
            offset,
            limit,
        })
    }

    fn read(&self) -> ToolOutput {
        let shown = &self.shown;
        let meta = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return ToolOutput::error(format!("file not found: {shown}"))
            }
            Err(e) => return ToolOutput::error(format!("cannot read {shown}: {e}")),
        };
        if meta.is_dir() {
            return ToolOutput::error(format!("{shown} is a directory; use `ls` to list it"));
        }
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) => return ToolOutput::error(format!("cannot open {shown}: {e}")),
        };
        let mut head = Vec::with_capacity(SNIFF_BYTES);
        if let Err(e) = file
            .by_ref()
            .take(SNIFF_BYTES as u64)
            .read_to_end(&mut head)
        {
            return ToolOutput::error(format!("cannot read {shown}: {e}"));
        }
        if let Some(mime) = image_mime(&self.path, &head) {
            return self.read_image(mime, meta.len());
        }
        if head.contains(&0) {
            return ToolOutput::error(format!("{shown} is a binary file; not showing it"));
        }
        self.read_text(BufReader::new(head.as_slice().chain(file)))
    }

    fn read_image(&self, mime: &str, len: u64) -> ToolOutput {
        let shown = &self.shown;
        if len > MAX_IMAGE_BYTES {
            return ToolOutput::error(format!(
                "{shown} is an image of {len} bytes; the limit is {MAX_IMAGE_BYTES} bytes"
            ));
        }
        match std::fs::read(&self.path) {
            Ok(bytes) => ToolOutput {
                content: vec![
                    Block::text(format!("Image {shown} ({mime}, {} bytes)", bytes.len())),
                    Block::Image {
                        mime_type: mime.to_string(),
                        data: base64::engine::general_purpose::STANDARD.encode(&bytes),
                    },
                ],
                is_error: false,
                plan: None,
            },
            Err(e) => ToolOutput::error(format!("cannot read {shown}: {e}")),
        }
    }

    fn read_text(&self, mut reader: impl BufRead) -> ToolOutput {
        let mut out = String::new();
        let mut line = Vec::new();
        let mut number: u64 = 0;
        // The first line not shown, when the window or byte budget ended early.
        let mut stopped_at: Option<u64> = None;
        let mut remaining: u64 = 0;
        loop {
            line.clear();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => break,
                Ok(_) => number += 1,
                Err(e) => return ToolOutput::error(format!("cannot read {}: {e}", self.shown)),
            }
            if stopped_at.is_some() {
                remaining += 1;
                continue;
            }
            if number < self.offset {
                continue;
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches('\n').trim_end_matches('\r');
            let entry = format!("{number:>6}\t{}\n", cut_line(text, MAX_LINE_CHARS));
            let full =
                number - self.offset >= self.limit || out.len() + entry.len() > MAX_OUTPUT_BYTES;
            if full && !out.is_empty() {
                stopped_at = Some(number);
                remaining = 1;
                continue;
            }
            out.push_str(&entry);
        }
        if number == 0 {
            return ToolOutput::ok(format!("({} is empty)", self.shown));
        }
        if self.offset > number {
            return ToolOutput::error(format!(
                "offset {} is past the end of {} ({number} lines)",
                self.offset, self.shown
            ));
        }
        if let Some(next) = stopped_at {
            out.push_str(&format!(
                "... {remaining} more lines; use offset={next} to continue\n"
            ));
        }
        ToolOutput::ok(out)
    }
}

/// The image type of a file, by its magic bytes or else its extension.
fn image_mime(path: &Path, head: &[u8]) -> Option<&'static str> {
    if head.starts_with(b"\x89PNG\r\n\x1a\n") {
        return Some("image/png");
    }
    if head.starts_with(&[0xFF, 0xD8, 0xFF]) {
        return Some("image/jpeg");
    }
    if head.starts_with(b"GIF87a") || head.starts_with(b"GIF89a") {
        return Some("image/gif");
    }
    if head.len() >= 12 && head.starts_with(b"RIFF") && &head[8..12] == b"WEBP" {
        return Some("image/webp");
    }
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "png" => Some("image/png"),
        "jpg" | "jpeg" => Some("image/jpeg"),
        "gif" => Some("image/gif"),
        "webp" => Some("image/webp"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{context, text};

    async fn read(dir: &Path, args: Value) -> ToolOutput {
        let (ctx, _rx) = context(dir);
        ReadTool.run(args, ctx).await
    }

    #[tokio::test]
    async fn numbers_lines_and_pages_with_offset_and_limit() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (1..=10).map(|i| format!("line {i}\r\n")).collect();
        std::fs::write(dir.path().join("a.txt"), body).unwrap();

        let out = read(dir.path(), json!({"path": "a.txt"})).await;
        assert!(!out.is_error);
        assert!(text(&out).starts_with("     1\tline 1\n     2\tline 2\n"));
        assert!(text(&out).ends_with("    10\tline 10\n"));

        let out = read(
            dir.path(),
            json!({"path": "a.txt", "offset": 3, "limit": 2}),
        )
        .await;
        assert_eq!(
            text(&out),
            "     3\tline 3\n     4\tline 4\n... 6 more lines; use offset=5 to continue\n"
        );

        let out = read(dir.path(), json!({"path": "a.txt", "offset": 11})).await;
        assert!(out.is_error);
        assert!(text(&out).contains("past the end"));
    }

    #[tokio::test]
    async fn cuts_long_lines_and_reports_empty_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("long"), "y".repeat(MAX_LINE_CHARS + 5)).unwrap();
        std::fs::write(dir.path().join("empty"), "").unwrap();
        let out = read(dir.path(), json!({"path": "long"})).await;
        assert!(
            text(&out).ends_with("... [5 more chars]\n"),
            "{}",
            text(&out)
        );
        let out = read(dir.path(), json!({"path": "empty"})).await;
        assert_eq!(text(&out), "(empty is empty)");
    }

    #[tokio::test]
    async fn missing_directory_and_binary_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bin"), b"abc\0def").unwrap();
        for (args, expect) in [
            (json!({"path": "nope.txt"}), "file not found: nope.txt"),
            (json!({"path": "."}), "is a directory"),
            (json!({"path": "bin"}), "binary file"),
            (json!({}), "missing required argument `path`"),
        ] {
            let out = read(dir.path(), args).await;
            assert!(out.is_error);
            assert!(text(&out).contains(expect), "{}", text(&out));
        }
    }

    #[tokio::test]
    async fn images_come_back_as_image_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        std::fs::write(dir.path().join("pic.bin"), png).unwrap();
        let out = read(dir.path(), json!({"path": "pic.bin"})).await;
        assert!(!out.is_error);
        let expected = base64::engine::general_purpose::STANDARD.encode(png);
        assert!(matches!(
            &out.content[1],
            Block::Image { mime_type, data } if mime_type == "image/png" && *data == expected
        ));

        let big = std::fs::File::create(dir.path().join("big.jpg")).unwrap();
        big.set_len(MAX_IMAGE_BYTES + 1).unwrap();
        let out = read(dir.path(), json!({"path": "big.jpg"})).await;
        assert!(out.is_error);
        assert!(text(&out).contains("the limit is"));
    }
}
