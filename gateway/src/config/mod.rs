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
//! The environment is read only for tokens, `PATH` (child lookup),
//! `OTEL_EXPORTER_OTLP_ENDPOINT` (declared with `--otlp-endpoint`) and,
//! with `--model-broker on`, the providers' keys and base URLs.

mod audit_log;
mod broker;
mod bytes;
mod checks;
mod child;
mod child_command;
mod cli;
mod declare;
mod duration;
mod egress;
mod file;
mod hiding;
mod jwt;
mod load;
mod sandbox;
mod serve_help;
mod settings;
mod throttle;
mod token_file;
mod token_table;
mod tokens;
mod values;

use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub use broker::BrokerMode;
pub use bytes::{format_bytes, parse_bytes, SizeError};
pub use checks::MAX_BUDGET_USD;
pub use child::{ChildEnv, DEFAULT_CHILD_BIN};
pub use cli::{AttachArgs, Cli, Command, LogFormat};
pub use declare::{Setting, Shown};
pub use duration::{format_duration, parse_duration, DurationError};
pub use egress::EgressSettings;
pub use hiding::{CoverRefused, Overlap, SECRET_FILE_SETTINGS};
pub use jwt::{MaxRole, MAX_LEEWAY, MAX_SECRET_FILE_BYTES};
pub use load::{load, load_with_env};
pub use sandbox::{ChildUser, Confinement, MIN_CHILD_MEMORY, MIN_CHILD_PIDS};
pub use settings::{ServeArgs, SETTINGS, TOKEN_ENV_VARS};
pub use throttle::own_addresses;
pub use token_file::{read_token_file, MIN_TOKEN_CHARS};
pub use token_table::is_static_name;
pub use values::{OnOff, ToolNetwork};

use crate::auth::{RandomError, Role, Secret, Tokens};

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
    /// `--audit-log` and its rotation; `None`: no audit log.
    pub audit: Option<crate::audit::AuditSettings>,
    /// Canonical directory whose direct subdirectories are the projects.
    pub projects_root: PathBuf,
    /// Canonical gateway state directory (created if missing).
    pub state_dir: PathBuf,
    /// Tokens of every role; `client` is never empty.
    pub tokens: Tokens,
    /// The config file's `[[token]]` entries (digests, never secrets).
    pub configured_tokens: Vec<crate::access::ConfiguredToken>,
    /// A client token made at startup because none was configured and the
    /// listener is loopback; the caller prints it once (`.expose()`).
    pub generated_token: Option<Secret>,
    /// Likewise an admin token, when none was configured and the listener
    /// is loopback (a public listener simply has no admin API then).
    pub generated_admin_token: Option<Secret>,
    /// Which JWTs are accepted (`--jwt-*`, `--jwks-*`); the secret, if
    /// any, already read. [`crate::access::jwt::Verifier::from_settings`]
    /// builds the verifier from it.
    pub jwt: crate::access::jwt::JwtSettings,
    /// Normalized allowed browser origins (`scheme://host[:port]` or `*`);
    /// empty = same origin only. See [`crate::auth::origin_allowed`].
    pub allowed_origins: Vec<String>,
    /// How long shutdown waits for children and connections before forcing.
    pub shutdown_grace: Duration,
    /// Per-connection and per-project bounds.
    pub limits: Limits,
    /// How children are run and supervised.
    pub supervisor: SupervisorSettings,
    /// How children are confined: sandbox, user, resource limits.
    pub confinement: Confinement,
    /// The egress proxy's policy and limits (`--tool-network proxy`).
    pub egress: EgressSettings,
    /// With `--model-broker on`: the providers' endpoints and keys, read
    /// from the environment (which `main` then masks and clears).
    pub model_broker: Option<crate::broker::Upstreams>,
    /// With `--model-broker auto` (or `off`): why the broker is off.
    pub model_broker_off: Option<&'static str>,
    /// What each project may spend on models until an admin raises or
    /// resets its budget; `None`: unlimited.
    pub project_budget_usd: Option<f64>,
    /// The operator's MCP servers and what clients may select of them.
    pub mcp: crate::mcp::McpPolicy,
}

/// Bounds on connections, frames and replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Most children running at once; further projects are refused.
    pub max_children: usize,
    /// Children being started at once; `None` = one per two cores
    /// ([`crate::process::spawner::starting_limit`]).
    pub max_starting: Option<usize>,
    /// Spare agents kept ready for cold starts (sandboxed `corral-agent`
    /// from its template only); 0 = none.
    pub spare_agents: usize,
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
    /// Prompts one identity may send per minute (0 = unlimited).
    pub max_prompts_per_minute: u32,
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
    /// Fork `corral-agent` children from its template instead of
    /// executing each.
    pub child_template: bool,
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
    pub const AUDIT_LOG_MAX_BYTES: usize = 100 << 20;
    /// Smallest accepted `audit_log_max_bytes`: many of the largest
    /// entries (a prompt of 64KiB) fit in one file.
    pub const MIN_AUDIT_LOG_BYTES: usize = 1 << 20;
    pub const AUDIT_LOG_KEEP: usize = 5;
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
    pub const MAX_CHILDREN: usize = 64;
    pub const SPARE_AGENTS: usize = crate::process::spares::DEFAULT_SPARES;
    /// Most spare agents: each holds two processes and about a MiB.
    pub const MAX_SPARE_AGENTS: usize = 64;
    pub const EGRESS_MAX_CONNECTIONS: usize = crate::egress::proxy::DEFAULT_MAX_CONNECTIONS;
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
    pub const MAX_PROMPTS_PER_MINUTE: u32 = 60;
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

#[cfg(test)]
mod docs_tests;
#[cfg(test)]
mod tests;
