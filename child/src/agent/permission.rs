//! The permission gate, the one place that decides whether a tool call may
//! run: under the session's [`PermissionMode`], calls that write files
//! (`write`, `edit`) or run commands (`bash`) run (`auto`), wait for the
//! client's answer (`ask`) or are refused (`read-only`). MCP tools (another
//! program acting) always ask under `ask`, and under `read-only` run only
//! when their server marks them `readOnlyHint`. Answers given as
//! `*_always` hold for the rest of the session, per kind of call (per tool
//! for MCP tools, whose names say server and tool). Pure state; the turn
//! loop does the waiting and the front-ends the wire.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

pub use corral_protocol::permission::{PermissionMode, PermissionOption};
use serde_json::Value;
use tokio::sync::oneshot;

/// What a gated call would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Risk {
    /// Changes files (`write`, `edit`).
    Edit,
    /// Runs a command (`bash`).
    Execute,
    /// Has an MCP server act (`mcp__SERVER__TOOL`).
    External,
}

/// How the gate treats a tool.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// Only looks (`read`, `ls`, …): never gated.
    Free,
    /// A built-in tool that edits or runs.
    Gated(Risk),
    /// An MCP tool; `read_only` when its server marks it `readOnlyHint`.
    External { read_only: bool },
}

impl Class {
    /// The class of the built-in tool `tool`.
    pub fn of(tool: &str) -> Class {
        Risk::of(tool).map_or(Class::Free, Class::Gated)
    }
}

/// What a `*_always` answer is remembered for.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Remembered {
    /// Every call of a built-in kind.
    Kind(Risk),
    /// One MCP tool (server and tool).
    Tool(String),
}

impl Risk {
    /// The risk of calling `tool`; `None` for tools that only look.
    pub fn of(tool: &str) -> Option<Risk> {
        match tool {
            "write" | "edit" => Some(Risk::Edit),
            "bash" => Some(Risk::Execute),
            _ => None,
        }
    }

    /// The wire name (ACP's tool kind): `edit`, `execute` or `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Edit => "edit",
            Risk::Execute => "execute",
            Risk::External => "other",
        }
    }

    fn doing(self) -> &'static str {
        match self {
            Risk::Edit => "changes files",
            Risk::Execute => "runs a command",
            Risk::External => "is an MCP tool its server does not mark read-only (readOnlyHint)",
        }
    }
}

/// A call waiting for the client's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct PermissionAsk {
    /// The request's id, unique in the process (`perm-N`).
    pub id: String,
    /// The tool call it is about.
    pub call_id: String,
    pub tool: String,
    pub args: Value,
    pub risk: Risk,
}

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Selected(PermissionOption),
    /// The run was cancelled (or the agent is stopping) before an answer.
    Cancelled,
}

impl Outcome {
    /// The wire name: an option's, or `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Selected(option) => option.as_str(),
            Outcome::Cancelled => corral_protocol::permission::CANCELLED,
        }
    }
}

/// The gate's verdict on one call.
#[derive(Debug)]
pub enum Gate {
    Allow,
    /// Not run; the text is the tool error the model sees.
    Refuse(String),
    /// Ask the client, then wait for the answer on the receiver.
    Ask(PermissionAsk, oneshot::Receiver<Outcome>),
}

/// An answer to a request that is not waiting (unknown, or answered).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no permission request {0:?} is waiting for an answer")]
pub struct NotWaiting(pub String);

/// The session's permission state.
#[derive(Debug, Default)]
pub struct Permissions {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    mode: PermissionMode,
    /// `*_always` answers: whether calls of a kind (or an MCP tool) are
    /// allowed.
    remembered: HashMap<Remembered, bool>,
    /// Requests not yet answered, by id.
    waiting: HashMap<String, (Remembered, oneshot::Sender<Outcome>)>,
    /// Requests made so far; the next id's number.
    asked: u64,
}

