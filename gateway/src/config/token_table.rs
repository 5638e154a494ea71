//! The config file's `[[token]]` entries: named, scoped credentials whose
//! secret the file never holds. Each names its token by digest
//! (`hash = "sha256:HEX"`, what `sha256sum` prints) or by a file holding
//! the token itself (`file = "alice.token"`, hidden from agents like every
//! token file); gives a `role`, the `projects` it opens (names and globs;
//! none: nothing) and optionally `expires` (a TOML date-time with an
//! offset) and `budget_usd`.
//!
//! ```toml
//! [[token]]
//! name = "alice"
//! hash = "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
//! role = "client"
//! projects = ["team-a-*"]
//! expires = 2027-06-30T00:00:00Z
//! ```

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::token_file::{read_token_file, MIN_TOKEN_CHARS};
use super::ConfigError;
use crate::access::digest::sha256;
use crate::access::{ConfiguredToken, Identity, Kind, ProjectScope};
use crate::auth::Role;

/// One `[[token]]` table as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenEntry {
    pub name: String,
    /// `sha256:HEX` (or the bare 64 hex digits) of the token.
    pub hash: Option<String>,
    /// A file holding the token (relative to the config file).
    pub file: Option<PathBuf>,
    pub role: Role,
    #[serde(default)]
    pub projects: Vec<String>,
    pub expires: Option<toml::value::Datetime>,
    pub budget_usd: Option<f64>,
}

/// The entries as credentials; `base` is the config file's directory.
pub fn resolve(entries: &[TokenEntry], base: &Path) -> Result<Vec<ConfiguredToken>, ConfigError> {
    let mut resolved: Vec<ConfiguredToken> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let bad = |reason: String| ConfigError::Invalid {
            setting: format!("[[token]] #{} ({:?}) in the config file", i + 1, entry.name),
            reason,
        };
        crate::projects::validate_name(&entry.name)
            .map_err(|e| bad(e.to_string().replace("project name", "token name")))?;
        if is_static_name(&entry.name) {
            return Err(bad(
                "names like client-token-1 are those of the tokens given by flags and variables"
                    .into(),
            ));
        }
        if resolved.iter().any(|r| r.identity.name == entry.name) {
            return Err(bad("another [[token]] has this name".into()));
        }
        let digest = match (&entry.hash, &entry.file) {
            (Some(hash), None) => crate::access::digest::parse(hash).ok_or_else(|| {
                bad(
                    "hash: write sha256:HEX, the 64 hex digits `sha256sum` prints for the token"
                        .into(),
                )
            })?,
            (None, Some(file)) => {
                let path = if file.is_relative() {
                    base.join(file)
                } else {
                    file.clone()
                };
                let found = read_token_file(&path)?;
                if found.len() != 1 {
                    return Err(bad(format!(
                        "{} must hold exactly one token",
                        path.display()
                    )));
                }
                let token = found[0].0.expose();
                if token.chars().count() < MIN_TOKEN_CHARS {
                    return Err(bad(format!(
                        "the token in {} is shorter than {} characters",
                        path.display(),
                        MIN_TOKEN_CHARS
                    )));
                }
                sha256(token)
            }
            _ => {
                return Err(bad(
                    "give either `hash` or `file`, not both or neither".into()
                ))
            }
        };
        let scope = ProjectScope::parse(&entry.projects).map_err(|e| bad(e.to_string()))?;
        let expires = entry
            .expires
            .as_ref()
            .map(|at| epoch_of(at).ok_or_else(|| bad(format!("expires: {at} needs a date, a time and an offset (e.g. 2027-06-30T00:00:00Z)"))))
            .transpose()?;
        if entry.budget_usd.is_some_and(|b| !b.is_finite() || b < 0.0) {
            return Err(bad("budget_usd: give a number of dollars, 0 or more".into()));
        }
        resolved.push(ConfiguredToken {
            digest,
            identity: Identity {
                name: entry.name.clone(),
                kind: Kind::Configured,
                role: entry.role,
                scope,
                expires,
                budget_usd: entry.budget_usd,
            },
        });
    }
    Ok(resolved)
}

/// The token files the entries name (to hide from agents).
pub fn files(entries: &[TokenEntry], base: &Path) -> Vec<(String, PathBuf)> {
    entries
        .iter()
        .filter_map(|e| {
            let file = e.file.as_ref()?;
            let path = if file.is_relative() {
                base.join(file)
            } else {
                file.clone()
            };
            Some((format!("[[token]] {:?} in the config file", e.name), path))
        })
        .collect()
}

