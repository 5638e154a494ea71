//! The egress policy: whether a tool's outbound request, as the gateway's
//! proxy sees it (host, port, the addresses it would connect to, and for
//! plain HTTP the method), may go out, and which rule decided. Pure
//! logic: no I/O, no resolution; the proxy resolves and asks.
//!
//! # Rules
//!
//! The operator writes allow and deny rules, each one of:
//!
//! | rule                        | covers                                          |
//! |-----------------------------|-------------------------------------------------|
//! | `registry.example.com`      | that name only                                  |
//! | `*.example.com`             | any name below `example.com`, not the apex      |
//! | `**.example.com`            | `example.com` and any name below it             |
//! | `10.1.2.3`, `[::1]`         | that address                                    |
//! | `10.0.0.0/8`, `fd00::/8`    | any address in that network                     |
//!
//! each optionally followed by `:PORT` (`git.example.com:443`,
//! `[fd00::1]:8080`); without one, any port. An IPv6 address or network
//! takes a port only in brackets: `::1:443` is an address, not a port.
//! Names compare case-insensitively and a trailing dot is ignored. Names
//! must be ASCII: an internationalised name is written in punycode
//! (`xn--…`), and any other character is refused with an error saying so.
//! A `*` anywhere but as the `*.`/`**.` prefix is refused, as is a
//! network with bits set after its prefix (`10.1.2.3/8`: the error
//! suggests `10.0.0.0/8`). Parse errors ([`RuleError`]) quote the pattern
//! and list these forms.
//!
//! Typical allowlists: a package registry `registry.example.com:443`; a
//! git host and its content hosts `**.git.example.com:443`. To allow any
//! public address (the always-refused ranges still apply): `0.0.0.0/0`
//! and `::/0`.
//!
//! # Decision, in order
//!
//! 1. **Nothing to connect to**: no resolved address → refused
//!    (`unresolved`); the proxy must not resolve again after asking.
//! 2. **Deny wins**: a deny rule covering the name, or any address (or
//!    the IPv4 a NAT64/6to4 address carries), on this port → refused
//!    (`deny:*.example.com`).
//! 3. **Always-refused ranges**, checked on *every* address, so a name
//!    that resolves (or is rebound) to `127.0.0.1` or `169.254.169.254`
//!    is refused even when the name is allowed
//!    (`blocked-range:link-local`); the ranges are listed on
//!    [`BlockedRange`]. One address in a blocked range refuses the whole
//!    request: the proxy connects only to addresses the decision covered.
//!    The only way through is an **operator exception**: an allow rule
//!    of the operator's naming the address, or a network *inside* the
//!    blocked range it lies in (`127.0.0.1:8080`, `10.20.0.0/16`), on the
//!    matching port. A name rule never unlocks a blocked address, and
//!    neither does a network wider than the blocked range (`0.0.0.0/0`).
//!    The exceptions are taken from the operator's allowlist once, when
//!    the policy is made ([`Policy::new`]); a project's [`Override`]
//!    keeps them as they are and cannot add one, so no per-project
//!    setting reaches cloud metadata or the host's own networks.
//! 4. **Allow**: an allow rule covering the name, or address rules
//!    covering every address; otherwise refused (`not-allowed`). Nothing
//!    is allowed by default. An address rule covers any name resolving
//!    into it: the connection reaches the same address either way.
//! 5. **Methods**: with a method list, a plain-HTTP request with another
//!    method is refused (`method:POST`), and so is a CONNECT tunnel to
//!    port 80 (`method:CONNECT`), which would carry plain HTTP past the
//!    list. Any other tunnel (HTTPS) is decided by host and port alone:
//!    the method of requests inside TLS is not visible to the proxy, so a
//!    method list cannot limit them; name ports in the allow rules.
//!
//! An exception only lifts the block: the request must still be allowed
//! in step 4, by the allowlist in force (the operator's, or a project's
//! replacement for it).
//!
//! **Before resolving**, the proxy asks [`Policy::refuse_name`]: a name
//! denied by a name rule, or covered by no allow rule when the allowlist
//! holds no address rule for its port, is refused whatever it would
//! resolve to, so it is refused without a DNS query: a tool cannot leak
//! data through lookups of names it may not reach.
//!
//! Addresses: IPv4-mapped IPv6 (`::ffff:a.b.c.d`) *is* that IPv4 to a
//! socket and is judged, and excepted, as it. NAT64 (`64:ff9b::/96`),
//! 6to4 (`2002::/16`), IPv4-translated (`::ffff:0:a.b.c.d`) and
//! IPv4-compatible (`::a.b.c.d`) addresses that
//! carry a blocked IPv4 are refused with its range and no exception (they
//! reach it through a translator, not this host's socket); Teredo and
//! local-use NAT64 are refused whole. Documentation, benchmarking and
//! reserved ranges are refused: no public host lives there, so a name
//! resolving into them points into someone's own network.

