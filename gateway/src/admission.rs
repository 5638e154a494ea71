//! The gateway's [`Gate`] for prompts: `--max-prompts-per-minute` per
//! identity, then the budgets of the project and of the identity
//! ([`crate::spend`]). One place decides whether a prompt of an identity
//! may start on a project, for every dialect; the hub asks it before the
//! prompt reaches the child and answers a refusal as the dialect answers
//! a failed request.

use std::sync::Arc;
use std::time::Instant;

use crate::access::rate::PromptRate;
use crate::access::Identity;
use crate::hub::gate::{Gate, Refusal};
use crate::spend::{Ledger, Payer};

/// Rate limits and budgets of prompts.
#[derive(Debug)]
pub struct Admission {
    rate: PromptRate,
    /// The budgets a prompt is checked against.
    spend: Arc<Ledger>,
}

impl Admission {
    pub fn new(max_prompts_per_minute: u32, spend: Arc<Ledger>) -> Admission {
        Admission {
            rate: PromptRate::new(max_prompts_per_minute),
            spend,
        }
    }
}

impl Gate for Admission {
    /// The rate limit first (a prompt refused for it costs nothing more),
    /// then the project's budget, then the identity's.
    fn prompt(&self, project: &str, who: &Identity) -> Result<(), Refusal> {
        if let Err(wait) = self.rate.take(&who.key(), Instant::now()) {
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            return Err(Refusal {
                reason: "rate_limit",
                message: format!(
                    "rate limit: {} may start {} prompts a minute (--max-prompts-per-minute); try again in {secs} s",
                    who.name,
                    self.rate.per_minute()
                ),
            });
        }
        if let Err(spent) = self.spend.check(project, Some(&Payer::of(who))) {
            return Err(Refusal {
                reason: "budget",
                message: spent.to_string(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::{Kind, ProjectScope};
    use crate::auth::Role;
    use crate::metrics::Metrics;
    use crate::spend::Source;

    fn alice(budget_usd: Option<f64>) -> Identity {
        Identity {
            name: "alice".into(),
            kind: Kind::Managed,
            role: Role::Client,
            scope: ProjectScope::All,
            expires: None,
            budget_usd,
        }
    }

    fn admission(project_limit: Option<f64>) -> (Admission, Arc<Ledger>) {
        let metrics = Arc::new(Metrics::new().unwrap());
        let ledger = Arc::new(Ledger::detached(project_limit, metrics));
        (Admission::new(0, ledger.clone()), ledger)
    }

    #[test]
    fn a_spent_project_budget_refuses_prompts_with_its_message() {
        let (gate, ledger) = admission(Some(0.01));
        assert_eq!(gate.prompt("alpha", &alice(None)), Ok(()));
        ledger.charge("alpha", None, Source::Broker, 0.02);
        let refused = gate.prompt("alpha", &alice(None)).unwrap_err();
        assert_eq!(refused.reason, "budget");
        assert_eq!(
            refused.message,
            "the budget of project alpha ($0.01) is spent: $0.02 so far; an admin can raise or reset it with PUT /v1/projects/alpha/budget"
        );
        assert_eq!(gate.prompt("beta", &alice(None)), Ok(()));
    }

    #[test]
    fn a_spent_identity_budget_refuses_its_prompts_on_every_project() {
        let (gate, ledger) = admission(None);
        let payer = Payer::of(&alice(Some(1.0)));
        ledger.charge("alpha", Some(&payer), Source::Agent, 1.5);
        for project in ["alpha", "beta"] {
            let refused = gate.prompt(project, &alice(Some(1.0))).unwrap_err();
            assert_eq!(refused.reason, "budget");
            assert!(
                refused
                    .message
                    .starts_with("the budget of identity alice ($1.00) is spent: $1.50"),
                "{}",
                refused.message
            );
            assert!(refused.message.ends_with("PUT /v1/identities/alice/budget"));
        }
        let mut bob = alice(None);
        bob.name = "bob".into();
        assert_eq!(gate.prompt("alpha", &bob), Ok(()));
    }

    #[test]
    fn the_rate_limit_comes_first() {
        let metrics = Arc::new(Metrics::new().unwrap());
        let ledger = Arc::new(Ledger::detached(Some(0.01), metrics));
        ledger.charge("alpha", None, Source::Broker, 0.02);
        let gate = Admission::new(1, ledger);
        assert_eq!(
            gate.prompt("alpha", &alice(None)).unwrap_err().reason,
            "budget"
        );
        assert_eq!(
            gate.prompt("alpha", &alice(None)).unwrap_err().reason,
            "rate_limit"
        );
    }
}