/// `client-token-3` and the like: names of the flags' tokens, which no
/// other credential may take (logs and the audit would show the
/// operator's token acting), whether the flags give that many or not.
pub fn is_static_name(name: &str) -> bool {
    ["client-token-", "observer-token-", "admin-token-"]
        .iter()
        .any(|prefix| {
            name.strip_prefix(prefix)
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
}

/// A TOML offset date-time as a time; `None` without date, time or offset.
fn epoch_of(at: &toml::value::Datetime) -> Option<SystemTime> {
    let (date, time, offset) = (at.date?, at.time?, at.offset?);
    let days = days_from_civil(i64::from(date.year), date.month.into(), date.day.into());
    let local = days * 86_400
        + i64::from(time.hour) * 3600
        + i64::from(time.minute) * 60
        + i64::from(time.second);
    let offset_secs = match offset {
        toml::value::Offset::Z => 0,
        toml::value::Offset::Custom { minutes } => i64::from(minutes) * 60,
    };
    let secs = u64::try_from(local - offset_secs).ok()?;
    Some(UNIX_EPOCH + Duration::from_secs(secs))
}

/// Days from 1970-01-01 to the given proleptic Gregorian date.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(text: &str) -> Vec<TokenEntry> {
        #[derive(Deserialize)]
        struct File {
            token: Vec<TokenEntry>,
        }
        toml::from_str::<File>(text).unwrap().token
    }

    #[test]
    fn entries_become_scoped_identities_kept_as_digests() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("bob.token"), "bob-secret-0123456789\n").unwrap();
        let text = format!(
            r#"
            [[token]]
            name = "alice"
            hash = "sha256:{}"
            role = "client"
            projects = ["a-*"]
            expires = 2027-06-30T02:00:00+02:00
            budget_usd = 5.0

            [[token]]
            name = "bob"
            file = "bob.token"
            role = "observer"
            "#,
            crate::access::digest::hex(&sha256("alice-secret-0123456789"))
        );
        let found = resolve(&entries(&text), dir.path()).unwrap();
        let alice = &found[0];
        assert_eq!(alice.digest, sha256("alice-secret-0123456789"));
        assert_eq!(alice.identity.role, Role::Client);
        assert!(alice.identity.sees("a-1") && !alice.identity.sees("b-1"));
        // 2027-06-30T00:00:00Z
        assert_eq!(
            alice.identity.expires,
            Some(UNIX_EPOCH + Duration::from_secs(1_814_313_600))
        );
        let bob = &found[1];
        assert_eq!(bob.digest, sha256("bob-secret-0123456789"));
        // No projects: opens nothing.
        assert!(!bob.identity.sees("a-1"));
        assert_eq!(files(&entries(&text), dir.path()).len(), 1);
    }

    #[test]
    fn bad_entries_are_refused_by_name() {
        let hash = format!("sha256:{}", "ab".repeat(32));
        for (text, expected) in [
            ("name = \"a\"\nrole = \"client\"".to_string(), "either"),
            (
                "name = \"a\"\nrole = \"client\"\nhash = \"sha256:12\"".to_string(),
                "hash",
            ),
            (
                format!("name = \"client-token-1\"\nrole = \"client\"\nhash = \"{hash}\""),
                "flags",
            ),
            (
                format!("name = \"a/b\"\nrole = \"client\"\nhash = \"{hash}\""),
                "token name",
            ),
            (
                format!("name = \"a\"\nrole = \"client\"\nhash = \"{hash}\"\nprojects = [\"a b\"]"),
                "pattern",
            ),
            (
                format!("name = \"a\"\nrole = \"client\"\nhash = \"{hash}\"\nexpires = 2027-01-01"),
                "offset",
            ),
        ] {
            let err = resolve(&entries(&format!("[[token]]\n{text}")), Path::new(""))
                .unwrap_err()
                .to_string();
            assert!(err.contains(expected), "{text}: {err}");
            assert!(err.contains("[[token]] #1"), "{err}");
        }
        let twice =
            format!("[[token]]\nname = \"a\"\nrole = \"client\"\nhash = \"{hash}\"\n").repeat(2);
        let err = resolve(&entries(&twice), Path::new(""))
            .unwrap_err()
            .to_string();
        assert!(err.contains("another"), "{err}");
    }

    #[test]
    fn the_example_in_corral_toml_example_is_valid() {
        let example = include_str!("../../../deploy/corral.toml.example");
        let block: Vec<&str> = example
            .split("# [[token]]")
            .nth(1)
            .expect("an example [[token]]")
            .lines()
            .map(|line| line.trim_start_matches('#').trim_start())
            .collect();
        let text = format!("[[token]]{}", block.join("\n"));
        let found = resolve(&entries(&text), Path::new("")).unwrap();
        assert_eq!(found[0].identity.name, "alice");
        assert_eq!(found[0].digest, sha256("test"));
    }
}
