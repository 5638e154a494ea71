//! One egress rule as the operator writes it (`*.example.com:443`,
//! `10.0.0.0/8`, `[::1]:8080`): parsing, with errors that name the bad
//! pattern and the accepted forms, and matching against a host, an
//! address and a port. The syntax is described in the parent module.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// The accepted forms, quoted by every parse error.
const FORMS: &str = "accepted forms: example.com, *.example.com (subdomains), \
    **.example.com (the domain and its subdomains), 10.1.2.3, 10.0.0.0/8, \
    [::1], fd00::/8, each optionally followed by :PORT, e.g. example.com:443 \
    or [fd00::1]:8080";

/// The longest host name DNS can carry (without the trailing dot).
const MAX_NAME: usize = 253;
/// The longest label of a host name.
const MAX_LABEL: usize = 63;

/// A rule that could not be parsed. Each message quotes the pattern and
/// lists the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("empty egress rule ({FORMS})")]
    Empty,
    #[error(
        "egress rule {pattern:?} is not ASCII: write an internationalised \
         name in its punycode form (xn--...) ({FORMS})"
    )]
    NonAscii { pattern: String },
    #[error("egress rule {pattern:?}: {port:?} is not a port from 1 to 65535 ({FORMS})")]
    Port { pattern: String, port: String },
    #[error(
        "egress rule {pattern:?} is a URL: write the host alone, e.g. \
         example.com or example.com:443 ({FORMS})"
    )]
    Url { pattern: String },
    #[error("egress rule {pattern:?} is not a valid IP address or CIDR ({FORMS})")]
    Address { pattern: String },
    #[error(
        "egress rule {pattern:?} has address bits set after the prefix length; \
         did you mean {network}? ({FORMS})"
    )]
    HostBits { pattern: String, network: IpNet },
    #[error(
        "egress rule {pattern:?}: a * may only open a name, as *. (subdomains) \
         or **. (the domain and its subdomains) ({FORMS})"
    )]
    Wildcard { pattern: String },
    #[error("egress rule {pattern:?} is not a valid host name: {reason} ({FORMS})")]
    Hostname {
        pattern: String,
        reason: &'static str,
    },
}

/// Which names a host pattern covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// `example.com`: that name only.
    Exact,
    /// `*.example.com`: any name below it, not the name itself.
    Subdomains,
    /// `**.example.com`: the name and any name below it.
    DomainAndSubdomains,
}

/// What a rule names: hosts by name, or addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// A host name pattern; `domain` is lower case, without trailing dot
    /// or wildcard prefix.
    Name { scope: Scope, domain: String },
    /// An address or a network (a single address is a /32 or /128).
    /// IPv4-mapped IPv6 is stored as its IPv4 form.
    Net(IpNet),
}

/// One allow or deny rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub destination: Destination,
    /// `None`: any port.
    pub port: Option<u16>,
}

impl Rule {
    /// Whether `port` is one this rule covers.
    pub fn covers_port(&self, port: u16) -> bool {
        self.port.is_none_or(|p| p == port)
    }

    /// Whether this rule covers the host name `name` (any case, trailing
    /// dot ignored) on `port`. An address rule never covers a name.
    pub fn covers_name(&self, name: &str, port: u16) -> bool {
        let Destination::Name { scope, domain } = &self.destination else {
            return false;
        };
        if !self.covers_port(port) {
            return false;
        }
        // Bytes, not str slices: the name comes from a tool and may hold
        // anything, so no offset may be assumed to be a char boundary.
        let name = name.strip_suffix('.').unwrap_or(name).as_bytes();
        let domain = domain.as_bytes();
        let below = name.len() > domain.len() + 1
            && name[name.len() - domain.len()..].eq_ignore_ascii_case(domain)
            && name[name.len() - domain.len() - 1] == b'.';
        let exact = name.eq_ignore_ascii_case(domain);
        match scope {
            Scope::Exact => exact,
            Scope::Subdomains => below,
            Scope::DomainAndSubdomains => exact || below,
        }
    }

    /// Whether this rule covers the address `addr` (canonical: IPv4-mapped
    /// IPv6 already turned into IPv4) on `port`. A name rule never covers
    /// an address.
    pub fn covers_addr(&self, addr: IpAddr, port: u16) -> bool {
        match &self.destination {
            Destination::Net(net) => self.covers_port(port) && net.contains(&addr),
            Destination::Name { .. } => false,
        }
    }

    /// The network this rule names, if it is an address rule.
    pub fn net(&self) -> Option<IpNet> {
        match &self.destination {
            Destination::Net(net) => Some(*net),
            Destination::Name { .. } => None,
        }
    }
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(input: &str) -> Result<Self, RuleError> {
        let text = input.trim();
        if text.is_empty() {
            return Err(RuleError::Empty);
        }
        let pattern = || text.to_string();
        if !text.is_ascii() {
            return Err(RuleError::NonAscii { pattern: pattern() });
        }
        if text.contains("://") {
            return Err(RuleError::Url { pattern: pattern() });
        }
        let (host, port) = split_port(text)?;
        let port = match port {
            None => None,
            Some(p) => match p.parse::<u16>() {
                Ok(n) if n != 0 => Some(n),
                _ => {
                    return Err(RuleError::Port {
                        pattern: pattern(),
                        port: p.to_string(),
                    })
                }
            },
        };
        let destination = if let Some(inner) = host.strip_prefix('[') {
            // split_port only lets a '[' through with its ']'.
            let inner = inner.strip_suffix(']').unwrap_or(inner);
            Destination::Net(parse_net(text, inner)?)
        } else if host.contains(':') || host.contains('/') || looks_numeric(host) {
            Destination::Net(parse_net(text, host)?)
        } else {
            parse_name(text, host)?
        };
        Ok(Rule { destination, port })
    }
}

