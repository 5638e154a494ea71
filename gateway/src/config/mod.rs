//! `corral serve` configuration: command line + optional TOML file + token
//! environment variables, merged (command line > environment > file >
//! default) and validated once into a [`Config`].
//!
//! Each setting is declared once, in `settings.rs` (flag, TOML key,
//! environment variable, default, check, help); `declare.rs` says what is
//! generated from that table. The README's flag table and
//! `deploy/corral.toml.example` are tested against it (`docs_tests`).
//!
//! Durations: `250ms`, `10s`, `5m`, `2h` or bare seconds (TOML: also an
//! integer). Sizes: bytes or `KiB`/`MiB`/`GiB`. List settings (origins,
//! child env, child args) come whole from the highest layer that sets them.
//! Relative paths in the file are relative to the file.
//!
//! Tokens (at least 16 characters, never logged): per role, the first
//! source with any token wins: flags plus the flag's token file; then the
//! environment, `CORRAL_TOKENS` / `CORRAL_OBSERVER_TOKENS` (comma-separated)
//! and `CORRAL_ADMIN_TOKEN`; then the file's key plus its `*_file` key.
//! Token files hold one token per line; blank lines and `#` comments are
//! skipped. Without a client token a loopback listener gets a generated
//! one ([`Config::generated_token`]); any other address is refused.
//! The environment is read only for tokens, `PATH` (child lookup) and
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (declared with `--otlp-endpoint`).

mod bytes;
mod checks;
mod child;
mod child_command;
mod cli;
mod declare;
mod duration;
mod file;
mod hiding;
mod sandbox;
mod serve_help;
mod settings;
mod throttle;
mod tokens;
mod values;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use bytes::{format_bytes, parse_bytes, SizeError};
pub use child::{ChildEnv, DEFAULT_CHILD_BIN};
pub use cli::{AttachArgs, Cli, Command, LogFormat};
pub use declare::{Setting, Shown};
pub use duration::{format_duration, parse_duration, DurationError};
pub use hiding::{CoverRefused, Overlap, SECRET_FILE_SETTINGS};
pub use sandbox::{ChildUser, Confinement, MIN_CHILD_MEMORY, MIN_CHILD_PIDS};
pub use settings::{ServeArgs, SETTINGS};
pub use tokens::{read_token_file, MIN_TOKEN_CHARS, TOKEN_ENV_VARS};
pub use values::OnOff;

use crate::auth::{self, RandomError, Role, Secret, Tokens};
use checks::{at_least, canonical_dir, create_dir, origins};
use settings::Layers;

/// The validated settings of one `corral serve` run.
#[derive(Debug, Clone)]
pub struct Config {
    /// The TOML file that was read, if any (for the startup log).
    pub config_file: Option<PathBuf>,
    /// Address the HTTP/WebSocket server binds.
    pub listen: SocketAddr,
    /// A second listener serving only `/metrics`, without a token.
    pub metrics_listen: Option<SocketAddr>,
    /// A listener for a trusted balancer: the same routes, the client
    /// address taken from `X-Forwarded-For`.
    pub proxy_listen: Option<SocketAddr>,
    /// The balancers whose `X-Forwarded-For` counts on `proxy_listen`.
    pub trusted_proxies: Vec<ipnet::IpNet>,
    /// The per-source failure budget for tokens.
    pub throttle: crate::throttle::ThrottlePolicy,
    /// Where the gateway and its children export traces (OTLP/HTTP).
    pub otlp_endpoint: Option<String>,
    /// Canonical directory whose direct subdirectories are the projects.
    pub projects_root: PathBuf,
    /// Canonical gateway state directory (created if missing).
    pub state_dir: PathBuf,
    /// Tokens of every role; `client` is never empty.
    pub tokens: Tokens,
    /// A client token made at startup because none was configured and the
    /// listener is loopback; the caller prints it once (`.expose()`).
    pub generated_token: Option<Secret>,
    /// Likewise an admin token, when none was configured and the listener
    /// is loopback (a public listener simply has no admin API then).
    pub generated_admin_token: Option<Secret>,
    /// Normalized allowed browser origins (`scheme://host[:port]` or `*`);
    /// empty = same origin only. See [`auth::origin_allowed`].
    pub allowed_origins: Vec<String>,
    /// How long shutdown waits for children and connections before forcing.
    pub shutdown_grace: Duration,
    /// Per-connection and per-project bounds.
    pub limits: Limits,
    /// How children are run and supervised.
    pub supervisor: SupervisorSettings,
    /// How children are confined: sandbox, user, resource limits.
    pub confinement: Confinement,
}

