//! The measurements of the `bench-gateway` program, one module each
//! ([`pings`], [`fanout`], [`memory`]), and of `bench-broker` ([`broker`]), on top of the real `corral` and
//! `corral-agent` processes ([`procs`]), a WebSocket client whose every read
//! is bounded ([`client`]) in any of the three dialects ([`wire`]), and
//! the quantiles and units of the tables ([`stats`]). Everything returns `anyhow` errors instead of panicking.

pub mod broker;
pub mod cli;
pub mod client;
pub mod cold;
pub mod disk;
pub mod fanout;
pub mod idle;
pub mod memory;
pub mod nofile;
pub mod pings;
pub mod procs;
pub mod scale;
pub mod stats;
pub mod wire;

use std::time::Duration;

/// The longest any single read may take before the benchmark gives up.
pub const READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The one project every benchmark gateway serves.
pub const PROJECT: &str = "bench";
