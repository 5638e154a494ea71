//! `edit {path, old_text, new_text, replace_all?}`: exact-text replacement in
//! an existing UTF-8 file. `old_text` must match exactly once unless
//! `replace_all`; every other byte of the file is kept (line endings too: an
//! LF-only `old_text` also matches a CRLF file, and the replacement gets CRLF).

use std::path::Path;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::write::write_atomic;
use super::{display_path, resolve_path, Args, ClientFiles, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

pub struct EditTool;

impl Tool for EditTool {
    fn name(&self) -> &'static str {
        "edit"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Replace exact text in an existing file. `old_text` must match the \
                          file exactly (including whitespace and indentation) and exactly once; \
                          include enough surrounding lines to make it unique, or set \
                          `replace_all` to replace every occurrence. Read the file first."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File to edit."},
                    "old_text": {"type": "string", "description": "Exact text to replace."},
                    "new_text": {"type": "string", "description": "Replacement text (may be empty to delete)."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence. Default false."}
                },
                "required": ["path", "old_text", "new_text"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let request = match Request::parse(&args, &ctx) {
            Ok(request) => request,
            Err(out) => return Box::pin(async move { out }),
        };
        let (reader, writer) = (ctx.client_reader(), ctx.client_writer());
        if reader.is_some() || writer.is_some() {
            return Box::pin(async move { request.apply_through(reader, writer).await });
        }
        Box::pin(async move {
            tokio::task::spawn_blocking(move || request.apply())
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("edit failed: {e}")))
        })
    }
}

/// A validated call.
struct Request {
    path: std::path::PathBuf,
    shown: String,
    old_text: String,
    new_text: String,
    replace_all: bool,
}

impl Request {
    fn parse(args: &Value, ctx: &ToolContext) -> Result<Request, ToolOutput> {
        let args = Args::new(args)?;
        let path = resolve_path(&ctx.cwd, args.non_empty("path")?);
        let old_text = args.string("old_text")?;
        let new_text = args.string("new_text")?;
        let replace_all = args.opt_bool("replace_all")?.unwrap_or(false);
        if old_text.is_empty() {
            return Err(ToolOutput::error(
                "`old_text` must not be empty; use `write` to create a file",
            ));
        }
        if old_text == new_text {
            return Err(ToolOutput::error(
                "`old_text` and `new_text` are identical; nothing to do",
            ));
        }
        Ok(Request {
            shown: display_path(&ctx.cwd, &path),
            path,
            old_text: old_text.to_string(),
            new_text: new_text.to_string(),
            replace_all,
        })
    }

    fn apply(&self) -> ToolOutput {
        let shown = &self.shown;
        let content = match read_text(&self.path, shown) {
            Ok(content) => content,
            Err(out) => return out,
        };
        let (count, updated) = match self.replaced(&content) {
            Ok(done) => done,
            Err(out) => return out,
        };
        if let Err(e) = write_atomic(&self.path, updated.as_bytes()) {
            return ToolOutput::error(format!("cannot write {shown}: {e}"));
        }
        replaced_output(count, shown)
    }

    /// The edit with the client's files where it offers them (reading
    /// and writing each go through it when it can), the disk otherwise.
    async fn apply_through(
        self,
        reader: Option<Arc<dyn ClientFiles>>,
        writer: Option<Arc<dyn ClientFiles>>,
    ) -> ToolOutput {
        let shown = self.shown.clone();
        let content = match reader {
            Some(client) => match client.read(self.path.clone()).await {
                Ok(content) => content,
                Err(e) => return ToolOutput::error(format!("cannot read {shown}: {e}")),
            },
            None => match read_text(&self.path, &shown) {
                Ok(content) => content,
                Err(out) => return out,
            },
        };
        let (count, updated) = match self.replaced(&content) {
            Ok(done) => done,
            Err(out) => return out,
        };
        let written = match writer {
            Some(client) => client.write(self.path.clone(), updated).await,
            None => write_atomic(&self.path, updated.as_bytes()).map_err(|e| e.to_string()),
        };
        match written {
            Ok(()) => replaced_output(count, &shown),
            Err(e) => ToolOutput::error(format!("cannot write {shown}: {e}")),
        }
    }

    /// The content with the replacement made, and how many were made.
    fn replaced(&self, content: &str) -> Result<(usize, String), ToolOutput> {
        let shown = &self.shown;
        let (count, updated) =
            match replace(content, &self.old_text, &self.new_text, self.replace_all) {
                Ok(done) => done,
                Err(Ambiguity::NotFound) => {
                    return Err(ToolOutput::error(format!(
                    "old_text not found in {shown}; it must match exactly, including whitespace"
                )))
                }
                Err(Ambiguity::Many(n)) => {
                    return Err(ToolOutput::error(format!(
                        "old_text matches {n} times in {shown}; add surrounding lines to make it \
                     unique, or set replace_all to replace all {n}"
                    )))
                }
            };
        Ok((count, updated))
    }
}

