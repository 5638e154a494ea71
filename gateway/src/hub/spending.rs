//! A hub's part in the budgets ([`crate::spend`]), as state the hub's
//! `metering` methods drive:
//!
//! - **Who pays.** A prompt the gate admitted makes its identity the
//!   project's payer ([`Ledger::attribute`]): the model broker charges
//!   the project's model calls to that identity as well as to the
//!   project. The latest admitted prompt decides (a prompt queued, or
//!   input sent, during a run pays from then on); the payer is cleared
//!   when the project is idle again, unless a prompt admitted since the
//!   last run started is still to run.
//! - **Stopping a run.** When a budget may have become spent (the
//!   ledger's [`Ledger::changes`], or a report charged here) and a run is
//!   in flight, the project's budget and the payer's are checked; a spent
//!   one stops the run as an admin abort does, after an `error` event
//!   that names the budget. A run that starts while one is spent (it was
//!   queued before) is stopped the same way.
//! - **Reported spend.** For a child whose model calls do not go through
//!   the broker, the costs it reports ([`ReportedCost`]) are charged with
//!   [`Source::Agent`]; with the broker, only the broker counts, so
//!   nothing is counted twice.

use std::sync::Arc;

use tokio::sync::watch;

use crate::dialect::ReportedCost;
use crate::spend::{Exhausted, Ledger, Payer, Source};

/// A hub's part in the budgets.
#[derive(Debug, Default)]
pub(super) struct Spending {
    /// The budgets; `None`: none are kept (tests).
    ledger: Option<Arc<Ledger>>,
    /// Wakes the hub when a budget may have become spent.
    changes: Option<watch::Receiver<u64>>,
    /// Whom the project's model calls are charged to besides the project.
    payer: Option<Payer>,
    /// A prompt was admitted since the last run started: it may still
    /// start a run, so the payer outlives the run that ends now.
    admitted_since_start: bool,
    /// The runs in flight were stopped for a budget (once is enough).
    stopped: bool,
    /// The child's reports are charged (no broker sees its model calls).
    counts_reports: bool,
    /// The session total the child last reported, with the child's pid:
    /// a new child starts counting afresh.
    session_total: Option<(u32, f64)>,
}

impl Spending {
    /// `brokered`: the model broker sees this project's model calls.
    pub fn new(ledger: Option<Arc<Ledger>>, brokered: bool) -> Spending {
        Spending {
            changes: ledger.as_ref().map(|l| l.changes()),
            ledger,
            counts_reports: !brokered,
            ..Spending::default()
        }
    }

    /// Resolves when a budget may have become spent (never, without
    /// budgets).
    pub async fn changed(&mut self) {
        let Some(changes) = &mut self.changes else {
            return std::future::pending().await;
        };
        if changes.changed().await.is_err() {
            // The ledger is gone: nothing changes any more.
            std::future::pending::<()>().await;
        }
    }

    pub fn admitted(&mut self, project: &str, payer: Payer) {
        if let Some(ledger) = &self.ledger {
            ledger.attribute(project, Some(payer.clone()));
        }
        self.payer = Some(payer);
        self.admitted_since_start = true;
    }

    pub fn run_started(&mut self) {
        self.admitted_since_start = false;
        self.stopped = false;
    }

    /// No run is in flight any more.
    pub fn idle(&mut self, project: &str) {
        self.stopped = false;
        if !self.admitted_since_start {
            self.forget(project);
        }
    }

    /// Nobody pays for the project's model calls any more.
    pub fn forget(&mut self, project: &str) {
        if self.payer.take().is_some() {
            if let Some(ledger) = &self.ledger {
                ledger.attribute(project, None);
            }
        }
    }

    /// The first spent budget of the project or its payer, if the runs
    /// in flight were not stopped for one yet (they are, from now).
    pub fn stop_due(&mut self, project: &str) -> Option<Exhausted> {
        if self.stopped {
            return None;
        }
        let spent = self
            .ledger
            .as_ref()?
            .check(project, self.payer.as_ref())
            .err()?;
        self.stopped = true;
        Some(spent)
    }

    /// Whether the child's reports are charged.
    pub fn counts_reports(&self) -> bool {
        self.counts_reports && self.ledger.is_some()
    }

    /// Charges what the child `pid` reported; whether a budget was crossed.
    pub fn charge(&mut self, project: &str, pid: Option<u32>, cost: ReportedCost) -> bool {
        let Some(ledger) = &self.ledger else {
            return false;
        };
        let usd = match cost {
            ReportedCost::Call(usd) => usd,
            ReportedCost::SessionTotal(total) => {
                let before = self.session_total.filter(|(was, _)| Some(*was) == pid);
                self.session_total = pid.map(|pid| (pid, total));
                grown(before.map(|(_, usd)| usd), total)
            }
        };
        !ledger
            .charge(project, self.payer.as_ref(), Source::Agent, usd)
            .crossed
            .is_empty()
    }
}

/// What a session total grew by since `before`: all of it at the first
/// report, and after a lower one (the agent counts afresh).
fn grown(before: Option<f64>, total: f64) -> f64 {
    match before {
        Some(before) if total >= before => total - before,
        _ => total,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_total_counts_what_it_grew_by() {
        assert_eq!(grown(None, 0.5), 0.5);
        assert_eq!(grown(Some(0.5), 0.75), 0.25);
        assert_eq!(grown(Some(0.5), 0.5), 0.0);
        // Lower than before: the agent started counting again.
        assert_eq!(grown(Some(0.5), 0.125), 0.125);
    }

    #[test]
    fn a_new_child_reports_a_new_session_total() {
        let metrics = Arc::new(crate::metrics::Metrics::new().unwrap());
        let ledger = Arc::new(Ledger::detached(None, metrics));
        let mut spending = Spending::new(Some(ledger.clone()), false);
        let spent = |ledger: &Ledger| ledger.view(crate::spend::Scope::Project, "alpha").spent_usd;
        spending.charge("alpha", Some(7), ReportedCost::SessionTotal(0.25));
        spending.charge("alpha", Some(7), ReportedCost::SessionTotal(0.5));
        assert_eq!(spent(&ledger), 0.5);
        spending.charge("alpha", Some(8), ReportedCost::SessionTotal(0.25));
        assert_eq!(spent(&ledger), 0.75);
        spending.charge("alpha", Some(8), ReportedCost::Call(0.25));
        assert_eq!(spent(&ledger), 1.0);
    }
}
