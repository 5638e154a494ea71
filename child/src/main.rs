//! `corral-agent`: `rpc` serves an RPC dialect on stdio; `run` answers one
//! prompt; `sandbox-probe` checks the sandbox works on this host;
//! `sandbox-exec` runs another program in the same sandbox; `template`
//! forks children for the gateway; `spare` enters the sandbox ahead of its
//! project and runs the `rpc` or `run` it is then assigned.
//!
//! stdout belongs to the protocol (or, in `run`, to the reply text); logs go
//! to stderr, filtered by `CORRAL_LOG` (default `warn`). Start order: the
//! process becomes undumpable, the session journal is opened and locked,
//! the egress route is opened (`--tool-network proxy`), the sandbox is
//! entered (with `--sandbox`), and only then does the async runtime, and so
//! any thread, start. A spare agent enters the sandbox's first part before
//! all of this, and finishes it in the same place. The hidden `egress-relay` runs a tool command behind
//! the egress relay.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::Path;
use std::time::Duration;

use corral_agent::agent::{Agent, AgentEvent, Output, PermissionMode, RunKind, RunRequest};
use corral_agent::cli::{self, AgentArgs, Mode, SandboxExecArgs, ToolNetwork};
use corral_agent::egress::{open_socket, relay, EgressRoute};
use corral_agent::mcp;
use corral_agent::rpc::dialects::Dialect;
use corral_agent::rpc::{self, TransportOptions};
use corral_agent::sandbox::{self, ProbedNetwork, SandboxConfig, ToolConfinement, ToolNet};
use corral_agent::setup::{self, Prepared, SetupError};
use corral_agent::spare;
use corral_agent::stdin_prompt;
use corral_agent::template;
use corral_protocol::egress::SECRET_ENV;
use corral_telemetry::Telemetry;
use tokio::sync::mpsc;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// The exit code of a spare agent that refused its assignment.
const SPARE_REFUSED: u8 = corral_protocol::template::SPARE_REFUSED_EXIT as u8;

fn main() {
    let args: Vec<OsString> = std::env::args_os().collect();
    // `corral-agent template [ROOM]`: ROOM only makes the argument block
    // long enough for a child's own argv (see `template`).
    if args.get(1).is_some_and(|arg| arg == template::ARG) && args.len() <= 3 {
        // The template holds no secret, but what it forks will.
        if let Err(e) = sandbox::make_undumpable() {
            eprintln!("corral-agent: cannot make the process undumpable: {e}");
        }
        std::process::exit(i32::from(template::serve(agent_main)));
    }
    agent_main(args)
}

/// The agent with `args` as its argv, or a spare agent
/// (`corral-agent spare`): also what a child forked from the template
/// runs.
fn agent_main(args: Vec<OsString>) -> ! {
    if args.get(1).is_some_and(|arg| arg == spare::ARG) {
        spare::run(&args[2..], agent_main_with)
    }
    agent_main_with(args, None)
}

