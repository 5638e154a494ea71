//! `grep {pattern, path?, glob?, ignore_case?}`: regex search over the files
//! under a path, honouring `.gitignore`/`.ignore` (in or out of a git repo),
//! skipping hidden and binary files. Prints `path:line:text`; stops after
//! [`MAX_MATCHES`] matches or [`MAX_OUTPUT_BYTES`], lines cut at
//! [`MAX_LINE_CHARS`].

use std::path::{Path, PathBuf};

use futures_util::future::BoxFuture;
use grep_regex::RegexMatcherBuilder;
use grep_searcher::sinks::Lossy;
use grep_searcher::{BinaryDetection, SearcherBuilder};
use ignore::WalkBuilder;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::find::PathGlob;
use super::{cut_line, display_path, resolve_path, Args, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

/// Matching lines reported before the search stops.
pub const MAX_MATCHES: usize = 500;
/// Characters kept of one matching line.
pub const MAX_LINE_CHARS: usize = 500;
/// Bytes of output before the search stops.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

pub struct GrepTool;

impl Tool for GrepTool {
    fn name(&self) -> &'static str {
        "grep"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Search file contents with a regular expression (Rust regex syntax) under a file \
                 or directory (default: the working directory). Respects .gitignore, skips \
                 hidden and binary files. Prints `path:line:text`, at most {MAX_MATCHES} \
                 matches. Narrow with `glob` (same syntax as `find`, e.g. `*.rs`)."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression to search for."},
                    "path": {"type": "string", "description": "File or directory to search. Default: the working directory."},
                    "glob": {"type": "string", "description": "Only search files matching this glob, e.g. `*.rs`."},
                    "ignore_case": {"type": "boolean", "description": "Case-insensitive search. Default false."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let request = match Request::parse(&args, &ctx.cwd) {
            Ok(request) => request,
            Err(out) => return Box::pin(async move { out }),
        };
        Box::pin(async move {
            tokio::task::spawn_blocking(move || request.search(&ctx.cwd, &ctx.cancel))
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("grep failed: {e}")))
        })
    }
}

/// A validated call.
struct Request {
    pattern: String,
    root: PathBuf,
    glob: Option<String>,
    ignore_case: bool,
}

impl Request {
    fn parse(args: &Value, cwd: &Path) -> Result<Request, ToolOutput> {
        let args = Args::new(args)?;
        Ok(Request {
            pattern: args.non_empty("pattern")?.to_string(),
            root: resolve_path(cwd, args.opt_string("path")?.unwrap_or(".")),
            glob: args
                .opt_string("glob")?
                .filter(|g| !g.is_empty())
                .map(str::to_string),
            ignore_case: args.opt_bool("ignore_case")?.unwrap_or(false),
        })
    }

    fn search(&self, cwd: &Path, cancel: &CancellationToken) -> ToolOutput {
        let matcher = RegexMatcherBuilder::new()
            .case_insensitive(self.ignore_case)
            .line_terminator(Some(b'\n'))
            .build(&self.pattern);
        let matcher = match matcher {
            Ok(matcher) => matcher,
            Err(e) => return ToolOutput::error(format!("invalid regex: {e}")),
        };
        let glob = match self.glob.as_deref().map(PathGlob::new).transpose() {
            Ok(glob) => glob,
            Err(e) => return ToolOutput::error(format!("invalid glob pattern: {e}")),
        };
        if !self.root.exists() {
            return ToolOutput::error(format!("path not found: {}", display_path(cwd, &self.root)));
        }
        let mut searcher = SearcherBuilder::new()
            .binary_detection(BinaryDetection::quit(0))
            .line_number(true)
            .build();
        let walk = WalkBuilder::new(&self.root)
            .require_git(false)
            .sort_by_file_path(|a, b| a.cmp(b))
            .build();
        let mut out = String::new();
        let mut matches = 0;
        for entry in walk {
            if cancel.is_cancelled() {
                return ToolOutput::error("aborted");
            }
            let Ok(entry) = entry else { continue };
            if !entry.file_type().is_some_and(|t| t.is_file()) {
                continue;
            }
            let path = entry.path();
            if glob.as_ref().is_some_and(|g| !g.is_match(&self.root, path)) {
                continue;
            }
            let shown = display_path(cwd, path);
            let sink = Lossy(|number, line: &str| {
                let line = line.trim_end_matches('\n').trim_end_matches('\r');
                out.push_str(&format!(
                    "{shown}:{number}:{}\n",
                    cut_line(line, MAX_LINE_CHARS)
                ));
                matches += 1;
                Ok(matches < MAX_MATCHES && out.len() < MAX_OUTPUT_BYTES)
            });
            // Unreadable files are skipped, as ripgrep does.
            let _ = searcher.search_path(&matcher, path, sink);
            if matches >= MAX_MATCHES || out.len() >= MAX_OUTPUT_BYTES {
                out.push_str(&format!(
                    "... stopped after {matches} matches; narrow the pattern, path or glob\n"
                ));
                break;
            }
        }
        if matches == 0 {
            return ToolOutput::ok(format!("No matches for `{}`", self.pattern));
        }
        ToolOutput::ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{context, text};

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (file, body) in [
            ("src/a.rs", "fn main() {\n    println!(\"Hello\");\n}\n"),
            ("src/b.txt", "hello world\n"),
            ("build/out.rs", "hello from build\n"),
            ("blob.bin", "hello\0binary\n"),
        ] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, body).unwrap();
        }
        std::fs::write(dir.path().join(".gitignore"), "build/\n").unwrap();
        dir
    }

    #[tokio::test]
    async fn finds_matches_respecting_gitignore_outside_git() {
        let dir = tree();
        let (ctx, _rx) = context(dir.path());
        let out = GrepTool.run(json!({"pattern": "hello"}), ctx.clone()).await;
        assert!(!out.is_error);
        assert_eq!(text(&out), "src/b.txt:1:hello world\n");

        let args = json!({"pattern": "hello", "ignore_case": true, "glob": "*.rs"});
        let out = GrepTool.run(args, ctx.clone()).await;
        assert_eq!(text(&out), "src/a.rs:2:    println!(\"Hello\");\n");

        let out = GrepTool.run(json!({"pattern": "nothing here"}), ctx).await;
        assert!(!out.is_error);
        assert_eq!(text(&out), "No matches for `nothing here`");
    }

    #[tokio::test]
    async fn stops_at_the_match_cap_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let body: String = (0..MAX_MATCHES + 10).map(|i| format!("x{i}\n")).collect();
        std::fs::write(dir.path().join("f.txt"), body).unwrap();
        std::fs::write(dir.path().join("g.txt"), "x\n").unwrap();
        let (ctx, _rx) = context(dir.path());
        let out = GrepTool.run(json!({"pattern": "^x"}), ctx).await;
        let text = text(&out);
        assert_eq!(text.lines().count(), MAX_MATCHES + 1);
        assert!(text.ends_with(&format!(
            "stopped after {MAX_MATCHES} matches; narrow the pattern, path or glob\n"
        )));
    }

    #[tokio::test]
    async fn invalid_regex_and_cancel_are_errors() {
        let dir = tree();
        let (ctx, _rx) = context(dir.path());
        let out = GrepTool.run(json!({"pattern": "("}), ctx.clone()).await;
        assert!(out.is_error);
        assert!(text(&out).starts_with("invalid regex"), "{}", text(&out));
        ctx.cancel.cancel();
        let out = GrepTool.run(json!({"pattern": "hello"}), ctx).await;
        assert!(out.is_error);
        assert_eq!(text(&out), "aborted");
    }
}
