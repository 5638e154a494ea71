//! The address ranges egress always refuses, whatever the allow rules
//! say about names: this host, its link, private networks, cloud
//! metadata, and addresses that are not unicast destinations on the
//! internet. Each resolved address is classified here.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// Why an address is refused; its name is the label in decisions
/// (`blocked-range:link-local`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockedRange {
    /// `0.0.0.0/8`, `::`: on Linux a connect to them reaches this host.
    Unspecified,
    /// `127.0.0.0/8`, `::1`: this host, including the gateway's port.
    Loopback,
    /// `169.254.0.0/16` (cloud metadata at 169.254.169.254), `fe80::/10`.
    LinkLocal,
    /// RFC 1918, `fc00::/7` (unique local), `fec0::/10` (old site-local).
    Private,
    /// `100.64.0.0/10`: carrier-grade NAT, often a provider's internal net.
    SharedCgnat,
    /// `224.0.0.0/4`, `ff00::/8`.
    Multicast,
    /// `255.255.255.255`.
    Broadcast,
    /// `192.0.2.0/24`, `198.51.100.0/24`, `203.0.113.0/24`,
    /// `2001:db8::/32`, `3fff::/20`: never on the internet, so a name
    /// resolving there points into someone's own network.
    Documentation,
    /// `198.18.0.0/15`: benchmarking, lab networks.
    Benchmarking,
    /// `192.0.0.0/24`, `240.0.0.0/4`, `100::/64` (discard-only): protocol
    /// assignments and addresses that route nowhere public.
    Reserved,
    /// `2001::/32`: Teredo tunnels carry an obfuscated IPv4 client; not
    /// unwrapped, refused whole.
    Teredo,
    /// `64:ff9b:1::/48`: local-use NAT64, translating into the operator's
    /// own IPv4 networks at a prefix length we cannot know.
    Nat64Local,
    /// An address of the gateway's own host (any of its interfaces'),
    /// public or not: it reaches the host's services as loopback would.
    ThisHost,
}

impl BlockedRange {
    /// The label used after `blocked-range:`.
    pub fn name(self) -> &'static str {
        match self {
            BlockedRange::Unspecified => "unspecified",
            BlockedRange::Loopback => "loopback",
            BlockedRange::LinkLocal => "link-local",
            BlockedRange::Private => "private",
            BlockedRange::SharedCgnat => "cgnat",
            BlockedRange::Multicast => "multicast",
            BlockedRange::Broadcast => "broadcast",
            BlockedRange::Documentation => "documentation",
            BlockedRange::Benchmarking => "benchmarking",
            BlockedRange::Reserved => "reserved",
            BlockedRange::Teredo => "teredo",
            BlockedRange::Nat64Local => "nat64-local",
            BlockedRange::ThisHost => "this-host",
        }
    }
}

/// A refused address and what may unlock it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocked {
    pub range: BlockedRange,
    /// The blocked network the address lies in: an allow rule naming an
    /// address or CIDR inside it is an operator exception. `None` when the
    /// address only embeds a blocked IPv4 (NAT64, 6to4, IPv4-compatible):
    /// it reaches that IPv4 through a translator, and no exception applies.
    pub exceptable: Option<IpNet>,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> IpNet {
    IpNet::V4(Ipv4Net::new_assert(Ipv4Addr::new(a, b, c, d), len))
}

const fn v6(segments: [u16; 8], len: u8) -> IpNet {
    let [a, b, c, d, e, f, g, h] = segments;
    IpNet::V6(Ipv6Net::new_assert(
        Ipv6Addr::new(a, b, c, d, e, f, g, h),
        len,
    ))
}

/// Every blocked network, most specific first where they nest.
const BLOCKED: &[(IpNet, BlockedRange)] = &[
    (v4(0, 0, 0, 0, 8), BlockedRange::Unspecified),
    (v4(10, 0, 0, 0, 8), BlockedRange::Private),
    (v4(100, 64, 0, 0, 10), BlockedRange::SharedCgnat),
    (v4(127, 0, 0, 0, 8), BlockedRange::Loopback),
    (v4(169, 254, 0, 0, 16), BlockedRange::LinkLocal),
    (v4(172, 16, 0, 0, 12), BlockedRange::Private),
    (v4(192, 0, 0, 0, 24), BlockedRange::Reserved),
    (v4(192, 0, 2, 0, 24), BlockedRange::Documentation),
    (v4(192, 168, 0, 0, 16), BlockedRange::Private),
    (v4(198, 18, 0, 0, 15), BlockedRange::Benchmarking),
    (v4(198, 51, 100, 0, 24), BlockedRange::Documentation),
    (v4(203, 0, 113, 0, 24), BlockedRange::Documentation),
    (v4(224, 0, 0, 0, 4), BlockedRange::Multicast),
    (v4(255, 255, 255, 255, 32), BlockedRange::Broadcast),
    (v4(240, 0, 0, 0, 4), BlockedRange::Reserved),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), BlockedRange::Unspecified),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), BlockedRange::Loopback),
    (
        v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        BlockedRange::Nat64Local,
    ),
    (v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), BlockedRange::Reserved),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), BlockedRange::Teredo),
    (
        v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        BlockedRange::Documentation,
    ),
    (
        v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
        BlockedRange::Documentation,
    ),
    (v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), BlockedRange::Private),
    (
        v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        BlockedRange::LinkLocal,
    ),
    (v6([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10), BlockedRange::Private),
    (
        v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
        BlockedRange::Multicast,
    ),
];

