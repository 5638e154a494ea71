//! Who a budget belongs to ([`Scope`], [`Payer`]) and the error a spent
//! one gives ([`Exhausted`]), whose text is what clients are told: which
//! budget, its limit, what was spent, and how an admin raises or resets
//! it. Pure: no I/O.

use std::fmt;

use crate::access::Identity;

/// Whose budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// A project's (`--project-budget-usd`, or an admin's override).
    Project,
    /// An identity's: a token's or JWT subject's `budget_usd`, or an
    /// admin's override.
    Identity,
}

impl Scope {
    pub const ALL: [Scope; 2] = [Scope::Project, Scope::Identity];

    /// The `scope` label of the budget metrics.
    pub fn label(self) -> &'static str {
        match self {
            Scope::Project => "project",
            Scope::Identity => "identity",
        }
    }

    /// The admin API path of a budget of this scope.
    pub fn admin_path(self, name: &str) -> String {
        match self {
            Scope::Project => format!("/v1/projects/{}/budget", path_segment(name)),
            Scope::Identity => format!("/v1/identities/{}/budget", path_segment(name)),
        }
    }
}

/// The identity a run (and so its model calls) is charged to besides its
/// project: its name and the budget its credential carries.
#[derive(Clone, Debug, PartialEq)]
pub struct Payer {
    /// The token name or JWT subject.
    pub name: String,
    /// The credential's own budget (`budget_usd`); `None` = unlimited
    /// unless an admin set one.
    pub budget_usd: Option<f64>,
}

impl Payer {
    /// The payer `who` is: its name (a token's name or a JWT's `sub`, as
    /// the admin API's `/v1/identities/NAME/budget` names it) and its
    /// credential's budget. Named by name, not by kind and name, so an
    /// identity keeps one budget however it signs in.
    pub fn of(who: &Identity) -> Payer {
        Payer {
            name: who.name.clone(),
            budget_usd: who.budget_usd,
        }
    }
}

/// A budget that is spent: the answer to a prompt it refuses and the
/// reason a run that crossed it stops.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub struct Exhausted {
    pub scope: Scope,
    /// The project or identity name.
    pub name: String,
    pub limit_usd: f64,
    /// Spent since the last reset.
    pub spent_usd: f64,
}

impl fmt::Display for Exhausted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the budget of {} {} ({}) is spent: {} so far; an admin can raise or reset it with PUT {}",
            self.scope.label(),
            self.name,
            usd(self.limit_usd),
            usd(self.spent_usd),
            self.scope.admin_path(&self.name),
        )
    }
}

/// `$1.50`, `$0.01`, `$0.0132`, `$0.000004`: cents at least, and the
/// digits that tell small amounts apart (up to millionths).
pub fn usd(amount: f64) -> String {
    let text = format!("{amount:.6}");
    let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
    let fraction = fraction.trim_end_matches('0');
    format!("${whole}.{fraction:0<2}")
}

/// `name` as one URL path segment: unreserved characters as they are,
/// every other byte percent-encoded.
fn path_segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metrics_know_every_scope() {
        let labels: Vec<&str> = Scope::ALL.iter().map(|s| s.label()).collect();
        assert_eq!(labels, crate::metrics::BUDGET_SCOPES);
    }

    #[test]
    fn amounts_show_cents_and_small_digits() {
        assert_eq!(usd(0.01), "$0.01");
        assert_eq!(usd(0.0132), "$0.0132");
        assert_eq!(usd(12.5), "$12.50");
        assert_eq!(usd(3.0), "$3.00");
        assert_eq!(usd(0.000004), "$0.000004");
        assert_eq!(usd(0.0), "$0.00");
    }

    #[test]
    fn the_message_names_the_budget_and_how_to_raise_it() {
        let project = Exhausted {
            scope: Scope::Project,
            name: "alpha".into(),
            limit_usd: 0.01,
            spent_usd: 0.0132,
        };
        assert_eq!(
            project.to_string(),
            "the budget of project alpha ($0.01) is spent: $0.0132 so far; an admin can raise or reset it with PUT /v1/projects/alpha/budget"
        );
        let identity = Exhausted {
            scope: Scope::Identity,
            name: "ana@example.com/ci bot".into(),
            limit_usd: 2.0,
            spent_usd: 2.5,
        };
        assert!(identity
            .to_string()
            .ends_with("PUT /v1/identities/ana%40example.com%2Fci%20bot/budget"));
    }
}
