//! `find {pattern, path?}`: files under a directory whose path matches a glob,
//! honouring `.gitignore`/`.ignore` (in or out of a git repo) and skipping
//! hidden files. Sorted, at most [`MAX_RESULTS`] shown; the walk stops after
//! [`MAX_SCANNED_MATCHES`]. Also owns [`PathGlob`], shared with `grep`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use futures_util::future::BoxFuture;
use globset::{GlobBuilder, GlobMatcher};
use ignore::{WalkBuilder, WalkState};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{display_path, resolve_path, Args, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

/// Paths listed; the rest is only counted.
pub const MAX_RESULTS: usize = 1000;
/// Matches after which the walk gives up counting.
pub const MAX_SCANNED_MATCHES: usize = 100_000;

pub struct FindTool;

impl Tool for FindTool {
    fn name(&self) -> &'static str {
        "find"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: format!(
                "Find files by glob pattern under a directory (default: the working \
                 directory). A pattern without `/` matches file names at any depth (`*.rs`); \
                 one with `/` matches the path relative to the search directory (`src/**/*.rs`, \
                 `*` does not cross `/`). Respects .gitignore and skips hidden files. Returns \
                 sorted paths, at most {MAX_RESULTS}."
            ),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob, e.g. `*.rs` or `src/**/mod.rs`."},
                    "path": {"type": "string", "description": "Directory to search. Default: the working directory."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let parsed =
            Args::new(&args).and_then(|a| Ok((a.non_empty("pattern")?, a.opt_string("path")?)));
        let (pattern, root) = match parsed {
            Ok((pattern, root)) => (
                pattern.to_string(),
                resolve_path(&ctx.cwd, root.unwrap_or(".")),
            ),
            Err(e) => return Box::pin(async move { e.into() }),
        };
        Box::pin(async move {
            tokio::task::spawn_blocking(move || find(&pattern, &root, &ctx.cwd, &ctx.cancel))
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("find failed: {e}")))
        })
    }
}

/// A glob as the `find` and `grep` tools interpret it.
pub(super) struct PathGlob {
    matcher: GlobMatcher,
    on: GlobTarget,
}

/// What part of a path a [`PathGlob`] is matched against.
enum GlobTarget {
    /// Patterns without `/`.
    FileName,
    /// Patterns with `/`: the path relative to the search root.
    Relative,
    /// Absolute patterns.
    Absolute,
}

impl PathGlob {
    pub(super) fn new(pattern: &str) -> Result<PathGlob, globset::Error> {
        let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
        let on = if Path::new(pattern).is_absolute() {
            GlobTarget::Absolute
        } else if pattern.contains('/') {
            GlobTarget::Relative
        } else {
            GlobTarget::FileName
        };
        let glob = GlobBuilder::new(pattern).literal_separator(true).build()?;
        Ok(PathGlob {
            matcher: glob.compile_matcher(),
            on,
        })
    }

    /// Whether `path`, found under `root`, matches.
    pub(super) fn is_match(&self, root: &Path, path: &Path) -> bool {
        match self.on {
            GlobTarget::FileName => path.file_name().is_some_and(|n| self.matcher.is_match(n)),
            GlobTarget::Relative => path
                .strip_prefix(root)
                .is_ok_and(|rel| self.matcher.is_match(rel)),
            GlobTarget::Absolute => self.matcher.is_match(path),
        }
    }
}

