//! What a newcomer meets in a fresh clone: the README's quick start leaves
//! `git status` clean (what it writes is ignored), and the documents it
//! points to ship with the repository.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

#[test]
fn what_the_quick_start_writes_is_ignored_by_git() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    // The quick start serves ./projects with the default state directory.
    assert!(
        readme.contains("mkdir -p projects/demo && target/release/corral serve --listen 127.0.0.1:7000 --projects-root projects"),
        "the quick start changed; update the paths this test checks"
    );
    if !workspace().join(".git").exists() {
        eprintln!("not a git checkout: nothing to check");
        return;
    }
    let written = [
        "projects/demo/notes.txt",
        "corral-state/sessions/demo.jsonl",
    ];
    let output = Command::new("git")
        .arg("check-ignore")
        .args(written)
        .current_dir(workspace())
        .output()
        .expect("git is installed");
    let ignored = String::from_utf8_lossy(&output.stdout);
    for path in written {
        assert!(
            ignored.lines().any(|l| l == path),
            "{path} is not ignored by git; add it to .gitignore"
        );
    }
}

#[test]
fn the_readme_points_to_documents_that_ship() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    for gone in ["zut-rpc.md", "design documents"] {
        assert!(
            !readme.contains(gone),
            "README.md refers to {gone:?}, which users do not have"
        );
    }
    assert!(readme.contains("docs/protocol.md"));
    let protocol = std::fs::read_to_string(workspace().join("docs/protocol.md")).unwrap();
    for section in [
        "## zut RPC v1",
        "## letscode-rpc/1",
        "## Zi RPC v1",
        "## ACP",
        "## Through the gateway",
    ] {
        assert!(
            protocol.contains(section),
            "docs/protocol.md lacks {section:?}"
        );
    }
}
