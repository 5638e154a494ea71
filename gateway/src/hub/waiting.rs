//! What waits for the child to be ready: attaches (answered once it is,
//! or refused when it will not come) and clients' requests (forwarded in
//! the order they came, or failed). Pure state, no I/O.

use std::collections::VecDeque;

use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::client_id::ClientId;
use super::{AttachError, Attached, Join};

/// An attach that waits for the child to become ready.
pub(super) struct WaitingAttach {
    pub join: Join,
    pub reply: oneshot::Sender<Result<Attached, AttachError>>,
}

/// A request frame of a client, held until the child is ready.
pub(super) type WaitingRequest = (ClientId, Map<String, Value>);

/// Attaches and requests waiting for a ready child, each in arrival
/// order. A client that leaves takes its waiting requests with it.
#[derive(Default)]
pub(super) struct Waiting {
    attaches: Vec<WaitingAttach>,
    requests: VecDeque<WaitingRequest>,
}

impl Waiting {
    pub fn push_attach(&mut self, waiting: WaitingAttach) {
        self.attaches.push(waiting);
    }

    pub fn push_request(&mut self, client: ClientId, frame: Map<String, Value>) {
        self.requests.push_back((client, frame));
    }

    /// Whether an attach waits.
    pub fn has_attaches(&self) -> bool {
        !self.attaches.is_empty()
    }

    /// Every waiting attach, oldest first; none wait afterwards.
    pub fn take_attaches(&mut self) -> Vec<WaitingAttach> {
        std::mem::take(&mut self.attaches)
    }

    /// Every waiting request, oldest first; none wait afterwards.
    pub fn take_requests(&mut self) -> VecDeque<WaitingRequest> {
        std::mem::take(&mut self.requests)
    }

    /// How many of `client`'s requests wait.
    pub fn count_client(&self, client: ClientId) -> usize {
        self.requests.iter().filter(|(c, _)| *c == client).count()
    }

    /// Drops the requests of a client that left.
    pub fn forget_client(&mut self, client: ClientId) {
        self.requests.retain(|(c, _)| *c != client);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Role;
    use crate::dialect::OwnRuns;
    use serde_json::json;

    fn frame(id: u64) -> Map<String, Value> {
        json!({"id": id, "type": "ping"})
            .as_object()
            .unwrap()
            .clone()
    }

    #[test]
    fn requests_wait_in_order_and_leave_with_their_client() {
        let mut waiting = Waiting::default();
        let (a, b) = (ClientId::named(1), ClientId::named(2));
        waiting.push_request(a, frame(1));
        waiting.push_request(b, frame(2));
        waiting.push_request(a, frame(3));
        waiting.push_request(b, frame(4));
        waiting.forget_client(a);
        let left: Vec<_> = waiting
            .take_requests()
            .into_iter()
            .map(|(client, frame)| (client, frame["id"].clone()))
            .collect();
        assert_eq!(left, [(b, json!(2)), (b, json!(4))]);
        assert!(waiting.take_requests().is_empty(), "taken once");
    }

    #[test]
    fn attaches_are_taken_all_at_once() {
        let mut waiting = Waiting::default();
        assert!(!waiting.has_attaches());
        let (reply, _rx) = oneshot::channel();
        let join = Join {
            who: std::sync::Arc::new(crate::access::Identity::gateway()),
            peer: None,
            role: Role::Client,
            resume_after: None,
            hello: None,
            own_runs: OwnRuns::default(),
        };
        waiting.push_attach(WaitingAttach { join, reply });
        assert!(waiting.has_attaches());
        assert_eq!(waiting.take_attaches().len(), 1);
        assert!(!waiting.has_attaches());
    }
}