impl Permissions {
    pub fn new(mode: PermissionMode) -> Permissions {
        Permissions {
            inner: Mutex::new(Inner {
                mode,
                ..Inner::default()
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn mode(&self) -> PermissionMode {
        self.lock().mode
    }

    /// Changes the mode. Requests waiting are settled by the new mode:
    /// allowed under `auto`, rejected under `read-only`, left waiting
    /// under `ask`.
    pub fn set_mode(&self, mode: PermissionMode) {
        let mut inner = self.lock();
        inner.mode = mode;
        let settle = match mode {
            PermissionMode::Auto => PermissionOption::AllowOnce,
            PermissionMode::ReadOnly => PermissionOption::RejectOnce,
            PermissionMode::Ask => return,
        };
        for (_, (_, reply)) in inner.waiting.drain() {
            let _ = reply.send(Outcome::Selected(settle));
        }
    }

    /// Decides on a call of the built-in tool `tool` with `args` (tool
    /// call `call_id`).
    pub fn check(&self, call_id: &str, tool: &str, args: &Value) -> Gate {
        self.check_class(call_id, tool, Class::of(tool), args)
    }

    /// Decides on a call of `tool`, of class `class`, with `args`.
    pub fn check_class(&self, call_id: &str, tool: &str, class: Class, args: &Value) -> Gate {
        let (risk, read_only, key) = match class {
            Class::Free => return Gate::Allow,
            Class::Gated(risk) => (risk, false, Remembered::Kind(risk)),
            Class::External { read_only } => (
                Risk::External,
                read_only,
                Remembered::Tool(tool.to_string()),
            ),
        };
        let mut inner = self.lock();
        match inner.mode {
            PermissionMode::Auto => Gate::Allow,
            PermissionMode::ReadOnly if read_only => Gate::Allow,
            PermissionMode::ReadOnly => Gate::Refuse(format!(
                "refused: the permission mode is read-only and `{tool}` {}; ask the user to \
                 switch the mode to ask or auto if this is needed",
                risk.doing()
            )),
            PermissionMode::Ask => match inner.remembered.get(&key) {
                Some(true) => Gate::Allow,
                Some(false) => Gate::Refuse(rejected(tool, true)),
                None => {
                    inner.asked += 1;
                    let id = format!("perm-{}", inner.asked);
                    let (reply, answer) = oneshot::channel();
                    inner.waiting.insert(id.clone(), (key, reply));
                    let ask = PermissionAsk {
                        id,
                        call_id: call_id.to_string(),
                        tool: tool.to_string(),
                        args: args.clone(),
                        risk,
                    };
                    Gate::Ask(ask, answer)
                }
            },
        }
    }

    /// The client's answer to request `id`; a `*_always` answer is
    /// remembered for the request's kind of call.
    pub fn answer(&self, id: &str, option: PermissionOption) -> Result<(), NotWaiting> {
        let mut inner = self.lock();
        let (key, reply) = inner
            .waiting
            .remove(id)
            .ok_or_else(|| NotWaiting(id.to_string()))?;
        if option.remembered() {
            inner.remembered.insert(key, option.allows());
        }
        let _ = reply.send(Outcome::Selected(option));
        Ok(())
    }

    /// The client answered `cancelled` (it gave up on the request).
    pub fn cancel(&self, id: &str) -> Result<(), NotWaiting> {
        let (_, reply) = self
            .lock()
            .waiting
            .remove(id)
            .ok_or_else(|| NotWaiting(id.to_string()))?;
        let _ = reply.send(Outcome::Cancelled);
        Ok(())
    }

    /// Forgets request `id` (its run stopped waiting).
    pub fn withdraw(&self, id: &str) {
        self.lock().waiting.remove(id);
    }
}

/// The tool error of a call the client rejected.
pub fn rejected(tool: &str, remembered: bool) -> String {
    if remembered {
        format!(
            "refused: the user rejected calls like this `{tool}` call for the rest of the session"
        )
    } else {
        format!("refused: the user rejected this `{tool}` call")
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ask(permissions: &Permissions, tool: &str) -> (PermissionAsk, oneshot::Receiver<Outcome>) {
        match permissions.check("c", tool, &json!({})) {
            Gate::Ask(ask, answer) => (ask, answer),
            other => panic!("{tool}: not asked: {other:?}"),
        }
    }

    #[test]
    fn auto_allows_and_read_only_refuses_only_risky_tools() {
        let auto = Permissions::new(PermissionMode::Auto);
        let read_only = Permissions::new(PermissionMode::ReadOnly);
        for tool in [
            "read", "ls", "find", "grep", "plan", "write", "edit", "bash",
        ] {
            assert!(matches!(auto.check("c", tool, &json!({})), Gate::Allow));
            let verdict = read_only.check("c", tool, &json!({}));
            match Risk::of(tool) {
                None => assert!(matches!(verdict, Gate::Allow), "{tool}"),
                Some(_) => {
                    let Gate::Refuse(message) = verdict else {
                        panic!("{tool} not refused")
                    };
                    assert!(message.contains("read-only") && message.contains(tool));
                }
            }
        }
    }

    #[tokio::test]
    async fn ask_waits_for_the_answer_and_once_is_not_remembered() {
        let permissions = Permissions::new(PermissionMode::Ask);
        assert!(matches!(
            permissions.check("c", "read", &json!({})),
            Gate::Allow
        ));
        let (first, answer) = ask(&permissions, "bash");
        assert_eq!((first.id.as_str(), first.risk), ("perm-1", Risk::Execute));
        permissions
            .answer(&first.id, PermissionOption::AllowOnce)
            .unwrap();
        assert_eq!(
            answer.await.unwrap(),
            Outcome::Selected(PermissionOption::AllowOnce)
        );
        assert_eq!(
            permissions.answer(&first.id, PermissionOption::AllowOnce),
            Err(NotWaiting("perm-1".into())),
            "answered once"
        );
        let (second, answer) = ask(&permissions, "bash");
        assert_eq!(second.id, "perm-2");
        permissions
            .answer(&second.id, PermissionOption::RejectOnce)
            .unwrap();
        assert_eq!(
            answer.await.unwrap(),
            Outcome::Selected(PermissionOption::RejectOnce)
        );
        ask(&permissions, "bash");
    }

    #[test]
    fn always_is_remembered_per_kind() {
        let permissions = Permissions::new(PermissionMode::Ask);
        let (edit, _answer) = ask(&permissions, "write");
        permissions
            .answer(&edit.id, PermissionOption::AllowAlways)
            .unwrap();
        assert!(matches!(
            permissions.check("c", "edit", &json!({})),
            Gate::Allow
        ));
        let (run, _answer) = ask(&permissions, "bash");
        permissions
            .answer(&run.id, PermissionOption::RejectAlways)
            .unwrap();
        let Gate::Refuse(message) = permissions.check("c", "bash", &json!({})) else {
            panic!("not refused")
        };
        assert!(message.contains("rest of the session"), "{message}");
    }

    #[test]
    fn mcp_tools_ask_always_pass_read_only_when_marked_and_are_remembered_per_tool() {
        let external = |read_only| Class::External { read_only };
        let auto = Permissions::new(PermissionMode::Auto);
        assert!(matches!(
            auto.check_class("c", "mcp__s__a", external(false), &json!({})),
            Gate::Allow
        ));
        let read_only = Permissions::new(PermissionMode::ReadOnly);
        assert!(matches!(
            read_only.check_class("c", "mcp__s__echo", external(true), &json!({})),
            Gate::Allow
        ));
        let Gate::Refuse(message) =
            read_only.check_class("c", "mcp__s__write", external(false), &json!({}))
        else {
            panic!("not refused")
        };
        assert!(
            message.contains("readOnlyHint") && message.contains("mcp__s__write"),
            "{message}"
        );

        let ask = Permissions::new(PermissionMode::Ask);
        let Gate::Ask(first, _answer) =
            ask.check_class("c", "mcp__s__echo", external(true), &json!({}))
        else {
            panic!("read-only MCP tools are asked about too")
        };
        assert_eq!(first.risk, Risk::External);
        ask.answer(&first.id, PermissionOption::AllowAlways)
            .unwrap();
        assert!(matches!(
            ask.check_class("c", "mcp__s__echo", external(true), &json!({})),
            Gate::Allow
        ));
        assert!(matches!(
            ask.check_class("c", "mcp__s__other", external(true), &json!({})),
            Gate::Ask(..)
        ));
        assert!(matches!(ask.check("c", "bash", &json!({})), Gate::Ask(..)));
    }

    #[tokio::test]
    async fn a_mode_change_settles_waiting_requests() {
        let permissions = Permissions::new(PermissionMode::Ask);
        let (_, answer) = ask(&permissions, "bash");
        permissions.set_mode(PermissionMode::Ask);
        permissions.set_mode(PermissionMode::ReadOnly);
        assert_eq!(
            answer.await.unwrap(),
            Outcome::Selected(PermissionOption::RejectOnce)
        );
        permissions.set_mode(PermissionMode::Ask);
        let (_, answer) = ask(&permissions, "edit");
        permissions.set_mode(PermissionMode::Auto);
        assert_eq!(
            answer.await.unwrap(),
            Outcome::Selected(PermissionOption::AllowOnce)
        );
        assert_eq!(permissions.mode(), PermissionMode::Auto);
    }

    #[tokio::test]
    async fn cancelled_and_withdrawn_requests_stop_waiting() {
        let permissions = Permissions::new(PermissionMode::Ask);
        let (first, answer) = ask(&permissions, "bash");
        permissions.cancel(&first.id).unwrap();
        assert_eq!(answer.await.unwrap(), Outcome::Cancelled);
        let (second, answer) = ask(&permissions, "bash");
        permissions.withdraw(&second.id);
        assert!(answer.await.is_err(), "the waiter is gone");
        assert!(permissions
            .answer(&second.id, PermissionOption::AllowOnce)
            .is_err());
    }
}
