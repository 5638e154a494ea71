//! `ls {path?}`: one directory's entries (hidden ones included), sorted by
//! name, directories marked with a trailing `/`, at most [`MAX_ENTRIES`].

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{display_path, resolve_path, Args, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

/// Entries listed; the rest is only counted.
pub const MAX_ENTRIES: usize = 1000;

pub struct LsTool;

impl Tool for LsTool {
    fn name(&self) -> &'static str {
        "ls"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "List a directory (default: the working directory): names sorted, directories \
                 end with `/`, hidden entries included, at most {MAX_ENTRIES} entries. Use \
                 `find` to search recursively."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Directory to list. Default: the working directory."}
                },
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let path = match Args::new(&args).and_then(|a| a.opt_string("path")) {
            Ok(path) => resolve_path(&ctx.cwd, path.unwrap_or(".")),
            Err(e) => return Box::pin(async move { e.into() }),
        };
        let shown = display_path(&ctx.cwd, &path);
        Box::pin(async move {
            tokio::task::spawn_blocking(move || list(&path, &shown))
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("ls failed: {e}")))
        })
    }
}

fn list(path: &std::path::Path, shown: &str) -> ToolOutput {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return ToolOutput::error(format!("directory not found: {shown}"))
        }
        Err(_) if path.is_file() => {
            return ToolOutput::error(format!("{shown} is a file, not a directory"))
        }
        Err(e) => return ToolOutput::error(format!("cannot list {shown}: {e}")),
    };
    let mut names: Vec<String> = entries
        .filter_map(Result::ok)
        .map(|entry| {
            let mut name = entry.file_name().to_string_lossy().into_owned();
            // Follows symlinks, so a link to a directory is listed as one.
            if entry.path().is_dir() {
                name.push('/');
            }
            name
        })
        .collect();
    if names.is_empty() {
        return ToolOutput::ok(format!("({shown} is empty)"));
    }
    names.sort();
    let total = names.len();
    names.truncate(MAX_ENTRIES);
    let mut out = names.join("\n");
    if total > MAX_ENTRIES {
        out.push_str(&format!(
            "\n... {} more entries not shown ({total} in total); use `find` to narrow down",
            total - MAX_ENTRIES
        ));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{context, text};

    #[tokio::test]
    async fn lists_sorted_with_directory_slashes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("b.txt"), "").unwrap();
        std::fs::write(dir.path().join(".hidden"), "").unwrap();
        std::fs::write(dir.path().join("src/main.rs"), "").unwrap();
        let (ctx, _rx) = context(dir.path());
        let out = LsTool.run(json!({}), ctx.clone()).await;
        assert_eq!(text(&out), ".hidden\nb.txt\nsrc/");
        let out = LsTool.run(json!({"path": "src"}), ctx).await;
        assert_eq!(text(&out), "main.rs");
    }

    #[tokio::test]
    async fn caps_entries_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_ENTRIES + 5 {
            std::fs::write(dir.path().join(format!("f{i:05}")), "").unwrap();
        }
        let (ctx, _rx) = context(dir.path());
        let out = LsTool.run(json!({}), ctx).await;
        let text = text(&out);
        assert_eq!(text.lines().count(), MAX_ENTRIES + 1);
        assert!(text.ends_with(&format!(
            "5 more entries not shown ({} in total); use `find` to narrow down",
            MAX_ENTRIES + 5
        )));
    }

    #[tokio::test]
    async fn missing_path_and_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("f"), "").unwrap();
        let (ctx, _rx) = context(dir.path());
        let out = LsTool.run(json!({"path": "nope"}), ctx.clone()).await;
        assert!(out.is_error);
        assert_eq!(text(&out), "directory not found: nope");
        let out = LsTool.run(json!({"path": "f"}), ctx).await;
        assert!(out.is_error);
        assert_eq!(text(&out), "f is a file, not a directory");
    }
}
