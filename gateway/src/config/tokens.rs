//! Where each role's tokens come from, and their checks. Per role, the first
//! source that yields any token wins: command line (flags plus the token
//! file flag) > environment > config file (key plus the `*_file` key).
//! Tokens are validated here and never appear in an error message.

use std::path::Path;

use super::settings::{FileConfig, ServeArgs, TOKEN_ENV_VARS};
use super::token_file::{read_token_file, Found, MIN_TOKEN_CHARS};
use super::values::TokenList;
use super::ConfigError;
use crate::auth::{Role, Secret, Tokens};

/// The tokens of every role, validated. Client tokens may be empty here;
/// `config::load` decides whether to generate one or refuse.
pub fn resolve(
    args: &ServeArgs,
    file: &FileConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Tokens, ConfigError> {
    let client = pick(
        Role::Client,
        [
            layer(&args.tokens, "--token", args.token_file.as_deref())?,
            from_env(env, TOKEN_ENV_VARS[0]),
            layer(
                file_list(&file.tokens),
                "`tokens` in the config file",
                file.token_file.as_deref(),
            )?,
        ],
    )?;
    let observer = pick(
        Role::Observer,
        [
            layer(
                &args.observer_tokens,
                "--observer-token",
                args.observer_token_file.as_deref(),
            )?,
            from_env(env, TOKEN_ENV_VARS[1]),
            layer(
                file_list(&file.observer_tokens),
                "`observer_tokens` in the config file",
                file.observer_token_file.as_deref(),
            )?,
        ],
    )?;
    let admin = pick(
        Role::Admin,
        [
            layer(
                args.admin_token.as_slice(),
                "--admin-token",
                args.admin_token_file.as_deref(),
            )?,
            from_env(env, TOKEN_ENV_VARS[2]),
            layer(
                file.admin_token.as_slice(),
                "`admin_token` in the config file",
                file.admin_token_file.as_deref(),
            )?,
        ],
    )?;
    Ok(Tokens {
        client,
        observer,
        admin,
    })
}

/// The first non-empty source, with every token in it checked.
fn pick<const N: usize>(role: Role, sources: [Found; N]) -> Result<Vec<Secret>, ConfigError> {
    let Some(found) = sources.into_iter().find(|found| !found.is_empty()) else {
        return Ok(Vec::new());
    };
    let mut tokens = Vec::with_capacity(found.len());
    for (token, origin) in found {
        check(&token, role, &origin)?;
        tokens.push(token);
    }
    Ok(tokens)
}

fn file_list(list: &Option<TokenList>) -> &[Secret] {
    list.as_ref().map_or(&[], |list| list.0.as_slice())
}

/// Tokens given directly (`what`) plus those read from `token_file`.
fn layer(direct: &[Secret], what: &str, token_file: Option<&Path>) -> Result<Found, ConfigError> {
    let mut found: Found = direct
        .iter()
        .enumerate()
        .map(|(i, t)| (t.clone(), format!("{what} (#{})", i + 1)))
        .collect();
    if let Some(path) = token_file {
        found.extend(read_token_file(path)?);
    }
    Ok(found)
}

/// A comma-separated list from the environment; unset or blank means none.
fn from_env(env: &dyn Fn(&str) -> Option<String>, var: &str) -> Found {
    env(var)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .enumerate()
        .map(|(i, t)| (Secret::new(t), format!("{var} (item {})", i + 1)))
        .collect()
}

/// At least [`MIN_TOKEN_CHARS`] characters, no whitespace or control
/// characters (they could not be sent in a header anyway).
fn check(token: &Secret, role: Role, origin: &str) -> Result<(), ConfigError> {
    let bad = |problem: String| ConfigError::BadToken {
        role,
        origin: origin.to_string(),
        problem,
    };
    let text = token.expose();
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("contains whitespace or control characters".into()));
    }
    let chars = text.chars().count();
    if chars < MIN_TOKEN_CHARS {
        return Err(bad(format!(
            "is too short: {chars} characters, at least {MIN_TOKEN_CHARS} are required because short tokens can be guessed"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::token_file::read_token_file;
    use std::fs;

    const A: &str = "aaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbb";
    const C: &str = "cccccccccccccccc";

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn exposed(list: &[Secret]) -> Vec<&str> {
        list.iter().map(Secret::expose).collect()
    }

    #[test]
    fn token_file_skips_comments_and_blanks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens");
        fs::write(&path, format!("# clients\n\n  {A}  \n#{B}\n{C}\n")).unwrap();
        let args = ServeArgs {
            token_file: Some(path),
            ..ServeArgs::default()
        };
        let tokens = resolve(&args, &FileConfig::default(), &no_env).unwrap();
        assert_eq!(exposed(&tokens.client), [A, C]);
        assert!(tokens.observer.is_empty() && tokens.admin.is_empty());
    }

    #[test]
    fn token_file_errors() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        fs::write(&empty, "# nothing\n\n").unwrap();
        let err = read_token_file(&empty).unwrap_err();
        assert!(matches!(err, ConfigError::EmptyTokenFile { .. }), "{err}");
        let err = read_token_file(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(err, ConfigError::TokenFile { .. }), "{err}");
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn flags_beat_env_beat_file_per_role() {
        let file = FileConfig {
            tokens: Some(TokenList(vec![Secret::new(C)])),
            observer_tokens: Some(TokenList(vec![Secret::new(C)])),
            admin_token: Some(Secret::new(C)),
            ..FileConfig::default()
        };
        let env = |var: &str| match var {
            "CORRAL_TOKENS" => Some(format!(" {B} ,, {A}")),
            "CORRAL_OBSERVER_TOKENS" => Some(B.to_string()),
            "CORRAL_ADMIN_TOKEN" => Some("  ".to_string()),
            _ => None,
        };
        let args = ServeArgs {
            tokens: vec![Secret::new(A)],
            ..ServeArgs::default()
        };
        let tokens = resolve(&args, &file, &env).unwrap();
        assert_eq!(exposed(&tokens.client), [A]);
        assert_eq!(exposed(&tokens.observer), [B]);
        assert_eq!(
            exposed(&tokens.admin),
            [C],
            "blank env falls through to the file"
        );

        let tokens = resolve(&ServeArgs::default(), &file, &env).unwrap();
        assert_eq!(exposed(&tokens.client), [B, A]);
    }

    #[test]
    fn short_or_spaced_tokens_are_refused_without_echo() {
        for (bad, problem) in [
            ("short-token", "too short"),
            ("has space in the middle", "whitespace"),
        ] {
            let args = ServeArgs {
                admin_token: Some(Secret::new(bad)),
                ..ServeArgs::default()
            };
            let err = resolve(&args, &FileConfig::default(), &no_env)
                .unwrap_err()
                .to_string();
            assert!(err.contains(problem), "{err}");
            assert!(err.contains("admin token from --admin-token"), "{err}");
            assert!(!err.contains(bad), "{err}");
        }
        let env = |_: &str| Some("tooshort".to_string());
        let err = resolve(&ServeArgs::default(), &FileConfig::default(), &env).unwrap_err();
        assert!(err.to_string().contains("CORRAL_TOKENS (item 1)"), "{err}");
    }

    #[test]
    fn sixteen_unicode_characters_are_enough() {
        let token = "é".repeat(MIN_TOKEN_CHARS);
        let args = ServeArgs {
            tokens: vec![Secret::new(token.as_str())],
            ..ServeArgs::default()
        };
        assert!(resolve(&args, &FileConfig::default(), &no_env).is_ok());
    }
}