pub mod kept;
mod overrides;
pub mod proxy;
mod ranges;
mod registry;
mod rule;
#[cfg(test)]
mod tests;

use std::fmt;
use std::net::IpAddr;

use axum::http::Method;

pub use kept::EgressAdmin;
pub use overrides::{parse_method, MethodError, Override};
pub use proxy::TEST_RESOLVE_ENV;
pub use ranges::{classify, Blocked, BlockedRange};
pub use registry::Registry;
pub use rule::{Destination, Rule, RuleError, Scope};

/// The port a method list closes to tunnels: plain HTTP through a
/// CONNECT tunnel would get past the list.
const PLAIN_HTTP_PORT: u16 = 80;

/// An egress policy: the operator's, or the operator's merged with a
/// project's [`Override`]. The default allows nothing. Built with
/// [`Policy::new`], which takes the blocked-range exceptions from the
/// operator's allowlist; the fields are private so that they cannot drift
/// apart afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// What may be reached (`--egress-allow`, or a project's replacement).
    allow: Vec<Rule>,
    /// What may never be reached (`--egress-deny`, plus a project's
    /// additions); wins over `allow`.
    deny: Vec<Rule>,
    /// The plain-HTTP methods allowed (`--egress-methods`); `None`: any.
    methods: Option<Vec<Method>>,
    /// The operator's allow rules that name an address or a network
    /// inside an always-refused range: the only exceptions to it. Kept
    /// apart from `allow` so that a project's allowlist, which replaces
    /// `allow`, can never add one.
    exceptions: Vec<Rule>,
}

/// The host a request names: a name, or a literal address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    /// Lower case, without trailing dot (see [`Host::parse`]).
    Name(String),
    Ip(IpAddr),
}

impl Host {
    /// The host part of a request's authority: a literal address (IPv6
    /// with or without brackets) or a name, lower-cased, trailing dot
    /// dropped.
    pub fn parse(text: &str) -> Host {
        let bare = text
            .strip_prefix('[')
            .and_then(|t| t.strip_suffix(']'))
            .unwrap_or(text);
        match bare.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase()),
        }
    }
}

/// One outbound request, as the proxy is about to make it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The host the tool asked for.
    pub host: Host,
    pub port: u16,
    /// The addresses the proxy will connect to (the resolution of a name;
    /// a literal address counts whether listed here or not).
    pub resolved: Vec<IpAddr>,
    /// The method of a plain-HTTP request; `None` (or `CONNECT`) for a
    /// CONNECT tunnel, whose inner requests the proxy cannot see.
    pub method: Option<Method>,
}

impl Target {
    /// Every address the proxy may connect to, canonical (IPv4-mapped
    /// IPv6 as IPv4), without duplicates.
    fn addresses(&self) -> Vec<IpAddr> {
        let literal = match self.host {
            Host::Ip(ip) => Some(ip),
            Host::Name(_) => None,
        };
        let mut addrs: Vec<IpAddr> = Vec::with_capacity(self.resolved.len() + 1);
        for addr in literal.into_iter().chain(self.resolved.iter().copied()) {
            let addr = ranges::canonical(addr);
            if !addrs.contains(&addr) {
                addrs.push(addr);
            }
        }
        addrs
    }

