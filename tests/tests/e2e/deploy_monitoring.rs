//! The monitoring files in `deploy/`: the Prometheus alert rules pass
//! `promtool check rules` and their own unit tests (`promtool test rules`),
//! and the Grafana dashboard is valid JSON with a panel for every
//! `corral_*` family a running gateway exports. Every metric either file
//! names exists in that gateway's `/metrics`, so a renamed metric breaks
//! this test instead of an alert silently.
//!
//! Needs `promtool` (Debian: `apt-get install prometheus`);
//! `.ci/install-deps` installs it.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use corral_e2e::gateway::{GatewaySpawn, ADMIN_TOKEN};
use corral_e2e::prerequisites::PROMTOOL;
use serde_json::{json, Value};

fn deploy(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../deploy")
        .join(path)
}

/// Runs promtool with `args` in `deploy/prometheus`; panics with its output
/// unless it succeeds.
fn promtool(args: &[&str]) -> String {
    let output = Command::new(PROMTOOL.require())
        .args(args)
        .current_dir(deploy("prometheus"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", "corral-rules.yml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "corral-rules.test.yml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert the rules define has a unit test that makes it fire or
    // checks that it stays quiet.
    let rules = std::fs::read_to_string(deploy("prometheus/corral-rules.yml")).unwrap();
    let tests = std::fs::read_to_string(deploy("prometheus/corral-rules.test.yml")).unwrap();
    for line in rules.lines() {
        if let Some(name) = line.trim().strip_prefix("- alert: ") {
            assert!(
                tests.contains(&format!("alertname: {name}\n")),
                "{name} has no case in corral-rules.test.yml"
            );
        }
    }
}

/// The metric families of a Prometheus text exposition, from its `# TYPE`
/// lines: name → type.
fn families(exposition: &str) -> Vec<(String, String)> {
    exposition
        .lines()
        .filter_map(|line| {
            let mut words = line.strip_prefix("# TYPE ")?.split_whitespace();
            Some((words.next()?.to_string(), words.next()?.to_string()))
        })
        .collect()
}

/// Words of a text that could be metric names (`corral_…` or `process_…`,
/// not a prefix like `process_` itself).
fn metric_words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .filter(|w| w.starts_with("corral_") || w.starts_with("process_"))
        .filter(|w| !w.ends_with('_'))
        .map(str::to_string)
        .collect()
}

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut all = Vec::new();
    let mut stack: Vec<&Value> = dashboard["panels"].as_array().unwrap().iter().collect();
    while let Some(panel) = stack.pop() {
        if let Some(nested) = panel["panels"].as_array() {
            stack.extend(nested);
        }
        all.push(panel);
    }
    all
}

#[tokio::test]
async fn the_dashboard_and_the_rules_cover_the_live_metrics() {
    let gateway = GatewaySpawn::default().echo().spawn().await;
    // A request, so labelled histograms (request_duration_seconds{command})
    // have a series and show up.
    let mut ws = gateway.client("alpha").await;
    let pong = ws.request(json!({"id": "1", "type": "ping"})).await;
    assert_eq!(pong["success"], true, "{pong}");
    let (status, exposition) = gateway.http_get("/metrics", Some(ADMIN_TOKEN)).await;
    assert_eq!(status, 200, "{exposition}");
    let families = families(&exposition);
    let corral: Vec<&(String, String)> = families
        .iter()
        .filter(|(name, _)| name.starts_with("corral_"))
        .collect();
    assert!(corral.len() >= 20, "few families: {corral:?}");
    // A name a query may use: the family's, or a histogram's series.
    let mut known = BTreeSet::new();
    for (name, kind) in &families {
        known.insert(name.clone());
        if kind == "histogram" || kind == "summary" {
            for suffix in ["_bucket", "_sum", "_count"] {
                known.insert(format!("{name}{suffix}"));
            }
        }
    }

    let text = std::fs::read_to_string(deploy("grafana/corral.json")).unwrap();
    let dashboard: Value = serde_json::from_str(&text).expect("corral.json is not valid JSON");
    assert_eq!(dashboard["uid"], "corral");
    let mut ids = BTreeSet::new();
    let mut queried = BTreeSet::new();
    for panel in panels(&dashboard) {
        let id = panel["id"].as_u64().expect("every panel has an id");
        assert!(ids.insert(id), "panel id {id} is used twice");
        let grid = &panel["gridPos"];
        let (x, w) = (grid["x"].as_u64().unwrap(), grid["w"].as_u64().unwrap());
        assert!(x + w <= 24, "panel {id} is wider than the grid: {grid}");
        if panel["type"] == "row" {
            continue;
        }
        let targets = panel["targets"].as_array().expect("a panel has targets");
        assert!(!targets.is_empty(), "panel {id} queries nothing");
        for target in targets {
            let expr = target["expr"].as_str().expect("a target has an expr");
            queried.extend(metric_words(expr));
        }
    }
    for (family, kind) in &corral {
        let covered = queried.contains(family.as_str())
            || ["_bucket", "_sum", "_count"]
                .iter()
                .any(|s| queried.contains(&format!("{family}{s}")));
        assert!(
            covered,
            "the dashboard has no panel for {family} ({kind}); add one to deploy/grafana/corral.json"
        );
    }
    let unknown: Vec<&String> = queried.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics the gateway does not export: {unknown:?}"
    );

    let rules = std::fs::read_to_string(deploy("prometheus/corral-rules.yml")).unwrap();
    let named = metric_words(&rules);
    let unknown: Vec<&String> = named.difference(&known).collect();
    assert!(
        unknown.is_empty(),
        "the alert rules name metrics the gateway does not export: {unknown:?}"
    );
    for needed in [
        "corral_crash_loops_total",
        "corral_child_exits_total",
        "corral_slow_client_disconnects_total",
        "corral_auth_failures_total",
        "process_open_fds",
        "process_max_fds",
        "corral_memory_available_bytes",
        "corral_memory_limit_bytes",
    ] {
        assert!(named.contains(needed), "no alert uses {needed}");
    }
}
