//! The authentication throttle's settings (`--auth-failure-rate`,
//! `--auth-failure-burst`, `--max-auth-sources`) and the trusted
//! balancer's listener (`--proxy-listen`, `--trusted-proxy`).

use std::net::{IpAddr, SocketAddr};

use super::settings::{FileConfig, Layers, ServeArgs};
use super::values::parse_net;
use super::ConfigError;
use crate::throttle::{defaults, ThrottlePolicy};

/// The failure budget per source address, each part checked.
pub(super) fn policy(layers: &Layers) -> Result<ThrottlePolicy, ConfigError> {
    Ok(ThrottlePolicy {
        rate: layers.auth_failure_rate()?,
        burst: layers.auth_failure_burst()?,
        max_sources: layers.max_auth_sources()?,
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

/// The balancers trusted on `--proxy-listen` (`--trusted-proxy`,
/// `trusted_proxies`): required with it, meaningless without it.
pub(super) fn trusted_proxies(
    args: &ServeArgs,
    file: &FileConfig,
    proxy_listen: Option<SocketAddr>,
) -> Result<Vec<ipnet::IpNet>, ConfigError> {
    let nets = if !args.trusted_proxy.is_empty() {
        args.trusted_proxy.clone()
    } else {
        file.trusted_proxies
            .iter()
            .flatten()
            .map(|text| {
                parse_net(text).map_err(|reason| ConfigError::Invalid {
                    setting: "`trusted_proxies` in the config file".into(),
                    reason,
                })
            })
            .collect::<Result<_, _>>()?
    };
    match (proxy_listen, nets.is_empty()) {
        (Some(_), true) => Err(ConfigError::Invalid {
            setting: "--proxy-listen / proxy_listen".into(),
            reason: "it needs --trusted-proxy (trusted_proxies): the balancer's address or range, the only peers whose X-Forwarded-For names the client".into(),
        }),
        (None, false) => Err(ConfigError::Invalid {
            setting: "--trusted-proxy / trusted_proxies".into(),
            reason: "it applies to --proxy-listen, which is not set".into(),
        }),
        _ => Ok(nets),
    }
}

/// Refuses a trusted range that covers an address of this host (`own`:
/// loopback and every interface address) while agents' tools share the
/// host's network: a tool connecting from there could name any client in
/// `X-Forwarded-For` and so get a fresh failure budget per forged address.
pub(super) fn check_trusted_reach(
    nets: &[ipnet::IpNet],
    own: &[IpAddr],
    tools_on_host_network: bool,
) -> Result<(), ConfigError> {
    if !tools_on_host_network {
        return Ok(());
    }
    for net in nets {
        if let Some(addr) = own.iter().find(|addr| net.contains(&addr.to_canonical())) {
            return Err(ConfigError::Invalid {
                setting: "--trusted-proxy / trusted_proxies".into(),
                reason: format!(
                    "{net} covers {addr}, an address of this host: agents' tools reach the gateway from there and could name any client in X-Forwarded-For; run the balancer on another host, or take the host's network from tools (--tool-network proxy, the default, or --tool-network off)"
                ),
            });
        }
    }
    Ok(())
}

/// Loopback and the addresses of this host's interfaces.
pub fn own_addresses() -> Vec<IpAddr> {
    let mut own = vec![
        IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
    ];
    if let Ok(interfaces) = nix::ifaddrs::getifaddrs() {
        for interface in interfaces {
            let Some(address) = interface.address else {
                continue;
            };
            if let Some(v4) = address.as_sockaddr_in() {
                own.push(IpAddr::V4(v4.ip()));
            } else if let Some(v6) = address.as_sockaddr_in6() {
                own.push(IpAddr::V6(v6.ip()));
            }
        }
    }
    own
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_covering_an_own_address_is_refused_while_tools_have_the_network() {
        let own: Vec<IpAddr> = ["127.0.0.1", "::1", "10.0.0.11"]
            .map(|a| a.parse().unwrap())
            .to_vec();
        let net = |t: &str| vec![t.parse::<ipnet::IpNet>().unwrap()];
        for covering in ["10.0.0.0/24", "127.0.0.1/32", "::1/128", "0.0.0.0/0"] {
            let err = check_trusted_reach(&net(covering), &own, true).unwrap_err();
            assert!(err.to_string().contains("--tool-network off"), "{err}");
            assert!(check_trusted_reach(&net(covering), &own, false).is_ok());
        }
        assert!(check_trusted_reach(&net("10.0.1.0/24"), &own, true).is_ok());
        // An IPv4-mapped own address is the same address.
        let mapped: Vec<IpAddr> = vec!["::ffff:10.0.0.11".parse().unwrap()];
        assert!(check_trusted_reach(&net("10.0.0.11/32"), &mapped, true).is_err());
    }

    #[test]
    fn this_host_has_at_least_its_loopback_addresses() {
        let own = own_addresses();
        assert!(own.iter().any(IpAddr::is_loopback));
    }
}
