//! `config::load`: the declared settings merged by [`Layers`], then the
//! checks that span several settings (addresses, buffers against the frame
//! limit, the trusted proxies against the sandbox, secret files against
//! the hidden directories), then the state directory and generated tokens.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::checks::{at_least, budget_usd, canonical_dir, create_dir, origins};
use super::settings::{Layers, ServeArgs};
use super::{
    audit_log, broker, child, child_command, defaults, egress, file, hiding, jwt, sandbox,
    throttle, token_table, tokens, Config, ConfigError, Confinement, Limits, SupervisorSettings,
};
use crate::auth::{self, Secret, Tokens};

/// Loads the configuration, reading the process environment.
pub fn load(args: ServeArgs) -> Result<Config, ConfigError> {
    load_with_env(args, &|var| std::env::var(var).ok())
}

/// Loads the configuration with `env` as the environment (for tests): the
/// declared settings merged by `Layers`, then the checks that span
/// several settings, then the state directory (last, so that a refused
/// configuration leaves nothing behind).
pub fn load_with_env(
    args: ServeArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let file = match &args.config {
        Some(path) => file::read(path)?,
        None => file::FileConfig::default(),
    };
    let layers = Layers {
        args: &args,
        file: &file,
    };
    // Every secret the gateway reads from a file, whichever layer won.
    let mut secret_files = hiding::secret_files(&args, &file);
    let base = args
        .config
        .as_deref()
        .and_then(Path::parent)
        .unwrap_or(Path::new(""));
    secret_files.extend(token_table::files(&file.token, base));
    let configured_tokens = token_table::resolve(&file.token, base)?;

    let listen = listen(&layers)?;
    let metrics_listen = file_addr(
        args.metrics_listen,
        &file.metrics_listen,
        "metrics_listen",
        "127.0.0.1:9100",
    )?;
    let proxy_listen = throttle::proxy_listen(&args, &file, listen)?;
    let trusted_proxies = throttle::trusted_proxies(&args, &file, proxy_listen)?;
    let throttle = throttle::policy(&layers)?;
    let audit = audit_log::resolve(&layers)?;

    let tokens = tokens::resolve(&args, &file, env)?;
    let jwt = jwt::resolve(&layers)?;
    let jwt_accepted = jwt.secret.is_some() || jwt.jwks.is_some();
    if tokens.client.is_empty()
        && configured_tokens.is_empty()
        && !jwt_accepted
        && !is_loopback(listen)
    {
        return Err(ConfigError::NoClientToken { addr: listen });
    }
    let projects_root = canonical_dir(&layers.projects_root()?)?;
    let allowed_origins = origins(layers.allowed_origins())?;
    let child_env = child::parse_env(&layers.child_env())?;
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let child_bin = child::resolve_bin(
        layers.child_bin().as_deref(),
        exe_dir.as_deref(),
        env("PATH").as_deref(),
    )?;
    let child_template = layers.child_template()?.applies_to(&child_bin);
    let limits = limits(&layers)?;
    let ready_timeout = layers.ready_timeout()?;
    let ping_interval = layers.ping_interval()?;
    let ping_timeout = layers.ping_timeout()?;
    let crash_limit = layers.crash_limit()?;
    let crash_window = layers.crash_window()?;
    let idle_timeout = layers.idle_timeout()?;
    let confinement = sandbox::resolve(sandbox::Raw {
        sandbox: layers.sandbox()?,
        extra_hide: layers.sandbox_hide(),
        tool_network: layers.args.tool_network.or(layers.file.tool_network),
        child_user: layers.child_user(),
        memory_max: layers.child_memory_max(),
        pids_max: layers.child_pids_max(),
    })?;
    if !trusted_proxies.is_empty() {
        throttle::check_trusted_reach(
            &trusted_proxies,
            &throttle::own_addresses(),
            confinement.tools_on_host_network(),
        )?;
    }
    let dialect = layers.dialect()?;
    let child_args = layers.child_args();
    let child_command = child_command::resolve(
        layers.child_command().as_deref(),
        &child_command::Context {
            dialect,
            child_args: &child_args,
            tool_network_off: confinement.sandbox
                && confinement.tool_network == super::ToolNetwork::Off,
            path_var: env("PATH").as_deref(),
        },
    )?;
    let broker = broker::resolve(
        layers.model_broker()?,
        &broker::Context {
            confinement: &confinement,
            third_party: child_command.is_some(),
            child_args: &child_args,
        },
        env,
    )?;
    let model_broker = broker.upstreams;
    // Names this gateway's sockets apart from those of other gateways
    // sharing the state directory.
    let instance: String = auth::random_token()?.chars().take(12).collect();
    let (state_dir, sessions_dir, mut confinement) = state(
        layers.state_dir()?,
        &projects_root,
        child_command
            .as_ref()
            .and_then(|c| c.first())
            .map(Path::new),
        confinement,
        secret_files,
        env,
    )?;
    if model_broker.is_some() {
        // Bound by the gateway at start; agents open it before their
        // sandbox hides the state directory.
        let socket = state_dir
            .join("egress")
            .join(socket_name("broker", &instance));
        confinement.model_socket = Some(socket);
    }
    if confinement.egress_proxy() {
        // Likewise.
        let socket = state_dir
            .join("egress")
            .join(socket_name("proxy", &instance));
        confinement.egress_socket = Some(socket);
    }
    let egress = egress::resolve(
        &layers.egress_allow(),
        &layers.egress_deny(),
        &layers.egress_methods(),
        layers.egress_max_connections()?,
    )?;
    let mcp = crate::mcp::McpPolicy {
        servers: match layers.mcp_servers() {
            Some(path) => {
                crate::mcp::OperatorServers::load(&path).map_err(|e| ConfigError::Invalid {
                    setting: "--mcp-servers / mcp_servers".into(),
                    reason: e.to_string(),
                })?
            }
            None => crate::mcp::OperatorServers::default(),
        },
        client: layers.client_mcp()?,
    };
    if !mcp.servers.is_empty()
        && child_args
            .iter()
            .any(|a| a == "--mcp-config" || a.starts_with("--mcp-config="))
    {
        return Err(ConfigError::Invalid {
            setting: "--mcp-servers / mcp_servers".into(),
            reason: "-- CHILD_ARGS name --mcp-config too: give every server in --mcp-servers \
                     (each agent gets them as its --mcp-config)"
                .into(),
        });
    }
    let mut tokens = tokens;
    let (generated_token, generated_admin_token) = generate_missing(
        &mut tokens,
        !configured_tokens.is_empty() || jwt_accepted,
        listen,
    )?;

    Ok(Config {
        config_file: args.config.clone(),
        listen,
        metrics_listen,
        proxy_listen,
        trusted_proxies,
        throttle,
        otlp_endpoint: args.otlp_endpoint.clone(),
        audit,
        projects_root,
        state_dir,
        tokens,
        configured_tokens,
        generated_token,
        generated_admin_token,
        jwt,
        allowed_origins,
        shutdown_grace: layers.shutdown_grace()?,
        limits,
        supervisor: SupervisorSettings {
            dialect,
            child_bin,
            child_args,
            child_template,
            child_command,
            child_env,
            sessions_dir,
            ready_timeout,
            ping_interval,
            ping_timeout,
            stop_grace: layers.stop_grace()?,
            permission_timeout: layers.permission_timeout()?,
            idle_timeout: (!idle_timeout.is_zero()).then_some(idle_timeout),
            crash_limit,
            crash_window,
            crash_cooldown: layers.crash_cooldown()?,
        },
        confinement,
        egress,
        model_broker,
        model_broker_off: broker.off_because,
        mcp,
        project_budget_usd: layers
            .project_budget_usd()
            .map(|usd| budget_usd("--project-budget-usd / project_budget_usd", usd))
            .transpose()?,
    })
}

