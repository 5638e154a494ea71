//! `corral serve` configuration: command line + optional TOML file + token
//! environment variables, merged (command line > environment > file >
//! default) and validated once into a [`Config`].
//!
//! | flag | TOML key | default |
//! |---|---|---|
//! | `--config FILE` | – | none |
//! | `--listen ADDR` | `listen` | required |
//! | `--metrics-listen ADDR` | `metrics_listen` | none: `/metrics` needs the admin token |
//! | `--proxy-listen ADDR` | `proxy_listen` | none (for a trusted balancer: client address from `X-Forwarded-For`) |
//! | `--trusted-proxy CIDR`… | `trusted_proxies` | none; required with `--proxy-listen`; not an address of this host unless `--tool-network off` |
//! | `--otlp-endpoint URL` | – | none: no traces exported |
//! | `--projects-root DIR` | `projects_root` | required; must be a directory |
//! | `--state-dir DIR` | `state_dir` | `./corral-state` (created) |
//! | `--token T`… / `--token-file F` | `tokens` / `token_file` | generated on loopback |
//! | `--observer-token T`… / `--observer-token-file F` | `observer_tokens` / `observer_token_file` | none |
//! | `--admin-token T` / `--admin-token-file F` | `admin_token` / `admin_token_file` | none |
//! | `--allowed-origin O`… | `allowed_origins` | same origin only |
//! | `--idle-timeout DUR` | `idle_timeout` | `10m` (`0` = never reap) |
//! | `--max-children N` | `max_children` | 64 |
//! | `--dialect zut\|letscode\|zi` | `dialect` | `zut` |
//! | `--child-bin PATH` | `child_bin` | `corral-agent` beside `corral`, else on PATH |
//! | `--child-env NAME[=VALUE]`… | `child_env` | none |
//! | `--child-command 'CMD ARGS…'` | `child_command` | none: `corral-agent` (needs `--dialect acp`) |
//! | `-- CHILD_ARGS…` | `child_args` | none |
//! | `--replay-events N` / `--replay-bytes BYTES` | `replay_events` / `replay_bytes` | 10000 / 8MiB |
//! | `--outbox-frames N` | `outbox_frames` | 256 |
//! | `--client-buffer-bytes BYTES` | `client_buffer_bytes` | 4 × `--max-frame-bytes` (64MiB); at least 2 × |
//! | `--total-client-buffer-bytes BYTES` | `total_client_buffer_bytes` | 1GiB, at least `--client-buffer-bytes` |
//! | `--max-client-requests N` | `max_client_requests` | 64 (requests in flight per client) |
//! | `--max-frame-bytes BYTES` | `max_frame_bytes` | 16MiB |
//! | `--ws-buffer-bytes BYTES` | `ws_buffer_bytes` | 8KiB (read and write buffer per WebSocket) |
//! | `--hello-timeout DUR` | `hello_timeout` | 10s |
//! | `--max-hello-bytes BYTES` | `max_hello_bytes` | 64KiB (what a client may send before it is authenticated) |
//! | `--header-timeout DUR` | `header_timeout` | 10s (time to send a request's headers) |
//! | `--max-connections N` | `max_connections` | the open-file limit minus headroom (see [`crate::fdlimit`]) |
//! | `--auth-failure-rate PER_SEC` / `--auth-failure-burst N` | `auth_failure_rate` / `auth_failure_burst` | 1 / 10 (wrong tokens checked per source address) |
//! | `--max-auth-sources N` | `max_auth_sources` | 10000 (source addresses the throttle remembers) |
//! | `--ops-connections N` | `ops_connections` | 8 (beyond the cap, for `/healthz`, `/readyz`, `/metrics` only) |
//! | `--max-connections-per-token N` | `max_connections_per_token` | 256 WebSocket sessions (`0` = unlimited) |
//! | `--ping-interval DUR` / `--ping-timeout DUR` | `ping_interval` / `ping_timeout` | 30s / 10s |
//! | `--ready-timeout DUR` | `ready_timeout` | 15s |
//! | `--stop-grace DUR` / `--shutdown-grace DUR` | `stop_grace` / `shutdown_grace` | 5s / 10s |
//! | `--permission-timeout DUR` | `permission_timeout` | 5m (ACP requests of the agent nobody answers are cancelled) |
//! | `--crash-limit N` / `--crash-window DUR` / `--crash-cooldown DUR` | `crash_limit` / `crash_window` / `crash_cooldown` | 5 / 60s / 5m |
//! | `--sandbox on\|off` | `sandbox` | `on` |
//! | `--sandbox-hide PATH`… | `sandbox_hide` | none (state dir, projects root and the directories of the config and token files are always hidden; a file is hidden with its directory, see `hiding`) |
//! | `--tool-network on\|off` | `tool_network` | `on` (`off` needs the sandbox) |
//! | `--child-user USER` | `child_user` | the gateway's user (another one needs root) |
//! | `--child-memory-max SIZE` / `--child-pids-max N` | `child_memory_max` / `child_pids_max` | none / none |
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
//! The environment is read only for tokens and `PATH` (child lookup).