/// The agent with `args` as its argv, in the sandbox a spare agent
/// prepared when there is one (`corral-agent spare`).
fn agent_main_with(args: Vec<OsString>, head: Option<spare::HeadStart>) -> ! {
    // First of all: no process of this uid, tools included, may ptrace this
    // one or read its memory or /proc/<pid>/environ (which keeps the token
    // and API keys even after remove_var).
    if let Err(e) = sandbox::make_undumpable() {
        eprintln!("corral-agent: cannot make the process undumpable: {e}");
    }
    // Read the RPC token and remove it from the environment before any
    // thread or tool process exists, so nothing the agent runs inherits it.
    let token = std::env::var(corral_protocol::zut::TOKEN_ENV).ok();
    std::env::remove_var(corral_protocol::zut::TOKEN_ENV);
    // The same for the egress secret: only a relay is ever given it again.
    let egress_secret = std::env::var_os(SECRET_ENV);
    std::env::remove_var(SECRET_ENV);
    let (spare, runtime, registry, command) = match head {
        Some(head) => (
            Some(head.sandbox),
            Some(head.runtime),
            head.registry,
            Some(head.command),
        ),
        None => (None, None, tracing_subscriber::registry(), None),
    };
    let mut cli = cli::parse(command, args);
    // Before any mode runs: the others would run without the sandbox the
    // spare still has to finish.
    if spare.is_some() && !matches!(cli.mode, Mode::Rpc { .. } | Mode::Run { .. }) {
        eprintln!("corral-agent spare: an assignment must be rpc or run");
        std::process::exit(i32::from(SPARE_REFUSED));
    }
    // The HTTP MCP bridge's server and headers: for the bridge alone (a
    // relay passes them on to the bridge it runs).
    if !matches!(cli.mode, Mode::EgressRelay { .. }) {
        let bridged = std::env::var_os(mcp::bridge::SERVER_ENV);
        std::env::remove_var(mcp::bridge::SERVER_ENV);
        if let Mode::McpHttpBridge = &cli.mode {
            std::process::exit(i32::from(mcp::bridge::run(bridged)));
        }
    }
    if let Mode::EgressRelay {
        socket_fd,
        listen,
        broker_fd,
        broker_listen,
        command,
    } = &cli.mode
    {
        let broker = broker_fd.map(|fd| relay::BrokerSeat {
            fd,
            listen: *broker_listen,
        });
        let code = relay::run(*socket_fd, *listen, broker, command, egress_secret);
        std::process::exit(i32::from(code));
    }
    let endpoint = match &cli.mode {
        // Without the host's network there is nowhere to export to.
        Mode::Rpc { agent, .. } | Mode::Run { agent, .. }
            if agent.sandbox && agent.model_socket.is_some() =>
        {
            if agent.otlp_endpoint().is_some() {
                eprintln!("corral-agent: --model-socket with --sandbox leaves the agent no network: no traces are exported");
            }
            None
        }
        Mode::Rpc { agent, .. } | Mode::Run { agent, .. } => agent.otlp_endpoint(),
        Mode::SandboxProbe { .. }
        | Mode::SandboxExec { .. }
        | Mode::EgressRelay { .. }
        | Mode::McpHttpBridge => None,
    };
    let telemetry = init_logging(registry, endpoint.as_deref());
    let prepared = match &mut cli.mode {
        Mode::SandboxProbe {
            sandbox_hide,
            tool_network,
            egress_socket,
            model_socket,
        } => {
            let network = match (tool_network, egress_socket) {
                (ToolNetwork::On, _) => ProbedNetwork::Host,
                (ToolNetwork::Off, _) | (ToolNetwork::Proxy, None) => ProbedNetwork::Isolated,
                (ToolNetwork::Proxy, Some(socket)) => ProbedNetwork::Proxy(socket),
            };
            let code = sandbox::probe(sandbox_hide, network, model_socket.as_deref());
            let _ = std::io::stdout().flush();
            std::process::exit(i32::from(code));
        }
        Mode::SandboxExec { sandbox, command } => {
            std::process::exit(i32::from(sandbox_exec(sandbox, command, egress_secret)));
        }
        Mode::Rpc { agent, .. } | Mode::Run { agent, .. } => {
            match prepare(agent, egress_secret, spare) {
                Ok(prepared) => prepared,
                Err(code) => std::process::exit(i32::from(code)),
            }
        }
        Mode::EgressRelay { .. } => unreachable!("the relay exits above"),
        Mode::McpHttpBridge => unreachable!("the bridge exits above"),
    };
    // Confined now: the exporter's threads may start.
    if let Some(Err(e)) = telemetry.as_ref().map(Telemetry::start) {
        eprintln!("corral-agent: {e}; no traces are exported");
    }
    let runtime = match runtime.map_or_else(corral_agent::runtime::build, Ok) {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("corral-agent: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async {
        // As its pid namespace's init, the agent reaps on its runtime.
        if let Err(e) = sandbox::start_reaping() {
            eprintln!("corral-agent: cannot reap the sandbox's orphans: {e}");
            return 1;
        }
        match cli.mode {
            Mode::Rpc {
                agent,
                dialect,
                max_line_bytes,
                eof_grace,
                max_in_flight,
                permission_mode,
            } => {
                let transport = TransportOptions {
                    max_line: max_line_bytes,
                    eof_grace: Duration::from_secs(eof_grace),
                    max_in_flight: max_in_flight.max(1),
                };
                let dialect = DialectChoice {
                    dialect,
                    permission_mode,
                };
                rpc_mode(&agent, prepared, dialect, token, transport).await
            }
            Mode::Run { agent, prompt } => run_mode(&agent, prepared, prompt).await,
            Mode::SandboxProbe { .. }
            | Mode::SandboxExec { .. }
            | Mode::EgressRelay { .. }
            | Mode::McpHttpBridge => {
                unreachable!("the sandbox commands exit before the runtime starts")
            }
        }
    });
    // Exit directly: the runtime would otherwise wait for the blocking
    // stdin reader, which only returns when the peer writes or closes.
    rpc::stdio::restore();
    let _ = std::io::stdout().flush();
    if let Some(telemetry) = telemetry {
        telemetry.shutdown();
    }
    std::process::exit(i32::from(code));
}

