//! Reasoning levels accepted by `set_reasoning` and `--reasoning`, and
//! the zut spellings of them: the aliases `set_reasoning` accepts and the
//! empty string zut reports for off.

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

impl ReasoningLevel {
    /// Reads a level the way zut's `set_reasoning` does: trimmed, any
    /// case, with the aliases `none`/`no`/`false`/`disabled` and the empty
    /// string for off, `min`/`minimal` for minimum, `med`, `hi`, and
    /// `maximum` for **xhigh** (`max` is the tier above it).
    pub fn from_alias(text: &str) -> Option<ReasoningLevel> {
        Some(match text.trim().to_ascii_lowercase().as_str() {
            "" | "off" | "none" | "no" | "false" | "disabled" => ReasoningLevel::Off,
            "min" | "minimal" | "minimum" => ReasoningLevel::Minimum,
            "low" => ReasoningLevel::Low,
            "med" | "medium" => ReasoningLevel::Medium,
            "hi" | "high" => ReasoningLevel::High,
            "xhigh" | "maximum" => ReasoningLevel::Xhigh,
            "max" => ReasoningLevel::Max,
            _ => return None,
        })
    }

    /// The level as zut reports it in `set_reasoning` and `get_state`:
    /// the canonical name, and the empty string for off.
    pub fn zut_name(self) -> &'static str {
        match self {
            ReasoningLevel::Off => "",
            level => level.as_str(),
        }
    }
}

/// The `set_reasoning` error for a value that is no level, worded as zut
/// words it.
pub const SET_REASONING_ERROR: &str = "reasoning must be off|minimum|low|medium|high|xhigh|max";

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

    #[test]
    fn aliases_follow_zut() {
        use ReasoningLevel::*;
        let cases = [
            ("", Off),
            (" OFF ", Off),
            ("none", Off),
            ("no", Off),
            ("false", Off),
            ("Disabled", Off),
            ("min", Minimum),
            ("minimal", Minimum),
            ("minimum", Minimum),
            ("low", Low),
            ("med", Medium),
            ("medium", Medium),
            ("hi", High),
            ("HIGH", High),
            ("xhigh", Xhigh),
            ("maximum", Xhigh),
            ("max", Max),
        ];
        for (text, level) in cases {
            assert_eq!(ReasoningLevel::from_alias(text), Some(level), "{text:?}");
        }
        for text in ["extreme", "1", "off-ish", "x high"] {
            assert_eq!(ReasoningLevel::from_alias(text), None, "{text:?}");
        }
        for level in ReasoningLevel::ALL {
            assert_eq!(ReasoningLevel::from_alias(level.as_str()), Some(level));
        }
    }

    #[test]
    fn zut_reports_off_as_the_empty_string() {
        assert_eq!(ReasoningLevel::Off.zut_name(), "");
        assert_eq!(ReasoningLevel::Xhigh.zut_name(), "xhigh");
        assert_eq!(ReasoningLevel::Max.zut_name(), "max");
    }
}
