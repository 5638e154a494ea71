//! The policy's rules, one test each, and a generated sweep over blocked
//! addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use axum::http::Method;
use ipnet::IpNet;

use super::*;

fn rules(texts: &[&str]) -> Vec<Rule> {
    texts.iter().map(|t| t.parse().unwrap()).collect()
}

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    Policy::new(rules(allow), rules(deny), None)
}

/// A CONNECT to `host:port` resolving to `addrs`.
fn target(host: &str, port: u16, addrs: &[&str]) -> Target {
    Target {
        host: Host::parse(host),
        port,
        resolved: addrs.iter().map(|a| a.parse().unwrap()).collect(),
        method: None,
    }
}

const PUBLIC: &str = "93.184.215.14";

fn label(policy: &Policy, target: &Target) -> String {
    policy.decide(target).to_string()
}

#[test]
fn nothing_is_allowed_by_default() {
    let none = Policy::default();
    assert_eq!(
        label(&none, &target("example.com", 443, &[PUBLIC])),
        "not-allowed"
    );
    assert_eq!(label(&none, &target(PUBLIC, 443, &[])), "not-allowed");
}

#[test]
fn deny_wins_over_allow() {
    let p = policy(&["**.example.com"], &["*.evil.example.com"]);
    let decision = p.decide(&target("x.evil.example.com", 443, &[PUBLIC]));
    assert_eq!(decision.to_string(), "deny:*.evil.example.com");
    assert!(!decision.is_allowed());
    assert_eq!(
        label(&p, &target("good.example.com", 443, &[PUBLIC])),
        "allow:**.example.com"
    );
    // An address deny rule refuses a name that resolves into it.
    let p = policy(&["**.example.com"], &["93.184.0.0/16"]);
    assert_eq!(
        label(&p, &target("a.example.com", 443, &[PUBLIC])),
        "deny:93.184.0.0/16"
    );
    // ... and the IPv4 a NAT64 address carries.
    let p = policy(&["**.example.com"], &["8.8.8.8"]);
    assert_eq!(
        label(&p, &target("a.example.com", 443, &["64:ff9b::808:808"])),
        "deny:8.8.8.8"
    );
}

#[test]
fn single_star_is_subdomains_double_star_adds_the_apex() {
    let sub = policy(&["*.example.com"], &[]);
    let all = policy(&["**.example.com"], &[]);
    for (host, sub_ok, all_ok) in [
        ("example.com", false, true),
        ("a.example.com", true, true),
        ("a.b.example.com", true, true),
        ("badexample.com", false, false),
        ("example.com.evil.test", false, false),
    ] {
        let t = target(host, 443, &[PUBLIC]);
        assert_eq!(sub.decide(&t).is_allowed(), sub_ok, "*. {host}");
        assert_eq!(all.decide(&t).is_allowed(), all_ok, "**. {host}");
    }
    let exact = policy(&["example.com"], &[]);
    assert!(exact
        .decide(&target("example.com", 80, &[PUBLIC]))
        .is_allowed());
    assert!(!exact
        .decide(&target("a.example.com", 80, &[PUBLIC]))
        .is_allowed());
}

#[test]
fn ports_restrict_rules() {
    let p = policy(&["registry.example.com:443", "[2606:4700::1]:8443"], &[]);
    assert!(p
        .decide(&target("registry.example.com", 443, &[PUBLIC]))
        .is_allowed());
    assert_eq!(
        label(&p, &target("registry.example.com", 80, &[PUBLIC])),
        "not-allowed"
    );
    assert!(p.decide(&target("[2606:4700::1]", 8443, &[])).is_allowed());
    assert!(!p.decide(&target("2606:4700::1", 443, &[])).is_allowed());
    let deny_port = policy(&["**.example.com"], &["**.example.com:22"]);
    assert!(deny_port
        .decide(&target("example.com", 443, &[PUBLIC]))
        .is_allowed());
    assert!(!deny_port
        .decide(&target("example.com", 22, &[PUBLIC]))
        .is_allowed());
}

