//! [`ClientId`]: one client connection of the gateway. A client id is
//! unique in this process (across projects and hubs), so a client id a
//! connection names to resume the runs of an earlier one never means
//! another project's client.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Client ids issued by this process; 0 is never issued.
static CLIENT_IDS: AtomicU64 = AtomicU64::new(0);

/// One client connection of the gateway, or the client id a connection
/// names as its own (`client_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClientId(u64);

impl ClientId {
    /// Requests the gateway makes itself (an admin abort): no client.
    pub const GATEWAY: ClientId = ClientId(0);

    /// A fresh id, never issued before in this process.
    pub fn mint() -> ClientId {
        ClientId(CLIENT_IDS.fetch_add(1, Ordering::Relaxed) + 1)
    }

    /// The id a client names (its `client_id`), as it was told it.
    pub const fn named(id: u64) -> ClientId {
        ClientId(id)
    }

    /// The number, as clients are told it and logs record it (a number
    /// in JSON logs, as before ids had a type).
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for ClientId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minted_ids_are_fresh_and_never_the_gateways() {
        let a = ClientId::mint();
        let b = ClientId::mint();
        assert_ne!(a, b);
        assert!(a > ClientId::GATEWAY && b > ClientId::GATEWAY);
        assert_eq!(ClientId::named(42).to_string(), "42");
    }
}