/// Opens the egress route (`--tool-network proxy`) and the session
/// journal and, with `--sandbox`, enters the sandbox: all before any thread
/// exists. With the sandbox, `args.cwd` becomes the resolved project
/// directory. On failure the reason is printed and the exit code returned.
fn prepare(
    args: &mut AgentArgs,
    egress_secret: Option<OsString>,
    spare: Option<sandbox::Spare>,
) -> Result<Prepared, u8> {
    let setup_failed = |e: SetupError| {
        eprintln!("corral-agent: {e}");
        e.exit_code()
    };
    let sandbox_failed = |e: sandbox::SandboxError| {
        eprintln!("corral-agent: {e}");
        match e {
            sandbox::SandboxError::Spare(_) => SPARE_REFUSED,
            _ => sandbox::EXIT_SANDBOX_UNAVAILABLE,
        }
    };
    if spare.is_some() && !args.sandbox {
        eprintln!("corral-agent spare: an assignment must ask for --sandbox");
        return Err(SPARE_REFUSED);
    }
    // The spare's own working directory is not the project's: a relative
    // path would name something else, and a hide that is not found there
    // would be dropped.
    if spare.is_some() && !args.cwd.as_deref().is_some_and(Path::is_absolute) {
        eprintln!("corral-agent spare: an assignment must name its project with an absolute --cwd");
        return Err(SPARE_REFUSED);
    }
    if spare.is_some() && !args.sandbox_hide.iter().all(|hide| hide.is_absolute()) {
        eprintln!("corral-agent spare: an assignment's --sandbox-hide paths must be absolute");
        return Err(SPARE_REFUSED);
    }
    if args.sandbox && args.model_socket.is_some() && args.tool_network == ToolNetwork::On {
        eprintln!(
            "corral-agent: --model-socket with --sandbox takes the host's network from the agent, \
             so --tool-network on would leave tool commands none; use --tool-network off or proxy"
        );
        return Err(2);
    }
    let network = tool_net(
        args.tool_network,
        args.egress_socket.as_deref(),
        egress_secret,
    )?;
    let model_socket = model_socket(args.model_socket.as_deref())?;
    let journal = setup::open_journal(args).map_err(setup_failed)?;
    let mcp_servers = setup::load_mcp(args).map_err(setup_failed)?;
    if !args.sandbox {
        return Ok(Prepared {
            journal,
            tool_confinement: ToolConfinement::none(),
            model_socket,
            mcp_servers,
        });
    }
    let project = setup::resolve_cwd(args.cwd.as_deref()).map_err(setup_failed)?;
    let mut hide = args.sandbox_hide.clone();
    if let Some(path) = journal
        .as_ref()
        .and_then(|(j, _)| j.path().canonicalize().ok())
    {
        hide.push(sandbox::session_hide(&path, &project));
    }
    let mut config = SandboxConfig::new(&project, &hide, network).map_err(sandbox_failed)?;
    if model_socket.is_some() {
        config = config.without_host_network();
    }
    let confined = match spare {
        Some(spare) => spare.finish(&config),
        None => sandbox::enter(&config),
    }
    .map_err(sandbox_failed)?;
    args.cwd = Some(config.project().to_path_buf());
    Ok(Prepared {
        journal,
        tool_confinement: confined.tools,
        model_socket,
        mcp_servers,
    })
}

/// The model broker's socket (`--model-socket`), opened `O_PATH` before
/// the sandbox hides its path (a failure is printed, and exit code 2
/// returned).
fn model_socket(path: Option<&Path>) -> Result<Option<std::os::fd::OwnedFd>, u8> {
    path.map(|path| {
        open_socket(path).map_err(|e| {
            eprintln!("corral-agent: --model-socket: {e}");
            2
        })
    })
    .transpose()
}

/// What `--tool-network` gives tool commands; with `proxy`, the egress
/// route opened (a failure is printed, and exit code 2 returned).
fn tool_net(
    network: ToolNetwork,
    socket: Option<&Path>,
    secret: Option<OsString>,
) -> Result<ToolNet, u8> {
    match (network, socket) {
        (ToolNetwork::On, _) => Ok(ToolNet::Host),
        (ToolNetwork::Off, _) => Ok(ToolNet::Isolated),
        (ToolNetwork::Proxy, socket) => {
            // clap requires the socket with proxy.
            let socket = socket.unwrap_or(Path::new(""));
            EgressRoute::open(socket, secret)
                .map(ToolNet::Proxy)
                .map_err(|e| {
                    eprintln!("corral-agent: {e}");
                    2
                })
        }
    }
}

