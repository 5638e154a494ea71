//! The command line: `corral serve …` and `corral attach …` (clap derive).
//! Every `serve` setting is optional here so that `config::load` can tell
//! a flag that was given from one that was not (command line > environment >
//! config file > default); the defaults live in `config`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use super::bytes::parse_bytes;
use super::duration::parse_duration;
use super::sandbox::OnOff;
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
}

const SERVE_ENV_HELP: &str = "\
Required: --listen and --projects-root, on the command line or in --config.

Example: serve every directory under ~/projects, agents on the offline echo provider:
  corral serve --listen 127.0.0.1:7000 --projects-root ~/projects -- --provider echo
On a loopback address without tokens, a client and an admin token are
generated and printed; the dashboard is at http://127.0.0.1:7000/ and
clients connect to ws://127.0.0.1:7000/v1/projects/NAME/rpc.

Dialects (--dialect): zut (zut RPC v1, the default), letscode (letscode-rpc/1),
zi (Zi RPC v1), acp (Agent Client Protocol v1). Clients and children speak
the same one.

Durations: 250ms, 10s, 5m, 2h, or a number of seconds. Sizes: bytes, or KiB/MiB/GiB.
Precedence: command line > environment > config file > default.

Environment:
  CORRAL_LOG              log filter for stderr, e.g. debug or corral=debug [default: info]
  CORRAL_TOKENS           client tokens, comma-separated
  CORRAL_OBSERVER_TOKENS  observer tokens, comma-separated
  CORRAL_ADMIN_TOKEN      the admin token
  ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, OPENAI_API_KEY, OPENAI_BASE_URL,
  ZUT_HOME, CORRAL_HOME   passed to children (as are PATH, HOME, LANG and the
                          like, and --child-env names); nothing else is
  NOTIFY_SOCKET           set by systemd (Type=notify): READY=1 once listening
Tokens are at least 16 characters. Tokens given on the command line are
visible to other local users (ps); prefer files or the environment. The
gateway removes these variables from its environment once read.

With --sandbox on (the default) the gateway checks at start that the agent
can confine itself here (corral-agent sandbox-probe) and refuses to start if
not. Resource limits use cgroup v2 when the gateway's cgroup offers the
memory and pids controllers, else cgroup v1, else rlimits.

Exit codes:
  0  stopped by SIGTERM or SIGINT (children stopped, clients closed)
  1  the agent sandbox is unavailable on this host (see --sandbox)
  2  bad flags or config, or it cannot start serving (address in use,
     state directory not writable)";

/// `corral serve`. Durations: 250ms, 10s, 5m, 2h or seconds; sizes: bytes
/// or KiB/MiB/GiB.
#[derive(Debug, Clone, Default, Args)]
#[command(after_help = SERVE_ENV_HELP)]
pub struct ServeArgs {
    /// TOML config file (same settings, snake_case keys).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// Address to listen on, e.g. 127.0.0.1:7000 (required).
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,

    /// Serve /metrics without a token on this separate address (for a scraper).
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// A second address serving everything --listen does, for a trusted load balancer only: on it (and only on it) the client address is the right-most X-Forwarded-For entry [default: none].
    #[arg(long, value_name = "ADDR")]
    pub proxy_listen: Option<SocketAddr>,

    /// The balancer's address or range (e.g. 10.0.0.5 or 10.0.0.0/24), repeatable; required with --proxy-listen: only connections from there may name the client in X-Forwarded-For. Refused when it covers an address of this host while agents' tools have the network [default: none].
    #[arg(long = "trusted-proxy", value_name = "CIDR", value_parser = parse_net)]
    pub trusted_proxy: Vec<ipnet::IpNet>,

    /// Export OpenTelemetry traces (one per prompt, the gateway's span
    /// linked to the agent's) over OTLP/HTTP to this base URL, e.g.
    /// http://127.0.0.1:4318; children export there too [default: off].
    #[arg(long, value_name = "URL", env = "OTEL_EXPORTER_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,

    /// Directory whose subdirectories are the projects (required).
    #[arg(long, value_name = "DIR")]
    pub projects_root: Option<PathBuf>,

    /// Gateway state; sessions go to STATE/sessions/PROJECT.jsonl [default: ./corral-state].
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// A client token (repeatable).
    #[arg(long = "token", value_name = "T")]
    pub tokens: Vec<Secret>,