#[test]
fn an_allowed_name_resolving_to_a_blocked_address_is_refused() {
    let p = policy(&["**.example.com", "0.0.0.0/0", "::/0"], &[]);
    for (addr, range) in [
        ("169.254.169.254", "link-local"),
        ("127.0.0.1", "loopback"),
        ("10.0.0.5", "private"),
        ("100.64.0.1", "cgnat"),
        ("fd00:ec2::254", "private"),
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("255.255.255.255", "broadcast"),
    ] {
        let t = target("metadata.example.com", 80, &[addr]);
        assert_eq!(label(&p, &t), format!("blocked-range:{range}"), "{addr}");
    }
    // One bad address among good ones refuses the request.
    let t = target("rebind.example.com", 443, &[PUBLIC, "127.0.0.1"]);
    assert_eq!(label(&p, &t), "blocked-range:loopback");
}

#[test]
fn v4_mapped_v6_is_judged_as_its_v4() {
    let p = policy(&["**.example.com", "::/0"], &[]);
    assert_eq!(
        label(&p, &target("[::ffff:127.0.0.1]", 80, &[])),
        "blocked-range:loopback"
    );
    assert_eq!(
        label(
            &p,
            &target("a.example.com", 80, &["::ffff:169.254.169.254"])
        ),
        "blocked-range:link-local"
    );
    // NAT64 and 6to4 carrying a blocked IPv4 have no exception.
    let p = policy(&["**.example.com", "127.0.0.1", "::/0"], &[]);
    for wrapped in ["64:ff9b::7f00:1", "2002:7f00:1::1", "::127.0.0.1"] {
        assert_eq!(
            label(&p, &target("a.example.com", 80, &[wrapped])),
            "blocked-range:loopback",
            "{wrapped}"
        );
    }
}

#[test]
fn an_explicit_exception_unlocks_only_its_address_and_port() {
    let p = policy(&["127.0.0.1:8080", "10.20.0.0/16"], &[]);
    assert_eq!(
        label(&p, &target("127.0.0.1", 8080, &[])),
        "allow:127.0.0.1:8080"
    );
    assert_eq!(
        label(&p, &target("127.0.0.1", 8081, &[])),
        "blocked-range:loopback"
    );
    assert_eq!(
        label(&p, &target("127.0.0.2", 8080, &[])),
        "blocked-range:loopback"
    );
    // The mapped form is the same socket, so the same exception.
    assert!(p
        .decide(&target("::ffff:127.0.0.1", 8080, &[]))
        .is_allowed());
    assert!(p.decide(&target("10.20.3.4", 22, &[])).is_allowed());
    assert!(!p.decide(&target("10.21.3.4", 22, &[])).is_allowed());
    // A name resolving to the excepted socket: both the name rule and the
    // exception are needed (a name rule never unlocks an address).
    let named = policy(&["registry.example.com"], &[]);
    let t = target("registry.example.com", 8080, &["127.0.0.1"]);
    assert_eq!(label(&named, &t), "blocked-range:loopback");
    let both = policy(&["registry.example.com", "127.0.0.1:8080"], &[]);
    assert_eq!(label(&both, &t), "allow:registry.example.com");
    // A network wider than the blocked range unlocks nothing in it.
    let wide = policy(&["0.0.0.0/0", "8.0.0.0/5", "::/0"], &[]);
    assert!(!wide.decide(&target("127.0.0.1", 8080, &[])).is_allowed());
    assert!(!wide.decide(&target("10.1.1.1", 80, &[])).is_allowed());
    assert!(wide.decide(&target(PUBLIC, 80, &[])).is_allowed());
}

