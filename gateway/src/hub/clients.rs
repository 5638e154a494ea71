//! The clients attached to one hub, by [`ClientId`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use tokio::sync::mpsc;

use super::budget::ClientBudget;
use super::client_id::ClientId;
use super::feed::Unicast;
use super::ClientInfo;
use crate::access::Identity;
use crate::auth::Role;

/// An attached client.
pub(super) struct Client {
    /// Who the client's credential proves, and where it connects from.
    pub who: Arc<Identity>,
    pub peer: Option<IpAddr>,
    pub role: Role,
    /// The client id its runs are attributed to: its own, or the one of
    /// an earlier connection it resumes (`client_id` in its hello).
    pub owner: ClientId,
    pub unicast: mpsc::Sender<Unicast>,
    /// The bytes waiting for it; frames for it are charged here.
    pub budget: Arc<ClientBudget>,
    /// The client's delivery cursor, for its lag.
    pub cursor: Arc<AtomicU64>,
    /// It follows the project's session: it gets events and the child's
    /// requests. Always, in a dialect without a session the clients open
    /// ([`crate::dialect::rules::OneSession`]); there, from its opening
    /// until it closes it.
    pub in_session: bool,
    /// A load of the conversation is under way for it (one at a time).
    pub loading: bool,
    /// A `session/list` is being read for it (one at a time: each reads
    /// the projects root off the hub's loop).
    pub listing: Arc<std::sync::atomic::AtomicBool>,
    /// Where its hello said it resumes (`resume_after`), for a resume
    /// that names no point of its own.
    pub resume_after: Option<u64>,
}

/// The clients of one hub. A client is here from the moment its attach
/// is answered until it detaches or the hub lets it go; once removed, it
/// is gone for good (its id is never issued again).
#[derive(Default)]
pub(super) struct Clients {
    attached: HashMap<ClientId, Client>,
}

impl Clients {
    pub fn get(&self, id: ClientId) -> Option<&Client> {
        self.attached.get(&id)
    }

    pub fn get_mut(&mut self, id: ClientId) -> Option<&mut Client> {
        self.attached.get_mut(&id)
    }

    pub fn insert(&mut self, id: ClientId, client: Client) {
        self.attached.insert(id, client);
    }

    /// Removes a client; `None` when it was not attached (any more).
    pub fn remove(&mut self, id: ClientId) -> Option<Client> {
        self.attached.remove(&id)
    }

    pub fn is_empty(&self) -> bool {
        self.attached.is_empty()
    }

    pub fn len(&self) -> usize {
        self.attached.len()
    }

    /// Every attached client's id, in id order.
    /// The clients that follow the session.
    pub fn in_session(&self) -> Vec<ClientId> {
        let mut ids: Vec<ClientId> = self
            .attached
            .iter()
            .filter(|(_, c)| c.in_session)
            .map(|(id, _)| *id)
            .collect();
        ids.sort();
        ids
    }

    #[cfg(test)]
    pub fn ids(&self) -> Vec<ClientId> {
        let mut ids: Vec<ClientId> = self.attached.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Removes every client.
    pub fn drain(&mut self) -> impl Iterator<Item = Client> + '_ {
        self.attached.drain().map(|(_, client)| client)
    }

    /// The clients as the admin API lists them.
    pub fn infos(&self) -> Vec<ClientInfo> {
        self.attached
            .iter()
            .map(|(id, c)| ClientInfo {
                client: *id,
                role: c.role,
                cursor: c.cursor.clone(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::budget::Budgets;
    use crate::metrics::Metrics;

    fn client(role: Role, owner: ClientId) -> (Client, mpsc::Receiver<Unicast>) {
        let budgets = Budgets::new(1024, 4096, Arc::new(Metrics::new().unwrap()));
        let (unicast, rx) = mpsc::channel(4);
        let client = Client {
            who: Arc::new(Identity::gateway()),
            peer: None,
            role,
            owner,
            unicast,
            budget: budgets.client(),
            cursor: Arc::new(AtomicU64::new(0)),
            in_session: true,
            loading: false,
            listing: Arc::default(),
            resume_after: None,
        };
        (client, rx)
    }

    #[test]
    fn a_removed_client_is_gone_and_the_rest_stay_listed() {
        let mut clients = Clients::default();
        let (a, b) = (ClientId::mint(), ClientId::mint());
        let (first, _rx_a) = client(Role::Client, a);
        let (second, _rx_b) = client(Role::Observer, ClientId::named(7));
        clients.insert(a, first);
        clients.insert(b, second);
        assert_eq!(clients.ids(), [a, b]);
        assert_eq!(clients.get(b).map(|c| c.owner), Some(ClientId::named(7)));
        assert!(clients.remove(a).is_some());
        assert!(clients.remove(a).is_none(), "removed once");
        assert!(clients.get(a).is_none());
        let infos = clients.infos();
        assert_eq!(infos.len(), 1);
        assert_eq!((infos[0].client, infos[0].role), (b, Role::Observer));
        assert_eq!(clients.drain().count(), 1);
        assert!(clients.is_empty());
        assert_eq!(clients.len(), 0);
    }
}