    /// File of client tokens, one per line (`#` comments, blank lines ignored).
    #[arg(long, value_name = "F")]
    pub token_file: Option<PathBuf>,

    /// An observer (read-only) token (repeatable).
    #[arg(long = "observer-token", value_name = "T")]
    pub observer_tokens: Vec<Secret>,

    /// File of observer tokens, one per line.
    #[arg(long, value_name = "F")]
    pub observer_token_file: Option<PathBuf>,

    /// The admin API token.
    #[arg(long, value_name = "T")]
    pub admin_token: Option<Secret>,

    /// File of admin tokens, one per line.
    #[arg(long, value_name = "F")]
    pub admin_token_file: Option<PathBuf>,

    /// A browser origin allowed to connect, `scheme://host[:port]`, or `*` (repeatable) [default: same origin only].
    #[arg(long = "allowed-origin", value_name = "O")]
    pub allowed_origins: Vec<String>,

    /// Stop a child with no clients after this long; 0 = never [default: 10m].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub idle_timeout: Option<Duration>,

    /// Most children running at once [default: 64].
    #[arg(long, value_name = "N")]
    pub max_children: Option<usize>,

    /// The wire protocol of every child and its clients [default: zut].
    #[arg(long, value_enum, value_name = "DIALECT")]
    pub dialect: Option<crate::dialect::Dialect>,

    /// The child binary [default: corral-agent next to corral, else on PATH].
    #[arg(long, value_name = "PATH")]
    pub child_bin: Option<PathBuf>,

    /// Run this ACP agent as every project's child instead of corral-agent, e.g. 'pi-acp' (split like shell words; a bare name is found on PATH); needs --dialect acp. With the sandbox on it runs under corral-agent sandbox-exec, with a private HOME under the state directory.
    #[arg(long, value_name = "'CMD ARGS…'")]
    pub child_command: Option<String>,

    /// Pass NAME from the gateway's environment to children, or set NAME=VALUE (repeatable).
    #[arg(long = "child-env", value_name = "NAME[=VALUE]")]
    pub child_env: Vec<String>,

    /// Events kept per project for clients that reconnect [default: 10000].
    #[arg(long, value_name = "N")]
    pub replay_events: Option<usize>,

    /// Bytes kept per project for clients that reconnect, never below two --max-frame-bytes (so one big event cannot push out the one a client is still sending) [default: 8MiB, so 32MiB in effect].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub replay_bytes: Option<usize>,

    /// Frames queued per client before it counts as too slow [default: 256].
    #[arg(long, value_name = "N")]
    pub outbox_frames: Option<usize>,

    /// Bytes queued for one client and not yet written to its socket; a client over it is closed with 4000. At least two --max-frame-bytes [default: four --max-frame-bytes, 64MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub client_buffer_bytes: Option<usize>,

    /// Bytes queued for all clients together; over it, the clients holding the most are closed with 4000. At least --client-buffer-bytes [default: 1GiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub total_client_buffer_bytes: Option<usize>,

    /// Requests one client may have waiting for the agent's answer; more get an error [default: 64].
    #[arg(long, value_name = "N")]
    pub max_client_requests: Option<usize>,

    /// Largest frame accepted from a client or a child [default: 16MiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_frame_bytes: Option<usize>,

    /// Read and write buffer of each WebSocket connection; small keeps
    /// idle clients cheap, larger frames still pass [default: 8KiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub ws_buffer_bytes: Option<usize>,

    /// Time a client has to send its hello [default: 10s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub hello_timeout: Option<Duration>,

    /// Bytes a WebSocket client may send before it is authenticated; more closes it with 1009 [default: 64KiB].
    #[arg(long, value_name = "BYTES", value_parser = parse_bytes)]
    pub max_hello_bytes: Option<usize>,

    /// Time a connection has to send a request's headers; slower connections are closed [default: 10s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub header_timeout: Option<Duration>,

    /// Most connections open at once; more are refused with 503 at accept [default: the open-file limit (raised to its hard limit at start) minus headroom for children and files].
    #[arg(long, value_name = "N")]
    pub max_connections: Option<usize>,

    /// Wrong tokens one source address may have checked per second, after --auth-failure-burst; more are refused unchecked (429, or close 1013) [default: 1].
    #[arg(long, value_name = "PER_SEC")]
    pub auth_failure_rate: Option<f64>,

