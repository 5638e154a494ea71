//! Small checks shared by the settings and `config::load`: minimums, the
//! failure rate, origins, and the projects root and state directories.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ConfigError;
use crate::auth;

pub(super) fn at_least<T: PartialOrd + std::fmt::Display>(
    setting: &str,
    value: T,
    min: T,
) -> Result<T, ConfigError> {
    if value < min {
        return Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: format!("{value} is less than the minimum {min}"),
        });
    }
    Ok(value)
}

pub(super) fn at_most<T: PartialOrd + std::fmt::Display>(
    setting: &str,
    value: T,
    max: T,
) -> Result<T, ConfigError> {
    if value > max {
        return Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: format!("{value} is more than the maximum {max}"),
        });
    }
    Ok(value)
}

pub(super) fn positive(setting: &str, value: Duration) -> Result<Duration, ConfigError> {
    if value.is_zero() {
        return Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: "must be longer than zero".into(),
        });
    }
    Ok(value)
}

/// Most wrong tokens per second a source may be allowed: beyond this the
/// budget is no limit at all.
const MAX_AUTH_FAILURE_RATE: f64 = 1_000_000.0;

/// `--auth-failure-rate`: a positive number of failures per second.
pub(super) fn auth_failure_rate(setting: &str, rate: f64) -> Result<f64, ConfigError> {
    if !(rate.is_finite() && rate > 0.0 && rate <= MAX_AUTH_FAILURE_RATE) {
        return Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: format!(
                "{rate} is not a number of failures per second above 0 and at most {MAX_AUTH_FAILURE_RATE}"
            ),
        });
    }
    Ok(rate)
}

/// Largest budget accepted, in USD: beyond it a number is a typo, not a
/// budget (no budget at all is the way to say unlimited).
pub const MAX_BUDGET_USD: f64 = 1e9;

/// A budget in USD: a number from 0 to [`MAX_BUDGET_USD`].
pub(super) fn budget_usd(setting: &str, usd: f64) -> Result<f64, ConfigError> {
    if !(usd.is_finite() && (0.0..=MAX_BUDGET_USD).contains(&usd)) {
        return Err(ConfigError::Invalid {
            setting: setting.into(),
            reason: format!("{usd} is not a number of US dollars from 0 to {MAX_BUDGET_USD}"),
        });
    }
    Ok(usd)
}

pub(super) fn origins(entries: Vec<String>) -> Result<Vec<String>, ConfigError> {
    entries
        .into_iter()
        .map(|entry| match entry.trim() {
            "*" => Ok("*".to_string()),
            text => auth::normalize_origin(text).ok_or_else(|| ConfigError::Invalid {
                setting: "--allowed-origin / allowed_origins".into(),
                reason: format!(
                    "{text:?} is not `*` or scheme://host[:port], e.g. https://ide.example.com"
                ),
            }),
        })
        .collect()
}

pub(super) fn canonical_dir(path: &Path) -> Result<PathBuf, ConfigError> {
    let error = |reason: String| ConfigError::ProjectsRoot {
        path: path.to_path_buf(),
        reason,
    };
    let dir = path.canonicalize().map_err(|err| {
        let hint = match err.kind() {
            std::io::ErrorKind::NotFound => format!(
                "; it holds one directory per project: create it (mkdir -p {}) or pass another --projects-root",
                path.display()
            ),
            _ => String::new(),
        };
        error(format!("{err}{hint}"))
    })?;
    if !dir.is_dir() {
        return Err(error(
            "not a directory; --projects-root names the directory that holds one directory per project".into(),
        ));
    }
    Ok(dir)
}

pub(super) fn create_dir(path: &Path) -> Result<PathBuf, ConfigError> {
    let error = |source| ConfigError::StateDir {
        path: path.to_path_buf(),
        source,
    };
    fs::create_dir_all(path).map_err(error)?;
    path.canonicalize().map_err(error)
}
