//! Each dialect's [`DialectRules::audited`](super::DialectRules::audited):
//! which client frames the audit log records, as what, with which
//! details, and a prompt's text only when asked for.

use serde_json::{json, Map, Value};

use super::{Audited, Dialect};
use crate::audit::Action;

fn frame(value: Value) -> Map<String, Value> {
    value.as_object().unwrap().clone()
}

/// `(dialect, command, frame)` as the audit log reads it, with the text.
fn read(dialect: &str, command: &str, value: Value) -> Option<Audited> {
    let rules = Dialect::named(dialect).unwrap().rules();
    rules.audited(command, &frame(value), true)
}

fn action(dialect: &str, command: &str, value: Value) -> Option<Action> {
    read(dialect, command, value).map(|a| a.action)
}

#[test]
fn every_dialect_names_its_prompts_aborts_and_changes() {
    let rows: &[(&str, &str, Value, Option<Action>)] = &[
        (
            "zut",
            "prompt",
            json!({"type": "prompt", "message": "hi"}),
            Some(Action::Prompt),
        ),
        (
            "zut",
            "abort",
            json!({"type": "abort"}),
            Some(Action::Abort),
        ),
        (
            "zut",
            "clear",
            json!({"type": "clear"}),
            Some(Action::Clear),
        ),
        (
            "zut",
            "compact",
            json!({"type": "compact"}),
            Some(Action::Compact),
        ),
        ("zut", "get_state", json!({"type": "get_state"}), None),
        (
            "letscode",
            "steer",
            json!({"cmd": "steer", "text": "t"}),
            Some(Action::Prompt),
        ),
        (
            "letscode",
            "reset",
            json!({"cmd": "reset"}),
            Some(Action::Clear),
        ),
        (
            "letscode",
            "abort",
            json!({"cmd": "abort"}),
            Some(Action::Abort),
        ),
        (
            "zi",
            "session.interrupt",
            json!({"method": "session.interrupt"}),
            Some(Action::Abort),
        ),
        (
            "zi",
            "command.invoke",
            json!({"method": "command.invoke", "params": {"name": "compact"}}),
            Some(Action::Compact),
        ),
        (
            "zi",
            "command.invoke",
            json!({"method": "command.invoke", "params": {"name": "review"}}),
            None,
        ),
        (
            "zi",
            "session.get_state",
            json!({"method": "session.get_state"}),
            None,
        ),
        (
            "acp",
            "session/cancel",
            json!({"method": "session/cancel"}),
            Some(Action::Abort),
        ),
        (
            "acp",
            "session/load",
            json!({"method": "session/load"}),
            None,
        ),
    ];
    for (dialect, command, value, expected) in rows {
        assert_eq!(
            action(dialect, command, value.clone()),
            *expected,
            "{dialect} {command}"
        );
    }
}

#[test]
fn a_prompt_keeps_its_text_only_when_asked() {
    let prompts = [
        (
            "zut",
            "prompt",
            json!({"type": "prompt", "message": "fix it"}),
        ),
        (
            "letscode",
            "prompt",
            json!({"cmd": "prompt", "text": "fix it"}),
        ),
        (
            "zi",
            "session.prompt",
            json!({"method": "session.prompt", "params": {"text": "fix it", "delivery": "direct"}}),
        ),
        (
            "acp",
            "session/prompt",
            json!({"method": "session/prompt", "params": {"prompt": [
                {"type": "text", "text": "fix it"},
                {"type": "image", "data": "…"}
            ]}}),
        ),
    ];
    for (dialect, command, value) in prompts {
        let rules = Dialect::named(dialect).unwrap().rules();
        let with = rules.audited(command, &frame(value.clone()), true).unwrap();
        assert_eq!(with.action, Action::Prompt, "{dialect}");
        assert_eq!(with.prompt.as_deref(), Some("fix it"), "{dialect}");
        let without = rules.audited(command, &frame(value), false).unwrap();
        assert_eq!(without.prompt, None, "{dialect}");
    }
    let steer = read(
        "letscode",
        "follow_up",
        json!({"cmd": "follow_up", "text": "x"}),
    )
    .unwrap();
    assert_eq!(steer.detail, [("delivery", json!("follow_up"))]);
}

#[test]
fn mode_changes_and_permission_answers_say_which() {
    let mode = read(
        "zut",
        "set_permission_mode",
        json!({"type": "set_permission_mode", "mode": "ask"}),
    )
    .unwrap();
    assert_eq!(
        (mode.action, mode.detail),
        (Action::ModeChange, vec![("mode", json!("ask"))])
    );
    let reply = json!({"type": "permission_reply", "request_id": "perm-1", "option": "allow_once"});
    let reply = read("zut", "permission_reply", reply).unwrap();
    assert_eq!(
        (reply.action, reply.detail),
        (
            Action::PermissionAnswered,
            vec![("option", json!("allow_once"))]
        )
    );
    let mode =
        json!({"method": "session/set_mode", "params": {"sessionId": "s", "modeId": "code"}});
    let mode = read("acp", "session/set_mode", mode).unwrap();
    assert_eq!(
        (mode.action, mode.detail),
        (Action::ModeChange, vec![("mode", json!("code"))])
    );
    let ask = "session/request_permission";
    let option = |answer: Value| read("acp", ask, answer).unwrap().detail;
    let selected = json!({"id": "a-1", "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}});
    assert_eq!(option(selected), [("option", json!("allow-once"))]);
    let cancelled = json!({"id": "a-1", "result": {"outcome": {"outcome": "cancelled"}}});
    assert_eq!(option(cancelled), [("option", json!("cancelled"))]);
    let failed = json!({"id": "a-1", "error": {"code": -32603, "message": "no"}});
    assert_eq!(option(failed), [("option", json!("error"))]);
    // A value that is not a string is not kept.
    let odd = read(
        "zut",
        "permission_reply",
        json!({"type": "permission_reply", "option": {"x": 1}}),
    );
    assert_eq!(odd.unwrap().detail, []);
}
