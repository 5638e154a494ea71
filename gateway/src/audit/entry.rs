//! One audit entry ([`Entry`]): who did what, from where, on which project
//! and run, and how it ended, built in one line at the call site and
//! written as one JSON object per line. Every string is bounded
//! ([`MAX_NAME_BYTES`], [`MAX_DETAIL_BYTES`], [`MAX_PROMPT_BYTES`]) and cut
//! with [`CUT_MARKER`], so no client can make a huge line. An entry never
//! holds a credential: the actor is a token's *name* or a JWT's `sub`.

use std::net::IpAddr;
use std::time::SystemTime;

use serde_json::{Map, Value};

/// Most bytes of the actor, project and run id.
pub const MAX_NAME_BYTES: usize = 128;
/// Most bytes of `detail`, serialised; a larger one is replaced by
/// `{"cut": "<its JSON, cut>"}`.
pub const MAX_DETAIL_BYTES: usize = 4 << 10;
/// Most bytes of a prompt's text (with `--audit-prompts`).
pub const MAX_PROMPT_BYTES: usize = 64 << 10;
/// What ends a string that was cut to its bound.
pub const CUT_MARKER: &str = "…[cut]";
/// The actor of the gateway's own actions.
pub const GATEWAY_ACTOR: &str = "gateway";

/// What happened; written snake_case (`session_opened`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    SessionOpened,
    SessionClosed,
    Prompt,
    Abort,
    Clear,
    Compact,
    ModeChange,
    /// `detail.option`: the option the client chose.
    PermissionAnswered,
    AdminStart,
    AdminStop,
    AdminRestart,
    AdminAbort,
    /// `detail`: the token's role, projects and expiry (never its secret).
    TokenCreated,
    TokenRevoked,
    /// `detail.limit_usd`: the new limit (or `reset`).
    BudgetChanged,
    /// Something was refused; `detail.reason` says why.
    Refused,
    EgressChanged,
}

impl Action {
    /// Every action, for docs and tests.
    pub const ALL: [Action; 17] = [
        Action::SessionOpened,
        Action::SessionClosed,
        Action::Prompt,
        Action::Abort,
        Action::Clear,
        Action::Compact,
        Action::ModeChange,
        Action::PermissionAnswered,
        Action::AdminStart,
        Action::AdminStop,
        Action::AdminRestart,
        Action::AdminAbort,
        Action::TokenCreated,
        Action::TokenRevoked,
        Action::BudgetChanged,
        Action::Refused,
        Action::EgressChanged,
    ];

    /// The name written in `action`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::SessionOpened => "session_opened",
            Action::SessionClosed => "session_closed",
            Action::Prompt => "prompt",
            Action::Abort => "abort",
            Action::Clear => "clear",
            Action::Compact => "compact",
            Action::ModeChange => "mode_change",
            Action::PermissionAnswered => "permission_answered",
            Action::AdminStart => "admin_start",
            Action::AdminStop => "admin_stop",
            Action::AdminRestart => "admin_restart",
            Action::AdminAbort => "admin_abort",
            Action::TokenCreated => "token_created",
            Action::TokenRevoked => "token_revoked",
            Action::BudgetChanged => "budget_changed",
            Action::Refused => "refused",
            Action::EgressChanged => "egress_changed",
        }
    }
}

/// Where the actor's identity came from (`actor_kind`): the kinds of
/// [`crate::access::Kind`] (see `audit::identity`), and the gateway.
/// They are told apart because they end differently: a static token with
/// the configuration, a managed one when revoked, a JWT when it expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActorKind {
    /// A token of the flags and variables (`--token`, `CORRAL_TOKENS`, …).
    Static,
    /// A `[[token]]` of the config file.
    Configured,
    /// A token made through `POST /v1/tokens`.
    Managed,
    /// A signed token; the actor is its `sub`.
    Jwt,
    /// The gateway itself (idle stops, crash loops, expiries).
    Gateway,
}

impl ActorKind {
    /// Every kind, for docs and tests.
    pub const ALL: [ActorKind; 5] = [
        ActorKind::Static,
        ActorKind::Configured,
        ActorKind::Managed,
        ActorKind::Jwt,
        ActorKind::Gateway,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ActorKind::Static => "static",
            ActorKind::Configured => "configured",
            ActorKind::Managed => "managed",
            ActorKind::Jwt => "jwt",
            ActorKind::Gateway => "gateway",
        }
    }
}

/// How the action ended (`outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    Refused,
    Error,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Refused => "refused",
            Outcome::Error => "error",
        }
    }
}

/// One line of the audit log. Built with [`Entry::new`] and the builder
/// methods, e.g. `Entry::new(Action::Prompt).by(&identity).source(ip)
/// .project(p)` (or `.actor(name, kind)`); an entry without an actor is
/// the gateway's own. The time is taken by [`Entry::new`].
#[derive(Clone, PartialEq)]
pub struct Entry {
    time: SystemTime,
    actor: String,
    actor_kind: ActorKind,
    source: Option<IpAddr>,
    action: Action,
    project: Option<String>,
    run: Option<String>,
    outcome: Outcome,
    detail: Map<String, Value>,
    prompt: Option<String>,
}

