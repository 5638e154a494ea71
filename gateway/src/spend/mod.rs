//! Budgets: what each project and each identity (token name or JWT
//! subject) has spent on models, in USD, against its limit. A budget is
//! a total until an admin raises or resets it.
//!
//! Spend is counted where the gateway sees model traffic itself — the
//! model broker reads the provider's own usage fields and prices them
//! with the catalogue ([`Source::Broker`]) — and, for agents that reach
//! their model without the broker, from the usage the agent reports
//! ([`Source::Agent`], the weaker source: an agent could under-report).
//! Limits: `--project-budget-usd` for every project, an admin's override
//! per project, a credential's `budget_usd` per identity, an admin's
//! override per identity.
//!
//! Kept in `STATE/budgets` (`store`: one spend file per gateway process,
//! the admins' limits in one file), synced every [`SYNC_INTERVAL`] by
//! [`spawn_keeper`]. With several gateways on one state directory every
//! gateway's spend counts against the same budgets, seen by the others
//! within a sync (so a budget can be overshot by what the other gateways
//! spend in about [`SYNC_INTERVAL`] twice, plus the model calls already
//! under way when it was crossed).

mod book;
mod exhausted;
mod keeper;
mod store;
mod tally;

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::watch;

pub use book::{Change, LimitChange, LimitFrom, View, MAX_REMEMBERED_IDENTITIES};
pub use exhausted::{usd, Exhausted, Payer, Scope};
pub use keeper::{spawn_keeper, SYNC_INTERVAL};
pub use store::{SpendError, HEARTBEAT, MAX_FILE_BYTES, MAX_SPENT_FILES, STALE_AFTER};
pub use tally::Source;

use book::Book;
use store::Store;

use crate::metrics::Metrics;
use crate::offload::{self, Lane};

/// Distinct unpriced models logged; past it they are only counted.
pub const MAX_UNPRICED_LOGGED: usize = 64;

/// What a charge did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Charged {
    /// The budgets the charge crossed: the run it was for is to stop.
    pub crossed: Vec<Exhausted>,
}

/// The budgets of this gateway (and of the others on its state
/// directory). `Send + Sync`: the broker's thread and the hubs share it.
pub struct Ledger {
    book: Mutex<Book>,
    /// Where the counts are kept; `None`: nowhere (tests).
    store: Option<Arc<Mutex<Store>>>,
    metrics: Arc<Metrics>,
    /// Serialises this gateway's admin changes (read the limits, change
    /// them, write them back).
    admin: tokio::sync::Mutex<()>,
    /// Bumped when a budget may have become spent: a charge crossed one,
    /// or a sync brought other gateways' spend or new limits. A hub with
    /// a run checks its budgets again when it changes.
    changes: watch::Sender<u64>,
    /// Models without a price that were logged.
    unpriced: Mutex<HashSet<String>>,
    /// Which kind of sync is failing (logged once until it works again).
    failing: Mutex<HashSet<&'static str>>,
}

