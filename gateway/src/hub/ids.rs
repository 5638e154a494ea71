//! Request id rewriting: each client request gets a gateway-unique id on
//! the way to the child; the child's response is mapped back to the client
//! and the id it used (or none).

use std::collections::HashMap;

use serde_json::Value;

use super::trace::RequestSpan;

/// Who asked, and what they called it.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    pub client: u64,
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

/// Outstanding requests of one project, by gateway id.
#[derive(Debug, Default)]
pub struct IdMap {
    next: u64,
    pending: HashMap<String, Pending>,
}

/// Prefix of gateway request ids; health pings use their own.
const PREFIX: &str = "corral-";

impl IdMap {
    /// Registers a request and returns the id to send to the child.
    pub fn insert(&mut self, pending: Pending) -> String {
        self.next += 1;
        let id = format!("{PREFIX}{}", self.next);
        self.pending.insert(id.clone(), pending);
        id
    }

    /// Resolves a child response's id.
    pub fn take(&mut self, id: &str) -> Option<Pending> {
        self.pending.remove(id)
    }

    /// Marks a request acknowledged and returns it, leaving it pending.
    pub fn ack(&mut self, id: &str) -> Option<&Pending> {
        let pending = self.pending.get_mut(id)?;
        pending.acked = true;
        Some(pending)
    }

    /// Whether `client` has a request with its own id `original` waiting.
    pub fn in_flight(&self, client: u64, original: &Value) -> bool {
        self.pending
            .values()
            .any(|p| p.client == client && p.original.as_ref() == Some(original))
    }

    /// How many of `client`'s requests are waiting, not counting those
    /// named `except`.
    pub fn count_client(&self, client: u64, except: &str) -> usize {
        self.pending
            .values()
            .filter(|p| p.client == client && p.command != except)
            .count()
    }

    /// Whether `client` has any request waiting.
    pub fn has_client(&self, client: u64) -> bool {
        self.pending.values().any(|p| p.client == client)
    }

    /// Forgets a client's requests (it left); their responses are dropped.
    pub fn forget_client(&mut self, client: u64) {
        self.pending.retain(|_, p| p.client != client);
    }

    /// Everything still waiting (the child died): each gets an error.
    pub fn drain(&mut self) -> Vec<Pending> {
        let mut all: Vec<(String, Pending)> = self.pending.drain().collect();
        all.sort_by_key(|(id, _)| id[PREFIX.len()..].parse::<u64>().unwrap_or(0));
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

    fn pending(client: u64, id: Option<Value>) -> Pending {
        Pending {
            client,
            original: id,
            command: "ping".into(),
            sent: std::time::Instant::now(),
            acked: false,
            span: RequestSpan::default(),
        }
    }

    #[test]
    fn same_client_ids_from_two_clients_map_to_distinct_gateway_ids() {
        let mut ids = IdMap::default();
        let a = ids.insert(pending(1, Some(json!("1"))));
        let b = ids.insert(pending(2, Some(json!("1"))));
        assert_ne!(a, b);
        assert_eq!(ids.take(&b).unwrap().client, 2);
        assert_eq!(ids.take(&a).unwrap().original, Some(json!("1")));
        assert!(ids.take(&a).is_none(), "a response is delivered once");
    }

    #[test]
    fn acknowledged_requests_stay_pending_and_ids_are_per_client() {
        let mut ids = IdMap::default();
        let a = ids.insert(pending(1, Some(json!("w"))));
        assert!(ids.in_flight(1, &json!("w")));
        assert!(!ids.in_flight(2, &json!("w")), "another client's id");
        assert!(ids.ack(&a).is_some_and(|p| p.acked));
        assert!(ids.in_flight(1, &json!("w")), "still waiting for its done");
        assert!(ids.take(&a).is_some_and(|p| p.acked));
        assert!(!ids.in_flight(1, &json!("w")));
    }

    #[test]
    fn forgetting_and_draining() {
        let mut ids = IdMap::default();
        ids.insert(pending(1, None));
        ids.insert(pending(2, Some(json!(7))));
        ids.insert(pending(1, Some(json!("x"))));
        ids.forget_client(1);
        assert_eq!(ids.len(), 1);
        let left = ids.drain();
        assert_eq!(left.len(), 1);
        assert_eq!((left[0].client, &left[0].original), (2, &Some(json!(7))));
        assert!(ids.is_empty());
    }
}
