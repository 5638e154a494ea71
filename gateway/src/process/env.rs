//! The environment a child gets: only allowlisted variables of the gateway's
//! environment plus explicit settings. Everything else (other services'
//! secrets, a stale `ZUTCORE_RPC_TOKEN`) stays behind.

use std::ffi::{OsStr, OsString};

/// Variables passed through by default, with [`AGENT_ONLY`]. A name
/// ending in `*` matches by prefix (`LC_*` is every locale category).
pub const DEFAULT_ALLOWED: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "LC_*",
];

/// The child's token variable: never inherited, only ever set explicitly.
pub const TOKEN_VAR: &str = corral_protocol::zut::TOKEN_ENV;

/// Variables passed through by default to `corral-agent`, which a
/// third-party agent does not get unless the operator names them
/// (`--child-env`): the provider keys and endpoints, and corral's own.
pub const AGENT_ONLY: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ZUT_HOME",
    "CORRAL_HOME",
    "CORRAL_LOG",
];

/// `env` for a third-party agent: without [`AGENT_ONLY`] variables the
/// operator did not name in `named` (`--child-env NAME` or `NAME=VALUE`).
pub fn third_party_env(
    env: Vec<(OsString, OsString)>,
    named: &[String],
    set: &[(String, String)],
) -> Vec<(OsString, OsString)> {
    env.into_iter()
        .filter(|(name, _)| {
            let Some(name) = name.to_str() else {
                return false;
            };
            !AGENT_ONLY.contains(&name)
                || named.iter().any(|n| n == name)
                || set.iter().any(|(n, _)| n == name)
        })
        .collect()
}

/// Builds a child's complete environment from `vars` (pass
/// `std::env::vars_os()`): the variables named in [`DEFAULT_ALLOWED`],
/// [`AGENT_ONLY`] or
/// `extra_allowed` (same `*` prefix syntax), then the `set` pairs, which
/// replace inherited values. [`TOKEN_VAR`] is never inherited; the caller
/// adds a fresh token through `set` or by pushing it onto the result.
pub fn child_env(
    extra_allowed: &[String],
    set: &[(String, String)],
    vars: impl Iterator<Item = (OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    let allowed = |name: &OsStr| {
        let Some(name) = name.to_str() else {
            return false;
        };
        name != TOKEN_VAR
            && DEFAULT_ALLOWED
                .iter()
                .chain(AGENT_ONLY)
                .copied()
                .chain(extra_allowed.iter().map(String::as_str))
                .any(|pattern| matches(pattern, name))
    };
    let mut env: Vec<(OsString, OsString)> = vars.filter(|(name, _)| allowed(name)).collect();
    for (name, value) in set {
        env.retain(|(existing, _)| existing.as_os_str() != OsStr::new(name));
        env.push((name.into(), value.into()));
    }
    env
}

/// Whether `name` matches `pattern`: exactly, or by prefix when the pattern
/// ends in `*`.
fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Iterator<Item = (OsString, OsString)> {
        pairs
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect::<Vec<_>>()
            .into_iter()
    }

    fn names(env: &[(OsString, OsString)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.to_str().unwrap()).collect()
    }

    #[test]
    fn a_third_party_agent_gets_provider_keys_only_when_named() {
        let all = vars(&[
            ("PATH", "/bin"),
            ("ANTHROPIC_API_KEY", "a"),
            ("OPENAI_API_KEY", "o"),
            ("CORRAL_LOG", "debug"),
        ]);
        let env = child_env(&[], &[], all);
        let named = ["OPENAI_API_KEY".to_string()];
        let set = [("ZUT_HOME".to_string(), "/z".to_string())];
        let env = third_party_env(env, &named, &set);
        assert_eq!(names(&env), ["PATH", "OPENAI_API_KEY"]);
    }

    #[test]
    fn keeps_only_allowlisted_names() {
        let env = child_env(
            &[],
            &[],
            vars(&[
                ("PATH", "/bin"),
                ("AWS_SECRET_ACCESS_KEY", "s"),
                ("LC_ALL", "C.UTF-8"),
                ("LC", "x"),
                ("path", "lower"),
                ("ANTHROPIC_API_KEY", "k"),
            ]),
        );
        assert_eq!(names(&env), ["PATH", "LC_ALL", "ANTHROPIC_API_KEY"]);
    }

    #[test]
    fn extra_names_and_prefixes_are_allowed() {
        let extra = vec!["GIT_AUTHOR_NAME".to_string(), "CARGO_*".to_string()];
        let env = child_env(
            &extra,
            &[],
            vars(&[
                ("GIT_AUTHOR_NAME", "a"),
                ("CARGO_HOME", "/c"),
                ("GIT_DIR", "/g"),
            ]),
        );
        assert_eq!(names(&env), ["GIT_AUTHOR_NAME", "CARGO_HOME"]);
    }

    #[test]
    fn inherited_token_never_passes_even_if_allowed() {
        let extra = vec![TOKEN_VAR.to_string(), "ZUTCORE_*".to_string()];
        let env = child_env(&extra, &[], vars(&[(TOKEN_VAR, "stale"), ("HOME", "/h")]));
        assert_eq!(names(&env), ["HOME"]);
    }

    #[test]
    fn explicit_settings_win_and_may_set_the_token() {
        let set = vec![
            ("HOME".to_string(), "/override".to_string()),
            (TOKEN_VAR.to_string(), "fresh".to_string()),
        ];
        let env = child_env(
            &[],
            &set,
            vars(&[("HOME", "/h"), ("PATH", "/bin"), (TOKEN_VAR, "stale")]),
        );
        assert_eq!(
            env,
            vec![
                ("PATH".into(), "/bin".into()),
                ("HOME".into(), "/override".into()),
                (TOKEN_VAR.into(), "fresh".into()),
            ]
        );
    }

    #[test]
    fn non_utf8_names_are_dropped_and_values_kept() {
        use std::os::unix::ffi::OsStringExt;
        let bad_name = OsString::from_vec(vec![b'L', b'C', b'_', 0xff]);
        let bad_value = OsString::from_vec(vec![b'/', 0xfe]);
        let input = vec![(bad_name, "x".into()), ("TMPDIR".into(), bad_value.clone())];
        let env = child_env(&[], &[], input.into_iter());
        assert_eq!(env, vec![("TMPDIR".into(), bad_value)]);
    }
}
