//! The child program: which binary to run (`--child-bin`, else
//! `corral-agent` next to the gateway binary, else on PATH) and the
//! environment entries passed to it (`--child-env NAME[=VALUE]`).

use std::fmt;
use std::path::{Path, PathBuf};

use super::ConfigError;

/// The child binary's file name when `--child-bin` is not given.
pub const DEFAULT_CHILD_BIN: &str = "corral-agent";

/// `--child-template`: fork `corral-agent` children from its template.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TemplateMode {
    /// On when the child binary is named `corral-agent`.
    Auto,
    On,
    Off,
}

impl<'de> serde::Deserialize<'de> for TemplateMode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        super::values::deserialize_switch(deserializer)
    }
}

impl TemplateMode {
    /// Whether children of `child_bin` are forked from its template.
    pub fn applies_to(self, child_bin: &Path) -> bool {
        match self {
            TemplateMode::On => true,
            TemplateMode::Off => false,
            TemplateMode::Auto => child_bin
                .file_name()
                .is_some_and(|name| name == DEFAULT_CHILD_BIN),
        }
    }
}

/// The variable the supervisor sets on each child to the child's hello
/// secret; users may not set or pass it.
const RESERVED_ENV: &str = corral_protocol::zut::TOKEN_ENV;

/// Environment for children beyond the supervisor's scrubbed base.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ChildEnv {
    /// Names copied from the gateway's own environment when set there; a
    /// name ending in `*` matches every variable with that prefix.
    pub pass: Vec<String>,
    /// `NAME=VALUE` pairs set on every child (later entries win).
    pub set: Vec<(String, String)>,
}

/// Values may be API keys: `Debug` shows names only.
impl fmt::Debug for ChildEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set: Vec<String> = self.set.iter().map(|(n, _)| format!("{n}=***")).collect();
        f.debug_struct("ChildEnv")
            .field("pass", &self.pass)
            .field("set", &set)
            .finish()
    }
}

/// Splits `NAME` and `NAME=VALUE` entries into pass-through names and pairs.
pub fn parse_env(entries: &[String]) -> Result<ChildEnv, ConfigError> {
    let mut env = ChildEnv::default();
    for entry in entries {
        let (name, value) = match entry.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (entry.as_str(), None),
        };
        let invalid = |reason: &str| ConfigError::Invalid {
            setting: "--child-env / child_env".into(),
            reason: format!("{name:?}: {reason}"),
        };
        // A pass-through name may end in `*` to match by prefix (`LC_*`).
        let stem = match value {
            None => name.strip_suffix('*').unwrap_or(name),
            Some(_) => name,
        };
        let well_formed = stem.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && stem.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !well_formed {
            return Err(invalid(
                "a variable name is letters, digits and `_`, not starting with a digit \
                 (a passed name may end in `*` to match a prefix)",
            ));
        }
        if name == RESERVED_ENV {
            return Err(invalid("the supervisor sets this variable itself"));
        }
        if value.is_some_and(|v| v.contains('\0')) {
            return Err(invalid("the value contains a NUL byte"));
        }
        match value {
            Some(value) => env.set.push((name.to_string(), value.to_string())),
            None => env.pass.push(name.to_string()),
        }
    }
    Ok(env)
}

/// The child binary as an absolute, canonical path.
///
/// - `given` with a directory part (`./x`, `/opt/x`, `bin/x`): that file;
/// - `given` as a bare name: looked up on `path_var`;
/// - nothing given: [`DEFAULT_CHILD_BIN`] in `exe_dir` (the gateway
///   binary's directory), else on `path_var`.
///
/// The result must be an executable regular file.
pub fn resolve_bin(
    given: Option<&Path>,
    exe_dir: Option<&Path>,
    path_var: Option<&str>,
) -> Result<PathBuf, ConfigError> {
    let error = |reason: String| ConfigError::ChildBin { reason };
    match given {
        Some(path) if path.components().count() > 1 || path.is_absolute() => {
            if !is_executable(path) {
                return Err(error(format!(
                    "--child-bin {}: not an executable file",
                    path.display()
                )));
            }
            canonical(path)
        }
        Some(name) => match search_path(name, path_var) {
            Some(found) => canonical(&found),
            None => Err(error(format!(
                "--child-bin {}: no executable of that name on PATH",
                name.display()
            ))),
        },
        None => {
            let beside = exe_dir.map(|dir| dir.join(DEFAULT_CHILD_BIN));
            if let Some(path) = beside.as_deref().filter(|p| is_executable(p)) {
                return canonical(path);
            }
            if let Some(found) = search_path(Path::new(DEFAULT_CHILD_BIN), path_var) {
                return canonical(&found);
            }
            let beside = beside.map_or_else(
                || "the gateway binary".to_string(),
                |p| p.display().to_string(),
            );
            Err(error(format!(
                "cannot find {DEFAULT_CHILD_BIN}: not at {beside} and not on PATH; give --child-bin"
            )))
        }
    }
}

