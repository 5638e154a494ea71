//! The ids the gateway gives what it sends a child (and, for the child's
//! own requests, what it sends clients): one [`GatewayId`] enum, minted by
//! one [`IdMint`] and parsed once, so a reply is routed by matching on
//! what its id is instead of probing string prefixes in turn.
//!
//! The wire strings are `corral-N` (a client's request), `corral-ping-N`
//! (health ping), `corral-abort-N` (admin abort), `corral-state-N` (state
//! snapshot for a greeting), `corral-ask-N` (a child's request as clients
//! get it), `corral-history-N` (a page of the conversation for one
//! client's load), `corral-mcp-N` (a selection of MCP servers). Anything else, including a client's own id shapes echoed back
//! and `corral-` followed by anything the mint never writes, is not ours.

use std::fmt;

/// Prefix of every gateway id.
const PREFIX: &str = "corral-";

/// An id the gateway minted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GatewayId {
    /// A client's request forwarded to the child.
    Request(u64),
    /// A health ping.
    Ping(u64),
    /// An admin abort of the run in flight.
    Abort(u64),
    /// A state snapshot requested for a client's greeting.
    State(u64),
    /// A request of the child, as its clients get it.
    Ask(u64),
    /// A page of the conversation asked for one client's load.
    History(u64),
    /// A selection of MCP servers for the project's session.
    Mcp(u64),
}

impl GatewayId {
    /// The namespace word between the prefix and the number (none for
    /// requests).
    fn word(self) -> Option<&'static str> {
        match self {
            GatewayId::Request(_) => None,
            GatewayId::Ping(_) => Some("ping"),
            GatewayId::Abort(_) => Some("abort"),
            GatewayId::State(_) => Some("state"),
            GatewayId::Ask(_) => Some("ask"),
            GatewayId::History(_) => Some("history"),
            GatewayId::Mcp(_) => Some("mcp"),
        }
    }

    fn number(self) -> u64 {
        match self {
            GatewayId::Request(n)
            | GatewayId::Ping(n)
            | GatewayId::Abort(n)
            | GatewayId::State(n)
            | GatewayId::Ask(n)
            | GatewayId::History(n)
            | GatewayId::Mcp(n) => n,
        }
    }

    /// Reads an id as the gateway writes it; `None` for anything that is
    /// not exactly one of its ids (so not ours).
    pub fn parse(id: &str) -> Option<GatewayId> {
        let rest = id.strip_prefix(PREFIX)?;
        let (make, digits): (fn(u64) -> GatewayId, &str) = match rest.split_once('-') {
            None => (GatewayId::Request, rest),
            Some(("ping", n)) => (GatewayId::Ping, n),
            Some(("abort", n)) => (GatewayId::Abort, n),
            Some(("state", n)) => (GatewayId::State, n),
            Some(("ask", n)) => (GatewayId::Ask, n),
            Some(("history", n)) => (GatewayId::History, n),
            Some(("mcp", n)) => (GatewayId::Mcp, n),
            Some(_) => return None,
        };
        number(digits).map(make)
    }
}

/// A canonical decimal number as [`fmt::Display`] writes a `u64`: digits
/// only, no sign, no leading zero, no overflow.
fn number(digits: &str) -> Option<u64> {
    let canonical = !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !canonical {
        return None;
    }
    digits.parse().ok()
}

impl fmt::Display for GatewayId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.word() {
            None => write!(f, "{PREFIX}{}", self.number()),
            Some(word) => write!(f, "{PREFIX}{word}-{}", self.number()),
        }
    }
}

/// The one place gateway ids come from: a counter per namespace, each
/// starting at 1, so an id is never minted twice by one hub.
#[derive(Debug, Default)]
pub struct IdMint {
    request: u64,
    ping: u64,
    abort: u64,
    state: u64,
    ask: u64,
    history: u64,
    mcp: u64,
}

impl IdMint {
    pub fn request(&mut self) -> GatewayId {
        GatewayId::Request(next(&mut self.request))
    }

    pub fn ping(&mut self) -> GatewayId {
        GatewayId::Ping(next(&mut self.ping))
    }

    pub fn abort(&mut self) -> GatewayId {
        GatewayId::Abort(next(&mut self.abort))
    }

    pub fn state(&mut self) -> GatewayId {
        GatewayId::State(next(&mut self.state))
    }

    pub fn ask(&mut self) -> GatewayId {
        GatewayId::Ask(next(&mut self.ask))
    }

    pub fn history(&mut self) -> GatewayId {
        GatewayId::History(next(&mut self.history))
    }

    pub fn mcp(&mut self) -> GatewayId {
        GatewayId::Mcp(next(&mut self.mcp))
    }
}

fn next(counter: &mut u64) -> u64 {
    *counter += 1;
    *counter
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_namespace_writes_todays_wire_string_and_reads_back() {
        let cases = [
            (GatewayId::Request(7), "corral-7"),
            (GatewayId::Ping(1), "corral-ping-1"),
            (GatewayId::Abort(2), "corral-abort-2"),
            (GatewayId::State(3), "corral-state-3"),
            (GatewayId::Ask(u64::MAX), "corral-ask-18446744073709551615"),
            (GatewayId::History(4), "corral-history-4"),
            (GatewayId::Mcp(5), "corral-mcp-5"),
        ];
        for (id, wire) in cases {
            assert_eq!(id.to_string(), wire);
            assert_eq!(GatewayId::parse(wire), Some(id), "{wire}");
        }
    }

    #[test]
    fn the_mint_counts_each_namespace_apart() {
        let mut mint = IdMint::default();
        assert_eq!(mint.request(), GatewayId::Request(1));
        assert_eq!(mint.request(), GatewayId::Request(2));
        assert_eq!(mint.ping(), GatewayId::Ping(1));
        assert_eq!(mint.abort(), GatewayId::Abort(1));
        assert_eq!(mint.state(), GatewayId::State(1));
        assert_eq!(mint.ask(), GatewayId::Ask(1));
        assert_eq!(mint.ask(), GatewayId::Ask(2));
        assert_eq!(mint.history(), GatewayId::History(1));
    }

    #[test]
    fn ids_the_gateway_never_writes_are_not_ours() {
        let foreign = [
            // Ids a client might use, echoed by a child.
            "1",
            "abc",
            "",
            "corral",
            "corral-hello",
            // `corral-` with junk.
            "corral-",
            "corral-x",
            "corral-ping-",
            "corral-ping-x",
            "corral-ping-1-2",
            "corral-pong-1",
            "corral-PING-1",
            "corral--1",
            "corral-+1",
            "corral- 1",
            "corral-1 ",
            "corral-01",
            "corral-state-007",
            "corral-ask-1.0",
            "Corral-1",
            "xcorral-1",
            // Past a u64.
            "corral-18446744073709551616",
            "corral-abort-99999999999999999999999",
        ];
        for id in foreign {
            assert_eq!(GatewayId::parse(id), None, "{id:?}");
        }
    }
}