/// `addr` with IPv4-mapped IPv6 (`::ffff:a.b.c.d`) turned into the IPv4
/// it is: a socket connecting to one reaches the other.
pub fn canonical(addr: IpAddr) -> IpAddr {
    addr.to_canonical()
}

/// The IPv4 address an IPv6 one carries to a translator: NAT64
/// (`64:ff9b::/96`, last 32 bits), 6to4 (`2002::/16`, bits 16–48), the
/// IPv4-translated form of stateless translators (`::ffff:0:a.b.c.d`,
/// RFC 2765) or the deprecated IPv4-compatible form (`::a.b.c.d`).
pub fn embedded_v4(addr: IpAddr) -> Option<Ipv4Addr> {
    let IpAddr::V6(v6) = addr else { return None };
    let s = v6.segments();
    let low = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    match s {
        [0x64, 0xff9b, 0, 0, 0, 0, _, _] | [0, 0, 0, 0, 0xffff, 0, _, _] => Some(low),
        [0x2002, hi, lo, ..] => Some(Ipv4Addr::new(
            (hi >> 8) as u8,
            hi as u8,
            (lo >> 8) as u8,
            lo as u8,
        )),
        // `::` and `::1` are in the table themselves.
        [0, 0, 0, 0, 0, 0, _, _] if u32::from(low) > 1 => Some(low),
        _ => None,
    }
}

/// Whether `net` lies inside one always-refused network (so an allow
/// rule naming it can be an operator exception).
pub fn inside_blocked(net: IpNet) -> bool {
    BLOCKED.iter().any(|(blocked, _)| blocked.contains(&net))
}

/// Whether `addr` lies in an always-refused range, and in which.
pub fn classify(addr: IpAddr) -> Option<Blocked> {
    let addr = canonical(addr);
    if let Some(blocked) = lookup(addr) {
        return Some(blocked);
    }
    let inner = embedded_v4(addr)?;
    lookup(IpAddr::V4(inner)).map(|blocked| Blocked {
        range: blocked.range,
        exceptable: None,
    })
}

fn lookup(addr: IpAddr) -> Option<Blocked> {
    BLOCKED
        .iter()
        .find(|(net, _)| net.contains(&addr))
        .map(|&(net, range)| Blocked {
            range,
            exceptable: Some(net),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(text: &str) -> Option<BlockedRange> {
        classify(text.parse().unwrap()).map(|b| b.range)
    }

    #[test]
    fn classifies_the_usual_suspects() {
        assert_eq!(class("127.0.0.1"), Some(BlockedRange::Loopback));
        assert_eq!(class("169.254.169.254"), Some(BlockedRange::LinkLocal));
        assert_eq!(class("10.9.8.7"), Some(BlockedRange::Private));
        assert_eq!(class("172.31.255.255"), Some(BlockedRange::Private));
        assert_eq!(class("100.100.100.200"), Some(BlockedRange::SharedCgnat));
        assert_eq!(class("255.255.255.255"), Some(BlockedRange::Broadcast));
        assert_eq!(class("239.1.1.1"), Some(BlockedRange::Multicast));
        assert_eq!(class("0.0.0.0"), Some(BlockedRange::Unspecified));
        assert_eq!(class("::"), Some(BlockedRange::Unspecified));
        assert_eq!(class("::1"), Some(BlockedRange::Loopback));
        assert_eq!(class("fe80::1"), Some(BlockedRange::LinkLocal));
        assert_eq!(class("fd00:ec2::254"), Some(BlockedRange::Private));
        assert_eq!(class("2001:db8::1"), Some(BlockedRange::Documentation));
        assert_eq!(class("ff02::1"), Some(BlockedRange::Multicast));
        for public in ["8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111"] {
            assert_eq!(class(public), None, "{public}");
        }
    }

    #[test]
    fn embedded_ipv4_is_checked_as_ipv4() {
        let mapped = classify("::ffff:127.0.0.1".parse().unwrap()).unwrap();
        assert_eq!(mapped.range, BlockedRange::Loopback);
        assert!(mapped.exceptable.is_some(), "mapped is the same socket");
        for wrapped in [
            "64:ff9b::a9fe:a9fe",
            "2002:a9fe:a9fe::1",
            "::169.254.169.254",
            "::ffff:0:a9fe:a9fe",
        ] {
            let blocked = classify(wrapped.parse().unwrap()).unwrap();
            assert_eq!(blocked.range, BlockedRange::LinkLocal, "{wrapped}");
            assert_eq!(blocked.exceptable, None, "{wrapped}");
        }
        assert_eq!(class("64:ff9b::808:808"), None);
        assert_eq!(class("2002:808:808::1"), None);
    }
}
