//! What a newcomer meets in a fresh clone: the README's quick start leaves
//! `git status` clean (what it writes is ignored), the documents it points
//! to ship with the repository, and the first mistakes (a busy port, a
//! projects root that does not exist) are answered with what to do.

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

#[tokio::test]
async fn a_busy_port_and_a_missing_projects_root_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let root = dir.path().join("projects");
    std::fs::create_dir(&root).unwrap();
    let (code, stderr) = corral_e2e::gateway::serve_exit(
        &[
            "--listen".as_ref(),
            addr.as_ref(),
            "--projects-root".as_ref(),
            root.as_os_str(),
            "--state-dir".as_ref(),
            dir.path().join("state").as_os_str(),
            "--sandbox".as_ref(),
            "off".as_ref(),
        ],
        &[],
    )
    .await;
    assert_ne!(code, 0);
    assert!(
        stderr.contains("Address already in use")
            && stderr.contains("pass --listen with another port"),
        "{stderr}"
    );

    let missing = dir.path().join("no-such-dir");
    let (code, stderr) =
        corral_e2e::gateway::serve_exit(&["--projects-root".as_ref(), missing.as_os_str()], &[])
            .await;
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains(&format!("create it (mkdir -p {})", missing.display())),
        "{stderr}"
    );
}