fn canonical(path: &Path) -> Result<PathBuf, ConfigError> {
    path.canonicalize().map_err(|err| ConfigError::ChildBin {
        reason: format!("{}: {err}", path.display()),
    })
}

pub(super) fn search_path(name: &Path, path_var: Option<&str>) -> Option<PathBuf> {
    std::env::split_paths(path_var?)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

pub(super) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn write_file(path: &Path, mode: u32) {
        fs::write(path, "#!/bin/sh\n").unwrap();
        fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn env_entries_split() {
        let entries = ["HOME", "MY_*", "RUST_LOG=debug", "EMPTY=", "A=b=c"].map(String::from);
        let env = parse_env(&entries).unwrap();
        assert_eq!(env.pass, ["HOME", "MY_*"]);
        assert_eq!(
            env.set,
            [("RUST_LOG", "debug"), ("EMPTY", ""), ("A", "b=c")]
                .map(|(n, v)| (n.to_string(), v.to_string()))
        );
        assert!(!format!("{env:?}").contains("debug"));
    }

    #[test]
    fn bad_env_entries() {
        for bad in [
            "",
            "=x",
            "1A",
            "A-B",
            "A B=c",
            "ZUTCORE_RPC_TOKEN",
            "ZUTCORE_RPC_TOKEN=x",
            "*",
            "A*B",
            "A*=x",
        ] {
            let err = parse_env(&[bad.to_string()]).unwrap_err();
            assert!(err.to_string().contains("--child-env"), "{bad}: {err}");
        }
    }

    #[test]
    fn explicit_path_must_be_executable() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("agent");
        let plain = dir.path().join("plain");
        write_file(&exe, 0o755);
        write_file(&plain, 0o644);
        assert_eq!(
            resolve_bin(Some(&exe), None, None).unwrap(),
            exe.canonicalize().unwrap()
        );
        for bad in [plain, dir.path().join("missing"), dir.path().to_path_buf()] {
            let err = resolve_bin(Some(&bad), None, None).unwrap_err().to_string();
            assert!(err.contains("not an executable file"), "{err}");
        }
    }

    #[test]
    fn bare_name_is_searched_on_path() {
        let dir = tempfile::tempdir().unwrap();
        write_file(&dir.path().join("my-agent"), 0o755);
        let path_var = format!("/nonexistent:{}", dir.path().display());
        let found = resolve_bin(Some(Path::new("my-agent")), None, Some(&path_var)).unwrap();
        assert_eq!(found, dir.path().join("my-agent").canonicalize().unwrap());
        let err = resolve_bin(Some(Path::new("other")), None, Some(&path_var)).unwrap_err();
        assert!(
            err.to_string()
                .contains("no executable of that name on PATH"),
            "{err}"
        );
    }

    #[test]
    fn default_prefers_beside_the_gateway_then_path() {
        let beside = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        let path_var = on_path.path().display().to_string();
        write_file(&on_path.path().join(DEFAULT_CHILD_BIN), 0o755);
        let found = resolve_bin(None, Some(beside.path()), Some(&path_var)).unwrap();
        assert_eq!(
            found.parent().unwrap(),
            on_path.path().canonicalize().unwrap()
        );

        write_file(&beside.path().join(DEFAULT_CHILD_BIN), 0o755);
        let found = resolve_bin(None, Some(beside.path()), Some(&path_var)).unwrap();
        assert_eq!(
            found.parent().unwrap(),
            beside.path().canonicalize().unwrap()
        );
    }

    #[test]
    fn default_not_found_is_a_clear_error() {
        let empty = tempfile::tempdir().unwrap();
        let err = resolve_bin(None, Some(empty.path()), None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("cannot find corral-agent"), "{err}");
        assert!(err.contains("--child-bin"), "{err}");
    }
}

#[cfg(test)]
mod template_tests {
    use super::*;

    #[test]
    fn auto_forks_only_a_binary_named_corral_agent() {
        let agent = Path::new("/opt/corral/corral-agent");
        let other = Path::new("/opt/fake-agent");
        assert!(TemplateMode::Auto.applies_to(agent));
        assert!(!TemplateMode::Auto.applies_to(other));
        assert!(TemplateMode::On.applies_to(other));
        assert!(!TemplateMode::Off.applies_to(agent));
    }
}
