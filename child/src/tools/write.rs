//! `write {path, content}`: creates or overwrites a whole file, creating
//! missing parent directories. The write is atomic (a temp file in the same
//! directory renamed over the target), keeps an existing file's permissions
//! and writes through symlinks. Content size is bounded only by the model's
//! output.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use futures_util::future::BoxFuture;
use serde_json::{json, Value};

use super::{display_path, resolve_path, Args, Tool, ToolContext, ToolOutput};
use crate::provider::ToolSpec;

pub struct WriteTool;

impl Tool for WriteTool {
    fn name(&self) -> &'static str {
        "write"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.name().into(),
            description: "Create or overwrite a file with the given content (the whole file). \
                          Parent directories are created. Prefer `edit` for changing part of an \
                          existing file. Relative paths resolve against the working directory."
                .into(),
            input_schema: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File to write."},
                    "content": {"type": "string", "description": "The complete new content of the file."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        }
    }

    fn run(&self, args: Value, ctx: ToolContext) -> BoxFuture<'static, ToolOutput> {
        let parsed =
            Args::new(&args).and_then(|a| Ok((a.non_empty("path")?, a.string("content")?)));
        let (path, content) = match parsed {
            Ok((path, content)) => (resolve_path(&ctx.cwd, path), content.to_string()),
            Err(e) => return Box::pin(async move { e.into() }),
        };
        let shown = display_path(&ctx.cwd, &path);
        if let Some(client) = ctx.client_writer() {
            return Box::pin(async move {
                let verb = if path.exists() {
                    "Overwrote"
                } else {
                    "Created"
                };
                let (bytes, lines) = (content.len(), content.lines().count());
                match client.write(path, content).await {
                    Ok(()) => {
                        ToolOutput::ok(format!("{verb} {shown}: {bytes} bytes, {lines} lines"))
                    }
                    Err(e) => ToolOutput::error(format!("cannot write {shown}: {e}")),
                }
            });
        }
        Box::pin(async move {
            tokio::task::spawn_blocking(move || write_file(&path, &shown, &content))
                .await
                .unwrap_or_else(|e| ToolOutput::error(format!("write failed: {e}")))
        })
    }
}

fn write_file(path: &Path, shown: &str, content: &str) -> ToolOutput {
    if path.is_dir() {
        return ToolOutput::error(format!("{shown} is a directory"));
    }
    let existed = path.exists();
    if let Some(parent) = path.parent() {
        if let Err(e) = fs::create_dir_all(parent) {
            return ToolOutput::error(format!("cannot create the directories for {shown}: {e}"));
        }
    }
    if let Err(e) = write_atomic(path, content.as_bytes()) {
        return ToolOutput::error(format!("cannot write {shown}: {e}"));
    }
    let verb = if existed { "Overwrote" } else { "Created" };
    ToolOutput::ok(format!(
        "{verb} {shown}: {} bytes, {} lines",
        content.len(),
        content.lines().count()
    ))
}

/// Replaces the contents of `path` with `bytes` atomically: readers see the
/// old file or the new one, never a mix. The parent directory must exist.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    // Write through symlinks rather than replacing the link itself.
    let target = fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let temp = temp_path(&target)?;
    let result = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temp)?;
        if let Ok(meta) = fs::metadata(&target) {
            file.set_permissions(meta.permissions())?;
        }
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, &target)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&temp);
    }
    result
}

/// A fresh hidden name next to `target`, so the rename stays on one
/// filesystem.
fn temp_path(target: &Path) -> io::Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp_name = format!(".{}.{}.{n}.tmp", name.to_string_lossy(), std::process::id());
    Ok(target.with_file_name(temp_name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::test_support::{context, text};

    async fn write(dir: &Path, args: Value) -> ToolOutput {
        let (ctx, _rx) = context(dir);
        WriteTool.run(args, ctx).await
    }

    #[tokio::test]
    async fn creates_parents_and_reports_size() {
        let dir = tempfile::tempdir().unwrap();
        let out = write(
            dir.path(),
            json!({"path": "a/b/c.txt", "content": "one\ntwo\n"}),
        )
        .await;
        assert!(!out.is_error, "{}", text(&out));
        assert_eq!(text(&out), "Created a/b/c.txt: 8 bytes, 2 lines");
        assert_eq!(
            fs::read_to_string(dir.path().join("a/b/c.txt")).unwrap(),
            "one\ntwo\n"
        );

        let out = write(dir.path(), json!({"path": "a/b/c.txt", "content": ""})).await;
        assert_eq!(text(&out), "Overwrote a/b/c.txt: 0 bytes, 0 lines");
        assert_eq!(fs::read(dir.path().join("a/b/c.txt")).unwrap(), b"");
        // No temp files are left behind.
        assert_eq!(fs::read_dir(dir.path().join("a/b")).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[tokio::test]
    async fn keeps_permissions_and_writes_through_symlinks() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real.sh");
        fs::write(&real, "old").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::symlink(&real, dir.path().join("link.sh")).unwrap();

        let out = write(dir.path(), json!({"path": "link.sh", "content": "new"})).await;
        assert!(!out.is_error, "{}", text(&out));
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
        assert!(fs::symlink_metadata(dir.path().join("link.sh"))
            .unwrap()
            .is_symlink());
        assert_eq!(
            fs::metadata(&real).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }

    #[tokio::test]
    async fn bad_arguments_and_directories_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("d")).unwrap();
        let out = write(dir.path(), json!({"path": "x"})).await;
        assert_eq!(text(&out), "missing required argument `content`");
        let out = write(dir.path(), json!({"path": "d", "content": "x"})).await;
        assert!(out.is_error);
        assert_eq!(text(&out), "d is a directory");
    }
}
