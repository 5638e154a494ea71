//! The command line: `corral serve …` (its settings are declared in
//! `settings`), `corral attach …` and `corral journal …` (clap derive).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::settings::ServeArgs;
use crate::auth::Secret;

/// corral: runs one coding-agent child per project and serves it to
/// WebSocket clients.
#[derive(Debug, Parser)]
#[command(name = "corral", version)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,

    /// Log format on stderr: human-readable text or one JSON object per line.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Parsed once at startup, so the size difference between variants is moot.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the gateway (needs --listen and --projects-root; see --help).
    Serve(ServeArgs),
    /// Bridge this process's stdin/stdout to a project on a remote gateway.
    Attach(AttachArgs),
    /// Check or repair a session journal (STATE/sessions/PROJECT.jsonl).
    Journal(crate::journal::JournalArgs),
    /// Make, list or revoke managed tokens through a gateway's admin API.
    Token(crate::token_cli::TokenArgs),
}

/// `corral attach URL`: the token comes from `--token-file`, else from
/// `--token` / `CORRAL_TOKEN`.
#[derive(Debug, Clone, Args)]
pub struct AttachArgs {
    /// The project's WebSocket URL, e.g. ws://host:7000/v1/projects/NAME/rpc.
    #[arg(value_name = "URL")]
    pub url: String,

    /// File holding the client token (first non-comment line).
    #[arg(long, value_name = "F")]
    pub token_file: Option<PathBuf>,

    /// The client token (prefer CORRAL_TOKEN: command lines are visible to other users).
    #[arg(long, value_name = "T", env = "CORRAL_TOKEN", hide_env_values = true)]
    pub token: Option<Secret>,

    /// The gateway's dialect, spoken on stdio too.
    #[arg(long, value_enum, default_value_t = crate::dialect::Dialect::default())]
    pub dialect: crate::dialect::Dialect,

    /// Receive only the events of runs this session started (plus events
    /// outside runs), not those of other clients of the project.
    #[arg(long)]
    pub own_runs: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::OnOff;
    use clap::CommandFactory;
    use std::time::Duration;

    fn serve(args: &[&str]) -> ServeArgs {
        let argv = ["corral", "serve"].iter().chain(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Serve(args) => args,
            _ => panic!("expected serve"),
        }
    }

    #[test]
    fn definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn serve_help_marks_required_flags_and_lists_environment_exit_codes_and_dialects() {
        let mut command = Cli::command();
        let serve = command.find_subcommand_mut("serve").unwrap();
        let help = serve.render_long_help().to_string();
        for needle in [
            "Address to listen on, e.g. 127.0.0.1:7000 (required)",
            "the projects (required)",
            "Required: --listen and --projects-root",
            "\n  corral serve --listen 127.0.0.1:7000 --projects-root",
            "CORRAL_LOG",
            "CORRAL_TOKENS",
            "ANTHROPIC_API_KEY",
            "Exit codes:",
            "  2  bad flags or config",
            "zut (zut RPC v1, the default), letscode (letscode-rpc/1),\nzi (Zi RPC v1), acp",
        ] {
            assert!(
                help.contains(needle),
                "corral serve --help lacks {needle:?}:\n{help}"
            );
        }
    }

    #[test]
    fn serve_flags() {
        let args = serve(&[
            "--listen",
            "127.0.0.1:7000",
            "--projects-root",
            "/p",
            "--token",
            "aaaaaaaaaaaaaaaa",
            "--token",
            "bbbbbbbbbbbbbbbb",
            "--idle-timeout",
            "0",
            "--replay-bytes",
            "4MiB",
            "--hello-timeout",
            "250ms",
            "--child-env",
            "HOME",
            "--child-env",
            "A=b",
            "--",
            "--model",
            "x",
        ]);
        assert_eq!(args.listen, Some("127.0.0.1:7000".parse().unwrap()));
        assert_eq!(args.tokens.len(), 2);
        assert_eq!(args.idle_timeout, Some(Duration::ZERO));
        assert_eq!(args.replay_bytes, Some(4 << 20));
        assert_eq!(args.hello_timeout, Some(Duration::from_millis(250)));
        assert_eq!(args.child_env, ["HOME", "A=b"]);
        assert_eq!(args.child_args, ["--model", "x"]);
        assert_eq!(args.max_children, None);
        assert!(!format!("{args:?}").contains("aaaaaaaaaaaaaaaa"));
        assert_eq!(args.sandbox, None);
    }

    #[test]
    fn confinement_flags() {
        let args = serve(&[
            "--sandbox",
            "off",
            "--sandbox-hide",
            "/srv/a",
            "--sandbox-hide",
            "/srv/b",
            "--tool-network",
            "on",
            "--child-user",
            "nobody",
            "--child-memory-max",
            "64MiB",
            "--child-pids-max",
            "128",
        ]);
        assert_eq!(args.sandbox, Some(OnOff::Off));
        assert_eq!(
            args.sandbox_hide,
            [PathBuf::from("/srv/a"), "/srv/b".into()]
        );
        assert_eq!(args.tool_network, Some(crate::config::ToolNetwork::On));
        assert_eq!(args.child_user.as_deref(), Some("nobody"));
        assert_eq!(args.child_memory_max, Some(64 << 20));
        assert_eq!(args.child_pids_max, Some(128));
        let argv = ["corral", "serve", "--sandbox", "maybe"];
        assert!(Cli::try_parse_from(argv).is_err());
    }

    #[test]
    fn bad_duration_is_a_usage_error() {
        let argv = ["corral", "serve", "--ping-interval", "soon"];
        let err = Cli::try_parse_from(argv).unwrap_err().to_string();
        assert!(err.contains("invalid duration"), "{err}");
    }

    #[test]
    fn attach_args() {
        let argv = [
            "corral",
            "attach",
            "ws://h/v1/projects/p/rpc",
            "--token-file",
            "/t",
        ];
        let Command::Attach(args) = Cli::try_parse_from(argv).unwrap().command else {
            panic!("expected attach");
        };
        assert_eq!(args.url, "ws://h/v1/projects/p/rpc");
        assert_eq!(args.token_file, Some(PathBuf::from("/t")));
        assert!(!args.own_runs);
    }
}
