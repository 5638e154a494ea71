//! End-to-end: `corral-agent sandbox-exec` confines another program as the
//! agent confines itself. The checks are a shell's view (what it can write,
//! read and see) and exit codes. The layout lives outside `/tmp` (which the
//! sandbox replaces), like the gateway's: the state directory and the
//! projects root hidden, the private home under the state directory.

#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Output;

use corral_e2e::harness::workspace_bin;
use corral_e2e::terminals;
use tempfile::TempDir;

struct Layout {
    root: TempDir,
}

impl Layout {
    fn new() -> Layout {
        let root = corral_e2e::dir_outside_tmp();
        for dir in ["projects/a", "projects/b", "state/sessions", "outside"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        std::fs::write(root.path().join("projects/b/secret.txt"), "b-secret").unwrap();
        std::fs::write(root.path().join("state/sessions/b.jsonl"), "{}").unwrap();
        Layout { root }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    /// `sandbox-exec` with the gateway's hides and `home`, running `script`
    /// in `sh -c` (its `$1` is the layout's root).
    fn run(&self, home: Option<&Path>, script: &str, env: &[(&str, &str)]) -> Output {
        let mut command = std::process::Command::new(workspace_bin("corral-agent"));
        command.arg("sandbox-exec");
        for hide in ["state", "projects"] {
            command.arg("--sandbox-hide").arg(self.path(hide));
        }
        command.arg("--cwd").arg(self.path("projects/a"));
        if let Some(home) = home {
            command.arg("--home").arg(home);
        }
        command
            .args(["--", "sh", "-c", script, "sh"])
            .arg(self.root.path())
            .env_remove("CORRAL_SANDBOX_SIMULATE_MISSING");
        for (name, value) in env {
            command.env(name, value);
        }
        command.output().unwrap()
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn writes_reach_only_the_project_home_and_tmp_and_hidden_paths_are_empty() {
    let layout = Layout::new();
    let home = layout.path("state/homes/a");
    let script = r#"
        root=$1
        try() { if eval "$2" 2>/dev/null; then echo "$1=yes"; else echo "$1=no"; fi; }
        echo "pid=$$ pwd=$(pwd) home=$HOME"
        try project 'echo ok > ok.txt'
        try home 'echo h > "$HOME/h.txt"'
        try tmp 'echo t > /tmp/t.txt'
        try etc 'touch /etc/corral-sandbox-exec-test'
        try outside 'touch "$root/outside/x"'
        try other-project 'cat "$root/projects/b/secret.txt"'
        try journals 'ls "$root/state/sessions/b.jsonl"'
        try homes-listed 'ls "$root/state/homes" | grep -qx a'
        grep -E '^(NoNewPrivs|CapEff|CapBnd)' /proc/self/status
        exit 3
    "#;
    let output = layout.run(Some(&home), script, &[]);
    let out = stdout(&output);
    assert_eq!(output.status.code(), Some(3), "{out}\n{}", stderr(&output));
    let home = home.canonicalize().unwrap();
    let project = layout.path("projects/a").canonicalize().unwrap();
    let expected = format!("pid=2 pwd={} home={}", project.display(), home.display());
    assert!(out.contains(&expected), "{expected:?} not in:\n{out}");
    for line in [
        "project=yes",
        "home=yes",
        "tmp=yes",
        "etc=no",
        "outside=no",
        "other-project=no",
        "journals=no",
        "homes-listed=yes",
        "NoNewPrivs:\t1",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
    ] {
        assert!(out.lines().any(|l| l == line), "{line:?} not in:\n{out}");
    }
    assert_eq!(
        std::fs::read_to_string(project.join("ok.txt")).unwrap(),
        "ok\n"
    );
    assert_eq!(std::fs::read_to_string(home.join("h.txt")).unwrap(), "h\n");
    assert!(!layout.path("outside/x").exists());
}

#[test]
fn the_home_is_created_private_and_must_not_hold_the_project() {
    use std::os::unix::fs::PermissionsExt;
    let layout = Layout::new();
    let home = layout.path("state/homes/new");
    let output = layout.run(Some(&home), "true", &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let mode = std::fs::metadata(&home).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);

    let output = layout.run(Some(&layout.path("projects")), "true", &[]);
    assert_eq!(output.status.code(), Some(78));
    let err = stderr(&output);
    assert!(err.contains("holds the project"), "{err}");
}

#[test]
fn an_unavailable_sandbox_exits_78_with_the_reason() {
    let layout = Layout::new();
    for (missing, reason) in [
        ("landlock", "Landlock is not enabled"),
        ("userns", "user namespaces are not permitted"),
    ] {
        let output = layout.run(
            None,
            "echo ran",
            &[("CORRAL_SANDBOX_SIMULATE_MISSING", missing)],
        );
        assert_eq!(output.status.code(), Some(78), "{missing}");
        assert_eq!(stdout(&output), "", "the command never ran");
        let err = stderr(&output);
        let line = err.lines().last().unwrap_or_default();
        assert!(
            line.starts_with("corral-agent: the sandbox is unavailable") && line.contains(reason),
            "{err}"
        );
    }
}

#[test]
fn a_missing_command_exits_127_and_tool_network_off_is_refused() {
    let layout = Layout::new();
    let output = std::process::Command::new(workspace_bin("corral-agent"))
        .args(["sandbox-exec", "--cwd"])
        .arg(layout.path("projects/a"))
        .args(["--", "corral-no-such-command"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(127));
    assert!(stderr(&output).contains("cannot execute corral-no-such-command"));

    let output = std::process::Command::new(workspace_bin("corral-agent"))
        .args(["sandbox-exec", "--tool-network", "off", "--cwd"])
        .arg(layout.path("projects/a"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("--tool-network proxy"));
}

#[test]
fn programs_get_terminals_of_their_own_and_none_of_the_hosts() {
    terminals::require();
    let _host = terminals::host_terminal();
    let layout = Layout::new();
    let output = layout.run(None, terminals::CHECK, &[]);
    let out = stdout(&output);
    assert!(output.status.success(), "{out}\n{}", stderr(&output));
    terminals::assert_private(&out);
}
