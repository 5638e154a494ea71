//! The hub's budget rules ([`super::spending`] holds their state): a
//! prompt the gate admitted pays as its identity, a run is stopped when
//! a budget it spends from is spent (as an admin abort stops it, after an
//! `error` event naming the budget), and without the broker the costs
//! the agent reports are charged.

use serde_json::json;

use super::actor::Hub;
use super::client_id::ClientId;
use crate::spend::Payer;

impl Hub {
    /// A prompt of `client` passed the gate: its identity pays from now.
    pub(super) fn prompt_admitted(&mut self, client: ClientId) {
        let Some(entry) = self.clients.get(client) else {
            return;
        };
        let payer = Payer::of(&entry.who);
        self.spending.admitted(&self.project, payer);
    }

    /// A run started: stopped at once if a budget it spends from is spent.
    pub(super) fn spending_run_started(&mut self) {
        self.spending.run_started();
        self.check_budgets();
    }

    /// No run is in flight any more.
    pub(super) fn spending_idle(&mut self) {
        self.spending.idle(&self.project);
    }

    /// Stops the runs in flight when a budget they spend from is spent.
    pub(super) fn check_budgets(&mut self) {
        if !self.runs.busy() {
            return;
        }
        let Some(spent) = self.spending.stop_due(&self.project) else {
            return;
        };
        tracing::info!(project = %self.project, budget = spent.scope.label(), name = %spent.name, "stopping the run: {spent}");
        let message = format!("the run was stopped: {spent}");
        let budget = json!({
            "scope": spent.scope.label(),
            "name": spent.name,
            "limit_usd": spent.limit_usd,
            "spent_usd": spent.spent_usd,
        });
        let run = self.runs.active().cloned();
        self.emit_for(
            run.as_ref(),
            "error",
            json!({"message": message, "budget": budget}),
        );
        self.abort();
    }

    /// Charges the cost the child's event `line` reports, when this
    /// hub counts reports.
    pub(super) fn agent_reported(&mut self, line: &[u8]) {
        if !self.spending.counts_reports() {
            return;
        }
        let Some(cost) = self.settings.dialect.rules().reported_cost(line) else {
            return;
        };
        let pid = self.supervision.child().map(|c| c.control.pid());
        if self.spending.charge(&self.project, pid, cost) {
            self.check_budgets();
        }
    }
}
