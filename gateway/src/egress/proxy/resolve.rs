//! Name resolution for the proxy: the system resolver, and a test mapping
//! ([`TEST_RESOLVE_ENV`]) consulted first. Each request is resolved once;
//! the policy judges every address, and the proxy connects only to those.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Duration;

/// Test hook: `name=ip[,name=ip…]`, read once when the gateway starts.
/// Names listed resolve to the addresses given (a name may be listed more
/// than once), without asking DNS. It can only change which addresses a
/// name resolves to: every address is still judged by the policy, so it
/// cannot reach what the policy refuses.
pub const TEST_RESOLVE_ENV: &str = "CORRAL_EGRESS_TEST_RESOLVE";

/// A [`TEST_RESOLVE_ENV`] value that is not `name=ip[,name=ip…]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{TEST_RESOLVE_ENV}: {entry:?} is not name=ip (e.g. pkg.test=127.0.0.1)")]
pub struct MappingError {
    entry: String,
}

/// Resolves host names to the addresses the proxy may connect to.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    /// Lower-case name (no trailing dot) → its addresses, in order.
    mapping: HashMap<String, Vec<IpAddr>>,
}

impl Resolver {
    /// The system resolver alone.
    pub fn system() -> Resolver {
        Resolver::default()
    }

    /// The system resolver, with [`TEST_RESOLVE_ENV`]'s mapping if it is
    /// set.
    pub fn from_env() -> Result<Resolver, MappingError> {
        match std::env::var(TEST_RESOLVE_ENV) {
            Ok(text) => Resolver::with_mapping(&text),
            Err(_) => Ok(Resolver::system()),
        }
    }

    /// The system resolver, with `text` (`name=ip[,name=ip…]`) consulted
    /// first.
    pub fn with_mapping(text: &str) -> Result<Resolver, MappingError> {
        let mut mapping: HashMap<String, Vec<IpAddr>> = HashMap::new();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let bad = || MappingError {
                entry: entry.to_string(),
            };
            let (name, ip) = entry.split_once('=').ok_or_else(bad)?;
            let ip: IpAddr = ip.trim().parse().map_err(|_| bad())?;
            let name = normalise(name.trim());
            if name.is_empty() {
                return Err(bad());
            }
            mapping.entry(name).or_default().push(ip);
        }
        Ok(Resolver { mapping })
    }

    /// The addresses of `name`, without duplicates, in the resolver's
    /// order; empty when it cannot be resolved within `limit` (the policy
    /// then refuses it as `unresolved`).
    pub async fn resolve(&self, name: &str, port: u16, limit: Duration) -> Vec<IpAddr> {
        if let Some(addrs) = self.mapping.get(&normalise(name)) {
            return addrs.clone();
        }
        let found = tokio::time::timeout(limit, tokio::net::lookup_host((name, port))).await;
        let mut addrs = Vec::new();
        match found {
            Ok(Ok(list)) => {
                for addr in list {
                    if !addrs.contains(&addr.ip()) {
                        addrs.push(addr.ip());
                    }
                }
            }
            Ok(Err(e)) => tracing::debug!(host = name, error = %e, "egress: cannot resolve"),
            Err(_) => tracing::debug!(host = name, "egress: resolving timed out"),
        }
        addrs
    }
}

fn normalise(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mapping_is_name_equals_ip_lists() {
        let r = Resolver::with_mapping(" a.test=127.0.0.1, A.test.=::1 ,b.test=10.0.0.1,").unwrap();
        assert_eq!(
            r.mapping["a.test"],
            [
                "127.0.0.1".parse::<IpAddr>().unwrap(),
                "::1".parse().unwrap()
            ]
        );
        assert_eq!(r.mapping.len(), 2);
        for bad in ["a.test", "a.test=", "=1.2.3.4", "a.test=localhost"] {
            assert!(Resolver::with_mapping(bad).is_err(), "{bad}");
        }
        assert!(Resolver::with_mapping("").unwrap().mapping.is_empty());
    }

    #[tokio::test]
    async fn mapped_names_skip_dns() {
        let r = Resolver::with_mapping("pkg.test=192.0.2.1").unwrap();
        let got = r.resolve("PKG.test", 443, Duration::from_secs(5)).await;
        assert_eq!(got, ["192.0.2.1".parse::<IpAddr>().unwrap()]);
    }
}
