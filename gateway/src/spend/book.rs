//! The accounting itself, without I/O: this gateway's own counts, the
//! other gateways' as last read, the admins' limits and resets, and the
//! answers built from them: is a budget spent ([`Book::check`]), which
//! budgets did a charge cross ([`Book::charge`]), what the admin API
//! shows ([`View`]) and what an admin change does ([`Book::apply`]).

use std::collections::{BTreeSet, HashMap};

use super::exhausted::{Exhausted, Payer, Scope};
use super::tally::{Entry, Limits, ProjectSpend, Source, Tally};

/// Identities whose credential budget is remembered for the admin API's
/// views; past it the memory starts afresh (the budgets themselves are
/// always the caller's to pass).
pub const MAX_REMEMBERED_IDENTITIES: usize = 100_000;

/// What changes with one admin request.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Change {
    pub limit: LimitChange,
    /// Start counting from zero again (the current total becomes the
    /// baseline).
    pub reset: bool,
}

/// What becomes of the limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LimitChange {
    /// As it is.
    Keep,
    /// The admin's limit: a number of USD, or `None` for unlimited.
    Set(Option<f64>),
    /// Back to the default (`--project-budget-usd`, the credential's).
    Default,
}

/// Where a budget's limit comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitFrom {
    /// `--project-budget-usd` (projects).
    Default,
    /// The credential's `budget_usd` (identities).
    Credential,
    /// An admin's override.
    Admin,
}

impl LimitFrom {
    pub fn label(self) -> &'static str {
        match self {
            LimitFrom::Default => "default",
            LimitFrom::Credential => "credential",
            LimitFrom::Admin => "admin",
        }
    }
}

/// One budget as the admin API shows it.
#[derive(Clone, Debug, PartialEq)]
pub struct View {
    pub scope: Scope,
    pub name: String,
    /// `None`: unlimited.
    pub limit_usd: Option<f64>,
    pub limit_from: LimitFrom,
    /// Spent since the last reset: what counts against the limit.
    pub spent_usd: f64,
    /// Spent since counting began.
    pub total_usd: f64,
    /// Projects: where the spend was read (`broker`, `agent`, `mixed`).
    pub source: Option<&'static str>,
    pub exhausted: bool,
}

/// The ledger's state.
#[derive(Debug)]
pub struct Book {
    /// `--project-budget-usd`.
    default_project_limit: Option<f64>,
    /// This gateway's counts (what its own file holds, plus what it has
    /// not written yet).
    own: Tally,
    /// The other gateways' counts, as last read from their files.
    others: Tally,
    /// The admins' overrides and baselines, as last read or written.
    limits: Limits,
    /// The budget each identity's credential carried when last seen.
    credential_limits: HashMap<String, Option<f64>>,
    /// The identity whose run is on each project now: the broker charges
    /// the project's model calls to it too.
    payers: HashMap<String, Payer>,
}

impl Book {
    pub fn new(default_project_limit: Option<f64>, own: Tally) -> Book {
        Book {
            default_project_limit,
            own,
            others: Tally::default(),
            limits: Limits::default(),
            credential_limits: HashMap::new(),
            payers: HashMap::new(),
        }
    }

    /// `--project-budget-usd`.
    pub fn default_project_limit(&self) -> Option<f64> {
        self.default_project_limit
    }

