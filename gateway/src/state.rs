//! What every request handler shares ([`AppState`]): the registry of
//! hubs, the tokens, the limits read from the configuration, the shutdown,
//! the metrics, and how children are confined (for `/v1/stats`). Built once
//! in `main`, handed to [`crate::server::router`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::Tokens;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::shutdown::Shutdown;
use crate::throttle::AuthThrottle;
use crate::token_slots::TokenSlots;

/// Everything request handlers share.
pub struct AppState {
    /// What clients speak (the children's dialect).
    pub dialect: crate::dialect::Dialect,
    pub registry: Arc<Registry>,
    pub tokens: Tokens,
    pub projects_root: PathBuf,
    pub allowed_origins: Vec<String>,
    pub hello_timeout: Duration,
    /// Bytes a WebSocket client may send before it is authenticated.
    pub max_hello_bytes: usize,
    pub max_frame_bytes: usize,
    /// Read and write buffer of each WebSocket connection.
    pub ws_buffer_bytes: usize,
    /// Failure budgets per source address, against guessing tokens
    /// ([`crate::guard`] checks every token through it).
    pub throttle: AuthThrottle,
    /// Open WebSocket sessions per credential
    /// (`--max-connections-per-token`).
    pub token_slots: Arc<TokenSlots>,
    /// Started when the gateway starts shutting down; tracks the tasks
    /// (connections, hubs, admin stops) it waits for before exiting.
    pub shutdown: Shutdown,
    pub metrics: Arc<Metrics>,
    /// When the gateway started, for `/v1/stats`.
    pub started: std::time::Instant,
    /// How children are confined (for `/v1/stats`).
    pub confinement: ConfinementStatus,
    /// With `--tool-network proxy`: the egress proxy's registry, for the
    /// per-project overrides of the admin API.
    pub egress: Option<crate::egress::EgressAdmin>,
}

/// How children are confined, as `/v1/stats` reports it under `sandbox`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ConfinementStatus {
    /// The agent sandbox is on.
    pub enabled: bool,
    /// How tool commands reach the network: `on`, `off` or `proxy`.
    pub tool_network: &'static str,
    /// The account children run as, when not the gateway's.
    pub child_user: Option<String>,
    pub limits: LimitsStatus,
}

/// The per-child resource limits and what enforces them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LimitsStatus {
    /// `cgroup2`, `cgroup1`, `rlimit` or `none`.
    pub backend: &'static str,
    pub memory_max: Option<u64>,
    pub pids_max: Option<u64>,
}
