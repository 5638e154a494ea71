//! `corral serve` runs the gateway; `corral attach` bridges stdio to a
//! remote project; `corral journal` checks or repairs a session journal.
//! Logs go to stderr (`CORRAL_LOG`, default `info`); stdout carries only
//! the listen address and a generated token (serve), the protocol (attach)
//! or the report (journal).

use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use corral::audit::Audit;
use corral::client_addr::Listeners;
use corral::config::{self, ChildUser, Cli, Command, Config, LogFormat};
use corral::egress::EgressAdmin;
use corral::hub::HubSettings;
use corral::listener::ListenerLimits;
use corral::metrics::Metrics;
use corral::process::backoff::RestartPolicy;
use corral::process::env::child_env;
use corral::process::probe::Probe;
use corral::process::{Credentials, Limits};
use corral::registry::Registry;
use corral::server;
use corral::shutdown::Shutdown;
use corral::state::{AppState, ConfinementStatus, LimitsStatus};
use corral::throttle::AuthThrottle;
use corral::token_slots::TokenSlots;
use corral_telemetry::Telemetry;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer as _;

/// First restart delay after a crash, and the cap of the backoff.
const RESTART_BASE: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);
/// How long a stopping gateway waits for the audit log's last entries.
const AUDIT_CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Flags whose value is a token, masked in the process's command line.
const TOKEN_FLAGS: [&str; 3] = ["--token", "--observer-token", "--admin-token"];

fn main() -> ExitCode {
    let cli = Cli::parse();
    let otlp_endpoint = match &cli.command {
        Command::Serve(args) => args.otlp_endpoint.clone(),
        Command::Attach(_) | Command::Journal(_) | Command::Token(_) => None,
    };
    let telemetry = init_logging(cli.log_format, otlp_endpoint.as_deref());
    match cli.command {
        Command::Serve(args) => serve_main(args, telemetry),
        Command::Attach(args) => run_async(corral::attach_cli::run(args)),
        Command::Journal(args) => journal_main(args),
        Command::Token(args) => run_async(corral::token_cli::run(args)),
    }
}

