//! End-to-end: what an idle project costs the gateway's host, counted on
//! the real processes: one descriptor in the gateway and two processes
//! of one thread each (outer and the sandboxed agent, pid 1 of its pid
//! namespace); and where
//! a child's stderr goes instead of a pipe: its file in the state
//! directory, which the gateway follows into its log and the admin API
//! shows.

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use corral_e2e::gateway::{Gateway, GatewaySpawn, ADMIN_TOKEN, TOKEN};
use serde_json::{json, Value};

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

fn threads_of(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| tasks.count())
        .unwrap_or(0)
}

fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Polls `value` until it is `want` (bounded); returns the last value.
async fn settles_at(want: usize, mut value: impl FnMut() -> usize) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = value();
        if now == want || Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The descriptor count of `pid` once it held still for a moment
/// (a departed client's socket closes asynchronously).
async fn steady_fds(pid: u32) -> usize {
    let mut last = open_fds(pid);
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = open_fds(pid);
        if now == last {
            return now;
        }
        last = now;
    }
    last
}

/// Connects to `project`, pings, and leaves.
async fn visit(gateway: &Gateway, project: &str) {
    let (mut ws, reply) = gateway.client_with(project, TOKEN, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    let pong = ws.request(json!({"id":"1","type":"ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
}

#[tokio::test]
async fn an_idle_project_costs_the_gateway_one_descriptor_and_two_single_threaded_processes() {
    let names = ["warm", "p1", "p2", "p3", "p4", "p5"];
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&names)
        .arg("--idle-timeout")
        .arg("0")
        .spawn()
        .await;
    let pid = gateway.child.id().unwrap();
    // What the gateway sets up at its first spawn is no project's cost.
    visit(&gateway, "warm").await;
    let base = steady_fds(pid).await;
    for name in &names[1..] {
        visit(&gateway, name).await;
    }
    let projects = names.len() - 1;
    let now = settles_at(base + projects, || open_fds(pid)).await;
    assert_eq!(now, base + projects, "one descriptor per idle project");

    let outers = gateway.child_pids();
    assert_eq!(outers.len(), names.len(), "one child per project");
    for outer in outers {
        let below = children_of(outer);
        assert_eq!(below.len(), 1, "outer and the agent only: {below:?}");
        assert!(children_of(below[0]).is_empty(), "nothing below the agent");
        // Each task takes a pid of the host's `pid_max`.
        assert_eq!(threads_of(outer), 1, "outer is one thread");
        let agent = below[0];
        assert_eq!(
            settles_at(1, || threads_of(agent)).await,
            1,
            "an idle agent is one thread"
        );
    }
    // Each still answers.
    for name in &names {
        visit(&gateway, name).await;
    }
}

/// A fake agent (a shell script): answers the hello, says something on
/// stderr, then reads until its stdin ends.
fn chatty_agent(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("chatty-agent");
    let body = r#"#!/bin/sh
read line
echo "the child speaks on stderr" >&2
echo '{"type":"response","id":"corral-hello","command":"hello","success":true,"data":{"protocol_version":1,"version":"0","provider":"fake","model":"m"}}'
while read line; do :; done
echo "the child's last words" >&2
"#;
    std::fs::write(&path, body).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[tokio::test]
async fn a_childs_stderr_goes_to_its_file_the_admin_api_and_the_gateway_log() {
    let dir = tempfile::tempdir().unwrap();
    // A shell script cannot pass the sandbox's start-up probe.
    let gateway = GatewaySpawn::default()
        .child_bin(chatty_agent(dir.path()))
        .arg("--sandbox")
        .arg("off")
        .capture_log()
        .spawn()
        .await;
    let (_ws, reply) = gateway.client_with("alpha", TOKEN, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    let file = gateway.state.join("logs/alpha.log");
    let said = |text: &str| {
        std::fs::read_to_string(&file)
            .unwrap_or_default()
            .contains(text)
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !said("the child speaks on stderr") {
        assert!(Instant::now() < deadline, "nothing in {}", file.display());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mode = std::fs::metadata(&file).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the file is the gateway's alone");

    let (status, body) = gateway
        .http_get("/v1/projects/alpha", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    let detail: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        detail["stderr_tail"],
        json!(["the child speaks on stderr"]),
        "{detail}"
    );

    let (status, body) = gateway
        .http_post("/v1/projects/alpha/stop", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202, "{body}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !gateway.log_text().contains("the child's last words") {
        assert!(
            Instant::now() < deadline,
            "the child's stderr is not in the gateway's log: {}",
            gateway.log_text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let log = gateway.log_text();
    assert!(log.contains("the child speaks on stderr"), "{log}");
    assert!(said("the child's last words"));
}

fn status_field(pid: u32, field: &str) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_string()))
        .unwrap_or_default()
}

/// Children are started by a clone that shares the gateway's memory until
/// `exec`; the account switch happens in that window. The child still ends
/// up as `--child-user` (ids and groups) and answers.
#[tokio::test]
async fn a_child_started_under_child_user_runs_as_that_account() {
    if !nix::unistd::Uid::effective().is_root() {
        eprintln!("skipped: --child-user needs a gateway running as root");
        return;
    }
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha"])
        .arg("--child-user")
        .arg("nobody")
        .spawn()
        .await;
    visit(&gateway, "alpha").await;
    let outers = gateway.child_pids();
    assert_eq!(outers.len(), 1);
    let nobody = nix::unistd::User::from_name("nobody").unwrap().unwrap();
    let want = nobody.uid.as_raw().to_string();
    let uids = status_field(outers[0], "Uid:");
    assert!(
        uids.split_whitespace().all(|u| u == want),
        "real, effective, saved and fs uid are nobody's: {uids}"
    );
    let groups = status_field(outers[0], "Groups:");
    assert!(
        !groups.split_whitespace().any(|g| g == "0"),
        "no root group left: {groups:?}"
    );
}

/// The gateway's agent templates: children of the gateway named
/// `corral-template`.
fn templates_of(gateway: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            corral_e2e::gateway::parent_of(*pid) == Some(gateway)
                && std::fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|c| c.trim() == "corral-template")
        })
        .collect()
}

/// Children are forked from one template, which is the gateway's child
/// and theirs' sibling (each child's parent is the gateway); a template
/// that dies is replaced at the next start, and nothing is lost.
#[tokio::test]
async fn children_are_forked_from_one_template_that_is_replaced_when_it_dies() {
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha", "beta", "gamma"])
        // Every child forked for its project, none a spare.
        .arg("--spare-agents")
        .arg("0")
        .spawn()
        .await;
    let pid = gateway.child.id().unwrap();
    visit(&gateway, "alpha").await;
    let templates = templates_of(pid);
    assert_eq!(templates.len(), 1, "one template: {templates:?}");
    // It keeps none of a spawn's descriptors.
    let fds = open_fds(templates[0]);
    visit(&gateway, "beta").await;
    assert_eq!(open_fds(templates[0]), fds, "the template's descriptors");
    assert_eq!(templates_of(pid), templates);
    let outers = gateway.child_pids();
    assert_eq!(outers.len(), 2, "{outers:?}");
    for outer in &outers {
        let cmdline = std::fs::read(format!("/proc/{outer}/cmdline")).unwrap();
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        assert!(
            cmdline.contains(" rpc "),
            "a child shows its own argv: {cmdline}"
        );
        assert!(!cmdline.contains("template"), "{cmdline}");
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(templates[0] as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    // Its children are the gateway's, not the template's: they live on.
    visit(&gateway, "alpha").await;
    visit(&gateway, "gamma").await;
    let again = templates_of(pid);
    assert_eq!(again.len(), 1, "a new template: {again:?}");
    assert_ne!(again[0], templates[0]);
    assert_eq!(gateway.child_pids().len(), 3);
}

/// With `--child-template off` every child is executed: no template.
#[tokio::test]
async fn child_template_off_executes_every_child() {
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha"])
        .arg("--child-template")
        .arg("off")
        .spawn()
        .await;
    visit(&gateway, "alpha").await;
    assert_eq!(templates_of(gateway.child.id().unwrap()), Vec::<u32>::new());
    assert_eq!(gateway.child_pids().len(), 1);
}

/// `--child-template on` with a child binary that does not serve
/// `template` (it never says it is ready): the gateway gives up on the
/// template within seconds, says so, and executes the child.
#[tokio::test]
async fn a_child_bin_that_is_no_template_is_executed_instead() {
    let dir = tempfile::tempdir().unwrap();
    let gateway = GatewaySpawn::default()
        .child_bin(chatty_agent(dir.path()))
        .arg("--sandbox")
        .arg("off")
        .arg("--child-template")
        .arg("on")
        .capture_log()
        .spawn()
        .await;
    let (_ws, reply) = gateway.client_with("alpha", TOKEN, None).await;
    assert_eq!(reply["success"], true, "{reply}");
    let log = gateway.log_text();
    assert!(
        log.contains("the agent template could not start") && log.contains("serves `template`"),
        "{log}"
    );
    assert_eq!(
        gateway.child_pids().len(),
        0,
        "a script is not named corral-agent"
    );
    assert_eq!(templates_of(gateway.child.id().unwrap()), Vec::<u32>::new());
}

/// A metric's value in the gateway's `/metrics`.
async fn metric(gateway: &Gateway, name: &str) -> f64 {
    let (status, text) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{text}");
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}"))
}

/// The gateway's one spare agent, once it is ready.
async fn the_spare(gateway: &Gateway) -> u32 {
    let count = settles_at(1, || gateway.spare_pids().len()).await;
    assert_eq!(count, 1, "one spare agent");
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(gateway, "corral_spare_agents_ready").await != 1.0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    gateway.spare_pids()[0]
}

/// A cold start takes the spare agent started after the previous one: the
/// project's child is that process, confined as any other (its agent is
/// pid 1 of its namespace, runs in the project with its stderr in the
/// project's file and shows its own command line), and another spare takes
/// its place. With `--spare-agents 0` there is none.
#[tokio::test]
async fn a_cold_start_takes_a_spare_agent_and_another_takes_its_place() {
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha", "beta"])
        .spawn()
        .await;
    visit(&gateway, "alpha").await;
    let spare = the_spare(&gateway).await;
    assert_eq!(metric(&gateway, "corral_spare_agents_ready").await, 1.0);
    let agent = children_of(spare);
    assert_eq!(agent.len(), 1, "outer and its agent: {agent:?}");

    visit(&gateway, "beta").await;
    let children = gateway.child_pids();
    assert!(children.contains(&spare), "{children:?} took {spare}");
    assert_eq!(children.len(), 2, "{children:?}");
    let agent = children_of(spare)[0];
    let cmdline = std::fs::read(format!("/proc/{agent}/cmdline")).unwrap();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    assert!(
        cmdline.contains(" rpc ") && cmdline.contains("projects/beta "),
        "the agent shows its project's command line: {cmdline}"
    );
    let cwd = std::fs::read_link(format!("/proc/{agent}/cwd")).unwrap();
    assert!(cwd.ends_with("projects/beta"), "{}", cwd.display());
    let stderr = std::fs::read_link(format!("/proc/{agent}/fd/2")).unwrap();
    assert!(
        stderr.ends_with("logs/beta.log"),
        "its stderr is the project's file: {}",
        stderr.display()
    );
    let next = the_spare(&gateway).await;
    assert_ne!(next, spare, "a new spare");
    assert_eq!(
        metric(&gateway, "corral_spare_agent_assignments_total").await,
        1.0
    );
    // It is a child as any other: it answers again and stops with the
    // gateway, its spare too.
    visit(&gateway, "beta").await;
    let gateway_pid = gateway.child.id().unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(gateway_pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let left = settles_at(0, || {
        let running = corral_e2e::gateway::agent_pids();
        [spare, next]
            .iter()
            .filter(|pid| running.contains(pid))
            .count()
    })
    .await;
    assert_eq!(left, 0, "the child and the spare end with the gateway");

    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha", "beta"])
        .arg("--spare-agents")
        .arg("0")
        .spawn()
        .await;
    visit(&gateway, "alpha").await;
    visit(&gateway, "beta").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gateway.spare_pids(), Vec::<u32>::new());
    assert_eq!(gateway.child_pids().len(), 2);
    for name in [
        "corral_spare_agents_ready",
        "corral_spare_agent_assignments_total",
        "corral_spare_agent_misses_total",
    ] {
        assert_eq!(metric(&gateway, name).await, 0.0, "{name}");
    }
}

/// A spare's view of the host is as old as the spare: a project directory
/// mounted over since is another directory to it. The agent refuses the
/// assignment (the gateway sends the directory it opened), and the gateway
/// starts a new agent for the project at once: the client sees nothing
/// but a working project, in the new file system.
#[tokio::test]
async fn a_spare_that_sees_another_project_directory_gives_way_to_a_new_agent() {
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha", "beta"])
        .capture_log()
        .spawn()
        .await;
    visit(&gateway, "alpha").await;
    let spare = the_spare(&gateway).await;
    let root = gateway.root.join("beta");
    std::fs::write(root.join("underneath.txt"), "old").unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&root)
        .status()
        .unwrap();
    assert!(mounted.success(), "mount a tmpfs over the project");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(root.clone());

    visit(&gateway, "beta").await;
    let children = gateway.child_pids();
    assert_eq!(children.len(), 2, "{children:?}");
    assert!(
        !children.contains(&spare),
        "the spare gave way: {children:?}"
    );
    let agent = children_of(
        children
            .iter()
            .copied()
            .find(|&c| {
                let cwd = children_of(c)
                    .first()
                    .and_then(|a| std::fs::read_link(format!("/proc/{a}/cwd")).ok());
                cwd.is_some_and(|cwd| cwd.ends_with("projects/beta"))
            })
            .expect("beta's child"),
    )[0];
    let seen = std::fs::read_dir(format!("/proc/{agent}/cwd"))
        .unwrap()
        .count();
    assert_eq!(seen, 0, "the new agent works in the mounted file system");
    assert_eq!(
        metric(&gateway, "corral_spare_agent_failures_total").await,
        1.0
    );
    let log = gateway.log_text();
    assert!(
        log.contains("is not the project directory the gateway opened"),
        "{log}"
    );
}

/// The names of the files made ahead in `dir`, with their inodes.
fn made_ahead(dir: &Path) -> Vec<(String, u64)> {
    use std::os::unix::fs::MetadataExt;
    let mut files: Vec<(String, u64)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with(".ahead-"))
                .map(|e| {
                    let inode = e.metadata().unwrap().ino();
                    (e.file_name().to_string_lossy().into_owned(), inode)
                })
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// A cold start renames files the gateway made ahead into place as the
/// project's journal and stderr file (creating a file can be slow on a
/// busy disk); new ones are made after it, and a project that has its
/// files keeps them.
#[tokio::test]
async fn a_cold_start_takes_its_journal_and_stderr_file_from_files_made_ahead() {
    use std::os::unix::fs::MetadataExt;
    let gateway = GatewaySpawn::default()
        .echo()
        .projects(&["alpha", "beta"])
        .spawn()
        .await;
    let (sessions, logs) = (gateway.state.join("sessions"), gateway.state.join("logs"));
    visit(&gateway, "alpha").await;
    let full = |dir: &Path| made_ahead(dir).len();
    assert_eq!(settles_at(8, || full(&sessions)).await, 8);
    assert_eq!(settles_at(8, || full(&logs)).await, 8);
    let ahead: Vec<u64> = made_ahead(&sessions)
        .into_iter()
        .chain(made_ahead(&logs))
        .map(|(_, inode)| inode)
        .collect();

    visit(&gateway, "beta").await;
    for file in [sessions.join("beta.jsonl"), logs.join("beta.log")] {
        let meta = std::fs::symlink_metadata(&file).unwrap();
        assert!(
            ahead.contains(&meta.ino()),
            "{} was made ahead",
            file.display()
        );
        assert!(meta.is_file() && meta.nlink() == 1);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let age = std::time::SystemTime::now()
            .duration_since(meta.modified().unwrap())
            .unwrap_or_default();
        assert!(age < Duration::from_secs(60), "its times are the start's");
    }
    // Replaced in the background.
    assert_eq!(settles_at(8, || full(&sessions)).await, 8);
    assert_eq!(settles_at(8, || full(&logs)).await, 8);
    // A restart of a project reuses its files.
    let journal = std::fs::metadata(sessions.join("alpha.jsonl"))
        .unwrap()
        .ino();
    let before = made_ahead(&sessions);
    let alpha = gateway.child_pids();
    let (status, _) = gateway
        .http_post("/v1/projects/alpha/stop", Some(ADMIN_TOKEN))
        .await;
    assert_eq!(status, 202);
    assert_eq!(
        settles_at(alpha.len() - 1, || gateway.child_pids().len()).await,
        alpha.len() - 1
    );
    visit(&gateway, "alpha").await;
    assert_eq!(
        std::fs::metadata(sessions.join("alpha.jsonl"))
            .unwrap()
            .ino(),
        journal
    );
    assert_eq!(made_ahead(&sessions), before);
}