    /// The admins' settings in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    fn project_total(&self, project: &str) -> ProjectSpend {
        let (own, others) = (self.own.project(project), self.others.project(project));
        ProjectSpend {
            broker: own.broker + others.broker,
            agent: own.agent + others.agent,
        }
    }

    fn total(&self, scope: Scope, name: &str) -> f64 {
        match scope {
            Scope::Project => self.project_total(name).total(),
            Scope::Identity => self.own.identity(name) + self.others.identity(name),
        }
    }

    fn entry(&self, scope: Scope, name: &str) -> Option<&Entry> {
        match scope {
            Scope::Project => self.limits.projects.get(name),
            Scope::Identity => self.limits.identities.get(name),
        }
    }

    /// Spent since the last reset.
    fn spent(&self, scope: Scope, name: &str) -> f64 {
        let baseline = self.entry(scope, name).map_or(0.0, |e| e.baseline_usd);
        (self.total(scope, name) - baseline).max(0.0)
    }

    /// The limit in force and where it comes from; `credential` is an
    /// identity's own budget.
    fn limit(&self, scope: Scope, name: &str, credential: Option<f64>) -> (Option<f64>, LimitFrom) {
        if let Some(limit) = self.entry(scope, name).and_then(|e| e.limit_usd) {
            return (limit, LimitFrom::Admin);
        }
        match scope {
            Scope::Project => (self.default_project_limit, LimitFrom::Default),
            Scope::Identity => (credential, LimitFrom::Credential),
        }
    }

    /// The budget, if it is spent.
    fn exhausted(&self, scope: Scope, name: &str, credential: Option<f64>) -> Option<Exhausted> {
        let limit = self.limit(scope, name, credential).0?;
        let spent = self.spent(scope, name);
        (spent >= limit).then(|| Exhausted {
            scope,
            name: name.to_string(),
            limit_usd: limit,
            spent_usd: spent,
        })
    }

    fn remember(&mut self, payer: &Payer) {
        if self.credential_limits.get(&payer.name) == Some(&payer.budget_usd) {
            return;
        }
        if self.credential_limits.len() >= MAX_REMEMBERED_IDENTITIES {
            self.credential_limits.clear();
        }
        self.credential_limits
            .insert(payer.name.clone(), payer.budget_usd);
    }

    /// `Err` naming the first spent budget: the project's, then the
    /// identity's.
    pub fn check(&mut self, project: &str, payer: Option<&Payer>) -> Result<(), Exhausted> {
        if let Some(spent) = self.exhausted(Scope::Project, project, None) {
            return Err(spent);
        }
        if let Some(payer) = payer {
            self.remember(payer);
            if let Some(spent) = self.exhausted(Scope::Identity, &payer.name, payer.budget_usd) {
                return Err(spent);
            }
        }
        Ok(())
    }

    /// Counts `usd` for `project` and `payer`; returns the budgets this
    /// charge crossed (below their limit before, at or over it after).
    /// An amount that is not a positive number is ignored.
    pub fn charge(
        &mut self,
        project: &str,
        payer: Option<&Payer>,
        source: Source,
        usd: f64,
    ) -> Vec<Exhausted> {
        if !(usd.is_finite() && usd > 0.0) {
            return Vec::new();
        }
        let budgets: Vec<(Scope, &str, Option<f64>)> =
            std::iter::once((Scope::Project, project, None))
                .chain(payer.map(|p| (Scope::Identity, p.name.as_str(), p.budget_usd)))
                .collect();
        let before: Vec<bool> = budgets
            .iter()
            .map(|(scope, name, credential)| self.exhausted(*scope, name, *credential).is_some())
            .collect();
        if let Some(payer) = payer {
            self.remember(payer);
        }
        self.own
            .add(project, payer.map(|p| p.name.as_str()), source, usd);
        budgets
            .iter()
            .zip(before)
            .filter(|(_, was_spent)| !was_spent)
            .filter_map(|((scope, name, credential), _)| self.exhausted(*scope, name, *credential))
            .collect()
    }

    /// Sets the identity whose run is on `project` (`None`: no run).
    pub fn attribute(&mut self, project: &str, payer: Option<Payer>) {
        match payer {
            Some(payer) => {
                self.payers.insert(project.to_string(), payer);
            }
            None => {
                self.payers.remove(project);
            }
        }
    }

    pub fn payer_of(&self, project: &str) -> Option<Payer> {
        self.payers.get(project).cloned()
    }

    /// The other gateways' counts, freshly read; whether they changed.
    pub fn set_others(&mut self, others: Tally) -> bool {
        let changed = others != self.others;
        self.others = others;
        changed
    }

    /// The admins' settings, freshly read or written; whether they changed.
    pub fn set_limits(&mut self, limits: Limits) -> bool {
        let changed = limits != self.limits;
        self.limits = limits;
        changed
    }

    /// This gateway's counts (what its file is to hold).
    pub fn own(&self) -> Tally {
        self.own.clone()
    }

    /// `taken` went to another gateway with this one's file (which it
    /// took for a dead gateway's): this gateway keeps counting the rest.
    pub fn hand_over(&mut self, taken: &Tally) {
        self.own.subtract(taken);
    }

    /// Applies an admin's change to `limits` (read afresh from the file):
    /// a reset makes the current total the baseline.
    pub fn apply(&self, limits: &mut Limits, scope: Scope, name: &str, change: Change) {
        let total = self.total(scope, name);
        let entries = match scope {
            Scope::Project => &mut limits.projects,
            Scope::Identity => &mut limits.identities,
        };
        let entry = entries.entry(name.to_string()).or_default();
        match change.limit {
            LimitChange::Keep => {}
            LimitChange::Set(limit) => entry.limit_usd = Some(limit),
            LimitChange::Default => entry.limit_usd = None,
        }
        if change.reset {
            entry.baseline_usd = total;
        }
        if *entry == Entry::default() {
            entries.remove(name);
        }
    }

    /// One budget as the admin API shows it.
    pub fn view(&self, scope: Scope, name: &str) -> View {
        let credential = match scope {
            Scope::Project => None,
            Scope::Identity => self.credential_limits.get(name).copied().flatten(),
        };
        let (limit_usd, limit_from) = self.limit(scope, name, credential);
        let spent_usd = self.spent(scope, name);
        View {
            scope,
            name: name.to_string(),
            limit_usd,
            limit_from,
            spent_usd,
            total_usd: self.total(scope, name),
            source: match scope {
                Scope::Project => self.project_total(name).source(),
                Scope::Identity => None,
            },
            exhausted: limit_usd.is_some_and(|limit| spent_usd >= limit),
        }
    }

    /// Every budget of `scope` with spend, an admin's setting or (for
    /// identities) a known credential budget, by name.
    pub fn list(&self, scope: Scope) -> Vec<View> {
        let names: BTreeSet<&String> = match scope {
            Scope::Project => self
                .own
                .projects
                .keys()
                .chain(self.others.projects.keys())
                .chain(self.limits.projects.keys())
                .collect(),
            Scope::Identity => self
                .own
                .identities
                .keys()
                .chain(self.others.identities.keys())
                .chain(self.limits.identities.keys())
                .chain(
                    self.credential_limits
                        .iter()
                        .filter(|(_, limit)| limit.is_some())
                        .map(|(name, _)| name),
                )
                .collect(),
        };
        names
            .into_iter()
            .map(|name| self.view(scope, name))
            .collect()
    }

    /// Spent since the last reset, summed over every budget of `scope`
    /// (the `corral_budget_spent_usd` gauge).
    pub fn spent_sum(&self, scope: Scope) -> f64 {
        self.list(scope).iter().map(|view| view.spent_usd).sum()
    }
}

#[cfg(test)]
#[path = "book_tests.rs"]
mod tests;
