//! Command-line interface: `corral-agent rpc`, `corral-agent run`,
//! `corral-agent sandbox-probe` and `corral-agent sandbox-exec`, and the
//! hidden `corral-agent egress-relay` that tool commands run behind.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use corral_protocol::ndjson::DEFAULT_MAX_LINE;
use corral_protocol::permission::PermissionMode;

pub use crate::agent_args::{AgentArgs, ToolNetwork};
use crate::rpc::dialects::{Dialect, DEFAULT_MAX_IN_FLIGHT};

/// What `corral-agent --help` says after the commands.
const AFTER_HELP: &str = "\
Dialects (rpc --dialect): zut (zut RPC v1, the default), letscode (letscode-rpc/1),
zi (Zi RPC v1), acp (Agent Client Protocol v1). `--mode rpc` also means `rpc`.

Examples:
  corral-agent rpc --provider echo                  zut RPC on stdin/stdout, offline
  corral-agent run \"explain src/main.rs\"            one prompt; the reply on stdout
  git diff | corral-agent run -                     the prompt read from stdin

Environment:
  ANTHROPIC_API_KEY, OPENAI_API_KEY    the provider's API key (or --api-key)
  ANTHROPIC_BASE_URL, OPENAI_BASE_URL  the provider's base URL (or --base-url)
  ZUTCORE_RPC_TOKEN  zut: the token a client's hello must carry; removed from the
                     environment at start, so tools never see it
  CORRAL_EGRESS_SECRET  --tool-network proxy: the secret of the gateway's egress
                     socket; removed from the environment at start
  CORRAL_LOG         log filter for stderr, e.g. debug [default: warn]
  OTEL_EXPORTER_OTLP_ENDPOINT  rpc and run: where to export traces, unless
                     --otlp-endpoint says
  ZUT_HOME, CORRAL_HOME  the home holding config.json [default: ~/.corral]

Exit codes:
  0   a normal end: stdin closed, or SIGTERM/SIGINT
  1   the client's hello was refused (zut), input framing could not be recovered
      (zi), or the `run` failed
  2   bad flags or setup: a missing API key, an unreadable journal, a prompt on
      stdin over 16 MiB, a missing egress secret or socket
  75  the --session journal is in use by another agent process
  78  --sandbox was asked for and this host cannot provide it (reason on stderr)
  126, 127  sandbox-exec: CMD cannot be executed, or is not found";

/// The parser, made and built ahead of any command line: what clap does
/// before its first parse (propagating settings and arguments through the
/// subcommands) is done, and the parse that comes later only parses.
/// Nothing of it depends on the environment, which clap reads as it
/// parses.
pub fn made_ahead() -> clap::Command {
    let mut command = <Cli as clap::CommandFactory>::command();
    command.build();
    command
}

/// Parses `args` (a process's argv) as `corral-agent`'s command line,
/// exiting with clap's message on an error, with `command` when given: the
/// parser made ahead by [`made_ahead`] and not used since (a spare agent
/// makes it while it waits); else with a new one.
/// No argument reads the environment when the parser is made, so one made
/// before the environment was in place parses as a new one would.
pub fn parse(command: Option<clap::Command>, args: Vec<OsString>) -> Cli {
    use clap::FromArgMatches as _;
    let args = mode_flag_as_subcommand(args);
    let Some(command) = command else {
        return Cli::parse_from(args);
    };
    let mut matches = command.get_matches_from(args);
    Cli::from_arg_matches_mut(&mut matches).unwrap_or_else(|e| {
        let mut command = <Cli as clap::CommandFactory>::command();
        e.format(&mut command).exit()
    })
}

#[derive(Debug, Parser)]
#[command(
    name = "corral-agent",
    version,
    about = "A coding agent on stdio: zut RPC v1 (default), letscode-rpc/1, Zi RPC v1 or ACP (rpc --dialect)",
    after_help = AFTER_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub mode: Mode,
}

