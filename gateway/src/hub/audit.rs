//! What the hub writes to the audit log: the actions clients take on the
//! project's agent — prompts, aborts, clears, compactions, mode changes,
//! permission answers, as the project's dialect names them
//! ([`DialectRules::audited`](crate::dialect::DialectRules::audited)) —
//! with the client's identity and address, the project and the run, and
//! the prompts refused before the agent saw them.
//!
//! A request that may start a run (a prompt, a compaction) is recorded at
//! the agent's first answer, which names the run it started or queued
//! (held until then in `Hub::audit_held`, bounded by the requests in
//! flight); everything else when it is passed to the agent, with the run
//! in flight.

use serde_json::{Map, Value};

use super::actor::Hub;
use super::client_id::ClientId;
use super::gateway_id::GatewayId;
use super::runs::{Answer, Claim, RunId};
use crate::audit::{Action, Entry, Outcome};
use crate::dialect::Audited;

/// An entry for a request on its way to the agent.
pub(super) struct Drafted {
    entry: Entry,
    /// Recorded at the agent's first answer, with the run it names.
    held: bool,
}

impl Hub {
    /// What `frame` (a client's, for `command`) is to the audit log, when
    /// the log is on and records it.
    fn audited(&self, command: &str, frame: &Map<String, Value>) -> Option<Audited> {
        let audit = &self.settings.audit;
        if !audit.enabled() {
            return None;
        }
        let rules = self.settings.dialect.rules();
        rules.audited(command, frame, audit.wants_prompts())
    }

    /// `audited`, done by `client` on this project; `None` once the client
    /// is gone.
    fn client_entry(&self, client: ClientId, audited: Audited) -> Option<Entry> {
        let who = self.clients.get(client)?;
        let mut entry = Entry::new(audited.action)
            .by(&who.who)
            .source(who.peer)
            .project(&self.project);
        for (key, value) in audited.detail {
            entry = entry.detail(key, value);
        }
        if let Some(text) = audited.prompt {
            entry = entry.prompt(&text);
        }
        Some(entry)
    }

    /// Records `entry` with the run in flight, if any.
    fn record_in_run(&self, entry: Entry) {
        let entry = match self.runs.active() {
            Some(run) => entry.run(run.id.as_str()),
            None => entry,
        };
        self.settings.audit.record(entry);
    }

    /// The entry for a request of `client` about to go to the agent
    /// (`claim`: what it may do to runs), if the log records it.
    pub(super) fn audit_request(
        &self,
        client: ClientId,
        command: &str,
        frame: &Map<String, Value>,
        claim: Claim,
    ) -> Option<Drafted> {
        let audited = self.audited(command, frame)?;
        let starts_runs = matches!(claim, Claim::May | Claim::Join | Claim::Input);
        let held = starts_runs && matches!(audited.action, Action::Prompt | Action::Compact);
        let entry = self.client_entry(client, audited)?;
        Some(Drafted { entry, held })
    }

    /// The request went to the agent as `gid`.
    pub(super) fn audit_sent(&mut self, gid: GatewayId, drafted: Option<Drafted>) {
        match drafted {
            Some(drafted) if drafted.held => {
                self.audit_held.insert(gid, drafted.entry);
            }
            other => self.audit_passed(other),
        }
    }

    /// The frame went to the agent, and nothing answers it (a
    /// notification) or its answer adds nothing: recorded now.
    pub(super) fn audit_passed(&self, drafted: Option<Drafted>) {
        if let Some(drafted) = drafted {
            self.record_in_run(drafted.entry);
        }
    }

    /// The request did not go to the agent: the gateway answered it
    /// `error` itself.
    pub(super) fn audit_not_sent(&self, drafted: Option<Drafted>, error: &str) {
        if let Some(drafted) = drafted {
            let entry = drafted.entry.outcome(Outcome::Error).detail("error", error);
            self.settings.audit.record(entry);
        }
    }

    /// The agent answered request `gid` (`answer`: what it says of runs;
    /// `run`: the run it names): a held prompt is recorded now.
    pub(super) fn audit_answered(&mut self, gid: GatewayId, answer: Answer, run: Option<&RunId>) {
        let Some(mut entry) = self.audit_held.remove(&gid) else {
            return;
        };
        if let Some(run) = run {
            entry = entry.run(run.as_str());
        }
        if answer == Answer::NoRun {
            entry = entry.outcome(Outcome::Error);
        }
        self.settings.audit.record(entry);
    }

    /// The agent will answer nothing held (it is gone): each is recorded
    /// as failed with `error`.
    pub(super) fn audit_unanswered(&mut self, error: &str) {
        let mut held: Vec<Entry> = self.audit_held.drain().map(|(_, entry)| entry).collect();
        held.sort_by_key(Entry::time);
        for entry in held {
            let entry = entry.outcome(Outcome::Error).detail("error", error);
            self.settings.audit.record(entry);
        }
    }

    /// A client's answer to the agent's request `command` (an ACP
    /// permission answer), passed on: recorded now, with the run in
    /// flight.
    pub(super) fn audit_now(&self, client: ClientId, command: &str, frame: &Map<String, Value>) {
        let entry = self
            .audited(command, frame)
            .and_then(|audited| self.client_entry(client, audited));
        if let Some(entry) = entry {
            self.record_in_run(entry);
        }
    }

    /// A request of `client` refused before the agent saw it (a prompt
    /// over its identity's rate limit or budget): `refused`, with the
    /// request's action and the `reason`.
    pub(super) fn audit_refused(
        &self,
        client: ClientId,
        command: &str,
        frame: &Map<String, Value>,
        reason: &str,
    ) {
        let Some(mut audited) = self.audited(command, frame) else {
            return;
        };
        let request = std::mem::replace(&mut audited.action, Action::Refused);
        audited.detail.push(("request", request.as_str().into()));
        let entry = self.client_entry(client, audited);
        if let Some(entry) = entry.map(|entry| entry.refused(reason)) {
            self.record_in_run(entry);
        }
    }
}
