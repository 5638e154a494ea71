//! What is counted and what is set, as kept on disk: a [`Tally`] of spend
//! per project (by where it was read) and per identity, and the
//! [`Limits`] an admin set (overrides and reset baselines). Pure data
//! with its arithmetic; no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

/// Where a charge's usage was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The model broker read it in the provider's own answer.
    Broker,
    /// The agent reported it (`usage` events): the weaker source, for
    /// agents that reach their model without the broker.
    Agent,
}

/// A project's spend in USD, by where it was read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ProjectSpend {
    #[serde(default, deserialize_with = "usd")]
    pub broker: f64,
    #[serde(default, deserialize_with = "usd")]
    pub agent: f64,
}

impl ProjectSpend {
    pub fn total(&self) -> f64 {
        self.broker + self.agent
    }

    /// `"broker"`, `"agent"`, `"mixed"`, or `None` before any spend.
    pub fn source(&self) -> Option<&'static str> {
        match (self.broker > 0.0, self.agent > 0.0) {
            (true, true) => Some("mixed"),
            (true, false) => Some("broker"),
            (false, true) => Some("agent"),
            (false, false) => None,
        }
    }
}

/// Spend in USD since counting began: one gateway's (its own file) or the
/// sum of several. Only grows, except when a whole file is handed over
/// (`super::store`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    #[serde(default)]
    pub projects: BTreeMap<String, ProjectSpend>,
    /// By identity name (token name or JWT subject).
    #[serde(default, deserialize_with = "usd_map")]
    pub identities: BTreeMap<String, f64>,
}

impl Tally {
    /// Adds `usd` to `project` (from `source`) and, when given, to
    /// `identity`.
    pub fn add(&mut self, project: &str, identity: Option<&str>, source: Source, usd: f64) {
        let spend = self.projects.entry(project.to_string()).or_default();
        match source {
            Source::Broker => spend.broker += usd,
            Source::Agent => spend.agent += usd,
        }
        if let Some(name) = identity {
            *self.identities.entry(name.to_string()).or_default() += usd;
        }
    }

    /// Adds every count of `other`.
    pub fn absorb(&mut self, other: &Tally) {
        for (project, spend) in &other.projects {
            let mine = self.projects.entry(project.clone()).or_default();
            mine.broker += spend.broker;
            mine.agent += spend.agent;
        }
        for (name, usd) in &other.identities {
            *self.identities.entry(name.clone()).or_default() += usd;
        }
    }

    /// Takes away what `other` counts (never below zero): what is left
    /// after `other` went to another gateway's file.
    pub fn subtract(&mut self, other: &Tally) {
        for (project, spend) in &other.projects {
            if let Some(mine) = self.projects.get_mut(project) {
                mine.broker = (mine.broker - spend.broker).max(0.0);
                mine.agent = (mine.agent - spend.agent).max(0.0);
            }
        }
        for (name, usd) in &other.identities {
            if let Some(mine) = self.identities.get_mut(name) {
                *mine = (*mine - usd).max(0.0);
            }
        }
    }

    pub fn project(&self, project: &str) -> ProjectSpend {
        self.projects.get(project).copied().unwrap_or_default()
    }

    pub fn identity(&self, name: &str) -> f64 {
        self.identities.get(name).copied().unwrap_or_default()
    }
}

/// What an admin set for one budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Entry {
    /// The admin's limit, in place of the default (a project's
    /// `--project-budget-usd`, an identity's `budget_usd`): absent = no
    /// override, `null` = unlimited.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub limit_usd: Option<Option<f64>>,
    /// The total spent when the budget was last reset; what counts
    /// against the limit is the total above it.
    #[serde(default, deserialize_with = "usd")]
    pub baseline_usd: f64,
}

/// Every admin setting, as `STATE/budgets/limits.json` holds it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    #[serde(default)]
    pub projects: BTreeMap<String, Entry>,
    #[serde(default)]
    pub identities: BTreeMap<String, Entry>,
}

/// An amount read from a file: negative or absurd values count as 0.
fn usd<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
    let value = f64::deserialize(deserializer)?;
    Ok(if value.is_finite() && value > 0.0 {
        value
    } else {
        0.0
    })
}

fn usd_map<'de, D: Deserializer<'de>>(deserializer: D) -> Result<BTreeMap<String, f64>, D::Error> {
    let map = BTreeMap::<String, f64>::deserialize(deserializer)?;
    Ok(map
        .into_iter()
        .filter(|(_, v)| v.is_finite() && *v > 0.0)
        .collect())
}

/// A field that is present (perhaps `null`): `Some(value)`; absent fields
/// take the `default`, `None`. A negative or non-finite limit is refused.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<f64>>, D::Error> {
    let value = Option::<f64>::deserialize(deserializer)?;
    if value.is_some_and(|v| !(v.is_finite() && v >= 0.0)) {
        return Err(serde::de::Error::custom(
            "a limit is a number of USD, 0 or more",
        ));
    }
    Ok(Some(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tallies_add_absorb_and_subtract() {
        let mut a = Tally::default();
        a.add("alpha", Some("alice"), Source::Broker, 0.5);
        a.add("alpha", None, Source::Agent, 0.25);
        let mut b = Tally::default();
        b.add("alpha", Some("alice"), Source::Broker, 1.0);
        b.add("beta", Some("bob"), Source::Broker, 2.0);
        let mut sum = a.clone();
        sum.absorb(&b);
        assert_eq!(sum.project("alpha").total(), 1.75);
        assert_eq!(sum.project("alpha").source(), Some("mixed"));
        assert_eq!(sum.project("beta").source(), Some("broker"));
        assert_eq!(sum.project("gamma").source(), None);
        assert_eq!(sum.identity("alice"), 1.5);
        sum.subtract(&b);
        assert_eq!(sum, {
            let mut left = a.clone();
            left.projects.insert("beta".into(), ProjectSpend::default());
            left.identities.insert("bob".into(), 0.0);
            left
        });
    }

    #[test]
    fn limits_tell_an_absent_override_from_unlimited() {
        let text = r#"{"projects": {
            "a": {"limit_usd": 5, "baseline_usd": 1.5},
            "b": {"limit_usd": null},
            "c": {"baseline_usd": 2}
        }}"#;
        let limits: Limits = serde_json::from_str(text).unwrap();
        assert_eq!(limits.projects["a"].limit_usd, Some(Some(5.0)));
        assert_eq!(limits.projects["b"].limit_usd, Some(None));
        assert_eq!(limits.projects["c"].limit_usd, None);
        assert_eq!(limits.projects["c"].baseline_usd, 2.0);
        let again: Limits = serde_json::from_str(&serde_json::to_string(&limits).unwrap()).unwrap();
        assert_eq!(again, limits);
        assert!(
            serde_json::from_str::<Limits>(r#"{"projects": {"a": {"limit_usd": -1}}}"#).is_err()
        );
    }

    #[test]
    fn bad_amounts_in_a_file_count_as_nothing() {
        let tally: Tally = serde_json::from_str(
            r#"{"projects": {"a": {"broker": -3, "agent": -0.5}}, "identities": {"x": -1, "y": 2}}"#,
        )
        .unwrap();
        assert_eq!(tally.project("a").total(), 0.0);
        assert_eq!(tally.identities.len(), 1);
        assert_eq!(tally.identity("y"), 2.0);
    }
}