/// Bounds on connections, frames and replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most children running at once; further projects are refused.
    pub max_children: usize,
    /// Most events the replay ring of one project keeps.
    pub replay_events: usize,
    /// Most bytes the replay ring of one project keeps.
    pub replay_bytes: usize,
    /// Frames queued for one client not yet written to its socket; a
    /// client that fills it is caught up from replay or disconnected.
    pub outbox_frames: usize,
    /// Bytes queued for one client and not written yet; a client over it
    /// is closed as too slow. At least two `max_frame_bytes`: a reader is
    /// never closed for one big reply while one big event is in hand.
    pub client_buffer_bytes: usize,
    /// Bytes queued for all clients together; over it the clients that
    /// hold the most are closed.
    pub total_client_buffer_bytes: usize,
    /// Requests one client may have waiting for the child's answer.
    pub max_client_requests: usize,
    /// Largest frame accepted from a client or a child (bytes).
    pub max_frame_bytes: usize,
    /// Read and write buffer of each WebSocket connection (bytes).
    pub ws_buffer_bytes: usize,
    /// Time a new connection has to send its `hello`.
    pub hello_timeout: Duration,
    /// Bytes a WebSocket client may send before it is authenticated; more
    /// closes it with 1009, so an unauthenticated socket costs at most this.
    pub max_hello_bytes: usize,
    /// Time a connection has to send the headers of a request; one that
    /// has not is closed.
    pub header_timeout: Duration,
    /// Most connections open at once; `None` = derived from the open-file
    /// limit at start ([`crate::fdlimit`]).
    pub max_connections: Option<usize>,
    /// Places beyond `max_connections` on which only `/healthz`, `/readyz`
    /// and `/metrics` are answered, for when every connection is
    /// authenticated ([`crate::listener`]).
    pub ops_connections: usize,
    /// WebSocket sessions one credential may hold open; 0 = unlimited
    /// ([`crate::token_slots`]).
    pub max_connections_per_token: usize,
}

/// How the supervisor runs children.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SupervisorSettings {
    /// The wire dialect of every child and its clients.
    pub dialect: crate::dialect::Dialect,
    /// Canonical path of the child binary.
    pub child_bin: PathBuf,
    /// Extra arguments appended to every child's command line.
    pub child_args: Vec<String>,
    /// A third-party ACP agent run instead of `corral-agent` (its program
    /// an absolute path, then its arguments); `child_bin` then only runs
    /// `sandbox-exec` around it.
    pub child_command: Option<Vec<String>>,
    /// Environment passed or set on every child.
    pub child_env: ChildEnv,
    /// `STATE/sessions` (created); one journal per project.
    pub sessions_dir: PathBuf,
    /// Spawn → child hello answered; a child slower than this is killed.
    pub ready_timeout: Duration,
    /// Interval between health pings to a ready child.
    pub ping_interval: Duration,
    /// Time a health ping has to be answered.
    pub ping_timeout: Duration,
    /// Grace between stop steps: close stdin → SIGTERM → SIGKILL.
    pub stop_grace: Duration,
    /// Time a request of the agent for its clients waits for an answer.
    pub permission_timeout: Duration,
    /// Stop a child this long after its last client left; `None` = never.
    pub idle_timeout: Option<Duration>,
    /// Crashes within `crash_window` after which a project is `failed`.
    pub crash_limit: u32,
    /// Window in which crashes are counted.
    pub crash_window: Duration,
    /// Time a `failed` project waits before it may be started again.
    pub crash_cooldown: Duration,
}

impl SupervisorSettings {
    /// The session journal of `project` (a validated project name).
    pub fn session_file(&self, project: &str) -> PathBuf {
        self.sessions_dir.join(format!("{project}.jsonl"))
    }
}

/// Default values of the optional settings.
pub mod defaults {
    use std::time::Duration;

    pub const STATE_DIR: &str = "./corral-state";
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
    pub const MAX_CHILDREN: usize = 64;
    pub const REPLAY_EVENTS: usize = 10_000;
    pub const REPLAY_BYTES: usize = 8 << 20;
    pub const OUTBOX_FRAMES: usize = 256;
    /// `client_buffer_bytes` by default, in `max_frame_bytes`: room for a
    /// few big replies at once.
    pub const CLIENT_BUFFER_FRAMES: usize = 4;
    /// Smallest accepted `client_buffer_bytes`, in `max_frame_bytes`: one
    /// big reply queued while one big event is in hand.
    pub const MIN_CLIENT_BUFFER_FRAMES: usize = 2;
    /// `total_client_buffer_bytes` by default (raised to
    /// `client_buffer_bytes` if that is larger).
    pub const TOTAL_CLIENT_BUFFER_BYTES: usize = 1 << 30;
    pub const MAX_CLIENT_REQUESTS: usize = 64;
    pub const MAX_FRAME_BYTES: usize = 16 << 20;
    /// Read and write buffer per WebSocket: about what an idle client
    /// costs; larger frames grow the buffer while they pass.
    pub const WS_BUFFER_BYTES: usize = 8 << 10;
    /// Smallest accepted `ws_buffer_bytes`.
    pub const MIN_WS_BUFFER_BYTES: usize = 1024;
    pub const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
    pub const MAX_HELLO_BYTES: usize = 64 << 10;
    pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const OPS_CONNECTIONS: usize = 8;
    pub const MAX_CONNECTIONS_PER_TOKEN: usize = 256;
    /// Smallest accepted `max_hello_bytes`: a hello with a token must fit.
    pub const MIN_HELLO_BYTES: usize = 256;
    pub const PING_INTERVAL: Duration = Duration::from_secs(30);
    pub const PING_TIMEOUT: Duration = Duration::from_secs(10);
    pub const READY_TIMEOUT: Duration = Duration::from_secs(15);
    pub const STOP_GRACE: Duration = Duration::from_secs(5);
    pub const PERMISSION_TIMEOUT: Duration = Duration::from_secs(300);
    pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
    pub const CRASH_LIMIT: u32 = 5;
    pub const CRASH_WINDOW: Duration = Duration::from_secs(60);
    pub const CRASH_COOLDOWN: Duration = Duration::from_secs(300);
    /// Smallest accepted `max_frame_bytes`: a hello must fit.
    pub const MIN_FRAME_BYTES: usize = 1024;
}