#[test]
fn names_compare_without_case_or_trailing_dot() {
    let p = policy(&["Registry.Example.COM."], &[]);
    assert_eq!(p.allow[0].to_string(), "registry.example.com");
    for host in [
        "registry.example.com",
        "REGISTRY.example.com.",
        "registry.EXAMPLE.com",
    ] {
        assert!(
            p.decide(&target(host, 443, &[PUBLIC])).is_allowed(),
            "{host}"
        );
    }
    // A Target built by hand, not through Host::parse, matches too.
    let raw = Target {
        host: Host::Name("A.Example.Com.".into()),
        ..target("x", 443, &[PUBLIC])
    };
    assert!(policy(&["*.example.com"], &[]).decide(&raw).is_allowed());
    // A non-ASCII host from a tool is compared byte by byte, no panic:
    // below the domain is below it; anything else matches nothing.
    let p = policy(&["*.example.com"], &[]);
    assert!(p
        .decide(&target("bü.example.com", 443, &[PUBLIC]))
        .is_allowed());
    for host in ["é", "ü.examplé.com", "éxample.com"] {
        assert!(
            !p.decide(&target(host, 443, &[PUBLIC])).is_allowed(),
            "{host}"
        );
    }
}

#[test]
fn methods_limit_plain_http_and_tunnels_to_its_port_but_no_other_tunnel() {
    let p = Policy {
        methods: Some(vec![Method::GET, Method::HEAD]),
        ..policy(&["**.example.com"], &[])
    };
    let with = |method: Option<Method>| Target {
        method,
        ..target("example.com", 80, &[PUBLIC])
    };
    assert!(p.decide(&with(Some(Method::GET))).is_allowed());
    assert!(p.decide(&with(Some(Method::HEAD))).is_allowed());
    assert_eq!(label(&p, &with(Some(Method::POST))), "method:POST");
    // A tunnel to port 80 would carry plain HTTP past the list.
    assert_eq!(label(&p, &with(None)), "method:CONNECT");
    assert_eq!(label(&p, &with(Some(Method::CONNECT))), "method:CONNECT");
    let tls = |method: Option<Method>| Target {
        method,
        ..target("example.com", 443, &[PUBLIC])
    };
    assert!(p.decide(&tls(None)).is_allowed());
    assert!(p.decide(&tls(Some(Method::CONNECT))).is_allowed());
    // Without a list, any tunnel.
    let open = policy(&["**.example.com"], &[]);
    assert!(open.decide(&with(None)).is_allowed());
    // A refused host is refused for what it is, not for its method.
    let other = Target {
        method: Some(Method::POST),
        ..target("other.test", 80, &[PUBLIC])
    };
    assert_eq!(label(&p, &other), "not-allowed");
}

#[test]
fn a_name_without_addresses_is_refused() {
    let p = policy(&["**.example.com"], &[]);
    assert_eq!(label(&p, &target("example.com", 443, &[])), "unresolved");
}

