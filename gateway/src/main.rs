//! `corral serve` runs the gateway; `corral attach` bridges stdio to a
//! remote project. Logs go to stderr (`CORRAL_LOG`, default `info`); stdout
//! carries only the listen address and a generated token (serve) or the
//! protocol (attach).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use corral::config::{self, Cli, Command, Config, LogFormat};
use corral::hub::HubSettings;
use corral::metrics::Metrics;
use corral::registry::Registry;
use corral::server::{self, AppState};
use corral::supervisor::backoff::RestartPolicy;
use corral::supervisor::env::child_env;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// First restart delay after a crash, and the cap of the backoff.
const RESTART_BASE: Duration = Duration::from_millis(500);
const RESTART_MAX: Duration = Duration::from_secs(30);

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
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
    let result = runtime.block_on(async {
        match cli.command {
            Command::Serve(args) => serve(args).await.map(|()| 0),
            Command::Attach(args) => corral::attach::run(args).await,
        }
    });
    match result {
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

fn init_logging(format: LogFormat) {
    let filter = std::env::var("CORRAL_LOG").unwrap_or_else(|_| "info".into());
    let builder = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter));
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

async fn serve(args: config::ServeArgs) -> anyhow::Result<()> {
    let config = config::load(args)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("cannot listen on {}", config.listen))?;
    let addr = listener.local_addr()?;
    announce(&config, addr);
    let metrics = Arc::new(Metrics::new().context("cannot set up metrics")?);
    let settings = hub_settings(&config, metrics.clone())?;
    std::fs::create_dir_all(&settings.sessions_dir)
        .with_context(|| format!("cannot create {}", settings.sessions_dir.display()))?;
    let registry = Arc::new(Registry::new(
        Arc::new(settings),
        config.limits.max_children,
    ));
    let shutdown = CancellationToken::new();
    let state = Arc::new(AppState {
        dialect: config.supervisor.dialect,
        registry,
        tokens: config.tokens.clone(),
        projects_root: config.projects_root.clone(),
        allowed_origins: config.allowed_origins.clone(),
        hello_timeout: config.limits.hello_timeout,
        max_frame_bytes: config.limits.max_frame_bytes,
        shutdown: shutdown.clone(),
        metrics: metrics.clone(),
        started: std::time::Instant::now(),
        connections: TaskTracker::new(),
    });
    if let Some(addr) = config.metrics_listen {
        serve_metrics(addr, state.clone()).await?;
    }
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let trigger = shutdown.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
        trigger.cancel();
    });
    corral::notify::announce_ready();
    server::run(listener, state, config.shutdown_grace).await?;
    tracing::info!("stopped");
    Ok(())
}

/// The two lines a user (or a test) needs: the address and, when one was
/// generated, the token. Printed once, to stdout only.
#[allow(clippy::print_stdout)]
fn announce(config: &Config, addr: std::net::SocketAddr) {
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
    println!("listening on http://{addr}");
    tracing::info!(%addr, projects_root = %config.projects_root.display(), "corral gateway started");
}

fn hub_settings(config: &Config, metrics: Arc<Metrics>) -> anyhow::Result<HubSettings> {
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
        dialect: supervisor.dialect,
        child_bin: supervisor.child_bin.clone(),
        child_args: supervisor.child_args.iter().map(Into::into).collect(),
        child_env: child_env(
            &supervisor.child_env.pass,
            &supervisor.child_env.set,
            std::env::vars_os(),
        ),
        sessions_dir: supervisor.sessions_dir.clone(),
        replay_events: config.limits.replay_events,
        replay_bytes: config.limits.replay_bytes,
        outbox_frames: config.limits.outbox_frames,
        max_line: config.limits.max_frame_bytes,
        ping_interval: supervisor.ping_interval,
        ping_timeout: supervisor.ping_timeout,
        ready_timeout: supervisor.ready_timeout,
        stop_grace: supervisor.stop_grace,
        idle_timeout: supervisor.idle_timeout,
        restart,
        metrics,
    })
}

/// `/metrics` without a token on a separate listener, for a scraper that
/// should not hold the admin token.
async fn serve_metrics(addr: std::net::SocketAddr, state: Arc<AppState>) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for metrics"))?;
    tracing::info!(%addr, "serving /metrics without a token");
    let shutdown = state.shutdown.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            axum::routing::get(
                |axum::extract::State(state): axum::extract::State<Arc<AppState>>| async move {
                    corral::admin::metrics_text(&state)
                },
            ),
        )
        .with_state(state);
    tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
        if let Err(e) = server.await {
            tracing::error!(error = %e, "metrics listener failed");
        }
    });
    Ok(())
}