/// Why the configuration was refused. Messages name flags/keys and files,
/// never token values.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    ReadFile { path: PathBuf, source: io::Error },
    #[error("invalid config file {}: {message}", path.display())]
    ParseFile { path: PathBuf, message: String },
    #[error("missing {flag} (or `{key}` in the config file)")]
    Missing {
        flag: &'static str,
        key: &'static str,
    },
    #[error("invalid {setting}: {reason}")]
    Invalid { setting: String, reason: String },
    #[error("projects root {}: {reason}", path.display())]
    ProjectsRoot { path: PathBuf, reason: String },
    #[error("state directory {}: {source}", path.display())]
    StateDir { path: PathBuf, source: io::Error },
    #[error("cannot read token file {}: {source}", path.display())]
    TokenFile { path: PathBuf, source: io::Error },
    #[error("token file {} holds no tokens", path.display())]
    EmptyTokenFile { path: PathBuf },
    #[error("{role} token from {origin} {problem}")]
    BadToken {
        role: Role,
        origin: String,
        problem: String,
    },
    #[error("refusing to listen on {addr} without a client token (give --token, --token-file, CORRAL_TOKENS or `tokens` in the config file)")]
    NoClientToken { addr: SocketAddr },
    #[error("child binary: {reason}")]
    ChildBin { reason: String },
    #[error("cannot generate a client token: {0}")]
    Random(#[from] RandomError),
    #[error("{0}")]
    Overlap(#[from] Overlap),
    #[error("{0}")]
    CoverRefused(#[from] CoverRefused),
    #[error("state directory: {0}")]
    StateFs(#[from] crate::statefs::StateFsError),
}

/// Loads the configuration, reading the process environment.
pub fn load(args: ServeArgs) -> Result<Config, ConfigError> {
    load_with_env(args, &|var| std::env::var(var).ok())
}

/// Loads the configuration with `env` as the environment (for tests): the
/// declared settings merged by [`Layers`], then the checks that span
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
    let secret_files = hiding::secret_files(&args, &file);

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

    let tokens = tokens::resolve(&args, &file, env)?;
    if tokens.client.is_empty() && !is_loopback(listen) {
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
        tool_network: layers.tool_network()?,
        child_user: layers.child_user(),
        memory_max: layers.child_memory_max(),
        pids_max: layers.child_pids_max(),
    })?;
    if !trusted_proxies.is_empty() {
        let tools_on_host_network = !confinement.sandbox || confinement.tool_network;
        throttle::check_trusted_reach(
            &trusted_proxies,
            &throttle::own_addresses(),
            tools_on_host_network,
        )?;
    }
    let dialect = layers.dialect()?;
    let child_args = layers.child_args();
    let child_command = child_command::resolve(
        layers.child_command().as_deref(),
        &child_command::Context {
            dialect,
            child_args: &child_args,
            tool_network_off: confinement.sandbox && !confinement.tool_network,
            path_var: env("PATH").as_deref(),
        },
    )?;
    let (state_dir, sessions_dir, confinement) = state(
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
    let mut tokens = tokens;
    let (generated_token, generated_admin_token) = generate_missing(&mut tokens, listen)?;

    Ok(Config {
        config_file: args.config.clone(),
        listen,
        metrics_listen,
        proxy_listen,
        trusted_proxies,
        throttle,
        otlp_endpoint: args.otlp_endpoint.clone(),
        projects_root,
        state_dir,
        tokens,
        generated_token,
        generated_admin_token,
        allowed_origins,
        shutdown_grace: layers.shutdown_grace()?,
        limits,
        supervisor: SupervisorSettings {
            dialect,
            child_bin,
            child_args,
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
    let confinement =
        confinement.hiding_first(&[state_dir.clone(), projects_root.to_path_buf()])?;
    Ok((state_dir, sessions_dir, confinement))
}

/// Without a client token, one is generated; likewise an admin token
/// (dashboard, admin API) on loopback only. Returns what was generated.
fn generate_missing(
    tokens: &mut Tokens,
    listen: SocketAddr,
) -> Result<(Option<Secret>, Option<Secret>), ConfigError> {
    let mut generated_token = None;
    if tokens.client.is_empty() {
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

#[cfg(test)]
mod docs_tests;
#[cfg(test)]
mod tests;