#[derive(Debug, Subcommand)]
pub enum Mode {
    /// Serve an RPC dialect (--dialect; zut RPC v1 by default): NDJSON
    /// commands on stdin, responses and events on stdout.
    Rpc {
        #[command(flatten)]
        agent: AgentArgs,
        /// Wire dialect on stdio: zut (zut RPC v1), letscode (letscode-rpc/1), zi (Zi RPC v1)
        /// or acp (Agent Client Protocol v1).
        #[arg(long, value_enum, default_value_t = Dialect::default())]
        dialect: Dialect,
        /// Tool calls that write files or run commands: auto (run them), ask (wait for the
        /// client's approval; not with zi) or read-only (refuse them). Clients change it at run
        /// time (ACP session/set_mode, zut and letscode set_permission_mode).
        #[arg(long, default_value = "auto", value_name = "MODE")]
        permission_mode: PermissionMode,
        /// Longest accepted input line, in bytes.
        #[arg(long, default_value_t = DEFAULT_MAX_LINE, value_name = "BYTES")]
        max_line_bytes: usize,
        /// After stdin closes, seconds queued prompts may run before they are aborted.
        #[arg(long, default_value_t = 120, value_name = "SECS")]
        eof_grace: u64,
        /// Zi: ordinary operations that may be in flight at once (a gateway
        /// that bounds each of its clients raises it).
        #[arg(long, default_value_t = DEFAULT_MAX_IN_FLIGHT, value_name = "N",
            value_parser = clap::value_parser!(usize))]
        max_in_flight: usize,
    },
    /// Run one prompt and print the reply text to stdout.
    Run {
        #[command(flatten)]
        agent: AgentArgs,
        /// The prompt, or - to read it from stdin (up to EOF, at most 16 MiB).
        prompt: String,
    },
    /// Check that the sandbox works on this host.
    ///
    /// Enters the sandbox in a throwaway process tree rooted at the current
    /// directory, checks from inside that it holds, and prints
    /// {"sandbox":"ok","landlock_abi":N,"scoped":BOOL}; exits 78 with the
    /// reason on stderr when it is unavailable.
    SandboxProbe {
        /// A path made empty inside (repeatable).
        #[arg(long = "sandbox-hide", value_name = "PATH")]
        sandbox_hide: Vec<PathBuf>,
        /// Also check that tool commands can be cut off the network (off,
        /// proxy) and that the egress socket opens (proxy).
        #[arg(long, value_enum, default_value_t = ToolNetwork::On)]
        tool_network: ToolNetwork,
        /// With --tool-network proxy: the gateway's egress socket.
        #[arg(long, value_name = "PATH", required_if_eq("tool_network", "proxy"))]
        egress_socket: Option<PathBuf>,
        /// Also check that the agent can run without the host's network,
        /// reaching the gateway's model broker through this socket.
        #[arg(long, value_name = "PATH")]
        model_socket: Option<PathBuf>,
    },
    /// Run another program (a third-party agent) in the agent's sandbox.
    ///
    /// The same confinement as `rpc --sandbox`: user, mount, pid and ipc
    /// namespaces, a private /tmp, hidden paths, Landlock (writes only in
    /// --cwd, the --home directory and /tmp), no new privileges and no
    /// capabilities; then CMD replaces the process in --cwd, with the
    /// environment it was given (HOME set to --home). With --tool-network
    /// proxy, CMD and everything it starts run in an empty network
    /// namespace behind the egress relay instead. Exits as CMD does; 78
    /// with the reason on stderr when the sandbox cannot be set up, 127
    /// when CMD is not found, 126 when it cannot be executed.
    #[command(
        after_help = "Example: corral-agent sandbox-exec --cwd ~/p --home /var/lib/corral/homes/p -- pi-acp"
    )]
    SandboxExec {
        #[command(flatten)]
        sandbox: SandboxExecArgs,
        /// The command and its arguments, after --.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Relay a tool command's proxy traffic to the egress socket (run by
    /// the agent inside the command's network namespace; not for people).
    #[command(hide = true)]
    EgressRelay {
        /// The inherited descriptor of the egress socket (O_PATH).
        #[arg(long, value_name = "N")]
        socket_fd: i32,
        /// Where to listen; CMD's proxy variables name the address bound.
        #[arg(long, value_name = "ADDR", default_value = crate::egress::relay::PROXY_ADDR)]
        listen: SocketAddr,
        /// The inherited descriptor of the model broker's socket (O_PATH):
        /// connections to --broker-listen are carried there as they are.
        #[arg(long, value_name = "N")]
        broker_fd: Option<i32>,
        /// Where to listen for CMD's model calls, with --broker-fd.
        #[arg(long, value_name = "ADDR", default_value = corral_protocol::egress::BROKER_ADDR)]
        broker_listen: SocketAddr,
        /// The command and its arguments, after --.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<OsString>,
    },
    /// Carry MCP messages between stdio and a streamable HTTP server,
    /// through the egress proxy (run by the agent behind the egress relay
    /// for an HTTP MCP server with --tool-network proxy; not for people).
    #[command(hide = true)]
    McpHttpBridge,
}