    fn name(&self) -> Option<&str> {
        match &self.host {
            Host::Name(name) => Some(name),
            Host::Ip(_) => None,
        }
    }
}

/// Whether a request may go out, and the rule that said so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Allowed by this allow rule (`allow:registry.example.com`).
    Allowed(Rule),
    Refused(Refusal),
}

/// Why a request was refused; its [`Display`](fmt::Display) is the label
/// for the proxy's 403 body, the log and the metric.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `deny:<rule>`.
    Deny(Rule),
    /// `blocked-range:<range>`.
    BlockedRange(BlockedRange),
    /// `not-allowed`: no allow rule covers the request.
    NotAllowed,
    /// `method:<METHOD>`: outside the method list.
    Method(Method),
    /// `unresolved`: no address to judge.
    Unresolved,
}

impl Decision {
    pub fn is_allowed(&self) -> bool {
        matches!(self, Decision::Allowed(_))
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decision::Allowed(rule) => write!(f, "allow:{rule}"),
            Decision::Refused(refusal) => refusal.fmt(f),
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Deny(rule) => write!(f, "deny:{rule}"),
            Refusal::BlockedRange(range) => write!(f, "blocked-range:{}", range.name()),
            Refusal::NotAllowed => f.write_str("not-allowed"),
            Refusal::Method(method) => write!(f, "method:{method}"),
            Refusal::Unresolved => f.write_str("unresolved"),
        }
    }
}

impl Policy {
    /// The operator's policy. Its allow rules that name an address or a
    /// network inside an always-refused range (`127.0.0.1:8080`,
    /// `10.20.0.0/16`) become its exceptions to that range, and those that
    /// name one address (`203.0.113.7:22`) its exceptions to
    /// `blocked-range:this-host` ([`Policy::decide_on`]).
    pub fn new(allow: Vec<Rule>, deny: Vec<Rule>, methods: Option<Vec<Method>>) -> Policy {
        let exceptions = allow
            .iter()
            .filter(|rule| {
                rule.net().is_some_and(|net| {
                    ranges::inside_blocked(net) || net.prefix_len() == net.max_prefix_len()
                })
            })
            .cloned()
            .collect();
        Policy {
            allow,
            deny,
            methods,
            exceptions,
        }
    }

    /// This policy with a project's override applied: its allowlist
    /// replaces this one, its deny rules are added, its method list
    /// replaces this one. The exceptions stay this policy's own, so an
    /// override allow rule naming `169.254.169.254` or `10.0.0.0/8`
    /// never reaches a blocked address.
    pub fn with_override(&self, project: &Override) -> Policy {
        Policy {
            allow: project.allow.clone().unwrap_or_else(|| self.allow.clone()),
            deny: self.deny.iter().chain(&project.deny).cloned().collect(),
            methods: project.methods.clone().or_else(|| self.methods.clone()),
            exceptions: self.exceptions.clone(),
        }
    }

    pub fn allow(&self) -> &[Rule] {
        &self.allow
    }

    pub fn deny(&self) -> &[Rule] {
        &self.deny
    }

    pub fn methods(&self) -> Option<&[Method]> {
        self.methods.as_deref()
    }

    /// The allow rules that lift an always-refused range (see [`Policy::new`]).
    pub fn exceptions(&self) -> &[Rule] {
        &self.exceptions
    }

    /// A refusal decided from the name alone, before resolving it: a deny
    /// name rule covers it, or no allow rule can cover it whatever it
    /// resolves to (no name rule covers it and no address rule covers
    /// `port`). `None`: the addresses decide. Asking first means a name
    /// the policy refuses anyway never reaches DNS.
    pub fn refuse_name(&self, name: &str, port: u16) -> Option<Refusal> {
        if let Some(rule) = self.deny.iter().find(|rule| rule.covers_name(name, port)) {
            return Some(Refusal::Deny(rule.clone()));
        }
        let may_allow = self.allow.iter().any(|rule| match rule.destination {
            Destination::Name { .. } => rule.covers_name(name, port),
            Destination::Net(_) => rule.covers_port(port),
        });
        (!may_allow).then_some(Refusal::NotAllowed)
    }

