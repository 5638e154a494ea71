//! What every request handler shares ([`AppState`]): the registry of
//! hubs, the tokens, the limits read from the configuration, the shutdown,
//! the metrics, the audit log, and how children are confined (for
//! `/v1/stats`). Built once
//! in `main`, handed to [`crate::server::router`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::access::{Keyring, Live};
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
    /// Every credential the gateway accepts ([`crate::guard`] asks it).
    pub keyring: Keyring,
    /// The sessions each credential holds, for closing them when it is
    /// revoked.
    pub live: Arc<Live>,
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
    /// The budgets: what projects and identities spent on models, and
    /// their limits (the admin API's `/v1/budgets`).
    pub spend: Arc<crate::spend::Ledger>,
    /// The audit log (`--audit-log`); records nothing when off.
    pub audit: crate::audit::Audit,
    /// The open Streamable HTTP connections of the ACP endpoint
    /// ([`crate::acp_remote`]).
    pub acp_connections: crate::acp_remote::Connections,
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