/// Splits `host[:port]`. A bracketed IPv6 may carry a port (`[::1]:80`);
/// an unbracketed one has more than one colon and never does.
fn split_port(text: &str) -> Result<(&str, Option<&str>), RuleError> {
    if text.starts_with('[') {
        let Some(close) = text.find(']') else {
            return Err(RuleError::Address {
                pattern: text.to_string(),
            });
        };
        let (host, rest) = text.split_at(close + 1);
        return match rest {
            "" => Ok((host, None)),
            _ => match rest.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(RuleError::Address {
                    pattern: text.to_string(),
                }),
            },
        };
    }
    match text.matches(':').count() {
        0 => Ok((text, None)),
        1 => {
            let (host, port) = text.split_once(':').unwrap_or((text, ""));
            Ok((host, Some(port)))
        }
        _ => Ok((text, None)),
    }
}

/// Whether `host` ends in an all-digit label, as only an IPv4 address
/// does (no top-level domain is numeric).
fn looks_numeric(host: &str) -> bool {
    let host = host.strip_suffix('.').unwrap_or(host);
    host.rsplit('.')
        .next()
        .is_some_and(|last| !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit()))
}

/// An address or CIDR, with IPv4-mapped IPv6 turned into IPv4 and host
/// bits after the prefix refused.
fn parse_net(pattern: &str, text: &str) -> Result<IpNet, RuleError> {
    let bad = || RuleError::Address {
        pattern: pattern.to_string(),
    };
    let net = if text.contains('/') {
        let net: IpNet = text.parse().map_err(|_| bad())?;
        if net.trunc() != net {
            return Err(RuleError::HostBits {
                pattern: pattern.to_string(),
                network: net.trunc(),
            });
        }
        net
    } else {
        IpNet::from(text.parse::<IpAddr>().map_err(|_| bad())?)
    };
    Ok(canonical_net(net))
}

/// `::ffff:a.b.c.d/N` (N ≥ 96) as the IPv4 network it names.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net {
        if let Some(v4) = v6.addr().to_ipv4_mapped() {
            if v6.prefix_len() >= 96 {
                if let Ok(v4) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96) {
                    return IpNet::V4(v4);
                }
            }
        }
    }
    net
}

/// A host name pattern: `name`, `*.name` or `**.name`.
fn parse_name(pattern: &str, host: &str) -> Result<Destination, RuleError> {
    let (scope, domain) = if let Some(rest) = host.strip_prefix("**.") {
        (Scope::DomainAndSubdomains, rest)
    } else if let Some(rest) = host.strip_prefix("*.") {
        (Scope::Subdomains, rest)
    } else {
        (Scope::Exact, host)
    };
    if domain.contains('*') {
        return Err(RuleError::Wildcard {
            pattern: pattern.to_string(),
        });
    }
    let domain = domain.strip_suffix('.').unwrap_or(domain);
    let invalid = |reason| RuleError::Hostname {
        pattern: pattern.to_string(),
        reason,
    };
    if domain.is_empty() {
        return Err(invalid("it names no domain"));
    }
    if domain.len() > MAX_NAME {
        return Err(invalid("it is longer than 253 characters"));
    }
    for label in domain.split('.') {
        if label.is_empty() {
            return Err(invalid("it has an empty label (two dots in a row)"));
        }
        if label.len() > MAX_LABEL {
            return Err(invalid("a label is longer than 63 characters"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(invalid(
                "a label holds a character other than letters, digits, - and _",
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Err(invalid("a label starts or ends with -"));
        }
    }
    Ok(Destination::Name {
        scope,
        domain: domain.to_ascii_lowercase(),
    })
}

impl fmt::Display for Rule {
    /// The rule in its canonical written form (lower case, no trailing
    /// dot), as used in decisions and metric labels.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.destination {
            Destination::Name { scope, domain } => {
                let prefix = match scope {
                    Scope::Exact => "",
                    Scope::Subdomains => "*.",
                    Scope::DomainAndSubdomains => "**.",
                };
                write!(f, "{prefix}{domain}")?;
            }
            Destination::Net(net) => {
                let single = net.prefix_len() == net.max_prefix_len();
                match (net, single, self.port.is_some()) {
                    (IpNet::V6(v6), true, true) => write!(f, "[{}]", v6.addr())?,
                    (IpNet::V6(v6), false, true) => write!(f, "[{v6}]")?,
                    (_, true, _) => write!(f, "{}", net.addr())?,
                    (_, false, _) => write!(f, "{net}")?,
                }
            }
        }
        match self.port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        }
    }
}

/// A rule is written and read as its text form (`"*.example.com:443"`),
/// as in the admin API's per-project overrides.
impl Serialize for Rule {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Rule, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}
