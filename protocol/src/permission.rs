//! Permission modes and answers, the same words in every dialect: the
//! modes of `--permission-mode` (and ACP's session modes), and the four
//! options of a permission request (ACP's `PermissionOptionKind`, which
//! the zut and letscode extensions reuse as they are).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Which tool calls run without asking.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Every tool call runs (the agent's behaviour without the flag).
    #[default]
    Auto,
    /// Calls that write files or run commands wait for the client's answer.
    Ask,
    /// Calls that write files or run commands are refused.
    ReadOnly,
}

/// Every mode, in the order clients list them.
pub const PERMISSION_MODES: [PermissionMode; 3] = [
    PermissionMode::Auto,
    PermissionMode::Ask,
    PermissionMode::ReadOnly,
];

impl PermissionMode {
    /// The wire name: `auto`, `ask` or `read-only`.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Auto => "auto",
            PermissionMode::Ask => "ask",
            PermissionMode::ReadOnly => "read-only",
        }
    }

    /// A short human name (ACP's `SessionMode.name`).
    pub fn title(self) -> &'static str {
        match self {
            PermissionMode::Auto => "Auto",
            PermissionMode::Ask => "Ask",
            PermissionMode::ReadOnly => "Read-only",
        }
    }

    /// One line on what the mode does (ACP's `SessionMode.description`).
    pub fn description(self) -> &'static str {
        match self {
            PermissionMode::Auto => "Tools run without asking.",
            PermissionMode::Ask => "Writing files and running commands wait for your approval.",
            PermissionMode::ReadOnly => "Writing files and running commands are refused.",
        }
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is none of `auto`, `ask`, `read-only`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown permission mode {0:?}; modes are auto, ask, read-only")]
pub struct UnknownPermissionMode(pub String);

impl FromStr for PermissionMode {
    type Err = UnknownPermissionMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PERMISSION_MODES
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| UnknownPermissionMode(s.to_string()))
    }
}

/// One answer to a permission request. `*_always` is remembered for the
/// rest of the session, for every call of the same kind (edit or execute).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionOption {
    AllowOnce,
    AllowAlways,
    RejectOnce,
    RejectAlways,
}

/// Every option, in the order clients show them.
pub const PERMISSION_OPTIONS: [PermissionOption; 4] = [
    PermissionOption::AllowOnce,
    PermissionOption::AllowAlways,
    PermissionOption::RejectOnce,
    PermissionOption::RejectAlways,
];

impl PermissionOption {
    /// The wire name (also the ACP `optionId` and `kind`).
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionOption::AllowOnce => "allow_once",
            PermissionOption::AllowAlways => "allow_always",
            PermissionOption::RejectOnce => "reject_once",
            PermissionOption::RejectAlways => "reject_always",
        }
    }

    /// A button label (ACP's `PermissionOption.name`).
    pub fn label(self) -> &'static str {
        match self {
            PermissionOption::AllowOnce => "Allow",
            PermissionOption::AllowAlways => "Always allow",
            PermissionOption::RejectOnce => "Reject",
            PermissionOption::RejectAlways => "Always reject",
        }
    }

    pub fn allows(self) -> bool {
        matches!(
            self,
            PermissionOption::AllowOnce | PermissionOption::AllowAlways
        )
    }

    /// Whether the answer holds for later calls of the same kind.
    pub fn remembered(self) -> bool {
        matches!(
            self,
            PermissionOption::AllowAlways | PermissionOption::RejectAlways
        )
    }
}

impl FromStr for PermissionOption {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PERMISSION_OPTIONS
            .into_iter()
            .find(|option| option.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown permission option {s:?}; options are allow_once, allow_always, \
                     reject_once, reject_always"
                )
            })
    }
}

/// The zut and letscode extension: the event asking for an answer ...
pub const REQUEST_EVENT: &str = "permission_request";
/// ... the event saying how a request ended (answered by any client, or
/// cancelled) ...
pub const RESOLVED_EVENT: &str = "permission_resolved";
/// ... the command answering a request ...
pub const REPLY_COMMAND: &str = "permission_reply";
/// ... and the command changing the mode.
pub const SET_MODE_COMMAND: &str = "set_permission_mode";

/// The wire name of a request that ended without an answer (the run was
/// cancelled while it waited).
pub const CANCELLED: &str = "cancelled";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_serde_and_from_str() {
        for mode in PERMISSION_MODES {
            assert_eq!(
                serde_json::to_value(mode).unwrap(),
                serde_json::json!(mode.as_str())
            );
            assert_eq!(mode.as_str().parse::<PermissionMode>(), Ok(mode));
        }
        for option in PERMISSION_OPTIONS {
            assert_eq!(
                serde_json::to_value(option).unwrap(),
                serde_json::json!(option.as_str())
            );
            assert_eq!(option.as_str().parse::<PermissionOption>(), Ok(option));
        }
        assert!("readonly".parse::<PermissionMode>().is_err());
        assert!("allow".parse::<PermissionOption>().is_err());
    }
}
