//! `--child-command 'CMD ARGS…'`: a third-party ACP agent as every
//! project's child instead of `corral-agent`. The string is split like a
//! POSIX shell splits words (quotes and backslashes; no expansion), the
//! program is found once at start (a bare name on `PATH`), and the
//! settings it cannot work with are refused here.

use std::path::{Path, PathBuf};

use super::child::{is_executable, search_path};
use super::ConfigError;
use crate::dialect::Dialect;

const SETTING: &str = "--child-command / child_command";

/// What the rest of the configuration says that the command depends on.
pub(super) struct Context<'a> {
    pub dialect: Dialect,
    /// `-- CHILD_ARGS` / `child_args`: arguments for `corral-agent`.
    pub child_args: &'a [String],
    /// The sandbox is on and tool commands lose the network.
    pub tool_network_off: bool,
    /// `PATH` of the gateway's environment.
    pub path_var: Option<&'a str>,
}

/// The command's words, the program as an absolute path; `None` when no
/// command is configured.
pub(super) fn resolve(
    given: Option<&str>,
    context: &Context<'_>,
) -> Result<Option<Vec<String>>, ConfigError> {
    let Some(text) = given else {
        return Ok(None);
    };
    let invalid = |reason: String| ConfigError::Invalid {
        setting: SETTING.into(),
        reason,
    };
    let mut words = shlex::split(text).ok_or_else(|| {
        invalid(format!(
            "{text:?} is not a command line: a quote is not closed, or it ends in a backslash"
        ))
    })?;
    if words.is_empty() {
        return Err(invalid(
            "the command is empty: give the agent's program and its arguments, \
             e.g. --child-command 'pi-acp'"
                .into(),
        ));
    }
    if !context.dialect.rules().runs_third_party_agents() {
        return Err(invalid(format!(
            "it needs --dialect {}: a third-party agent must speak that dialect itself \
             (the other dialects' child is corral-agent)",
            third_party_dialects().join(" or --dialect "),
        )));
    }
    if !context.child_args.is_empty() {
        return Err(invalid(
            "-- CHILD_ARGS (child_args) are arguments for corral-agent; put the agent's own \
             arguments in the command"
                .into(),
        ));
    }
    if context.tool_network_off {
        return Err(invalid(
            "--tool-network off cannot apply to a third-party agent: its tool commands cannot \
             be cut off the network apart from the agent, which needs it for its model; \
             use --tool-network proxy (the agent and its tools go out through the egress \
             proxy: allow its model provider with --egress-allow) or on"
                .into(),
        ));
    }
    words[0] = program(&words[0], context.path_var)
        .map_err(invalid)?
        .to_string_lossy()
        .into_owned();
    Ok(Some(words))
}

/// The names of the dialects third-party agents speak.
fn third_party_dialects() -> Vec<&'static str> {
    let dialects = Dialect::all().iter().map(|dialect| dialect.rules());
    dialects
        .filter(|rules| rules.runs_third_party_agents())
        .map(|rules| rules.name())
        .collect()
}

/// `name` as an absolute path: a path with a directory part made absolute
/// (against the current directory), a bare name found on `path_var`. It
/// must be an executable file.
fn program(name: &str, path_var: Option<&str>) -> Result<PathBuf, String> {
    let path = Path::new(name);
    if path.components().count() > 1 || path.is_absolute() {
        if !is_executable(path) {
            return Err(format!("{name}: not an executable file"));
        }
        return std::path::absolute(path).map_err(|e| format!("{name}: {e}"));
    }
    search_path(path, path_var).ok_or_else(|| format!("{name}: no executable of that name on PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn context(path_var: Option<&str>) -> Context<'_> {
        Context {
            dialect: Dialect::named("acp").unwrap(),
            child_args: &[],
            tool_network_off: false,
            path_var,
        }
    }

    fn agent_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let agent = dir.path().join("my-agent");
        std::fs::write(&agent, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&agent, std::fs::Permissions::from_mode(0o755)).unwrap();
        dir
    }

    #[test]
    fn words_split_like_a_shell_and_the_program_is_found_on_path() {
        let dir = agent_dir();
        let path_var = format!("/nonexistent:{}", dir.path().display());
        let words = resolve(
            Some(r#"my-agent --name "two words" 'it''s' a\ b"#),
            &context(Some(&path_var)),
        )
        .unwrap()
        .unwrap();
        let program = dir.path().join("my-agent").display().to_string();
        assert_eq!(
            words,
            [program.as_str(), "--name", "two words", "its", "a b"]
        );
        assert_eq!(resolve(None, &context(None)).unwrap(), None);
    }

    #[test]
    fn a_path_is_taken_as_given_if_executable() {
        let dir = agent_dir();
        let agent = dir.path().join("my-agent").display().to_string();
        let words = resolve(Some(&agent), &context(None)).unwrap().unwrap();
        assert_eq!(words, [agent.as_str()]);
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "x").unwrap();
        let err = resolve(Some(&plain.display().to_string()), &context(None)).unwrap_err();
        assert!(err.to_string().contains("not an executable file"), "{err}");
    }

    #[test]
    fn refusals_name_the_setting_and_the_way_out() {
        let dir = agent_dir();
        let path_var = dir.path().display().to_string();
        let ok = context(Some(&path_var));
        let args = ["--model".to_string()];
        let cases: Vec<(&str, Context<'_>, &str)> = vec![
            ("", context(Some(&path_var)), "the command is empty"),
            ("  ", context(Some(&path_var)), "the command is empty"),
            (
                "my-agent 'open",
                context(Some(&path_var)),
                "a quote is not closed",
            ),
            (
                "no-such-agent",
                context(Some(&path_var)),
                "no executable of that name on PATH",
            ),
            (
                "my-agent",
                Context {
                    dialect: Dialect::default(),
                    ..context(Some(&path_var))
                },
                "needs --dialect acp",
            ),
            (
                "my-agent",
                Context {
                    child_args: &args,
                    ..context(Some(&path_var))
                },
                "CHILD_ARGS",
            ),
            (
                "my-agent",
                Context {
                    tool_network_off: true,
                    ..context(Some(&path_var))
                },
                "use --tool-network proxy",
            ),
        ];
        for (text, context, needle) in cases {
            let err = resolve(Some(text), &context).unwrap_err().to_string();
            assert!(err.contains(SETTING), "{text:?}: {err}");
            assert!(err.contains(needle), "{text:?}: {err}");
        }
        assert!(resolve(Some("my-agent"), &ok).is_ok());
    }
}