/// The flags of `sandbox-exec`: the sandbox flags of `rpc`, the project
/// and the private home.
#[derive(Debug, Clone, Args)]
pub struct SandboxExecArgs {
    /// Accepted for the same command line as rpc; sandbox-exec always confines.
    #[arg(long)]
    pub sandbox: bool,
    /// A path made empty and unreadable inside (repeatable).
    #[arg(long = "sandbox-hide", value_name = "PATH")]
    pub sandbox_hide: Vec<PathBuf>,
    /// on, or proxy: CMD and everything it starts (its model calls and its
    /// tools alike) reach the network only through the gateway's HTTP(S)
    /// proxy. Not off: CMD is the agent itself and needs the network for
    /// its model.
    #[arg(long, value_enum, default_value_t = ToolNetwork::On)]
    pub tool_network: ToolNetwork,
    /// With --tool-network proxy: the gateway's egress socket.
    #[arg(long, value_name = "PATH", required_if_eq("tool_network", "proxy"))]
    pub egress_socket: Option<PathBuf>,
    /// With --tool-network proxy: the gateway's model-key broker. The
    /// relay also listens on 127.0.0.1:3129 and carries what CMD sends
    /// there to this socket: CMD's provider base URL names that address.
    #[arg(long, value_name = "PATH", requires = "egress_socket")]
    pub model_socket: Option<PathBuf>,
    /// The project: CMD runs here, and may write here (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub cwd: Option<PathBuf>,
    /// A private home for CMD's own state: created (0700) if missing,
    /// writable inside even under a hidden path, and CMD's HOME.
    #[arg(long, value_name = "DIR")]
    pub home: Option<PathBuf>,
}

impl Mode {
    /// The agent flags of `rpc` and `run`.
    pub fn agent_args(&self) -> Option<&AgentArgs> {
        match self {
            Mode::Rpc { agent, .. } | Mode::Run { agent, .. } => Some(agent),
            Mode::SandboxProbe { .. }
            | Mode::SandboxExec { .. }
            | Mode::EgressRelay { .. }
            | Mode::McpHttpBridge => None,
        }
    }
}

