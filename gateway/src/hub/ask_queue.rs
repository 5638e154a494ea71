//! The child's requests waiting for a client's answer (ACP permission
//! requests), oldest first, each under the gateway id clients got it by.
//! Pure state; what the hub does with them is in `asks`.

use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::time::Instant;

use super::gateway_id::GatewayId;

/// A child request waiting for a client's answer.
#[derive(Debug, Clone)]
pub(super) struct Ask {
    pub gid: GatewayId,
    /// The id the child gave it.
    pub child_id: Value,
    pub method: String,
    /// The request as clients get it (under `gid`).
    pub bytes: Bytes,
    pub since: Instant,
}

/// The child's requests waiting for an answer, oldest first.
#[derive(Debug, Default)]
pub(super) struct Asks {
    waiting: Vec<Ask>,
}

impl Asks {
    pub fn push(&mut self, ask: Ask) {
        self.waiting.push(ask);
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    /// The request asked as `gid`, once.
    pub fn take(&mut self, gid: GatewayId) -> Option<Ask> {
        let at = self.waiting.iter().position(|a| a.gid == gid)?;
        Some(self.waiting.remove(at))
    }

    pub fn waiting(&self) -> impl Iterator<Item = &Ask> {
        self.waiting.iter()
    }

    /// When the oldest request times out.
    pub fn deadline(&self, timeout: Duration) -> Option<Instant> {
        self.waiting.first().map(|a| a.since + timeout)
    }

    /// Removes and returns the requests older than `timeout` at `now`.
    pub fn expired(&mut self, now: Instant, timeout: Duration) -> Vec<Ask> {
        let (old, young) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|a| a.since + timeout <= now);
        self.waiting = young;
        old
    }

    pub fn drain(&mut self) -> Vec<Ask> {
        std::mem::take(&mut self.waiting)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::gateway_id::IdMint;
    use serde_json::json;

    fn ask(asks: &mut Asks, mint: &mut IdMint, since: Instant) -> GatewayId {
        let gid = mint.ask();
        asks.push(Ask {
            gid,
            child_id: json!(1),
            method: "session/request_permission".into(),
            bytes: Bytes::new(),
            since,
        });
        gid
    }

    #[tokio::test(start_paused = true)]
    async fn the_oldest_request_times_out_first_and_each_is_taken_once() {
        let mut asks = Asks::default();
        let mut mint = IdMint::default();
        let start = Instant::now();
        let first = ask(&mut asks, &mut mint, start);
        let second = ask(&mut asks, &mut mint, start + Duration::from_secs(5));
        let timeout = Duration::from_secs(10);
        assert_eq!(asks.deadline(timeout), Some(start + timeout));
        let expired = asks.expired(start + timeout, timeout);
        assert_eq!(expired.len(), 1);
        assert_eq!(expired[0].gid, first);
        assert!(asks.take(first).is_none());
        assert!(asks.take(second).is_some());
        assert!(asks.take(second).is_none());
        assert_eq!(asks.deadline(timeout), None);
    }
}