mod bytes;
mod checks;
mod child;
mod child_command;
mod cli;
mod duration;
mod file;
mod hiding;
mod sandbox;
mod throttle;
mod tokens;

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use bytes::{format_bytes, parse_bytes, SizeError};
pub use child::{ChildEnv, DEFAULT_CHILD_BIN};
pub use cli::{AttachArgs, Cli, Command, LogFormat, ServeArgs};
pub use duration::{format_duration, parse_duration, DurationError};
pub use hiding::{CoverRefused, Overlap, SECRET_FILE_SETTINGS};
pub use sandbox::{ChildUser, Confinement, OnOff, MIN_CHILD_MEMORY, MIN_CHILD_PIDS};
pub use tokens::{read_token_file, MIN_TOKEN_CHARS, TOKEN_ENV_VARS};

use crate::auth::{self, RandomError, Role, Secret, Tokens};
use checks::{at_least, canonical_dir, create_dir, origins, pick_list, positive};

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

/// Loads the configuration with `env` as the environment (for tests).
pub fn load_with_env(
    args: ServeArgs,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let file = match &args.config {
        Some(path) => file::read(path)?,
        None => file::FileConfig::default(),
    };
    // Every secret the gateway reads from a file, whichever layer won.
    let secret_files = hiding::secret_files(&args, &file);

    let listen = match (args.listen, &file.listen) {
        (Some(addr), _) => addr,
        (None, Some(text)) => text.trim().parse().map_err(|_| ConfigError::Invalid {
            setting: "`listen` in the config file".into(),
            reason: format!("{text:?} is not IP:PORT, e.g. 127.0.0.1:7000 or [::]:7000"),
        })?,
        (None, None) => {
            return Err(ConfigError::Missing {
                flag: "--listen ADDR",
                key: "listen",
            })
        }
    };

    let metrics_listen = match (args.metrics_listen, &file.metrics_listen) {
        (Some(addr), _) => Some(addr),
        (None, Some(text)) => Some(text.trim().parse().map_err(|_| ConfigError::Invalid {
            setting: "`metrics_listen` in the config file".into(),
            reason: format!("{text:?} is not IP:PORT, e.g. 127.0.0.1:9100"),
        })?),
        (None, None) => None,
    };

    let proxy_listen = throttle::proxy_listen(&args, &file, listen)?;
    let trusted_proxies = throttle::trusted_proxies(&args, &file, proxy_listen)?;
    let throttle = throttle::policy(&args, &file)?;

    let tokens = tokens::resolve(&args, &file, env)?;
    if tokens.client.is_empty() && !listen.ip().to_canonical().is_loopback() {
        return Err(ConfigError::NoClientToken { addr: listen });
    }

    let projects_root = args
        .projects_root
        .or(file.projects_root)
        .ok_or(ConfigError::Missing {
            flag: "--projects-root DIR",
            key: "projects_root",
        })?;
    let projects_root = canonical_dir(&projects_root)?;

    let allowed_origins = origins(pick_list(args.allowed_origins, file.allowed_origins))?;

    let child_env = child::parse_env(&pick_list(args.child_env, file.child_env))?;
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf));
    let child_bin = child::resolve_bin(
        args.child_bin.as_deref().or(file.child_bin.as_deref()),
        exe_dir.as_deref(),
        env("PATH").as_deref(),
    )?;

    let dur = |cli: Option<Duration>, file: Option<duration::FileDuration>, default| {
        cli.or(file.map(|d| d.0)).unwrap_or(default)
    };
    let size = |cli: Option<usize>, file: Option<bytes::FileBytes>, default| {
        cli.or(file.map(|b| b.0)).unwrap_or(default)
    };
    let max_frame_bytes = at_least(
        "--max-frame-bytes / max_frame_bytes",
        size(
            args.max_frame_bytes,
            file.max_frame_bytes,
            defaults::MAX_FRAME_BYTES,
        ),
        defaults::MIN_FRAME_BYTES,
    )?;
    let client_buffer_bytes = at_least(
        "--client-buffer-bytes / client_buffer_bytes (at least two --max-frame-bytes)",
        size(
            args.client_buffer_bytes,
            file.client_buffer_bytes,
            max_frame_bytes.saturating_mul(defaults::CLIENT_BUFFER_FRAMES),
        ),
        max_frame_bytes.saturating_mul(defaults::MIN_CLIENT_BUFFER_FRAMES),
    )?;
    let total_client_buffer_bytes = at_least(
        "--total-client-buffer-bytes / total_client_buffer_bytes (at least --client-buffer-bytes)",
        size(
            args.total_client_buffer_bytes,
            file.total_client_buffer_bytes,
            defaults::TOTAL_CLIENT_BUFFER_BYTES.max(client_buffer_bytes),
        ),
        client_buffer_bytes,
    )?;
    let limits = Limits {
        max_children: at_least(
            "--max-children / max_children",
            args.max_children
                .or(file.max_children)
                .unwrap_or(defaults::MAX_CHILDREN),
            1,
        )?,
        replay_events: at_least(
            "--replay-events / replay_events",
            args.replay_events
                .or(file.replay_events)
                .unwrap_or(defaults::REPLAY_EVENTS),
            1,
        )?,
        replay_bytes: at_least(
            "--replay-bytes / replay_bytes",
            size(args.replay_bytes, file.replay_bytes, defaults::REPLAY_BYTES),
            1,
        )?,
        outbox_frames: at_least(
            "--outbox-frames / outbox_frames",
            args.outbox_frames
                .or(file.outbox_frames)
                .unwrap_or(defaults::OUTBOX_FRAMES),
            1,
        )?,
        client_buffer_bytes,
        total_client_buffer_bytes,
        max_client_requests: at_least(
            "--max-client-requests / max_client_requests",
            args.max_client_requests
                .or(file.max_client_requests)
                .unwrap_or(defaults::MAX_CLIENT_REQUESTS),
            1,
        )?,
        max_frame_bytes,
        ws_buffer_bytes: at_least(
            "--ws-buffer-bytes / ws_buffer_bytes",
            size(
                args.ws_buffer_bytes,
                file.ws_buffer_bytes,
                defaults::WS_BUFFER_BYTES,
            ),
            defaults::MIN_WS_BUFFER_BYTES,
        )?,
        hello_timeout: positive(
            "--hello-timeout / hello_timeout",
            dur(
                args.hello_timeout,
                file.hello_timeout,
                defaults::HELLO_TIMEOUT,
            ),
        )?,
        max_hello_bytes: at_least(
            "--max-hello-bytes / max_hello_bytes",
            size(
                args.max_hello_bytes,
                file.max_hello_bytes,
                defaults::MAX_HELLO_BYTES,
            ),
            defaults::MIN_HELLO_BYTES,
        )?,
        header_timeout: positive(
            "--header-timeout / header_timeout",
            dur(
                args.header_timeout,
                file.header_timeout,
                defaults::HEADER_TIMEOUT,
            ),
        )?,
        max_connections: args
            .max_connections
            .or(file.max_connections)
            .map(|n| at_least("--max-connections / max_connections", n, 1))
            .transpose()?,
        ops_connections: at_least(
            "--ops-connections / ops_connections",
            args.ops_connections
                .or(file.ops_connections)
                .unwrap_or(defaults::OPS_CONNECTIONS),
            1,
        )?,
        max_connections_per_token: args
            .max_connections_per_token
            .or(file.max_connections_per_token)
            .unwrap_or(defaults::MAX_CONNECTIONS_PER_TOKEN),
    };
    let ready_timeout = positive(
        "--ready-timeout / ready_timeout",
        dur(
            args.ready_timeout,
            file.ready_timeout,
            defaults::READY_TIMEOUT,
        ),
    )?;
    let ping_interval = positive(
        "--ping-interval / ping_interval",
        dur(
            args.ping_interval,
            file.ping_interval,
            defaults::PING_INTERVAL,
        ),
    )?;
    let ping_timeout = positive(
        "--ping-timeout / ping_timeout",
        dur(args.ping_timeout, file.ping_timeout, defaults::PING_TIMEOUT),
    )?;
    let crash_limit = at_least(
        "--crash-limit / crash_limit",
        args.crash_limit
            .or(file.crash_limit)
            .unwrap_or(defaults::CRASH_LIMIT),
        1,
    )?;
    let crash_window = positive(
        "--crash-window / crash_window",
        dur(args.crash_window, file.crash_window, defaults::CRASH_WINDOW),
    )?;
    let idle_timeout = dur(args.idle_timeout, file.idle_timeout, defaults::IDLE_TIMEOUT);
    let confinement = sandbox::resolve(sandbox::Raw {
        sandbox: args.sandbox.or(file.sandbox),
        extra_hide: pick_list(args.sandbox_hide.clone(), file.sandbox_hide.clone()),
        tool_network: args.tool_network.or(file.tool_network),
        child_user: args.child_user.clone().or(file.child_user.clone()),
        memory_max: args.child_memory_max.or(file.child_memory_max.map(|b| b.0)),
        pids_max: args.child_pids_max.or(file.child_pids_max),
    })?;
    if !trusted_proxies.is_empty() {
        let tools_on_host_network = !confinement.sandbox || confinement.tool_network;
        throttle::check_trusted_reach(
            &trusted_proxies,
            &throttle::own_addresses(),
            tools_on_host_network,
        )?;
    }
    let dialect = args.dialect.or(file.dialect).unwrap_or_default();
    let child_args = pick_list(args.child_args, file.child_args);
    let child_command = child_command::resolve(
        args.child_command
            .as_deref()
            .or(file.child_command.as_deref()),
        &child_command::Context {
            dialect,
            child_args: &child_args,
            tool_network_off: confinement.sandbox && !confinement.tool_network,
            path_var: env("PATH").as_deref(),
        },
    )?;
    // Created last, so that a refused configuration leaves nothing behind.
    let state_dir = args
        .state_dir
        .clone()
        .or(file.state_dir.clone())
        .unwrap_or_else(|| defaults::STATE_DIR.into());
    let planned_state = hiding::resolved(&state_dir).map_err(|source| ConfigError::StateDir {
        path: state_dir.clone(),
        source,
    })?;
    hiding::apart(&planned_state, &projects_root)?;
    let confinement = match confinement.sandbox {
        true => {
            let program = child_command
                .as_ref()
                .and_then(|c| c.first())
                .map(Path::new);
            let places = Places {
                projects_root: &projects_root,
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
    let confinement = confinement.hiding_first(&[state_dir.clone(), projects_root.clone()])?;

    let mut tokens = tokens;
    let mut generated_token = None;
    if tokens.client.is_empty() {
        let token = Secret::new(auth::random_token()?);
        tokens.client.push(token.clone());
        generated_token = Some(token);
    }
    // Same for the admin token (dashboard, admin API), on loopback only.
    let mut generated_admin_token = None;
    if tokens.admin.is_empty() && listen.ip().to_canonical().is_loopback() {
        let token = Secret::new(auth::random_token()?);
        tokens.admin.push(token.clone());
        generated_admin_token = Some(token);
    }

    Ok(Config {
        config_file: args.config,
        listen,
        metrics_listen,
        proxy_listen,
        trusted_proxies,
        throttle,
        otlp_endpoint: args.otlp_endpoint,
        projects_root,
        state_dir,
        tokens,
        generated_token,
        generated_admin_token,
        allowed_origins,
        shutdown_grace: dur(
            args.shutdown_grace,
            file.shutdown_grace,
            defaults::SHUTDOWN_GRACE,
        ),
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
            stop_grace: dur(args.stop_grace, file.stop_grace, defaults::STOP_GRACE),
            permission_timeout: dur(
                args.permission_timeout,
                file.permission_timeout,
                defaults::PERMISSION_TIMEOUT,
            ),
            idle_timeout: (!idle_timeout.is_zero()).then_some(idle_timeout),
            crash_limit,
            crash_window,
            crash_cooldown: dur(
                args.crash_cooldown,
                file.crash_cooldown,
                defaults::CRASH_COOLDOWN,
            ),
        },
        confinement,
    })
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
mod tests;
