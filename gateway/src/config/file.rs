//! The optional TOML config file (`--config FILE`): the `serve` settings
//! under snake_case keys. Unknown keys are errors that name the key.
//! Relative paths in the file are relative to the file's directory.
//! Parse errors give the message and position but never the offending
//! line, which could hold a token.

use std::fs;
use std::path::{Path, PathBuf};

pub use super::settings::FileConfig;
use super::ConfigError;

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
    rebase(&mut file.mcp_servers);
    rebase(&mut file.observer_token_file);
    rebase(&mut file.admin_token_file);
    rebase(&mut file.audit_log);
    rebase(&mut file.jwt_secret_file);
    rebase(&mut file.jwks_file);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::bytes::FileBytes;
    use crate::config::duration::FileDuration;
    use crate::config::OnOff;
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
        assert_eq!(f.tool_network, Some(crate::config::ToolNetwork::Off));
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
