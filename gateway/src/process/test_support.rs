//! Helpers for the process tests: fake children written as `sh` scripts,
//! and reads that time out instead of hanging.

use std::path::Path;
use std::time::Duration;

use tokio::sync::mpsc;

use super::child::SpawnSpec;
use super::spec::ChildOutput;

/// Upper bound on any single wait in a test.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// A spec running `script` with `/bin/sh` in `dir`, with only `PATH` set.
pub(crate) fn sh(dir: &Path, script: &str) -> SpawnSpec {
    SpawnSpec {
        program: "/bin/sh".into(),
        args: vec!["-c".into(), script.into()],
        cwd: dir.to_path_buf(),
        env: vec![("PATH".into(), std::env::var_os("PATH").unwrap_or_default())],
        project: "test".into(),
        max_line: 1024,
        confine: Default::default(),
        stderr_log: None,
        template: false,
    }
}

/// The next output item, failing the test after [`PATIENCE`].
pub(crate) async fn next(output: &mut mpsc::Receiver<ChildOutput>) -> ChildOutput {
    tokio::time::timeout(PATIENCE, output.recv())
        .await
        .expect("timed out waiting for child output")
        .expect("output channel closed before Exited")
}

/// The next output item, which must be a line; returned as text.
pub(crate) async fn next_line(output: &mut mpsc::Receiver<ChildOutput>) -> String {
    match next(output).await {
        ChildOutput::Line(line) => String::from_utf8(line.to_vec()).unwrap(),
        other => panic!("expected a line, got {other:?}"),
    }
}

/// Whether `pid` is gone: no `/proc` entry, or a zombie awaiting its reaper.
pub(crate) fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // Format: "pid (comm) S ..."; comm may contain spaces or parens.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// Polls [`is_gone`] for up to `within`.
pub(crate) async fn gone_within(pid: u32, within: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if is_gone(pid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
