use std::net::IpAddr;
use std::path::Path;

use prometheus::Opts;
use serde_json::{json, Value};

use super::*;

const WAIT: Duration = Duration::from_secs(30);

fn counter() -> IntCounterVec {
    IntCounterVec::new(Opts::new("audit_entries_total", "test"), &["outcome"]).unwrap()
}

fn count(counter: &IntCounterVec, outcome: &str) -> u64 {
    counter.with_label_values(&[outcome]).get()
}

fn settings(path: &Path) -> AuditSettings {
    AuditSettings {
        path: path.to_path_buf(),
        max_bytes: 100 << 20,
        keep: 5,
        prompts: false,
    }
}

/// Every line of `path`, parsed.
fn lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn alice() -> Entry {
    Entry::new(Action::PermissionAnswered)
        .actor("alice", ActorKind::Jwt)
        .source("::ffff:203.0.113.7".parse::<IpAddr>().unwrap())
        .project("team-a-web")
        .run("r-12")
        .detail("option", "allow_once")
}

#[test]
fn each_entry_is_one_json_line_with_its_fields() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let counter = counter();
    let audit = Audit::start(&settings(&path), counter.clone(), None).unwrap();
    audit.record(alice());
    audit.record(
        Entry::new(Action::AdminStop)
            .project("b")
            .refused("out_of_scope"),
    );
    assert!(audit.close(WAIT));
    let got = lines(&path);
    assert_eq!(got.len(), 2, "{got:?}");
    let first = got[0].as_object().unwrap();
    let keys: Vec<&str> = first.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "time",
            "actor",
            "actor_kind",
            "source",
            "action",
            "project",
            "run",
            "outcome",
            "detail"
        ]
    );
    assert_eq!(first["actor"], "alice");
    assert_eq!(first["actor_kind"], "jwt");
    assert_eq!(
        first["source"], "203.0.113.7",
        "an IPv4 client is not shown mapped"
    );
    assert_eq!(first["action"], "permission_answered");
    assert_eq!(first["project"], "team-a-web");
    assert_eq!(first["run"], "r-12");
    assert_eq!(first["outcome"], "ok");
    assert_eq!(first["detail"], json!({"option": "allow_once"}));
    let time = first["time"].as_str().unwrap();
    assert_eq!(time.len(), "2026-12-01T09:30:00.123Z".len(), "{time}");
    assert!(time.ends_with('Z') && time.as_bytes()[19] == b'.', "{time}");
    assert_eq!(
        got[1],
        json!({
            "time": got[1]["time"], "actor": "gateway", "actor_kind": "gateway",
            "action": "admin_stop", "project": "b", "outcome": "refused",
            "detail": {"reason": "out_of_scope"},
        })
    );
    assert_eq!(count(&counter, "written"), 2);
    assert_eq!(count(&counter, "dropped"), 0);
}

#[test]
fn the_time_is_rfc3339_utc_with_milliseconds() {
    let time = std::time::UNIX_EPOCH + Duration::from_millis(1_796_117_400_123);
    assert_eq!(rfc3339_millis(time), "2026-12-01T09:30:00.123Z");
    assert_eq!(
        rfc3339_millis(std::time::UNIX_EPOCH),
        "1970-01-01T00:00:00.000Z"
    );
}

#[test]
fn every_action_has_its_snake_case_name() {
    let names: Vec<&str> = Action::ALL.iter().map(|a| a.as_str()).collect();
    for name in &names {
        assert!(
            name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{name}"
        );
    }
    let unique: std::collections::BTreeSet<&&str> = names.iter().collect();
    assert_eq!(unique.len(), names.len());
    assert!(names.contains(&"permission_answered") && names.contains(&"egress_changed"));
}

#[test]
fn prompts_are_absent_unless_enabled() {
    for prompts in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.jsonl");
        let settings = AuditSettings {
            prompts,
            ..settings(&path)
        };
        let audit = Audit::start(&settings, counter(), None).unwrap();
        assert_eq!(audit.wants_prompts(), prompts);
        audit.record(Entry::new(Action::Prompt).prompt("delete the tests"));
        assert!(audit.close(WAIT));
        let line = &lines(&path)[0];
        match prompts {
            true => assert_eq!(line["prompt"], "delete the tests"),
            false => {
                assert!(line.get("prompt").is_none(), "{line}");
                let text = std::fs::read_to_string(&path).unwrap();
                assert!(!text.contains("delete the tests"), "{text}");
            }
        }
    }
}