#[test]
fn rules_print_in_canonical_form() {
    for (written, shown) in [
        ("*.Example.com:443", "*.example.com:443"),
        ("**.example.com", "**.example.com"),
        ("10.0.0.0/8", "10.0.0.0/8"),
        ("10.1.2.3:80", "10.1.2.3:80"),
        ("[::1]:8080", "[::1]:8080"),
        ("[fd00::/8]:443", "[fd00::/8]:443"),
        ("::1", "::1"),
        ("::ffff:127.0.0.1", "127.0.0.1"),
        ("  git.example.com  ", "git.example.com"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ] {
        let rule: Rule = written.parse().unwrap();
        assert_eq!(rule.to_string(), shown, "{written}");
    }
}

#[test]
fn parse_errors_name_the_pattern_and_the_forms() {
    for (bad, says) in [
        ("", "empty"),
        ("bücher.example", "punycode"),
        ("example.com:0", "port"),
        ("example.com:http", "port"),
        ("example.com:70000", "port"),
        ("10.1.2.3/8", "did you mean 10.0.0.0/8"),
        ("10.0.0.0/33", "not a valid IP address"),
        ("10.1.2", "not a valid IP address"),
        ("[::1", "not a valid IP address"),
        ("[::1]443", "not a valid IP address"),
        ("*", "a * may only open"),
        ("a.*.example.com", "a * may only open"),
        ("*.", "names no domain"),
        ("a..example.com", "empty label"),
        ("-a.example.com", "starts or ends with -"),
        ("a b.example.com", "other than letters"),
        ("https://example.com", "is a URL"),
        ("example.com/simple", "not a valid IP address"),
    ] {
        let error = bad.parse::<Rule>().unwrap_err();
        let message = error.to_string();
        assert!(message.contains(says), "{bad:?}: {message}");
        assert!(message.contains("accepted forms"), "{bad:?}: {message}");
        if !bad.is_empty() {
            assert!(message.contains(&format!("{:?}", bad.trim())), "{message}");
        }
    }
    assert!(matches!(
        "bücher.example".parse::<Rule>(),
        Err(RuleError::NonAscii { .. })
    ));
}

/// Every always-refused network, written out independently of the
/// implementation's table.
const ORACLE: &[&str] = &[
    "0.0.0.0/8",
    "10.0.0.0/8",
    "100.64.0.0/10",
    "127.0.0.0/8",
    "169.254.0.0/16",
    "172.16.0.0/12",
    "192.0.0.0/24",
    "192.0.2.0/24",
    "192.168.0.0/16",
    "198.18.0.0/15",
    "198.51.100.0/24",
    "203.0.113.0/24",
    "224.0.0.0/3",
    "::/128",
    "::1/128",
    "64:ff9b:1::/48",
    "100::/64",
    "2001::/32",
    "2001:db8::/32",
    "3fff::/20",
    "fc00::/7",
    "fe80::/10",
    "fec0::/10",
    "ff00::/8",
];

/// splitmix64: enough randomness for a sweep, no crate.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A random address inside `net`.
    fn inside(&mut self, net: IpNet) -> IpAddr {
        let random = u128::from(self.next()) << 64 | u128::from(self.next());
        match net {
            IpNet::V4(n) => {
                let host = u32::from(n.hostmask()) & random as u32;
                IpAddr::V4(Ipv4Addr::from(u32::from(n.network()) | host))
            }
            IpNet::V6(n) => {
                let host = u128::from(n.hostmask()) & random;
                IpAddr::V6(Ipv6Addr::from(u128::from(n.network()) | host))
            }
        }
    }
}

fn oracle_blocked(addr: IpAddr) -> Option<IpNet> {
    ORACLE
        .iter()
        .map(|n| n.parse::<IpNet>().unwrap())
        .find(|n| n.contains(&addr))
}