    /// Wrong tokens one source address may have checked at once before --auth-failure-rate applies [default: 10].
    #[arg(long, value_name = "N")]
    pub auth_failure_burst: Option<u32>,

    /// Source addresses whose failure budget the gateway remembers at once [default: 10000].
    #[arg(long, value_name = "N")]
    pub max_auth_sources: Option<usize>,
    /// Places beyond --max-connections for /healthz, /readyz and /metrics when every connection is authenticated: one answer each, then closed [default: 8].
    #[arg(long, value_name = "N")]
    pub ops_connections: Option<usize>,

    /// WebSocket sessions one token may hold open at once; more are refused with close 1013 (0 = unlimited) [default: 256].
    #[arg(long, value_name = "N")]
    pub max_connections_per_token: Option<usize>,

    /// Interval between health pings [default: 30s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ping_interval: Option<Duration>,

    /// Time a ping has to be answered [default: 10s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ping_timeout: Option<Duration>,

    /// Time from spawning a child to its answered hello [default: 15s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub ready_timeout: Option<Duration>,

    /// Grace between each step of stopping a child (close stdin, SIGTERM, SIGKILL) [default: 5s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub stop_grace: Option<Duration>,

    /// Time a request of the agent for its clients (an ACP permission request) waits for an answer before the gateway answers it "cancelled" [default: 5m].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub permission_timeout: Option<Duration>,

    /// Time the gateway waits for children and clients on shutdown [default: 10s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub shutdown_grace: Option<Duration>,

    /// Crashes within --crash-window that mark a child failed [default: 5].
    #[arg(long, value_name = "N")]
    pub crash_limit: Option<u32>,

    /// Window for counting crashes [default: 60s].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub crash_window: Option<Duration>,

    /// Time a failed project waits before it may be started again [default: 5m].
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    pub crash_cooldown: Option<Duration>,

    /// Confine every agent (namespaces and Landlock: only its project is writable; other projects, the state dir, config and token files are hidden); off runs agents unconfined [default: on].
    #[arg(long, value_enum, value_name = "on|off")]
    pub sandbox: Option<OnOff>,

    /// Another path children must not see (repeatable); a file is hidden with the directory holding it. The state dir, projects root and the directories of the config and token files are always hidden.
    #[arg(long = "sandbox-hide", value_name = "PATH")]
    pub sandbox_hide: Vec<PathBuf>,

    /// Whether commands run by the agent's tools reach the network (the agent's model calls always do); off needs the sandbox [default: on].
    #[arg(long, value_enum, value_name = "on|off")]
    pub tool_network: Option<OnOff>,

    /// Run children as this user (name or uid) instead of the gateway's; the gateway must run as root.
    #[arg(long, value_name = "USER")]
    pub child_user: Option<String>,

    /// Memory of one child and everything it runs, at least 16MiB; with a cgroup, exceeding it kills and restarts the child (exit reason memory_limit), else RLIMIT_AS caps each process [default: none].
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub child_memory_max: Option<usize>,

    /// Processes and threads of one child and everything it runs, at least 16; with a cgroup, reaching it kills and restarts the child (exit reason pids_limit), else RLIMIT_NPROC applies [default: none].
    #[arg(long, value_name = "N")]
    pub child_pids_max: Option<u64>,

    /// Extra arguments for every child, after `--`.
    #[arg(last = true, value_name = "CHILD_ARGS")]
    pub child_args: Vec<String>,
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
    #[arg(long, value_enum, default_value_t = crate::dialect::Dialect::Zut)]
    pub dialect: crate::dialect::Dialect,

    /// Receive only the events of runs this session started (plus events
    /// outside runs), not those of other clients of the project.
    #[arg(long)]
    pub own_runs: bool,
}

/// An address range: `10.0.0.0/24`, `fd00::/8`, or one address (`10.0.0.5`).
pub fn parse_net(text: &str) -> Result<ipnet::IpNet, String> {
    let text = text.trim();
    text.parse::<ipnet::IpNet>()
        .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
        .map_err(|_| format!("{text:?} is not an address or an address range such as 10.0.0.0/24"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

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
        assert_eq!(args.tool_network, Some(OnOff::On));
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