#[test]
fn long_fields_are_cut_with_a_marker() {
    let (entry, _) = Entry::new(Action::TokenCreated)
        .actor(&"a".repeat(1000), ActorKind::Managed)
        .project(&"p".repeat(1000))
        .run(&"é".repeat(1000))
        .prompt(&"x".repeat(MAX_PROMPT_BYTES * 2))
        .detail("projects", vec!["team-\"a\"-*"; 2000])
        .seal(true);
    let fields = entry.fields();
    for (key, max) in [
        ("actor", MAX_NAME_BYTES),
        ("project", MAX_NAME_BYTES),
        ("run", MAX_NAME_BYTES),
        ("prompt", MAX_PROMPT_BYTES),
    ] {
        let text = fields[key].as_str().unwrap();
        assert!(text.len() <= max, "{key}: {}", text.len());
        assert!(text.ends_with(CUT_MARKER), "{key}");
    }
    let detail = serde_json::to_string(&fields["detail"]).unwrap();
    assert!(detail.len() <= MAX_DETAIL_BYTES, "{}", detail.len());
    assert!(fields["detail"]["cut"]
        .as_str()
        .unwrap()
        .starts_with("{\"projects\":[\"team-"));
    // Short ones are left alone.
    assert_eq!(cut("short", MAX_NAME_BYTES), "short");
    assert_eq!(
        cut(&"b".repeat(MAX_NAME_BYTES), MAX_NAME_BYTES).len(),
        MAX_NAME_BYTES
    );
}

#[test]
fn a_full_queue_drops_and_counts_without_blocking() {
    let counter = counter();
    // No writer drains this queue: it fills.
    let (audit, queue, _load) = Audit::queue(false, counter.clone(), (2, usize::MAX));
    for _ in 0..5 {
        audit.record(alice());
    }
    assert_eq!(queue.try_iter().count(), 2);
    assert_eq!(count(&counter, "dropped"), 3);
}

#[test]
fn the_queue_is_bounded_in_bytes_too() {
    let counter = counter();
    let (audit, queue, load) = Audit::queue(true, counter.clone(), (1000, 100_000));
    for _ in 0..10 {
        audit.record(Entry::new(Action::Prompt).prompt(&"x".repeat(30_000)));
    }
    let queued: Vec<(Entry, usize)> = queue.try_iter().collect();
    assert_eq!(queued.len(), 3, "three prompts of 30 kB fit in 100 kB");
    assert_eq!(count(&counter, "dropped"), 7);
    // What the writer takes makes room again.
    for (_, bytes) in &queued {
        load.release(*bytes);
    }
    audit.record(alice());
    assert_eq!(queue.try_iter().count(), 1);
}

#[test]
fn a_disabled_audit_records_nothing_and_a_closed_one_counts_drops() {
    let disabled = Audit::disabled();
    disabled.record(alice());
    assert!(!disabled.enabled() && !disabled.wants_prompts());
    assert!(disabled.close(WAIT));

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let counter = counter();
    let audit = Audit::start(&settings(&path), counter.clone(), None).unwrap();
    assert!(audit.close(WAIT));
    audit.clone().record(alice());
    assert_eq!(count(&counter, "dropped"), 1);
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "");
}

#[test]
fn the_writer_rotates_and_keeps_every_line_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let line_len = {
        let (entry, _) = alice().seal(false);
        serde_json::to_vec(&entry.fields()).unwrap().len() + 1
    };
    let settings = AuditSettings {
        max_bytes: (line_len * 3) as u64,
        keep: 2,
        ..settings(&path)
    };
    let counter = counter();
    let audit = Audit::start(&settings, counter.clone(), None).unwrap();
    for i in 0..8 {
        audit.record(alice().run(&format!("r-{i}")));
    }
    assert!(audit.close(WAIT));
    assert_eq!(count(&counter, "written"), 8);
    // 8 lines, 3 per file: r-6 r-7 in FILE, r-3..5 in FILE.1, r-0..2 in FILE.2.
    let runs = |p: &Path| -> Vec<String> {
        lines(p)
            .iter()
            .map(|l| l["run"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(runs(&path), ["r-6", "r-7"]);
    assert_eq!(runs(&numbered(&path, 1)), ["r-3", "r-4", "r-5"]);
    assert_eq!(runs(&numbered(&path, 2)), ["r-0", "r-1", "r-2"]);
    assert!(!numbered(&path, 3).exists());
    for p in [path.clone(), numbered(&path, 1), numbered(&path, 2)] {
        assert!(std::fs::metadata(&p).unwrap().len() <= settings.max_bytes);
    }
}

#[test]
fn start_refuses_a_symbolic_link_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    std::os::unix::fs::symlink("/etc/passwd", &path).unwrap();
    let err = Audit::start(&settings(&path), counter(), None).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("cannot open the audit log "), "{text}");
    assert!(text.contains("symbolic link"), "{text}");
}

#[test]
fn debug_output_leaves_the_prompt_out() {
    let entry = Entry::new(Action::Prompt).prompt("my secret plan");
    let text = format!("{entry:?}");
    assert!(
        !text.contains("secret plan") && text.contains("prompt_bytes"),
        "{text}"
    );
}

#[test]
fn a_link_put_at_the_name_fails_entries_and_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.jsonl");
    let target = dir.path().join("target");
    std::fs::write(&target, "").unwrap();
    let counter = counter();
    let audit = Audit::start(&settings(&path), counter.clone(), None).unwrap();
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    audit.record(alice());
    assert!(audit.close(WAIT));
    assert_eq!(count(&counter, "failed"), 1);
    assert_eq!(count(&counter, "written"), 0);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "");
}
