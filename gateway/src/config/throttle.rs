//! The authentication throttle's settings (`--auth-failure-rate`,
//! `--auth-failure-burst`, `--max-auth-sources`) and the trusted
//! balancer's listener (`--proxy-listen`).

use std::net::SocketAddr;

use super::checks::at_least;
use super::cli::ServeArgs;
use super::file::FileConfig;
use super::ConfigError;
use crate::throttle::{defaults, ThrottlePolicy};

/// Most wrong tokens per second a source may be allowed: beyond this the
/// budget is no limit at all.
const MAX_RATE: f64 = 1_000_000.0;

pub(super) fn policy(args: &ServeArgs, file: &FileConfig) -> Result<ThrottlePolicy, ConfigError> {
    let rate = args
        .auth_failure_rate
        .or(file.auth_failure_rate)
        .unwrap_or(defaults::RATE);
    if !(rate.is_finite() && rate > 0.0 && rate <= MAX_RATE) {
        return Err(ConfigError::Invalid {
            setting: "--auth-failure-rate / auth_failure_rate".into(),
            reason: format!(
                "{rate} is not a number of failures per second above 0 and at most {MAX_RATE}"
            ),
        });
    }
    let burst = at_least(
        "--auth-failure-burst / auth_failure_burst",
        args.auth_failure_burst
            .or(file.auth_failure_burst)
            .unwrap_or(defaults::BURST),
        1,
    )?;
    let max_sources = at_least(
        "--max-auth-sources / max_auth_sources",
        args.max_auth_sources
            .or(file.max_auth_sources)
            .unwrap_or(defaults::MAX_SOURCES),
        1,
    )?;
    Ok(ThrottlePolicy {
        rate,
        burst,
        max_sources,
        remembered: defaults::REMEMBERED,
    })
}

pub(super) fn proxy_listen(
    args: &ServeArgs,
    file: &FileConfig,
    listen: SocketAddr,
) -> Result<Option<SocketAddr>, ConfigError> {
    let addr = match (args.proxy_listen, &file.proxy_listen) {
        (Some(addr), _) => addr,
        (None, Some(text)) => text.trim().parse().map_err(|_| ConfigError::Invalid {
            setting: "`proxy_listen` in the config file".into(),
            reason: format!("{text:?} is not IP:PORT, e.g. 10.0.0.11:7001"),
        })?,
        (None, None) => return Ok(None),
    };
    if addr == listen && addr.port() != 0 {
        return Err(ConfigError::Invalid {
            setting: "--proxy-listen / proxy_listen".into(),
            reason: format!("{addr} is also --listen; the balancer needs an address of its own"),
        });
    }
    Ok(Some(addr))
}