    /// Decides `request` on a host whose own addresses are `own` (its
    /// interfaces'): as [`Policy::decide`], and then an allowed request
    /// reaching one of `own` is refused (`blocked-range:this-host`) unless
    /// an operator's allow rule names that very address (a network does
    /// not do): a public address of the gateway's host reaches its
    /// services as loopback would.
    pub fn decide_on(&self, request: &Target, own: &[IpAddr]) -> Decision {
        let decision = self.decide(request);
        if !decision.is_allowed() {
            return decision;
        }
        let port = request.port;
        let reaches_host = request.addresses().into_iter().any(|addr| {
            own.iter().any(|&mine| ranges::canonical(mine) == addr)
                && !self.exceptions.iter().any(|rule| {
                    rule.covers_addr(addr, port)
                        && rule
                            .net()
                            .is_some_and(|n| n.prefix_len() == n.max_prefix_len())
                })
        });
        match reaches_host {
            true => Decision::Refused(Refusal::BlockedRange(BlockedRange::ThisHost)),
            false => decision,
        }
    }

    /// Decides `request`; the steps are listed in the module doc.
    pub fn decide(&self, request: &Target) -> Decision {
        let port = request.port;
        let addrs = request.addresses();
        if addrs.is_empty() {
            return Decision::Refused(Refusal::Unresolved);
        }
        if let Some(rule) = self.deny.iter().find(|rule| {
            request
                .name()
                .is_some_and(|name| rule.covers_name(name, port))
                || addrs.iter().any(|&addr| {
                    rule.covers_addr(addr, port)
                        || ranges::embedded_v4(addr)
                            .is_some_and(|v4| rule.covers_addr(IpAddr::V4(v4), port))
                })
        }) {
            return Decision::Refused(Refusal::Deny(rule.clone()));
        }
        for &addr in &addrs {
            if let Some(blocked) = classify(addr) {
                if !self.excepts(addr, blocked, port) {
                    return Decision::Refused(Refusal::BlockedRange(blocked.range));
                }
            }
        }
        let by_name = request
            .name()
            .and_then(|name| self.allow.iter().find(|rule| rule.covers_name(name, port)));
        let by_address = || {
            let mut first = None;
            for &addr in &addrs {
                let rule = self
                    .allow
                    .iter()
                    .find(|rule| rule.covers_addr(addr, port))?;
                first.get_or_insert(rule);
            }
            first
        };
        let Some(rule) = by_name.or_else(by_address) else {
            return Decision::Refused(Refusal::NotAllowed);
        };
        if let Some(methods) = &self.methods {
            match &request.method {
                Some(method) if *method != Method::CONNECT && !methods.contains(method) => {
                    return Decision::Refused(Refusal::Method(method.clone()));
                }
                Some(method) if *method != Method::CONNECT => {}
                // A tunnel to the plain-HTTP port would carry requests
                // the list cannot see: with a list, none.
                _ if port == PLAIN_HTTP_PORT => {
                    return Decision::Refused(Refusal::Method(Method::CONNECT));
                }
                _ => {}
            }
        }
        Decision::Allowed(rule.clone())
    }

    /// Whether an operator exception covers `addr`: it names the address
    /// or a network inside the blocked range, on this port.
    fn excepts(&self, addr: IpAddr, blocked: Blocked, port: u16) -> bool {
        let Some(range) = blocked.exceptable else {
            return false;
        };
        self.exceptions.iter().any(|rule| {
            rule.covers_addr(addr, port) && rule.net().is_some_and(|net| range.contains(&net))
        })
    }
}