fn is_loopback(addr: SocketAddr) -> bool {
    addr.ip().to_canonical().is_loopback()
}

/// `--listen`, required; from the file it is text checked here.
fn listen(layers: &Layers) -> Result<SocketAddr, ConfigError> {
    file_addr(
        layers.args.listen,
        &layers.file.listen,
        "listen",
        "127.0.0.1:7000 or [::]:7000",
    )?
    .ok_or(ConfigError::Missing {
        flag: "--listen ADDR",
        key: "listen",
    })
}

/// An address from the command line, else the file's text for `key`.
fn file_addr(
    cli: Option<SocketAddr>,
    file: &Option<String>,
    key: &str,
    example: &str,
) -> Result<Option<SocketAddr>, ConfigError> {
    match (cli, file) {
        (Some(addr), _) => Ok(Some(addr)),
        (None, Some(text)) => text
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::Invalid {
                setting: format!("`{key}` in the config file"),
                reason: format!("{text:?} is not IP:PORT, e.g. {example}"),
            }),
        (None, None) => Ok(None),
    }
}

/// The bounds on connections, frames and replay. The client buffers
/// follow the frame limit: at least two frames each, and the total at
/// least one client's.
fn limits(layers: &Layers) -> Result<Limits, ConfigError> {
    let max_frame_bytes = layers.max_frame_bytes()?;
    let client_buffer_bytes = at_least(
        "--client-buffer-bytes / client_buffer_bytes (at least two --max-frame-bytes)",
        layers
            .client_buffer_bytes()
            .unwrap_or(max_frame_bytes.saturating_mul(defaults::CLIENT_BUFFER_FRAMES)),
        max_frame_bytes.saturating_mul(defaults::MIN_CLIENT_BUFFER_FRAMES),
    )?;
    let total_client_buffer_bytes = at_least(
        "--total-client-buffer-bytes / total_client_buffer_bytes (at least --client-buffer-bytes)",
        layers
            .total_client_buffer_bytes()
            .unwrap_or(defaults::TOTAL_CLIENT_BUFFER_BYTES.max(client_buffer_bytes)),
        client_buffer_bytes,
    )?;
    Ok(Limits {
        max_children: layers.max_children()?,
        max_starting: layers
            .max_starting()
            .map(|n| at_least("--max-starting / max_starting", n, 1))
            .transpose()?,
        spare_agents: layers.spare_agents()?,
        replay_events: layers.replay_events()?,
        replay_bytes: layers.replay_bytes()?,
        outbox_frames: layers.outbox_frames()?,
        client_buffer_bytes,
        total_client_buffer_bytes,
        max_client_requests: layers.max_client_requests()?,
        max_frame_bytes,
        ws_buffer_bytes: layers.ws_buffer_bytes()?,
        hello_timeout: layers.hello_timeout()?,
        max_hello_bytes: layers.max_hello_bytes()?,
        header_timeout: layers.header_timeout()?,
        max_connections: layers
            .max_connections()
            .map(|n| at_least("--max-connections / max_connections", n, 1))
            .transpose()?,
        ops_connections: layers.ops_connections()?,
        max_connections_per_token: layers.max_connections_per_token()?,
        max_prompts_per_minute: layers.max_prompts_per_minute()?,
    })
}

