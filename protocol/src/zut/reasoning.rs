//! Reasoning levels accepted by `set_reasoning` and `--reasoning`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How much the model should think before answering. Backends with fewer
/// levels clamp to the nearest one they support.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum ReasoningLevel {
    #[default]
    Off,
    Minimum,
    Low,
    Medium,
    High,
    Xhigh,
    Max,
}

impl ReasoningLevel {
    pub const ALL: [ReasoningLevel; 7] = [
        ReasoningLevel::Off,
        ReasoningLevel::Minimum,
        ReasoningLevel::Low,
        ReasoningLevel::Medium,
        ReasoningLevel::High,
        ReasoningLevel::Xhigh,
        ReasoningLevel::Max,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningLevel::Off => "off",
            ReasoningLevel::Minimum => "minimum",
            ReasoningLevel::Low => "low",
            ReasoningLevel::Medium => "medium",
            ReasoningLevel::High => "high",
            ReasoningLevel::Xhigh => "xhigh",
            ReasoningLevel::Max => "max",
        }
    }
}

impl fmt::Display for ReasoningLevel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error for a reasoning level outside the accepted set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid reasoning level {0:?}: expected one of off, minimum, low, medium, high, xhigh, max"
)]
pub struct InvalidReasoningLevel(pub String);

impl FromStr for ReasoningLevel {
    type Err = InvalidReasoningLevel;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ReasoningLevel::ALL
            .into_iter()
            .find(|level| level.as_str() == s)
            .ok_or_else(|| InvalidReasoningLevel(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_level_and_rejects_others() {
        for level in ReasoningLevel::ALL {
            assert_eq!(level.as_str().parse::<ReasoningLevel>(), Ok(level));
        }
        assert!("huge".parse::<ReasoningLevel>().is_err());
        assert!("".parse::<ReasoningLevel>().is_err());
    }
}