impl std::fmt::Debug for Ledger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ledger")
            .field("kept", &self.store.is_some())
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ledger {
    /// The ledger kept under `STATE/budgets`: this process's spend file
    /// started (taking over a dead gateway's), every other file and the
    /// limits read. Refuses when the limits cannot be read (a lost limit
    /// would let projects overspend). Blocking: call at start.
    pub fn open(
        state_dir: &Path,
        default_project_limit: Option<f64>,
        metrics: Arc<Metrics>,
    ) -> Result<Ledger, SpendError> {
        let (mut store, own) = Store::open(state_dir)?;
        tracing::debug!(
            instance = store.instance(),
            "budgets: this gateway counts its spend in STATE/budgets/spent/INSTANCE.json"
        );
        let limits = store.read_limits()?;
        let others = store.read_others()?;
        let mut book = Book::new(default_project_limit, own);
        book.set_limits(limits);
        book.set_others(others);
        let mut ledger = Ledger::with_book(book, metrics);
        ledger.store = Some(Arc::new(Mutex::new(store)));
        ledger.update_metrics();
        Ok(ledger)
    }

    /// A ledger kept nowhere (tests, and tools that need none).
    pub fn detached(default_project_limit: Option<f64>, metrics: Arc<Metrics>) -> Ledger {
        Ledger::with_book(
            Book::new(default_project_limit, Default::default()),
            metrics,
        )
    }

    fn with_book(book: Book, metrics: Arc<Metrics>) -> Ledger {
        Ledger {
            book: Mutex::new(book),
            store: None,
            metrics,
            admin: tokio::sync::Mutex::new(()),
            changes: watch::Sender::new(0),
            unpriced: Mutex::new(HashSet::new()),
            failing: Mutex::new(HashSet::new()),
        }
    }

    /// `Err` naming the first spent budget, the project's then the
    /// payer's: what refuses a new prompt (and a brokered model call).
    pub fn check(&self, project: &str, payer: Option<&Payer>) -> Result<(), Exhausted> {
        lock(&self.book).check(project, payer)
    }

    /// Counts `usd` spent by `project` (and `payer`, if any), read from
    /// `source`; says which budgets it crossed.
    pub fn charge(
        &self,
        project: &str,
        payer: Option<&Payer>,
        source: Source,
        usd: f64,
    ) -> Charged {
        let crossed = lock(&self.book).charge(project, payer, source, usd);
        for spent in &crossed {
            self.metrics
                .budget_exhausted
                .with_label_values(&[spent.scope.label()])
                .inc();
            tracing::info!(budget = spent.scope.label(), name = %spent.name, "{spent}");
        }
        if !crossed.is_empty() {
            self.changes.send_modify(|n| *n += 1);
        }
        Charged { crossed }
    }

    /// Sets (or with `None`, clears) the identity whose run is on
    /// `project`: the broker charges the project's model calls to it too.
    pub fn attribute(&self, project: &str, payer: Option<Payer>) {
        lock(&self.book).attribute(project, payer);
    }

    /// The identity whose run is on `project`, if any.
    pub fn payer_of(&self, project: &str) -> Option<Payer> {
        lock(&self.book).payer_of(project)
    }

    /// Changes whenever a budget may have become spent.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Notes a model call priced 0 because the catalogue does not know
    /// `model`: counted, and logged once per model.
    pub fn unpriced(&self, provider: &str, model: &str) {
        self.metrics.budget_unpriced_calls.inc();
        let mut logged = lock(&self.unpriced);
        if logged.len() < MAX_UNPRICED_LOGGED && logged.insert(format!("{provider}/{model}")) {
            tracing::warn!(provider, model, "budgets: this model has no price in the catalogue; its calls count $0 (rely on the agents' reported usage, or add its prices)");
        }
    }

    /// `--project-budget-usd`.
    pub fn default_project_limit(&self) -> Option<f64> {
        lock(&self.book).default_project_limit()
    }

    /// One budget as the admin API shows it.
    pub fn view(&self, scope: Scope, name: &str) -> View {
        lock(&self.book).view(scope, name)
    }

    /// Every budget of `scope` with spend or a setting.
    pub fn list(&self, scope: Scope) -> Vec<View> {
        lock(&self.book).list(scope)
    }

    /// Applies an admin's change (to the limits as last written by any
    /// gateway: last writer wins) and keeps it; returns the new view.
    pub async fn change(
        &self,
        scope: Scope,
        name: &str,
        change: Change,
    ) -> Result<View, SpendError> {
        let _one_at_a_time = self.admin.lock().await;
        let Some(store) = self.store.clone() else {
            let mut book = lock(&self.book);
            let mut limits = book.limits().clone();
            book.apply(&mut limits, scope, name, change);
            book.set_limits(limits);
            return Ok(book.view(scope, name));
        };
        let reader = store.clone();
        let mut limits = offload::run(Lane::Files, move || lock(&reader).read_limits()).await??;
        lock(&self.book).apply(&mut limits, scope, name, change);
        let kept = limits.clone();
        offload::run(Lane::Files, move || lock(&store).write_limits(&kept)).await??;
        lock(&self.book).set_limits(limits);
        self.changes.send_modify(|n| *n += 1);
        self.update_metrics();
        Ok(self.view(scope, name))
    }

    /// One round with the files: this gateway's spend written if due, the
    /// others' and the limits read again. Failures are logged (once
    /// until they clear) and retried at the next round.
    pub async fn sync(&self) {
        let Some(store) = self.store.clone() else {
            return;
        };
        let own = lock(&self.book).own();
        let round = offload::run(Lane::Files, move || {
            let mut store = lock(&store);
            let written = store.write_own(&own);
            (written, store.read_others(), store.read_limits())
        })
        .await;
        let Ok((written, others, limits)) = round else {
            return;
        };
        let mut changed = false;
        if let Some(Some(taken)) = self.outcome("write", written) {
            lock(&self.book).hand_over(&taken);
        }
        if let Some(others) = self.outcome("read", others) {
            changed |= lock(&self.book).set_others(others);
        }
        if let Some(limits) = self.outcome("limits", limits) {
            changed |= lock(&self.book).set_limits(limits);
        }
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
        self.update_metrics();
    }

    /// The value of a sync step, logging a failure once until it clears.
    fn outcome<T>(&self, step: &'static str, result: Result<T, SpendError>) -> Option<T> {
        let mut failing = lock(&self.failing);
        match result {
            Ok(value) => {
                if failing.remove(step) {
                    tracing::info!(step, "budgets: the state directory works again");
                }
                Some(value)
            }
            Err(e) => {
                if failing.insert(step) {
                    tracing::warn!(step, error = %e, "budgets: cannot sync with the state directory; retrying every second (spend is still counted here)");
                }
                None
            }
        }
    }

    fn update_metrics(&self) {
        let book = lock(&self.book);
        for scope in Scope::ALL {
            self.metrics
                .budget_spent
                .with_label_values(&[scope.label()])
                .set(book.spent_sum(scope));
        }
    }
}

#[cfg(test)]
mod tests;