/// Checks where the state directory would be, hides the secret files,
/// then creates it with `sessions/`: (state dir, sessions dir, the
/// confinement with the gateway's own paths hidden first).
fn state(
    state_dir: PathBuf,
    projects_root: &Path,
    program: Option<&Path>,
    confinement: Confinement,
    secret_files: Vec<(String, PathBuf)>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(PathBuf, PathBuf, Confinement), ConfigError> {
    let planned_state = hiding::resolved(&state_dir).map_err(|source| ConfigError::StateDir {
        path: state_dir.clone(),
        source,
    })?;
    hiding::apart(&planned_state, projects_root)?;
    let confinement = match confinement.sandbox {
        true => {
            let places = Places {
                projects_root,
                state_dir: &planned_state,
                program,
            };
            covering_secrets(confinement, secret_files, &places, env)?
        }
        false => confinement,
    };
    let state_dir = create_dir(&state_dir)?;
    let sessions_dir = crate::statefs::Dir::open_root(&state_dir)?
        .subdir("sessions", 0o755)?
        .path()
        .to_path_buf();
    let mut confinement =
        confinement.hiding_first(&[state_dir.clone(), projects_root.to_path_buf()])?;
    if confinement.sandbox {
        for socket in hiding::host_sockets() {
            if !confinement.hide.iter().any(|h| socket.starts_with(h)) {
                confinement.hide.push(socket);
            }
        }
    }
    Ok((state_dir, sessions_dir, confinement))
}

/// `STATE/egress/KIND-INSTANCE.sock`: each gateway sharing a state
/// directory binds sockets of its own (one would take another's place).
fn socket_name(kind: &str, instance: &str) -> String {
    format!("{kind}-{instance}.sock")
}

/// Without a client token nor another way in (`[[token]]` entries,
/// JWTs), one is generated; likewise an admin token
/// (dashboard, admin API) on loopback only. Returns what was generated.
fn generate_missing(
    tokens: &mut Tokens,
    has_configured: bool,
    listen: SocketAddr,
) -> Result<(Option<Secret>, Option<Secret>), ConfigError> {
    let mut generated_token = None;
    if tokens.client.is_empty() && !has_configured {
        let token = Secret::new(auth::random_token()?);
        tokens.client.push(token.clone());
        generated_token = Some(token);
    }
    let mut generated_admin_token = None;
    if tokens.admin.is_empty() && is_loopback(listen) {
        let token = Secret::new(auth::random_token()?);
        tokens.admin.push(token.clone());
        generated_admin_token = Some(token);
    }
    Ok((generated_token, generated_admin_token))
}

/// Where the gateway's directories are and what agents run.
struct Places<'a> {
    projects_root: &'a Path,
    /// The state directory, resolved (it may not exist yet).
    state_dir: &'a Path,
    /// The third-party agent's program (`--child-command`), if any.
    program: Option<&'a Path>,
}

