//! Request id rewriting: each client request gets a gateway-unique id
//! ([`GatewayId::Request`]) on the way to the child; the child's response
//! is mapped back to the client and the id it used (or none).

use std::collections::HashMap;

use serde_json::Value;

use super::client_id::ClientId;
use super::gateway_id::GatewayId;
use super::trace::RequestSpan;

/// A request forwarded to the child: who asked, and what they called it.
#[derive(Debug, Clone, PartialEq)]
pub struct Forwarded {
    pub client: ClientId,
    /// The client's own `id`, echoed back as given; `None` when it sent none.
    pub original: Option<Value>,
    /// The command name, for error responses the gateway makes up.
    pub command: String,
    /// When it was forwarded, for `request_duration_seconds`.
    pub sent: std::time::Instant,
    /// The child acknowledged it (letscode `ack`); its final answer is due.
    pub acked: bool,
    /// The trace span of a run-starting request; ends with this entry.
    pub span: RequestSpan,
}

/// Outstanding requests of one project, by gateway id. Each id is
/// answered once: its last answer takes it out.
#[derive(Debug, Default)]
pub struct IdMap {
    pending: HashMap<GatewayId, Forwarded>,
}

impl IdMap {
    /// Registers a request sent to the child as `id` (freshly minted).
    pub fn insert(&mut self, id: GatewayId, request: Forwarded) {
        self.pending.insert(id, request);
    }

    /// Resolves a child response's id.
    pub fn take(&mut self, id: GatewayId) -> Option<Forwarded> {
        self.pending.remove(&id)
    }

    /// Marks a request acknowledged and returns it, leaving it pending.
    pub fn ack(&mut self, id: GatewayId) -> Option<&Forwarded> {
        let pending = self.pending.get_mut(&id)?;
        pending.acked = true;
        Some(pending)
    }

    /// Whether `client` has a request with its own id `original` waiting.
    pub fn in_flight(&self, client: ClientId, original: &Value) -> bool {
        self.pending
            .values()
            .any(|p| p.client == client && p.original.as_ref() == Some(original))
    }

    /// How many of `client`'s requests are waiting, not counting those
    /// named `except`.
    pub fn count_client(&self, client: ClientId, except: &str) -> usize {
        self.pending
            .values()
            .filter(|p| p.client == client && p.command != except)
            .count()
    }

    /// Whether `client` has any request waiting.
    pub fn has_client(&self, client: ClientId) -> bool {
        self.pending.values().any(|p| p.client == client)
    }

    /// Forgets a client's requests (it left); their responses are dropped.
    pub fn forget_client(&mut self, client: ClientId) {
        self.pending.retain(|_, p| p.client != client);
    }

    /// Everything still waiting (the child died): each gets an error.
    /// In the order they were sent.
    pub fn drain(&mut self) -> Vec<Forwarded> {
        let mut all: Vec<(GatewayId, Forwarded)> = self.pending.drain().collect();
        all.sort_by_key(|(id, _)| *id);
        all.into_iter().map(|(_, p)| p).collect()
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pending(client: u64, id: Option<Value>) -> Forwarded {
        Forwarded {
            client: ClientId::named(client),
            original: id,
            command: "ping".into(),
            sent: std::time::Instant::now(),
            acked: false,
            span: RequestSpan::default(),
        }
    }

    fn c(n: u64) -> ClientId {
        ClientId::named(n)
    }

    #[test]
    fn same_client_ids_from_two_clients_map_to_distinct_gateway_ids() {
        let mut ids = IdMap::default();
        let (a, b) = (GatewayId::Request(1), GatewayId::Request(2));
        ids.insert(a, pending(1, Some(json!("1"))));
        ids.insert(b, pending(2, Some(json!("1"))));
        assert_eq!(ids.take(b).unwrap().client, c(2));
        assert_eq!(ids.take(a).unwrap().original, Some(json!("1")));
        assert!(ids.take(a).is_none(), "a response is delivered once");
    }

    #[test]
    fn acknowledged_requests_stay_pending_and_ids_are_per_client() {
        let mut ids = IdMap::default();
        let a = GatewayId::Request(1);
        ids.insert(a, pending(1, Some(json!("w"))));
        assert!(ids.in_flight(c(1), &json!("w")));
        assert!(!ids.in_flight(c(2), &json!("w")), "another client's id");
        assert!(ids.ack(a).is_some_and(|p| p.acked));
        assert!(
            ids.in_flight(c(1), &json!("w")),
            "still waiting for its done"
        );
        assert!(ids.take(a).is_some_and(|p| p.acked));
        assert!(!ids.in_flight(c(1), &json!("w")));
    }

    #[test]
    fn forgetting_and_draining_in_the_order_sent() {
        let mut ids = IdMap::default();
        ids.insert(GatewayId::Request(1), pending(1, None));
        ids.insert(GatewayId::Request(10), pending(2, Some(json!(7))));
        ids.insert(GatewayId::Request(3), pending(1, Some(json!("x"))));
        ids.insert(GatewayId::Request(2), pending(3, Some(json!(2))));
        ids.forget_client(c(1));
        assert_eq!(ids.len(), 2);
        assert!(!ids.has_client(c(1)) && ids.has_client(c(2)));
        let left = ids.drain();
        let order: Vec<_> = left
            .iter()
            .map(|p| (p.client, p.original.clone()))
            .collect();
        assert_eq!(order, [(c(3), Some(json!(2))), (c(2), Some(json!(7)))]);
        assert!(ids.is_empty());
    }
}