impl Entry {
    /// `action`, now, by the gateway, `ok`.
    pub fn new(action: Action) -> Entry {
        Entry {
            time: SystemTime::now(),
            actor: GATEWAY_ACTOR.to_string(),
            actor_kind: ActorKind::Gateway,
            source: None,
            action,
            project: None,
            run: None,
            outcome: Outcome::Ok,
            detail: Map::new(),
            prompt: None,
        }
    }

    /// Who did it: a token's name or a JWT's `sub`, never a secret.
    pub fn actor(mut self, name: &str, kind: ActorKind) -> Entry {
        self.actor = cut(name, MAX_NAME_BYTES);
        self.actor_kind = kind;
        self
    }

    /// The client's address (after trusted proxies), if known.
    pub fn source(mut self, ip: impl Into<Option<IpAddr>>) -> Entry {
        self.source = ip.into().map(|ip| ip.to_canonical());
        self
    }

    pub fn project(mut self, project: &str) -> Entry {
        self.project = Some(cut(project, MAX_NAME_BYTES));
        self
    }

    pub fn run(mut self, run: &str) -> Entry {
        self.run = Some(cut(run, MAX_NAME_BYTES));
        self
    }

    pub fn outcome(mut self, outcome: Outcome) -> Entry {
        self.outcome = outcome;
        self
    }

    /// `refused`, with `detail.reason` (e.g. `out_of_scope`).
    pub fn refused(self, reason: &str) -> Entry {
        self.outcome(Outcome::Refused).detail("reason", reason)
    }

    /// Adds `key` to `detail` (small values only: the whole is cut at
    /// [`MAX_DETAIL_BYTES`]). Never a secret.
    pub fn detail(mut self, key: &str, value: impl Into<Value>) -> Entry {
        self.detail.insert(key.to_string(), value.into());
        self
    }

    /// The prompt's text, cut at [`MAX_PROMPT_BYTES`]; kept only when the
    /// audit was started with `--audit-prompts` (ask
    /// [`super::Audit::wants_prompts`] before extracting it).
    pub fn prompt(mut self, text: &str) -> Entry {
        self.prompt = Some(cut(text, MAX_PROMPT_BYTES));
        self
    }

    /// When it happened.
    pub fn time(&self) -> SystemTime {
        self.time
    }

    pub fn action(&self) -> Action {
        self.action
    }

    /// The entry as it is queued: without its prompt unless `prompts`,
    /// its detail cut to its bound; and the bytes it holds, for the
    /// queue's bound.
    pub(super) fn seal(mut self, prompts: bool) -> (Entry, usize) {
        if !prompts {
            self.prompt = None;
        }
        let mut detail_bytes = 0;
        if !self.detail.is_empty() {
            let text = serde_json::to_string(&self.detail).unwrap_or_default();
            if text.len() > MAX_DETAIL_BYTES {
                // JSON escaping at most doubles the cut text; room is left
                // for `{"cut":""}`.
                let kept = cut(&text, (MAX_DETAIL_BYTES - 32) / 2);
                self.detail = Map::from_iter([("cut".to_string(), Value::String(kept))]);
            }
            detail_bytes = text.len().min(MAX_DETAIL_BYTES);
        }
        let held = std::mem::size_of::<Entry>()
            + self.actor.len()
            + self.project.as_ref().map_or(0, String::len)
            + self.run.as_ref().map_or(0, String::len)
            + self.prompt.as_ref().map_or(0, String::len)
            + detail_bytes;
        (self, held)
    }

    /// The entry's fields in the order they are written; absent optional
    /// fields are left out.
    pub fn fields(&self) -> Map<String, Value> {
        let mut out = Map::new();
        out.insert("time".into(), rfc3339_millis(self.time).into());
        out.insert("actor".into(), self.actor.clone().into());
        out.insert("actor_kind".into(), self.actor_kind.as_str().into());
        if let Some(source) = self.source {
            out.insert("source".into(), source.to_string().into());
        }
        out.insert("action".into(), self.action.as_str().into());
        if let Some(project) = &self.project {
            out.insert("project".into(), project.clone().into());
        }
        if let Some(run) = &self.run {
            out.insert("run".into(), run.clone().into());
        }
        out.insert("outcome".into(), self.outcome.as_str().into());
        if !self.detail.is_empty() {
            out.insert("detail".into(), Value::Object(self.detail.clone()));
        }
        if let Some(prompt) = &self.prompt {
            out.insert("prompt".into(), prompt.clone().into());
        }
        out
    }
}

/// Without the prompt's text, which is the user's, not the log's.
impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("action", &self.action)
            .field("actor", &self.actor)
            .field("actor_kind", &self.actor_kind)
            .field("source", &self.source)
            .field("project", &self.project)
            .field("run", &self.run)
            .field("outcome", &self.outcome)
            .field("detail", &self.detail)
            .field("prompt_bytes", &self.prompt.as_ref().map(String::len))
            .finish()
    }
}

/// `text` if it has at most `max` bytes, else its longest prefix that
/// fits with [`CUT_MARKER`] after it (cut on a character boundary).
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(CUT_MARKER.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{CUT_MARKER}", &text[..end])
}

/// `2026-12-01T09:30:00.123Z`: RFC 3339, UTC, milliseconds.
pub fn rfc3339_millis(time: SystemTime) -> String {
    let t = time::OffsetDateTime::from(time);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.millisecond()
    )
}