/// Hides every secret file by covering its directory, first in the hidden
/// list, and turns each `--sandbox-hide` path that is a file into its
/// directory likewise ([`hiding::cover_for`]).
fn covering_secrets(
    mut confinement: Confinement,
    secret_files: Vec<(String, PathBuf)>,
    places: &Places,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Confinement, ConfigError> {
    let programs: Vec<&Path> = places.program.into_iter().collect();
    let needed = hiding::Needed {
        program_dirs: hiding::program_dirs(env("PATH").as_deref(), &programs),
        projects_root: places.projects_root.to_path_buf(),
        homes_dir: places.state_dir.join("homes"),
    };
    let mut covers = Vec::new();
    for (setting, path) in secret_files {
        let invalid = |e: std::io::Error| ConfigError::Invalid {
            setting: setting.clone(),
            reason: format!("{}: {e}", path.display()),
        };
        // Where it is named and, for a link, where it points now: a link
        // swapped on the host lands in the first, still covered.
        let named = hiding::named(&path).map_err(invalid)?;
        let target = hiding::resolved(&path).map_err(invalid)?;
        covers.push(hiding::cover_for(&setting, &named, &needed)?);
        if target != named {
            covers.push(hiding::cover_for(&setting, &target, &needed)?);
        }
    }
    let mut operator = Vec::new();
    for path in std::mem::take(&mut confinement.hide) {
        match path.exists() && !path.is_dir() {
            true => operator.push(hiding::cover_for(
                "--sandbox-hide / sandbox_hide",
                &path,
                &needed,
            )?),
            false => operator.push(path),
        }
    }
    confinement.hide = operator;
    confinement.hiding_first(&covers)
}
