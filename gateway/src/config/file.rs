//! The optional TOML config file (`--config FILE`): the `serve` settings
//! under snake_case keys. Unknown keys are errors that name the key.
//! Relative paths in the file are relative to the file's directory.
//! Parse errors give the message and position but never the offending
//! line, which could hold a token.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;

use super::bytes::FileBytes;
use super::duration::FileDuration;
use super::sandbox::OnOff;
use super::ConfigError;
use crate::auth::Secret;

/// The file's settings as written; `config::load` merges and validates them.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub metrics_listen: Option<String>,
    pub proxy_listen: Option<String>,
    pub trusted_proxies: Option<Vec<String>>,
    pub projects_root: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub tokens: Option<TokenList>,
    pub token_file: Option<PathBuf>,
    pub observer_tokens: Option<TokenList>,
    pub observer_token_file: Option<PathBuf>,
    pub admin_token: Option<Secret>,
    pub admin_token_file: Option<PathBuf>,
    pub allowed_origins: Option<Vec<String>>,
    pub idle_timeout: Option<FileDuration>,
    pub max_children: Option<usize>,
    pub dialect: Option<crate::dialect::Dialect>,
    pub child_bin: Option<PathBuf>,
    pub child_args: Option<Vec<String>>,
    pub child_command: Option<String>,
    pub child_env: Option<Vec<String>>,
    pub replay_events: Option<usize>,
    pub replay_bytes: Option<FileBytes>,
    pub outbox_frames: Option<usize>,
    pub client_buffer_bytes: Option<FileBytes>,
    pub total_client_buffer_bytes: Option<FileBytes>,
    pub max_client_requests: Option<usize>,
    pub max_frame_bytes: Option<FileBytes>,
    pub ws_buffer_bytes: Option<FileBytes>,
    pub hello_timeout: Option<FileDuration>,
    pub max_hello_bytes: Option<FileBytes>,
    pub header_timeout: Option<FileDuration>,
    pub max_connections: Option<usize>,
    pub auth_failure_rate: Option<f64>,
    pub auth_failure_burst: Option<u32>,
    pub max_auth_sources: Option<usize>,
    pub ops_connections: Option<usize>,
    pub max_connections_per_token: Option<usize>,
    pub ping_interval: Option<FileDuration>,
    pub ping_timeout: Option<FileDuration>,
    pub ready_timeout: Option<FileDuration>,
    pub stop_grace: Option<FileDuration>,
    pub permission_timeout: Option<FileDuration>,
    pub shutdown_grace: Option<FileDuration>,
    pub crash_limit: Option<u32>,
    pub crash_window: Option<FileDuration>,
    pub crash_cooldown: Option<FileDuration>,
    pub sandbox: Option<OnOff>,
    pub sandbox_hide: Option<Vec<PathBuf>>,
    pub tool_network: Option<OnOff>,
    pub child_user: Option<String>,
    pub child_memory_max: Option<FileBytes>,
    pub child_pids_max: Option<u64>,
}