fn find(pattern: &str, root: &Path, cwd: &Path, cancel: &CancellationToken) -> ToolOutput {
    let glob = match PathGlob::new(pattern) {
        Ok(glob) => glob,
        Err(e) => return ToolOutput::error(format!("invalid glob pattern: {e}")),
    };
    if !root.exists() {
        return ToolOutput::error(format!("path not found: {}", display_path(cwd, root)));
    }
    let found: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let count = AtomicUsize::new(0);
    let (glob, found_ref, count_ref) = (&glob, &found, &count);
    WalkBuilder::new(root)
        .require_git(false)
        .build_parallel()
        .run(|| {
            Box::new(move |entry| {
                if cancel.is_cancelled() || count_ref.load(Ordering::Relaxed) >= MAX_SCANNED_MATCHES
                {
                    return WalkState::Quit;
                }
                let Ok(entry) = entry else {
                    return WalkState::Continue;
                };
                let is_file = entry.file_type().is_some_and(|t| !t.is_dir());
                if is_file && glob.is_match(root, entry.path()) {
                    count_ref.fetch_add(1, Ordering::Relaxed);
                    if let Ok(mut found) = found_ref.lock() {
                        found.push(entry.into_path());
                    }
                }
                WalkState::Continue
            })
        });
    if cancel.is_cancelled() {
        return ToolOutput::error("aborted");
    }
    let mut paths: Vec<String> = found
        .into_inner()
        .unwrap_or_default()
        .iter()
        .map(|p| display_path(cwd, p))
        .collect();
    if paths.is_empty() {
        return ToolOutput::ok(format!("No files match `{pattern}`"));
    }
    paths.sort();
    let total = paths.len();
    paths.truncate(MAX_RESULTS);
    let mut out = paths.join("\n");
    if total >= MAX_SCANNED_MATCHES {
        out.push_str(&format!(
            "\n... more than {MAX_SCANNED_MATCHES} matches (the first {MAX_RESULTS} found are \
             shown, sorted); narrow the pattern or path"
        ));
    } else if total > MAX_RESULTS {
        out.push_str(&format!(
            "\n... {} more matches not shown ({total} in total); narrow the pattern or path",
            total - MAX_RESULTS
        ));
    }
    ToolOutput::ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{context, text};

    fn tree() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for file in [
            "a.rs",
            "src/b.rs",
            "src/deep/c.rs",
            "src/notes.md",
            "target/x.rs",
            ".hidden/h.rs",
        ] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        std::fs::write(dir.path().join(".gitignore"), "target/\n").unwrap();
        dir
    }

    #[tokio::test]
    async fn name_patterns_match_at_any_depth_respecting_gitignore() {
        let dir = tree();
        let (ctx, _rx) = context(dir.path());
        let out = FindTool.run(json!({"pattern": "*.rs"}), ctx.clone()).await;
        assert_eq!(text(&out), "a.rs\nsrc/b.rs\nsrc/deep/c.rs");
        let out = FindTool
            .run(json!({"pattern": "*.md", "path": "src"}), ctx)
            .await;
        assert_eq!(text(&out), "src/notes.md");
    }

    #[tokio::test]
    async fn path_patterns_match_relative_to_the_search_root() {
        let dir = tree();
        let (ctx, _rx) = context(dir.path());
        let out = FindTool
            .run(json!({"pattern": "src/*.rs"}), ctx.clone())
            .await;
        assert_eq!(text(&out), "src/b.rs");
        let out = FindTool
            .run(json!({"pattern": "**/deep/*.rs"}), ctx.clone())
            .await;
        assert_eq!(text(&out), "src/deep/c.rs");
        let out = FindTool.run(json!({"pattern": "*.py"}), ctx).await;
        assert!(!out.is_error);
        assert_eq!(text(&out), "No files match `*.py`");
    }

    #[tokio::test]
    async fn caps_results_with_a_note() {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..MAX_RESULTS + 3 {
            std::fs::write(dir.path().join(format!("f{i:05}.txt")), "").unwrap();
        }
        let (ctx, _rx) = context(dir.path());
        let out = FindTool.run(json!({"pattern": "*.txt"}), ctx).await;
        let text = text(&out);
        assert!(text.starts_with("f00000.txt\n"));
        assert!(
            text.ends_with("3 more matches not shown (1003 in total); narrow the pattern or path")
        );
    }

    #[tokio::test]
    async fn bad_glob_and_missing_path_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (ctx, _rx) = context(dir.path());
        let out = FindTool.run(json!({"pattern": "a[b"}), ctx.clone()).await;
        assert!(out.is_error);
        assert!(text(&out).starts_with("invalid glob pattern"));
        let out = FindTool
            .run(json!({"pattern": "*", "path": "nope"}), ctx.clone())
            .await;
        assert_eq!(text(&out), "path not found: nope");
        let out = FindTool.run(json!({}), ctx).await;
        assert_eq!(text(&out), "missing required argument `pattern`");
    }
}