#[test]
fn no_blocked_address_is_allowed_without_an_explicit_exception() {
    let p = policy(
        &[
            "**.example.com",
            "**.test",
            "0.0.0.0/0",
            "::/0",
            "0.0.0.0/1",
            "128.0.0.0/1",
            "127.0.0.1:8080",
            "10.20.0.0/16",
            "[fd00::1]:443",
        ],
        &[],
    );
    let nets: Vec<IpNet> = ORACLE.iter().map(|n| n.parse().unwrap()).collect();
    let exceptions: Vec<IpNet> = ["127.0.0.1/32", "10.20.0.0/16", "fd00::1/128"]
        .iter()
        .map(|n| n.parse().unwrap())
        .collect();
    let mut rng = Rng(0x00c0_ffee);
    let (mut allowed, mut refused) = (0, 0);
    for i in 0..2000u32 {
        // Blocked ranges, the exceptions' own networks, and disguises.
        let pick = rng.next() as usize;
        let net = if i.is_multiple_of(5) {
            exceptions[pick % exceptions.len()]
        } else {
            nets[pick % nets.len()]
        };
        let mut addr = rng.inside(net);
        if let (IpAddr::V4(v4), 1) = (addr, i % 4) {
            addr = IpAddr::V6(v4.to_ipv6_mapped());
        }
        if let (IpAddr::V4(v4), 2) = (addr, i % 4) {
            let o = v4.octets();
            let s = |a: u8, b: u8| u16::from(a) << 8 | u16::from(b);
            addr = IpAddr::V6(Ipv6Addr::new(
                0x64,
                0xff9b,
                0,
                0,
                0,
                0,
                s(o[0], o[1]),
                s(o[2], o[3]),
            ));
        }
        let port = [80, 443, 8080][pick % 3];
        let literal = pick.is_multiple_of(2);
        let t = if literal {
            Target {
                host: Host::Ip(addr),
                port,
                resolved: vec![],
                method: None,
            }
        } else {
            Target {
                host: Host::parse("pkg.example.com"),
                port,
                resolved: vec![addr],
                method: None,
            }
        };
        let decision = p.decide(&t);
        if !decision.is_allowed() {
            refused += 1;
            continue;
        }
        allowed += 1;
        // Allowed: the socket's address must be covered by an exception
        // naming it inside its blocked range, on this port.
        let canonical = addr.to_canonical();
        let range = oracle_blocked(canonical).expect("every generated address is blocked");
        let excepted = p.allow.iter().any(|rule| {
            rule.covers_addr(canonical, port) && rule.net().is_some_and(|n| range.contains(&n))
        });
        assert!(excepted, "{addr} port {port} allowed by {decision}");
    }
    assert!(
        allowed > 20 && refused > 1000,
        "allowed {allowed}, refused {refused}"
    );
    // The other way round: outside the oracle, 0.0.0.0/0 allows.
    for _ in 0..500 {
        let addr = IpAddr::V4(Ipv4Addr::from(rng.next() as u32));
        let t = Target {
            host: Host::Ip(addr),
            port: 443,
            resolved: vec![],
            method: None,
        };
        assert_eq!(
            p.decide(&t).is_allowed(),
            oracle_blocked(addr).is_none(),
            "{addr}"
        );
    }
}

#[test]
fn a_name_refused_whatever_it_resolves_to_is_refused_before_resolving() {
    let p = policy(&["**.example.com:443"], &["*.evil.example.com"]);
    assert_eq!(
        p.refuse_name("x.evil.example.com", 443),
        Some(Refusal::Deny("*.evil.example.com".parse().unwrap()))
    );
    assert_eq!(p.refuse_name("other.test", 443), Some(Refusal::NotAllowed));
    assert_eq!(
        p.refuse_name("a.example.com", 80),
        Some(Refusal::NotAllowed)
    );
    assert_eq!(p.refuse_name("a.example.com", 443), None);
    // An address rule may cover any name resolving into it: resolve.
    let by_address = policy(&["93.184.0.0/16:443"], &[]);
    assert_eq!(by_address.refuse_name("other.test", 443), None);
    assert_eq!(
        by_address.refuse_name("other.test", 80),
        Some(Refusal::NotAllowed)
    );
}

#[test]
fn the_hosts_own_public_address_is_refused_unless_the_operator_names_it() {
    let own: Vec<IpAddr> = vec!["127.0.0.1".parse().unwrap(), PUBLIC.parse().unwrap()];
    let open = policy(&["0.0.0.0/0", "::/0"], &[]);
    let own_public = target("gateway.example.com", 22, &[PUBLIC]);
    assert!(open.decide(&own_public).is_allowed());
    assert_eq!(
        open.decide_on(&own_public, &own).to_string(),
        "blocked-range:this-host"
    );
    // IPv4-mapped IPv6 is the same address.
    let mapped = target("[::ffff:93.184.215.14]", 22, &[]);
    assert_eq!(
        open.decide_on(&mapped, &own).to_string(),
        "blocked-range:this-host"
    );
    // Another public address is not the host's.
    let other = target("example.com", 443, &["93.184.215.15"]);
    assert!(open.decide_on(&other, &own).is_allowed());
    // An operator exception naming the address (and port) lets it through.
    let excepted = policy(&["0.0.0.0/0", "93.184.215.14/32:22"], &[]);
    assert!(excepted.decide_on(&own_public, &own).is_allowed());
    // A refusal stays the refusal it was.
    let none = policy(&[], &[]);
    assert_eq!(none.decide_on(&own_public, &own).to_string(), "not-allowed");
}