/// Reads and parses `path`, rebasing its relative paths onto its directory.
pub fn read(path: &Path) -> Result<FileConfig, ConfigError> {
    let text = fs::read_to_string(path).map_err(|source| ConfigError::ReadFile {
        path: path.to_path_buf(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new(""));
    parse(&text, base).map_err(|message| ConfigError::ParseFile {
        path: path.to_path_buf(),
        message,
    })
}

/// Parses the file's text; relative paths are joined onto `base`.
pub fn parse(text: &str, base: &Path) -> Result<FileConfig, String> {
    let mut file: FileConfig = toml::from_str(text).map_err(|err| describe(text, &err))?;
    let rebase = |p: &mut Option<PathBuf>| {
        if let Some(path) = p.as_mut().filter(|p| p.is_relative()) {
            *path = base.join(&*path);
        }
    };
    rebase(&mut file.projects_root);
    rebase(&mut file.state_dir);
    rebase(&mut file.token_file);
    rebase(&mut file.observer_token_file);
    rebase(&mut file.admin_token_file);
    for path in file.sandbox_hide.iter_mut().flatten() {
        if path.is_relative() {
            *path = base.join(&*path);
        }
    }
    // A bare program name is looked up on PATH; only real paths are rebased.
    if file
        .child_bin
        .as_ref()
        .is_some_and(|p| p.components().count() > 1)
    {
        rebase(&mut file.child_bin);
    }
    Ok(file)
}

/// `MESSAGE (line L, column C)`, without quoting the source line.
fn describe(text: &str, err: &toml::de::Error) -> String {
    let message = err.message().trim_end();
    match err.span() {
        Some(span) => {
            let before = &text[..span.start.min(text.len())];
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("{message} (line {line}, column {column})")
        }
        None => message.to_string(),
    }
}

/// A list of tokens: `["a", "b"]` or one string. Type errors do not echo
/// the value.
#[derive(Debug, Clone, Default)]
pub struct TokenList(pub Vec<Secret>);

impl<'de> Deserialize<'de> for TokenList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ListVisitor;

        impl<'de> Visitor<'de> for ListVisitor {
            type Value = TokenList;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a list of token strings")
            }

            fn visit_str<E: de::Error>(self, v: &str) -> Result<TokenList, E> {
                Ok(TokenList(vec![Secret::new(v)]))
            }

            fn visit_i64<E: de::Error>(self, _: i64) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a number",
                ))
            }

            fn visit_u64<E: de::Error>(self, _: u64) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a number",
                ))
            }

            fn visit_f64<E: de::Error>(self, _: f64) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a number",
                ))
            }

            fn visit_bool<E: de::Error>(self, _: bool) -> Result<TokenList, E> {
                Err(E::custom(
                    "expected a list of token strings, found a boolean",
                ))
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<TokenList, A::Error> {
                let mut tokens = Vec::new();
                while let Some(token) = seq.next_element::<Secret>()? {
                    tokens.push(token);
                }
                Ok(TokenList(tokens))
            }
        }

        deserializer.deserialize_any(ListVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn all_keys_parse() {
        let text = r#"
            listen = "127.0.0.1:7000"
            projects_root = "projects"
            state_dir = "/var/lib/corral"
            tokens = ["aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb"]
            token_file = "tokens.txt"
            observer_tokens = "cccccccccccccccc"
            observer_token_file = "/etc/obs"
            admin_token = "dddddddddddddddd"
            admin_token_file = "admin.txt"
            allowed_origins = ["https://ide.example"]
            idle_timeout = "10m"
            max_children = 8
            child_bin = "bin/corral-agent"
            child_args = ["--model", "m"]
            child_command = "pi-acp --verbose"
            child_env = ["HOME", "A=b"]
            replay_events = 100
            replay_bytes = "1MiB"
            outbox_frames = 32
            client_buffer_bytes = "256KiB"
            total_client_buffer_bytes = "1MiB"
            max_frame_bytes = 65536
            hello_timeout = 5
            max_hello_bytes = "16KiB"
            header_timeout = "3s"
            max_connections = 500
            ops_connections = 4
            max_connections_per_token = 16
            ping_interval = "30s"
            ping_timeout = "10s"
            ready_timeout = "15s"
            stop_grace = "250ms"
            shutdown_grace = "1m"
            crash_limit = 3
            crash_window = "60s"
            crash_cooldown = "5m"
            sandbox = "on"
            sandbox_hide = ["secrets", "/srv/keys"]
            tool_network = false
            child_user = "corral-agents"
            child_memory_max = "512MiB"
            child_pids_max = 256
        "#;
        let f = parse(text, Path::new("/etc/corral")).unwrap();
        assert_eq!(f.projects_root, Some(PathBuf::from("/etc/corral/projects")));
        assert_eq!(f.state_dir, Some(PathBuf::from("/var/lib/corral")));
        assert_eq!(f.token_file, Some(PathBuf::from("/etc/corral/tokens.txt")));
        assert_eq!(f.observer_token_file, Some(PathBuf::from("/etc/obs")));
        assert_eq!(
            f.child_bin,
            Some(PathBuf::from("/etc/corral/bin/corral-agent"))
        );
        assert_eq!(f.child_command.as_deref(), Some("pi-acp --verbose"));
        assert_eq!(f.tokens.unwrap().0.len(), 2);
        assert_eq!(f.observer_tokens.unwrap().0.len(), 1);
        assert_eq!(f.idle_timeout, Some(FileDuration(Duration::from_secs(600))));
        assert_eq!(f.hello_timeout, Some(FileDuration(Duration::from_secs(5))));
        assert_eq!(f.replay_bytes, Some(FileBytes(1 << 20)));
        assert_eq!(f.client_buffer_bytes, Some(FileBytes(256 << 10)));
        assert_eq!(f.total_client_buffer_bytes, Some(FileBytes(1 << 20)));
        assert_eq!(f.max_hello_bytes, Some(FileBytes(16 << 10)));
        assert_eq!(f.header_timeout, Some(FileDuration(Duration::from_secs(3))));
        assert_eq!(f.max_connections, Some(500));
        assert_eq!(f.ops_connections, Some(4));
        assert_eq!(f.max_connections_per_token, Some(16));
        assert_eq!(f.crash_limit, Some(3));
        assert_eq!(f.sandbox, Some(OnOff::On));
        assert_eq!(
            f.sandbox_hide,
            Some(vec![
                PathBuf::from("/etc/corral/secrets"),
                PathBuf::from("/srv/keys")
            ])
        );
        assert_eq!(f.tool_network, Some(OnOff::Off));
        assert_eq!(f.child_user.as_deref(), Some("corral-agents"));
        assert_eq!(f.child_memory_max, Some(FileBytes(512 << 20)));
        assert_eq!(f.child_pids_max, Some(256));
    }

    #[test]
    fn bare_child_bin_is_not_rebased() {
        let f = parse("child_bin = \"corral-agent\"", Path::new("/etc")).unwrap();
        assert_eq!(f.child_bin, Some(PathBuf::from("corral-agent")));
    }

    #[test]
    fn unknown_key_is_named() {
        let err = parse(
            "listen = \"127.0.0.1:1\"\nidel_timeout = \"5m\"\n",
            Path::new(""),
        )
        .unwrap_err();
        assert!(err.contains("unknown field `idel_timeout`"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn errors_do_not_echo_tokens() {
        for text in [
            "tokens = 12345678901234567",
            "tokens = [\"aaaaaaaaaaaaaaaa\", 5]\nadmin_token = \"secretsecretsecret\" x",
            "admin_token = [\"secretsecretsecret\"]",
            "admin_token = 1234567890123456789",
            "observer_tokens = [1234567890123456789]",
        ] {
            let err = parse(text, Path::new("")).unwrap_err();
            assert!(!err.contains("secretsecretsecret"), "{err}");
            assert!(!err.contains("aaaaaaaaaaaaaaaa"), "{err}");
            assert!(!err.contains("1234567890123456789"), "{err}");
        }
    }

    #[test]
    fn bad_values_are_errors() {
        let err = parse("idle_timeout = \"soon\"", Path::new("")).unwrap_err();
        assert!(err.contains("invalid duration"), "{err}");
        let err = parse("max_children = \"many\"", Path::new("")).unwrap_err();
        assert!(err.contains("invalid type"), "{err}");
    }
}