/// `sandbox-exec`: returns only on failure, with the exit code.
fn sandbox_exec(
    args: &SandboxExecArgs,
    command: &[OsString],
    egress_secret: Option<OsString>,
) -> u8 {
    if args.model_socket.is_some() && args.tool_network != ToolNetwork::Proxy {
        eprintln!(
            "corral-agent: sandbox-exec --model-socket needs --tool-network proxy: \
             the relay it starts is what carries the command's model calls"
        );
        return 2;
    }
    if args.tool_network == ToolNetwork::Off {
        eprintln!(
            "corral-agent: sandbox-exec --tool-network off: the command is the agent itself, \
             which needs the network for its model, and its tool commands cannot be cut off \
             separately; use --tool-network proxy (or on)"
        );
        return 2;
    }
    let network = match tool_net(
        args.tool_network,
        args.egress_socket.as_deref(),
        egress_secret,
    ) {
        Ok(network) => network,
        Err(code) => return code,
    };
    let broker = match model_socket(args.model_socket.as_deref()) {
        Ok(broker) => broker,
        Err(code) => return code,
    };
    let project = match setup::resolve_cwd(args.cwd.as_deref()) {
        Ok(project) => project,
        Err(e) => {
            eprintln!("corral-agent: {e}");
            return e.exit_code();
        }
    };
    match SandboxConfig::new(&project, &args.sandbox_hide, network) {
        Ok(config) => sandbox::exec(config, args.home.as_deref(), command, broker.as_ref()),
        Err(e) => {
            eprintln!("corral-agent: {e}");
            sandbox::EXIT_SANDBOX_UNAVAILABLE
        }
    }
}

/// Logs to stderr, and with an OTLP endpoint the trace pipeline (not yet
/// exporting: see [`Telemetry::start`]).
fn init_logging(
    registry: tracing_subscriber::Registry,
    otlp_endpoint: Option<&str>,
) -> Option<Telemetry> {
    let filter = std::env::var("CORRAL_LOG").unwrap_or_default();
    let filter = corral_telemetry::log_filter(if filter.is_empty() { "warn" } else { &filter });
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_filter(filter);
    let (telemetry, traces) = Telemetry::optional("corral-agent", otlp_endpoint);
    registry.with(logs).with(traces).init();
    telemetry
}

/// The dialect of `rpc` and the permission mode it starts in.
struct DialectChoice {
    dialect: Dialect,
    permission_mode: PermissionMode,
}

async fn rpc_mode(
    args: &AgentArgs,
    prepared: Prepared,
    choice: DialectChoice,
    token: Option<String>,
    transport: TransportOptions,
) -> u8 {
    if !choice.dialect.can_ask_permission() && choice.permission_mode == PermissionMode::Ask {
        eprintln!(
            "corral-agent: --permission-mode ask needs a dialect that can ask the client \
             (acp, zut or letscode); Zi RPC has no permission request"
        );
        return 2;
    }
    let mut setup = match setup::build(args, prepared) {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("corral-agent: {e}");
            return e.exit_code();
        }
    };
    setup.settings.permission_mode = choice.permission_mode;
    choice.dialect.serve_stdio(setup, token, transport).await
}

async fn run_mode(args: &AgentArgs, prepared: Prepared, prompt: String) -> u8 {
    let prompt = if prompt == stdin_prompt::FROM_STDIN {
        match stdin_prompt::read_prompt(std::io::stdin().lock(), stdin_prompt::MAX_STDIN_PROMPT) {
            Ok(prompt) => prompt,
            Err(e) => {
                eprintln!("corral-agent: {e}");
                return 2;
            }
        }
    } else {
        prompt
    };
    let setup = match setup::build(args, prepared) {
        Ok(setup) => setup,
        Err(e) => {
            eprintln!("corral-agent: {e}");
            return e.exit_code();
        }
    };
    let (out, mut events) = mpsc::channel(rpc::OUTPUT_QUEUE);
    let (mut agent, _worker) = Agent::start(
        setup.provider,
        setup.tools,
        setup.settings,
        setup.session,
        out,
    );
    let run = RunRequest {
        discarded: None,
        kind: RunKind::Prompt {
            text: prompt,
            images: Vec::new(),
        },
        started: None,
        traceparent: None,
    };
    if let Err(e) = agent.submit(run) {
        eprintln!("corral-agent: {e}");
        return 1;
    }
    agent.close();
    let mut stdout = std::io::stdout();
    let mut failed = false;
    let mut ends_with_newline = true;
    while let Some(Output::Event(event)) = events.recv().await {
        match event {
            AgentEvent::TextDelta(delta) => {
                ends_with_newline = delta.ends_with('\n');
                if stdout
                    .write_all(delta.as_bytes())
                    .and_then(|()| stdout.flush())
                    .is_err()
                {
                    agent.stop();
                }
            }
            AgentEvent::ToolCall { name, args, .. } => eprintln!("[tool] {name} {args}"),
            AgentEvent::TurnEnd {
                error: Some(error), ..
            } => {
                eprintln!("corral-agent: {error}");
                failed = true;
            }
            AgentEvent::Error(message) => eprintln!("corral-agent: {message}"),
            AgentEvent::Done => break,
            _ => {}
        }
    }
    if !ends_with_newline {
        let _ = stdout.write_all(b"\n");
    }
    u8::from(failed)
}