/// `corral journal check|repair FILE`: 0 when whole (or repaired), 1 when
/// check finds damage, 2 when the file cannot be read or repaired.
fn journal_main(args: corral::journal::JournalArgs) -> ExitCode {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    match corral::journal::run(args, now) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(e) => {
            eprintln!("corral journal: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs `future` on a single-threaded runtime and exits with its code.
fn run_async(future: impl std::future::Future<Output = anyhow::Result<i32>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("corral: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(future) {
        Ok(code) => {
            runtime.shutdown_timeout(Duration::from_millis(100));
            std::process::exit(code)
        }
        Err(e) => {
            eprintln!("corral: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// `corral serve`: hardening and every check that can refuse to start,
/// while the process has one thread; then the server.
fn serve_main(args: config::ServeArgs, telemetry: Option<Telemetry>) -> ExitCode {
    // First: no same-user process may ptrace the gateway or read its
    // memory or environment through /proc, and no core dump holds tokens.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "cannot clear the dumpable flag");
    }
    let tokens_on_command_line =
        !args.tokens.is_empty() || !args.observer_tokens.is_empty() || args.admin_token.is_some();
    let config = match config::load(args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("corral: {e}");
            return ExitCode::from(2);
        }
    };
    // Read once: masked where /proc shows them (the original argument and
    // environment blocks) and gone from the environment, before any thread
    // or child exists.
    let token_vars: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .filter(|name| {
            config::TOKEN_ENV_VARS.contains(&name.as_str())
                || (name.starts_with("CORRAL_") && name.contains("TOKEN"))
        })
        .collect();
    let vars: Vec<&str> = token_vars.iter().map(String::as_str).collect();
    if let Err(e) = corral::scrub::mask_process_secrets(&TOKEN_FLAGS, &vars) {
        tracing::warn!(error = %e, "cannot mask the tokens in /proc/self/cmdline and /proc/self/environ");
    }
    for name in &token_vars {
        std::env::remove_var(name);
    }
    if tokens_on_command_line {
        tracing::warn!("a token was given on the command line (--token, --observer-token or --admin-token): other local users can read it with ps; use --token-file / --observer-token-file / --admin-token-file or CORRAL_TOKENS / CORRAL_OBSERVER_TOKENS / CORRAL_ADMIN_TOKEN instead");
    }
    // Bound before the probe, which opens them as children will.
    let sockets = match bind_sockets(&config) {
        Ok(sockets) => sockets,
        Err(code) => return code,
    };
    if let Err(code) = check_sandbox(&config) {
        return code;
    }
    let confinement = &config.confinement;
    // Before the runtime: cgroup v2 moves the whole (single-threaded) process.
    let limits = Arc::new(Limits::choose(confinement.memory_max, confinement.pids_max));
    // In its cgroup now: the exporter's threads may start.
    if let Some(Err(e)) = telemetry.as_ref().map(Telemetry::start) {
        tracing::warn!(error = %e, "no traces are exported");
    }
    run_async(async move {
        let served = serve(config, limits, sockets, telemetry.as_ref()).await;
        if let Some(telemetry) = telemetry {
            // Sends the last spans; blocks, so off the event loop.
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
        served.map(|()| 0)
    })
}

/// The Unix sockets children reach the gateway through, bound before the
/// sandbox probe (which opens them as children will).
struct Sockets {
    /// The egress proxy's (`--tool-network proxy`).
    egress: Option<std::os::unix::net::UnixListener>,
    /// The model broker's (`--model-broker on`).
    broker: Option<std::os::unix::net::UnixListener>,
}

fn bind_sockets(config: &Config) -> Result<Sockets, ExitCode> {
    let egress = bind_egress(config).map_err(|e| {
        eprintln!("corral: {e:#}");
        ExitCode::from(2)
    })?;
    let broker = broker_socket(config)?;
    Ok(Sockets { egress, broker })
}

/// With `--model-broker on`: the provider keys masked in
/// `/proc/self/environ` and gone from the environment with their base URLs
/// (so no child inherits them), and the broker's socket bound, before the
/// sandbox probe opens it and before any thread exists.
fn broker_socket(config: &Config) -> Result<Option<std::os::unix::net::UnixListener>, ExitCode> {
    let (Some(_), Some(socket)) = (&config.model_broker, &config.confinement.model_socket) else {
        return Ok(None);
    };
    let keys = corral::broker::Provider::ALL.map(corral::broker::Provider::key_env);
    if let Err(e) = corral::scrub::mask_process_secrets(&[], &keys) {
        tracing::warn!(error = %e, "cannot mask the provider keys in /proc/self/environ");
    }
    for name in corral::broker::ENV_VARS {
        std::env::remove_var(name);
    }
    match corral::broker::open_socket(&config.state_dir, socket) {
        Ok(listener) => Ok(Some(listener)),
        Err(e) => {
            eprintln!(
                "corral: cannot make the model broker's socket under {}/egress: {e}",
                config.state_dir.display()
            );
            Err(ExitCode::from(1))
        }
    }
}

/// With the sandbox on, refuses to start unless the agent's sandbox works
/// on this host; with it off, says so loudly.
fn check_sandbox(config: &Config) -> Result<(), ExitCode> {
    let confinement = &config.confinement;
    if !confinement.sandbox {
        tracing::warn!("the agent sandbox is OFF (--sandbox off): agents and every command they run are unconfined and can read and write other projects, the state directory and the gateway's config and token files");
        return Ok(());
    }
    let probe = Probe {
        child_bin: &config.supervisor.child_bin,
        args: confinement.probe_args(),
        cwd: &config.projects_root,
        credentials: credentials(config),
        timeout: config.supervisor.ready_timeout,
    };
    match probe.run() {
        Ok(report) => {
            tracing::info!(report = %report, tool_network = confinement.tool_network.name(), "agent sandbox available");
            Ok(())
        }
        Err(reason) => {
            let reason = reason.to_string();
            let reason = reason.trim_end_matches('.');
            eprintln!("corral: the agent sandbox is unavailable: {reason}. Fix the host, or start with --sandbox off to run agents unconfined (not recommended).");
            Err(ExitCode::from(1))
        }
    }
}

fn credentials(config: &Config) -> Option<Credentials> {
    config
        .confinement
        .child_user
        .as_ref()
        .map(|user| Credentials {
            uid: user.uid,
            gid: user.gid,
            groups: user.groups.clone(),
        })
}

/// Logs to stderr, and with an OTLP endpoint the trace pipeline (not yet
/// exporting: see [`Telemetry::start`]).
fn init_logging(format: LogFormat, otlp_endpoint: Option<&str>) -> Option<Telemetry> {
    let filter = std::env::var("CORRAL_LOG").unwrap_or_else(|_| "info".into());
    let filter = corral_telemetry::log_filter(&filter);
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let logs = match format {
        LogFormat::Text => logs.with_filter(filter).boxed(),
        LogFormat::Json => logs.json().with_filter(filter).boxed(),
    };
    let (telemetry, traces) = Telemetry::optional("corral", otlp_endpoint);
    tracing_subscriber::registry()
        .with(logs)
        .with(traces)
        .init();
    telemetry
}

/// With `--tool-network proxy`: makes `STATE/egress` and binds the egress
/// proxy's socket there (children open it before their sandbox hides it).
fn bind_egress(config: &Config) -> anyhow::Result<Option<std::os::unix::net::UnixListener>> {
    let Some(socket) = &config.confinement.egress_socket else {
        return Ok(None);
    };
    corral::statefs::Dir::open_root(&config.state_dir)
        .and_then(|state| state.subdir("egress", 0o755))
        .with_context(|| format!("cannot create {}/egress", config.state_dir.display()))?;
    let listener = corral::egress::proxy::bind(socket)
        .with_context(|| format!("cannot listen on the egress socket {}", socket.display()))?;
    Ok(Some(listener))
}

/// The accounts children run as: the gateway's own, and `--child-user`.
fn child_peers(config: &Config) -> corral::child_socket::Peers {
    let own = nix::unistd::geteuid().as_raw();
    let child = config.confinement.child_user.as_ref().map(|u| u.uid);
    corral::child_socket::Peers::only(std::iter::once(own).chain(child))
}

/// Starts the egress proxy's thread on `listener` with `registry` (the
/// one the hubs give each spawn its secret from).
fn start_egress(
    config: &Config,
    listener: std::os::unix::net::UnixListener,
    registry: Arc<corral::egress::Registry>,
    metrics: Arc<Metrics>,
    events: Arc<corral::events::EventLog>,
    stop: tokio_util::sync::CancellationToken,
) -> anyhow::Result<()> {
    use corral::egress::proxy::{self, ProxyConfig, Resolver};
    let resolver = Resolver::from_env().context("CORRAL_EGRESS_TEST_RESOLVE")?;
    let proxy_config = ProxyConfig {
        max_connections: config.egress.max_connections,
        max_per_project: config.egress.max_per_project(),
        resolver,
        own_addresses: config::own_addresses(),
        peers: child_peers(config),
        ..ProxyConfig::default()
    };
    proxy::spawn(listener, registry, metrics, events, proxy_config, stop)
        .context("cannot start the egress proxy's thread")?;
    let policy = &config.egress.policy;
    if policy.allow().is_empty() {
        tracing::warn!("tools reach nothing through the egress proxy: no --egress-allow rule (egress_allow) is set; allow what your projects need, e.g. --egress-allow registry.example.com:443, or give tools the host's network with --tool-network on");
    } else {
        let allow: Vec<String> = policy.allow().iter().map(ToString::to_string).collect();
        let deny: Vec<String> = policy.deny().iter().map(ToString::to_string).collect();
        tracing::info!(allow = %allow.join(" "), deny = %deny.join(" "), "tools reach the network through the egress proxy");
    }
    Ok(())
}

async fn serve(
    config: Config,
    limits: Arc<Limits>,
    sockets: Sockets,
    telemetry: Option<&Telemetry>,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| listen_error(e, config.listen, "--listen"))?;
    let addr = listener.local_addr()?;
    let proxy = match config.proxy_listen {
        Some(proxy) => Some(
            tokio::net::TcpListener::bind(proxy)
                .await
                .map_err(|e| listen_error(e, proxy, "--proxy-listen"))?,
        ),
        None => None,
    };
    let metrics_listener = match config.metrics_listen {
        Some(at) => Some(
            tokio::net::TcpListener::bind(at)
                .await
                .map_err(|e| listen_error(e, at, "--metrics-listen"))?,
        ),
        None => None,
    };
    let addresses = Addresses {
        main: addr,
        proxy: proxy.as_ref().map(|p| p.local_addr()).transpose()?,
        metrics: metrics_listener
            .as_ref()
            .map(|m| m.local_addr())
            .transpose()?,
    };
    announce(&config, &addresses);
    let metrics = Arc::new(Metrics::new().context("cannot set up metrics")?);
    let audit = start_audit(&config, &metrics, telemetry)?;
    let egress_dir = config.state_dir.join("egress");
    let egress = match sockets.egress {
        Some(listener) => {
            let registry = Arc::new(corral::egress::Registry::new(config.egress.policy.clone()));
            let kept = corral::egress::kept::load(&registry, &egress_dir)
                .map_err(|e| anyhow::anyhow!("cannot read the egress overrides: {e}"))?;
            if kept > 0 {
                tracing::info!(projects = kept, "egress overrides in force");
            }
            Some((listener, registry))
        }
        None => None,
    };
    let ledger = Arc::new(
        corral::spend::Ledger::open(
            &config.state_dir,
            config.project_budget_usd,
            metrics.clone(),
        )
        .map_err(|e| anyhow::anyhow!("cannot read the budgets: {e}"))?,
    );
    if let Some(usd) = config.project_budget_usd {
        tracing::info!(budget = %corral::spend::usd(usd), "each project's model spend is limited (--project-budget-usd)");
    }
    let mut settings = hub_settings(
        &config,
        metrics.clone(),
        limits.clone(),
        audit.clone(),
        ledger.clone(),
    )?;
    settings.egress = egress.as_ref().map(|(_, registry)| registry.clone());
    let brokered = config.model_broker.clone().zip(sockets.broker);
    let broker_keys = brokered
        .as_ref()
        .map(|_| Arc::new(corral::broker::Registry::default()));
    settings.model_broker = broker_keys.clone();
    std::fs::create_dir_all(&settings.sessions_dir)
        .with_context(|| format!("cannot create {}", settings.sessions_dir.display()))?;
    let max_starting = config
        .limits
        .max_starting
        .unwrap_or_else(corral::process::spawner::default_starting_limit);
    if !corral::process::spawner::set_starting_limit(max_starting) {
        tracing::warn!("a child was started before --max-starting was applied");
    }
    corral::process::spares::set_target(config.limits.spare_agents);
    let shutdown = Shutdown::new();
    let registry = Arc::new(Registry::new(
        Arc::new(settings),
        config.limits.max_children,
        shutdown.clone(),
    ));
    let egress_admin = egress.as_ref().map(|(_, registry)| EgressAdmin {
        registry: registry.clone(),
        dir: egress_dir.clone(),
    });
    if let Some((listener, egress)) = egress {
        start_egress(
            &config,
            listener,
            egress,
            metrics.clone(),
            registry.events().clone(),
            shutdown.token().clone(),
        )?;
    }
    if let (Some((upstreams, socket)), Some(keys)) = (brokered, broker_keys) {
        let broker = corral::broker::Broker::new(keys, upstreams, metrics.clone(), ledger.clone())
            .context("cannot set up the model broker's HTTP client")?
            .with_peers(child_peers(&config));
        corral::broker::spawn(socket, broker, shutdown.token().clone())
            .context("cannot start the model broker")?;
        tracing::info!(
            "model broker on: agents reach their model through the gateway, which holds the keys"
        );
    } else if let Some(why) = config.model_broker_off {
        tracing::info!(
            "model broker off ({why}): agents get the provider keys in their environment"
        );
    }
    if !config.mcp.servers.is_empty() {
        let names: Vec<&str> = config.mcp.servers.iter().map(|s| s.name.as_str()).collect();
        match config.supervisor.child_command {
            Some(_) => tracing::warn!(
                servers = ?names,
                "--mcp-servers is not given to a --child-command agent: its projects get no operator MCP servers"
            ),
            None => {
                tracing::info!(servers = ?names, client_mcp = ?config.mcp.client, "MCP servers of the operator")
            }
        }
    }
    let managed = corral::access::store::Store::open(&config.state_dir).with_context(|| {
        format!(
            "cannot read the managed tokens in {}/{}",
            config.state_dir.display(),
            corral::access::store::DIR
        )
    })?;
    let keyring = corral::access::Keyring {
        statics: config.tokens.clone(),
        configured: config.configured_tokens.clone(),
        managed: Some(Arc::new(managed)),
        jwt: jwt_verify(&config, &shutdown)?,
    };
    let state = Arc::new(AppState {
        dialect: config.supervisor.dialect,
        registry,
        keyring,
        live: Arc::default(),
        projects_root: config.projects_root.clone(),
        allowed_origins: config.allowed_origins.clone(),
        hello_timeout: config.limits.hello_timeout,
        max_hello_bytes: config.limits.max_hello_bytes,
        max_frame_bytes: config.limits.max_frame_bytes,
        ws_buffer_bytes: config.limits.ws_buffer_bytes,
        throttle: AuthThrottle::new(config.throttle).context("cannot set up the auth throttle")?,
        token_slots: Arc::new(TokenSlots::new(config.limits.max_connections_per_token)),
        shutdown: shutdown.clone(),
        metrics: metrics.clone(),
        started: std::time::Instant::now(),
        confinement: confinement_status(&config, &limits),
        egress: egress_admin,
        spend: ledger.clone(),
        audit: audit.clone(),
        acp_connections: Default::default(),
    });
    corral::spend::spawn_keeper(ledger.clone(), &shutdown);
    // No spare agent starts once the gateway is stopping.
    let stopping = shutdown.token().clone();
    let spares_stopped = tokio::spawn(async move {
        stopping.cancelled().await;
        corral::process::spares::stop().await;
    });
    if let Some(listener) = metrics_listener {
        serve_metrics(listener, state.clone(), config.limits.header_timeout);
    }
    shutdown.spawn(corral::tokens_admin::follow(state.clone()));
    // Orphans of the children's tools become the gateway's, so they can
    // be killed and reaped (the children were already checked by the probe).
    match corral::process::leftovers::become_subreaper() {
        Ok(()) => {
            shutdown.spawn(corral::process::leftovers::watch_orphans(
                shutdown.token().clone(),
            ));
        }
        Err(e) => {
            tracing::warn!(error = %e, "cannot become a child subreaper: processes that leave their agent's session survive it")
        }
    }
    let manager = corral::notify::service_manager();
    if let Some(manager) = &manager {
        manager.notify("READY=1");
    }
    shutdown
        .on_signals(move || {
            if let Some(manager) = manager {
                manager.notify("STOPPING=1");
            }
        })
        .context("cannot listen for SIGTERM and SIGINT")?;
    let listener_limits = listener_limits(&config);
    let listeners = Listeners {
        main: listener,
        proxy,
        trusted: config.trusted_proxies.clone(),
    };
    server::run(listeners, state, listener_limits, config.shutdown_grace).await;
    // The spares are gone (reaped, their cgroups removed) before the
    // gateway's own cgroup is.
    shutdown.token().cancel();
    let _ = spares_stopped.await;
    // The children have stopped: their last spend is kept.
    ledger.sync().await;
    // The entries of the shutdown itself included; blocks, so off the loop.
    let _ = tokio::task::spawn_blocking(move || audit.close(AUDIT_CLOSE_WAIT)).await;
    limits.cleanup();
    // This gateway's own sockets go with it (other gateways on the state
    // directory have theirs).
    for socket in [
        &config.confinement.egress_socket,
        &config.confinement.model_socket,
    ]
    .into_iter()
    .flatten()
    {
        let _ = std::fs::remove_file(socket);
    }
    tracing::info!("stopped");
    Ok(())
}

/// With a JWT secret or JWKS: the verifier the keyring asks for what
/// looks like a JWT (its JWKS URL refreshed in the background); else none.
fn jwt_verify(
    config: &Config,
    shutdown: &corral::shutdown::Shutdown,
) -> anyhow::Result<Option<corral::access::keyring::JwtVerify>> {
    let verifier = Arc::new(
        corral::access::jwt::Verifier::from_settings(&config.jwt)
            .context("cannot set up JWT verification")?,
    );
    if !verifier.is_enabled() {
        return Ok(None);
    }
    verifier.spawn_refresh(shutdown);
    tracing::info!(accepted = %verifier.summary(), "signed tokens (JWT) accepted");
    Ok(Some(Arc::new(move |token: &str, now| {
        verifier
            .verify(token, now)
            .map_err(|error| tracing::debug!(%error, "JWT refused"))
            .ok()
    })))
}

/// With `--audit-log`: the file opened, its writer thread started and, with
/// `--otlp-endpoint`, its entries exported as log records; else an audit
/// that records nothing.
fn start_audit(
    config: &Config,
    metrics: &Metrics,
    telemetry: Option<&Telemetry>,
) -> anyhow::Result<Audit> {
    let Some(settings) = &config.audit else {
        return Ok(Audit::disabled());
    };
    let export = match telemetry.map(Telemetry::audit_export) {
        Some(Ok(export)) => Some(export),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "audit entries are not exported");
            None
        }
        None => None,
    };
    let audit = Audit::start(settings, metrics.audit_entries.clone(), export)?;
    tracing::info!(file = %settings.path.display(), prompts = settings.prompts, "audit log on");
    Ok(audit)
}

/// Raises the open-file limit and bounds connections under it.
fn listener_limits(config: &Config) -> ListenerLimits {
    let fds = match corral::fdlimit::raise() {
        Ok(fds) => fds,
        Err((fds, e)) => {
            tracing::warn!(error = %e, soft = fds.soft, "cannot raise the open-file limit");
            fds
        }
    };
    // A spare agent holds what a child does.
    let max_children = config.limits.max_children + config.limits.spare_agents;
    let egress_connections = match config.confinement.egress_proxy() {
        true => config.egress.max_connections,
        false => 0,
    };
    let derived =
        corral::fdlimit::default_max_connections(fds.soft, max_children, egress_connections);
    let max_connections = match config.limits.max_connections {
        Some(n) => {
            if n > derived {
                tracing::warn!(max_connections = n, open_files = fds.soft, "--max-connections leaves less headroom than the children and the admin API need; connections may fail with EMFILE");
            }
            n
        }
        None => derived,
    };
    tracing::info!(
        open_files = fds.soft,
        open_files_before = fds.before,
        max_connections,
        "connection limits"
    );
    ListenerLimits {
        max_connections,
        ops_connections: config.limits.ops_connections,
        header_timeout: config.limits.header_timeout,
    }
}

/// Why an address cannot be bound, and what to do about it.
fn listen_error(e: std::io::Error, addr: std::net::SocketAddr, flag: &str) -> anyhow::Error {
    let hint = match e.kind() {
        std::io::ErrorKind::AddrInUse => format!(
            "; another process listens there (another corral serve?): stop it, or pass {flag} with another port (port 0 picks a free one)"
        ),
        std::io::ErrorKind::PermissionDenied if addr.port() < 1024 => format!(
            "; ports below 1024 need privileges: pass {flag} with a port of 1024 or more"
        ),
        std::io::ErrorKind::AddrNotAvailable => format!(
            "; {} is not an address of this host: pass {flag} with one of its addresses (or 0.0.0.0)",
            addr.ip()
        ),
        _ => String::new(),
    };
    anyhow::anyhow!("cannot listen on {addr}: {e}{hint}")
}

/// Where the gateway listens, once bound (a port 0 resolved).
struct Addresses {
    main: std::net::SocketAddr,
    /// `--proxy-listen`.
    proxy: Option<std::net::SocketAddr>,
    /// `--metrics-listen`.
    metrics: Option<std::net::SocketAddr>,
}

/// The lines a user (or a test) needs: the addresses and, when one was
/// generated, the token. Printed once, to stdout only; `listening on`
/// comes last.
#[allow(clippy::print_stdout)]
fn announce(config: &Config, addresses: &Addresses) {
    if let Some(token) = &config.generated_token {
        println!(
            "client token (generated; pass it in the hello): {}",
            token.expose()
        );
    }
    if let Some(token) = &config.generated_admin_token {
        println!(
            "admin token (generated; for the dashboard and admin API): {}",
            token.expose()
        );
    }
    if let Some(proxy) = addresses.proxy {
        println!("proxy listening on http://{proxy}");
        tracing::info!(%proxy, "listening for a trusted balancer: the client address is the right-most X-Forwarded-For entry there");
    }
    if let Some(metrics) = addresses.metrics {
        println!("metrics listening on http://{metrics}");
        tracing::info!(%metrics, "serving /metrics without a token");
    }
    let addr = addresses.main;
    println!("listening on http://{addr}");
    tracing::info!(%addr, projects_root = %config.projects_root.display(), "corral gateway started");
}

/// What `/v1/stats` says of the confinement.
fn confinement_status(config: &Config, limits: &Limits) -> ConfinementStatus {
    let confinement = &config.confinement;
    ConfinementStatus {
        enabled: confinement.sandbox,
        tool_network: confinement.tool_network.name(),
        child_user: confinement.child_user.as_ref().map(|u| u.name.clone()),
        limits: LimitsStatus {
            backend: limits.backend_name(),
            memory_max: limits.memory_max(),
            pids_max: limits.pids_max(),
        },
    }
}

fn hub_settings(
    config: &Config,
    metrics: Arc<Metrics>,
    limits: Arc<Limits>,
    audit: Audit,
    spend: Arc<corral::spend::Ledger>,
) -> anyhow::Result<HubSettings> {
    let supervisor = &config.supervisor;
    let restart = RestartPolicy::new(
        RESTART_BASE,
        RESTART_MAX,
        supervisor.crash_limit,
        supervisor.crash_window,
        supervisor.crash_cooldown,
    )
    .context("invalid restart settings")?;
    Ok(HubSettings {
        epoch: corral::hub::new_epoch()
            .map_err(|e| anyhow::anyhow!("cannot make the seq epoch: {e}"))?,
        dialect: supervisor.dialect,
        child_bin: supervisor.child_bin.clone(),
        child_args: agent_args(config),
        child_command: supervisor
            .child_command
            .as_ref()
            .map(|words| words.iter().map(Into::into).collect()),
        homes_dir: config.state_dir.join("homes"),
        state_dir: config.state_dir.clone(),
        child_env: {
            let pass = &supervisor.child_env.pass;
            let set = &supervisor.child_env.set;
            let env = child_env(pass, set, std::env::vars_os());
            // A third-party agent gets provider keys only when named.
            let env = match supervisor.child_command {
                Some(_) => corral::process::env::third_party_env(env, pass, set),
                None => env,
            };
            with_user_env(env, config.confinement.child_user.as_ref())
        },
        sandbox_args: config.confinement.agent_args(),
        child_template: supervisor.child_template,
        egress: None,
        projects_root: config.projects_root.clone(),
        credentials: credentials(config),
        limits: (limits.backend_name() != "none").then_some(limits),
        sessions_dir: supervisor.sessions_dir.clone(),
        replay_events: config.limits.replay_events,
        replay_bytes: config.limits.replay_bytes,
        outbox_frames: config.limits.outbox_frames,
        budgets: corral::hub::budget::Budgets::new(
            config.limits.client_buffer_bytes,
            config.limits.total_client_buffer_bytes,
            metrics.clone(),
        ),
        max_client_requests: config.limits.max_client_requests,
        max_line: config.limits.max_frame_bytes,
        ping_interval: supervisor.ping_interval,
        ping_timeout: supervisor.ping_timeout,
        ready_timeout: supervisor.ready_timeout,
        stop_grace: supervisor.stop_grace,
        permission_timeout: supervisor.permission_timeout,
        idle_timeout: supervisor.idle_timeout,
        restart,
        metrics,
        model_broker: None,
        gate: Arc::new(corral::admission::Admission::new(
            config.limits.max_prompts_per_minute,
            spend.clone(),
        )),
        audit,
        spend: Some(spend),
        mcp: Arc::new(config.mcp.clone()),
        mcp_dir: config.state_dir.join("mcp"),
    })
}

/// What follows `corral-agent rpc --cwd DIR --session FILE`: the traces'
/// endpoint (so the agent's spans join the gateway's traces), then the
/// user's `-- CHILD_ARGS`. A third-party agent (`--child-command`) gets
/// neither.
fn agent_args(config: &Config) -> Vec<OsString> {
    // Under the model broker the agent has no network to export over.
    let endpoint = match (&config.otlp_endpoint, &config.supervisor.child_command) {
        (Some(endpoint), None) if config.model_broker.is_none() => {
            vec!["--otlp-endpoint".into(), endpoint.into()]
        }
        _ => Vec::new(),
    };
    let user = config.supervisor.child_args.iter().map(Into::into);
    endpoint.into_iter().chain(user).collect()
}

/// HOME, USER and LOGNAME of the child user, replacing the gateway's.
fn with_user_env(
    mut env: Vec<(OsString, OsString)>,
    user: Option<&ChildUser>,
) -> Vec<(OsString, OsString)> {
    let Some(user) = user else { return env };
    let set: [(&str, OsString); 3] = [
        ("HOME", user.home.clone().into_os_string()),
        ("USER", user.name.clone().into()),
        ("LOGNAME", user.name.clone().into()),
    ];
    env.retain(|(name, _)| !set.iter().any(|(n, _)| name == n));
    env.extend(set.into_iter().map(|(n, v)| (n.into(), v)));
    env
}

/// `/metrics` without a token on a separate listener, for a scraper that
/// should not hold the admin token.
/// Connections the `--metrics-listen` listener holds at once: a few
/// scrapers. Like the main listener's, they are bounded, time out without
/// a request head, and the oldest goes first to make room, so a flood on
/// this port cannot take descriptors the main listener needs.
const METRICS_CONNECTIONS: usize = 16;

fn serve_metrics(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    header_timeout: std::time::Duration,
) {
    let shutdown = state.shutdown.clone();
    let metrics = state.metrics.clone();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(
            |axum::extract::State(state): axum::extract::State<Arc<AppState>>| async move {
                corral::admin::metrics_text(state).await
            },
        ),
    );
    let app = corral::layers::http(app).with_state(state);
    let limits = ListenerLimits {
        max_connections: METRICS_CONNECTIONS,
        ops_connections: 1,
        header_timeout,
    };
    let listeners = Listeners {
        main: listener,
        proxy: None,
        trusted: Vec::new(),
    };
    shutdown.spawn(corral::listener::serve(
        listeners,
        app,
        limits,
        metrics,
        shutdown.clone(),
    ));
}
