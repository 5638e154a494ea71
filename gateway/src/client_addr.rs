//! Where a request comes from, for the authentication throttle: the TCP
//! peer, or — only for connections accepted on `--proxy-listen`, which
//! only a trusted balancer may reach — the right-most `X-Forwarded-For`
//! entry, the address the balancer itself saw (entries to its left were
//! written by the client and prove nothing). The header is never read on
//! the main listener: a tool on the same host reaches loopback and could
//! write anything there. On the proxy listener it is read only from a
//! peer in `--trusted-proxy` (a connection from anywhere else counts as
//! its TCP peer, like one on the main listener), and a request without a
//! usable entry counts as coming from the balancer.
//!
//! Also the sockets the accept loop takes connections from
//! ([`Listeners`]).

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::http::HeaderMap;
use tokio::net::{TcpListener, TcpStream};

/// `X-Forwarded-For`.
const FORWARDED_FOR: &str = "x-forwarded-for";

/// The listener a connection was accepted on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `--listen`: the TCP peer is the client.
    Main,
    /// `--proxy-listen`: the TCP peer is a trusted balancer.
    Proxy,
}

/// The sockets the accept loop listens on. Both serve the same routes
/// under the same connection cap.
#[derive(Debug)]
pub struct Listeners {
    pub main: TcpListener,
    /// For a trusted balancer (`--proxy-listen`), if configured.
    pub proxy: Option<TcpListener>,
    /// The peers whose `X-Forwarded-For` counts on `proxy`
    /// (`--trusted-proxy`).
    pub trusted: Vec<ipnet::IpNet>,
}

impl Listeners {
    /// The next connection on either listener.
    pub async fn accept(&self) -> (io::Result<(TcpStream, SocketAddr)>, Via) {
        match &self.proxy {
            None => (self.main.accept().await, Via::Main),
            Some(proxy) => tokio::select! {
                accepted = self.main.accept() => (accepted, Via::Main),
                accepted = proxy.accept() => {
                    // A peer outside --trusted-proxy is a client like any
                    // other (a failed accept keeps Proxy: its reserve).
                    let untrusted = accepted.as_ref().is_ok_and(|(_, peer)| !self.trusts(peer.ip()));
                    (accepted, if untrusted { Via::Main } else { Via::Proxy })
                }
            },
        }
    }

    /// Whether `peer` is a trusted balancer.
    fn trusts(&self, peer: IpAddr) -> bool {
        let peer = peer.to_canonical();
        self.trusted.iter().any(|net| net.contains(&peer))
    }

    /// The listener behind `via`.
    pub fn get(&self, via: Via) -> &TcpListener {
        match (via, &self.proxy) {
            (Via::Proxy, Some(proxy)) => proxy,
            _ => &self.main,
        }
    }
}

/// The address a request counts as coming from (a request extension set
/// by the accept loop; also an extractor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientAddr(pub IpAddr);

impl ClientAddr {
    /// The client of a request from `peer` on `via` with `headers`.
    pub fn of(peer: SocketAddr, via: Via, headers: &HeaderMap) -> ClientAddr {
        match via {
            Via::Main => ClientAddr(peer.ip()),
            Via::Proxy => ClientAddr(forwarded_for(headers).unwrap_or(peer.ip())),
        }
    }
}

/// The right-most entry of the last `X-Forwarded-For` line, if it is an
/// address (`1.2.3.4`, `1.2.3.4:80`, `::1` or `[::1]:80`).
pub fn forwarded_for(headers: &HeaderMap) -> Option<IpAddr> {
    let last = headers.get_all(FORWARDED_FOR).iter().next_back()?;
    let entry = last.to_str().ok()?.rsplit(',').next()?.trim();
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|a| a.ip()))
        .or_else(|| {
            let inner = entry.strip_prefix('[')?.strip_suffix(']')?;
            inner.parse().ok()
        })
}

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = Infallible;

    /// The accept loop's [`ClientAddr`], else the TCP peer, else (a
    /// request made without a socket, in tests) `0.0.0.0`.
    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        if let Some(addr) = parts.extensions.get::<ClientAddr>() {
            return Ok(*addr);
        }
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |info| info.0.ip());
        Ok(ClientAddr(peer))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(lines: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for line in lines {
            headers.append(FORWARDED_FOR, HeaderValue::from_str(line).unwrap());
        }
        headers
    }

    fn peer() -> SocketAddr {
        "10.0.0.1:5000".parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn the_main_listener_never_reads_the_header() {
        let spoofed = headers(&["203.0.113.9"]);
        assert_eq!(
            ClientAddr::of(peer(), Via::Main, &spoofed).0,
            ip("10.0.0.1")
        );
    }

    #[test]
    fn the_proxy_listener_takes_the_right_most_entry() {
        for (lines, want) in [
            (&["203.0.113.9"][..], "203.0.113.9"),
            (&["198.51.100.1, 203.0.113.9"], "203.0.113.9"),
            (&["198.51.100.1", "203.0.113.9 "], "203.0.113.9"),
            (&["203.0.113.9:4711"], "203.0.113.9"),
            (&["2001:db8::7"], "2001:db8::7"),
            (&["[2001:db8::7]:443"], "2001:db8::7"),
            (&["[2001:db8::7]"], "2001:db8::7"),
            // Nothing usable: the balancer itself.
            (&[], "10.0.0.1"),
            (&["unknown"], "10.0.0.1"),
            (&["203.0.113.9, "], "10.0.0.1"),
        ] {
            let got = ClientAddr::of(peer(), Via::Proxy, &headers(lines)).0;
            assert_eq!(got, ip(want), "{lines:?}");
        }
    }
}