/// `corral-agent --mode rpc …` (letscode's and Zi's spelling, also
/// `--mode=rpc`) means `corral-agent rpc …`. Other arguments keep their
/// order; every other command line is left alone.
pub fn mode_flag_as_subcommand(mut args: Vec<OsString>) -> Vec<OsString> {
    let position = args.iter().position(|a| a == "--mode" || a == "--mode=rpc");
    let Some(at) = position.filter(|&at| at > 0) else {
        return args;
    };
    let split = args[at] == "--mode";
    if split && args.get(at + 1).is_none_or(|v| v != "rpc") {
        return args;
    }
    args.drain(at..at + 1 + usize::from(split));
    if args.get(1).is_none_or(|first| first != "rpc") {
        args.insert(1, "rpc".into());
    }
    args
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::ValueEnum;

    #[test]
    fn sandbox_exec_takes_the_sandbox_flags_and_a_command_after_dashes() {
        let cli = parse(&[
            "sandbox-exec",
            "--sandbox",
            "--sandbox-hide",
            "/state",
            "--cwd",
            "/p",
            "--home",
            "/state/homes/p",
            "--",
            "pi-acp",
            "--verbose",
        ])
        .unwrap();
        let Mode::SandboxExec { sandbox, command } = cli.mode else {
            panic!("not sandbox-exec");
        };
        assert_eq!(sandbox.sandbox_hide, [PathBuf::from("/state")]);
        assert_eq!(sandbox.cwd, Some(PathBuf::from("/p")));
        assert_eq!(sandbox.home, Some(PathBuf::from("/state/homes/p")));
        assert_eq!(sandbox.tool_network, ToolNetwork::On);
        assert_eq!(command, ["pi-acp", "--verbose"].map(OsString::from));
        let err = parse(&["sandbox-exec", "--cwd", "/p"]).unwrap_err();
        assert!(err.to_string().contains("<CMD>"), "{err}");
        assert!(
            parse(&["sandbox-exec", "pi-acp"]).is_err(),
            "CMD only after --"
        );
    }

    /// What a parser made ahead, as a spare agent makes it, parses.
    fn parsed_ahead(command: clap::Command, args: &[&str]) -> Result<Cli, clap::Error> {
        use clap::FromArgMatches as _;
        let args: Vec<OsString> = std::iter::once("corral-agent")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        let mut matches = command.try_get_matches_from(mode_flag_as_subcommand(args))?;
        Cli::from_arg_matches_mut(&mut matches)
    }

    #[test]
    fn a_parser_made_ahead_parses_as_a_new_one() {
        let lines: &[&[&str]] = &[
            &[
                "rpc",
                "--dialect",
                "zi",
                "--permission-mode",
                "plan",
                "--cwd",
                "/p",
            ],
            &[
                "rpc",
                "--permission-mode",
                "ask",
                "--dialect",
                "zi",
                "--sandbox",
            ],
            &[
                "--dialect",
                "letscode",
                "--mode",
                "rpc",
                "--session",
                "/s/p.jsonl",
            ],
            &[
                "rpc",
                "--dialect",
                "acp",
                "--sandbox",
                "--sandbox-hide",
                "/state",
                "--cwd",
                "/p",
                "--tool-network",
                "off",
                "--otlp-endpoint",
                "http://127.0.0.1:4318",
            ],
            &["run", "--provider", "echo", "hello"],
            &["rpc", "--dialect", "nope"],
            &["rpc", "--max-steps"],
        ];
        for line in lines {
            let ahead = parsed_ahead(made_ahead(), line);
            let fresh = rewritten(line);
            match (ahead, fresh) {
                (Ok(ahead), Ok(fresh)) => {
                    assert_eq!(format!("{ahead:?}"), format!("{fresh:?}"), "{line:?}")
                }
                (Err(ahead), Err(fresh)) => assert_eq!(ahead.kind(), fresh.kind(), "{line:?}"),
                (ahead, fresh) => panic!("{line:?}: {ahead:?} against {fresh:?}"),
            }
        }
    }

    #[test]
    fn the_otlp_endpoint_variable_is_read_after_the_parser_was_made() {
        let command = made_ahead();
        // The assignment's environment arrives after the parser was made.
        std::env::set_var(
            crate::agent_args::OTLP_ENDPOINT_ENV,
            "http://127.0.0.1:4318",
        );
        let cli = parsed_ahead(command, &["rpc", "--provider", "echo"]).unwrap();
        let given = parse(&["rpc", "--otlp-endpoint", "http://127.0.0.1:9"]).unwrap();
        let endpoint = cli.mode.agent_args().unwrap().otlp_endpoint();
        // The flag wins over the variable.
        let flagged = given.mode.agent_args().unwrap().otlp_endpoint();
        std::env::remove_var(crate::agent_args::OTLP_ENDPOINT_ENV);
        assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:4318"));
        assert_eq!(flagged.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(cli.mode.agent_args().unwrap().otlp_endpoint(), None);
    }

    fn rewritten(args: &[&str]) -> Result<Cli, clap::Error> {
        let args = std::iter::once("corral-agent")
            .chain(args.iter().copied())
            .map(OsString::from)
            .collect();
        Cli::try_parse_from(mode_flag_as_subcommand(args))
    }

    #[test]
    fn zi_command_lines_in_either_order() {
        for args in [
            &[
                "--dialect",
                "zi",
                "--no-session",
                "--cwd",
                "/d",
                "--mode",
                "rpc",
            ][..],
            &[
                "--dialect",
                "zi",
                "--mode",
                "rpc",
                "--no-session",
                "--cwd",
                "/d",
            ],
            &[
                "rpc",
                "--dialect",
                "zi",
                "--no-session",
                "--cwd",
                "/d",
                "--mode=rpc",
            ],
            &[
                "--mode=rpc",
                "--dialect",
                "zi",
                "--no-session",
                "--cwd",
                "/d",
            ],
        ] {
            let cli = rewritten(args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
            let Mode::Rpc { agent, dialect, .. } = cli.mode else {
                panic!("{args:?} is not rpc");
            };
            assert_eq!(dialect.to_possible_value().unwrap().get_name(), "zi");
            assert_eq!(agent.cwd, Some(PathBuf::from("/d")));
            assert!(agent.no_session && agent.session.is_none(), "{args:?}");
        }
    }

    #[test]
    fn permission_mode_defaults_to_auto_and_takes_the_three_modes() {
        let mode = |args: &[&str]| match parse(args).map(|cli| cli.mode) {
            Ok(Mode::Rpc {
                permission_mode, ..
            }) => Ok(permission_mode),
            Ok(_) => panic!("not rpc"),
            Err(e) => Err(e.to_string()),
        };
        assert_eq!(mode(&["rpc"]), Ok(PermissionMode::Auto));
        assert_eq!(
            mode(&["rpc", "--dialect", "acp", "--permission-mode", "read-only"]),
            Ok(PermissionMode::ReadOnly)
        );
        assert_eq!(
            mode(&["rpc", "--permission-mode", "ask"]),
            Ok(PermissionMode::Ask)
        );
        let err = mode(&["rpc", "--permission-mode", "never"]).unwrap_err();
        assert!(err.contains("auto, ask, read-only"), "{err}");
    }

    #[test]
    fn help_names_the_dialects_environment_and_exit_codes() {
        use clap::CommandFactory;
        let help = Cli::command().render_long_help().to_string();
        for needle in [
            "zut (zut RPC v1, the default)",
            "letscode (letscode-rpc/1)",
            "zi (Zi RPC v1)",
            "acp (Agent Client Protocol v1)",
            "ANTHROPIC_API_KEY",
            "ZUTCORE_RPC_TOKEN",
            "CORRAL_EGRESS_SECRET",
            "CORRAL_LOG",
            "ZUT_HOME",
            "Exit codes:",
            "  75  ",
            "  78  ",
            "corral-agent run -",
        ] {
            assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
        }
        let mut command = Cli::command();
        let run = command.find_subcommand_mut("run").unwrap();
        let run_help = run.render_long_help().to_string();
        assert!(
            run_help.contains("or - to read it from stdin"),
            "{run_help}"
        );
    }

    #[test]
    fn the_later_of_session_and_no_session_wins() {
        let args = |cli: Cli| cli.mode.agent_args().cloned().unwrap();
        let last = args(parse(&["rpc", "--session", "s.jsonl", "--no-session"]).unwrap());
        assert_eq!(last.session, None);
        let last = args(parse(&["rpc", "--no-session", "--session", "s.jsonl"]).unwrap());
        assert_eq!(last.session, Some(PathBuf::from("s.jsonl")));
        assert!(parse(&["rpc", "--no-session=x"]).is_err());
    }

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("corral-agent").chain(args.iter().copied()))
    }

    #[test]
    fn sandbox_flags_parse_and_default_off() {
        let cli = parse(&["rpc"]).unwrap();
        let args = cli.mode.agent_args().unwrap();
        assert!(!args.sandbox);
        assert_eq!(args.tool_network, ToolNetwork::On);
        let cli = parse(&[
            "run",
            "--sandbox",
            "--sandbox-hide",
            "/a",
            "--sandbox-hide",
            "b",
            "--tool-network",
            "off",
            "hi",
        ])
        .unwrap();
        let args = cli.mode.agent_args().unwrap();
        assert!(args.sandbox);
        assert_eq!(args.sandbox_hide, [PathBuf::from("/a"), PathBuf::from("b")]);
        assert_eq!(args.tool_network, ToolNetwork::Off);
    }

    #[test]
    fn tool_network_off_and_hides_need_the_sandbox() {
        let err = parse(&["rpc", "--tool-network", "off"]).unwrap_err();
        assert!(err.to_string().contains("--sandbox"), "{err}");
        assert!(parse(&["rpc", "--tool-network", "on"]).is_ok());
        assert!(parse(&["rpc", "--sandbox-hide", "/x"]).is_err());
    }

    #[test]
    fn the_probe_takes_hides_and_tool_network() {
        let cli = parse(&[
            "sandbox-probe",
            "--sandbox-hide",
            "/s",
            "--tool-network",
            "off",
        ])
        .unwrap();
        let Mode::SandboxProbe {
            sandbox_hide,
            tool_network,
            ..
        } = cli.mode
        else {
            panic!("not the probe");
        };
        assert_eq!(sandbox_hide, [PathBuf::from("/s")]);
        assert_eq!(tool_network, ToolNetwork::Off);
    }

    #[test]
    fn tool_network_proxy_needs_the_sandbox_and_the_egress_socket() {
        let err = parse(&[
            "rpc",
            "--tool-network",
            "proxy",
            "--egress-socket",
            "/e.sock",
        ])
        .unwrap_err();
        assert!(err.to_string().contains("--sandbox"), "{err}");
        let err = parse(&["rpc", "--sandbox", "--tool-network", "proxy"]).unwrap_err();
        assert!(err.to_string().contains("--egress-socket"), "{err}");
        let cli = parse(&[
            "rpc",
            "--sandbox",
            "--tool-network",
            "proxy",
            "--egress-socket",
            "/s/egress/proxy.sock",
        ])
        .unwrap();
        let args = cli.mode.agent_args().unwrap();
        assert_eq!(args.tool_network, ToolNetwork::Proxy);
        assert_eq!(
            args.egress_socket,
            Some(PathBuf::from("/s/egress/proxy.sock"))
        );

        for mode in ["sandbox-probe", "sandbox-exec"] {
            let tail: &[&str] = match mode {
                "sandbox-exec" => &["--", "pi-acp"],
                _ => &[],
            };
            let with = |extra: &[&str]| {
                let args: Vec<&str> = [mode, "--tool-network", "proxy"]
                    .iter()
                    .chain(extra)
                    .chain(tail)
                    .copied()
                    .collect();
                parse(&args)
            };
            let err = with(&[]).unwrap_err();
            assert!(err.to_string().contains("--egress-socket"), "{mode}: {err}");
            with(&["--egress-socket", "/e.sock"]).unwrap_or_else(|e| panic!("{mode}: {e}"));
        }
    }

    #[test]
    fn the_relay_command_is_hidden_and_takes_a_descriptor_and_a_command() {
        use crate::egress::relay;
        use clap::CommandFactory;
        let cli = parse(&[
            relay::SUBCOMMAND,
            relay::SOCKET_FD_FLAG,
            "7",
            "--",
            "bash",
            "-c",
            "curl x",
        ])
        .unwrap();
        let Mode::EgressRelay {
            socket_fd,
            listen,
            command,
            ..
        } = cli.mode
        else {
            panic!("not the relay");
        };
        assert_eq!(socket_fd, 7);
        assert_eq!(listen.to_string(), relay::PROXY_ADDR);
        assert_eq!(command, ["bash", "-c", "curl x"].map(OsString::from));
        let cli = parse(&[
            relay::SUBCOMMAND,
            "--socket-fd",
            "3",
            "--listen",
            "127.0.0.1:0",
            "--",
            "true",
        ])
        .unwrap();
        assert!(matches!(cli.mode, Mode::EgressRelay { listen, .. } if listen.port() == 0));
        assert!(parse(&[relay::SUBCOMMAND, "--socket-fd", "3"]).is_err());
        let help = Cli::command().render_long_help().to_string();
        assert!(!help.contains(relay::SUBCOMMAND), "{help}");
    }

    #[test]
    fn the_model_socket_is_a_flag_of_every_mode_and_the_relay_takes_its_descriptor() {
        use crate::egress::relay;
        let cli = parse(&[
            "rpc",
            "--sandbox",
            "--model-socket",
            "/s/egress/broker.sock",
        ])
        .unwrap();
        assert_eq!(
            cli.mode.agent_args().unwrap().model_socket,
            Some(PathBuf::from("/s/egress/broker.sock"))
        );
        let probe = parse(&["sandbox-probe", "--model-socket", "/b.sock"]).unwrap();
        assert!(matches!(
            probe.mode,
            Mode::SandboxProbe {
                model_socket: Some(_),
                ..
            }
        ));
        // sandbox-exec carries model calls through its relay: proxy only.
        assert!(parse(&["sandbox-exec", "--model-socket", "/b.sock", "--", "pi-acp"]).is_err());
        parse(&[
            "sandbox-exec",
            "--tool-network",
            "proxy",
            "--egress-socket",
            "/e.sock",
            "--model-socket",
            "/b.sock",
            "--",
            "pi-acp",
        ])
        .unwrap();
        let cli = parse(&[
            relay::SUBCOMMAND,
            relay::SOCKET_FD_FLAG,
            "3",
            relay::BROKER_FD_FLAG,
            "4",
            "--",
            "pi-acp",
        ])
        .unwrap();
        let Mode::EgressRelay {
            broker_fd,
            broker_listen,
            ..
        } = cli.mode
        else {
            panic!("not the relay");
        };
        assert_eq!(broker_fd, Some(4));
        assert_eq!(broker_listen.to_string(), relay::BROKER_ADDR);
    }
}