fn replaced_output(count: usize, shown: &str) -> ToolOutput {
    let plural = if count == 1 { "" } else { "s" };
    ToolOutput::ok(format!("Replaced {count} occurrence{plural} in {shown}"))
}

fn read_text(path: &Path, shown: &str) -> Result<String, ToolOutput> {
    match std::fs::read(path) {
        Ok(bytes) => String::from_utf8(bytes)
            .map_err(|_| ToolOutput::error(format!("{shown} is not valid UTF-8; cannot edit it"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(ToolOutput::error(format!("file not found: {shown}")))
        }
        Err(e) if path.is_dir() => Err(ToolOutput::error(format!("{shown} is a directory: {e}"))),
        Err(e) => Err(ToolOutput::error(format!("cannot read {shown}: {e}"))),
    }
}

/// Why a replacement was not made.
#[derive(Debug, PartialEq, Eq)]
enum Ambiguity {
    NotFound,
    /// Several matches and `replace_all` was not set.
    Many(usize),
}

/// `content` with `old` replaced; returns how many occurrences were. When
/// `old` is absent but its CRLF form is present (the model usually writes LF),
/// the CRLF forms of both texts are used.
fn replace(content: &str, old: &str, new: &str, all: bool) -> Result<(usize, String), Ambiguity> {
    let mut count = content.matches(old).count();
    let (mut old, mut new) = (old.to_string(), new.to_string());
    if count == 0 && old.contains('\n') && !old.contains('\r') && content.contains("\r\n") {
        old = old.replace('\n', "\r\n");
        new = new.replace("\r\n", "\n").replace('\n', "\r\n");
        count = content.matches(old.as_str()).count();
    }
    match count {
        0 => Err(Ambiguity::NotFound),
        n if n > 1 && !all => Err(Ambiguity::Many(n)),
        n => Ok((n, content.replace(old.as_str(), &new))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{context, text};

    async fn edit(dir: &Path, args: Value) -> ToolOutput {
        let (ctx, _rx) = context(dir);
        EditTool.run(args, ctx).await
    }

    #[tokio::test]
    async fn replaces_a_unique_match_keeping_other_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.txt");
        std::fs::write(&file, "alpha\r\nbeta\r\ngamma\r\n").unwrap();
        let out = edit(
            dir.path(),
            json!({"path": "f.txt", "old_text": "beta", "new_text": "BETA"}),
        )
        .await;
        assert_eq!(text(&out), "Replaced 1 occurrence in f.txt");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "alpha\r\nBETA\r\ngamma\r\n"
        );
    }

    #[tokio::test]
    async fn lf_old_text_matches_a_crlf_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.txt");
        std::fs::write(&file, "a\r\nb\r\nc\r\n").unwrap();
        let args = json!({"path": "f.txt", "old_text": "a\nb\n", "new_text": "x\ny\nz\n"});
        let out = edit(dir.path(), args).await;
        assert!(!out.is_error, "{}", text(&out));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "x\r\ny\r\nz\r\nc\r\n"
        );
    }

    #[tokio::test]
    async fn ambiguous_match_needs_replace_all() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.rs");
        std::fs::write(&file, "let x = 1;\nlet x = 1;\nlet x = 1;\n").unwrap();
        let args = json!({"path": "f.rs", "old_text": "x = 1", "new_text": "y = 2"});
        let out = edit(dir.path(), args.clone()).await;
        assert!(out.is_error);
        assert!(text(&out).contains("matches 3 times"), "{}", text(&out));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "let x = 1;\n".repeat(3)
        );

        let mut args = args;
        args["replace_all"] = json!(true);
        let out = edit(dir.path(), args).await;
        assert_eq!(text(&out), "Replaced 3 occurrences in f.rs");
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "let y = 2;\n".repeat(3)
        );
    }

    #[tokio::test]
    async fn errors_for_missing_text_file_and_bad_arguments() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f.txt"), "hello").unwrap();
        for (args, expect) in [
            (
                json!({"path": "f.txt", "old_text": "bye", "new_text": "x"}),
                "old_text not found in f.txt",
            ),
            (
                json!({"path": "g.txt", "old_text": "a", "new_text": "b"}),
                "file not found: g.txt",
            ),
            (
                json!({"path": "f.txt", "old_text": "", "new_text": "b"}),
                "must not be empty",
            ),
            (
                json!({"path": "f.txt", "old_text": "a", "new_text": "a"}),
                "identical",
            ),
            (
                json!({"path": "f.txt", "old_text": "a"}),
                "missing required argument `new_text`",
            ),
        ] {
            let out = edit(dir.path(), args).await;
            assert!(out.is_error);
            assert!(text(&out).contains(expect), "{}", text(&out));
        }
        assert_eq!(
            std::fs::read_to_string(dir.path().join("f.txt")).unwrap(),
            "hello"
        );
    }
}
