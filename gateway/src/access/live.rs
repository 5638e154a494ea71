//! The sessions each credential holds open, so that revoking a credential
//! closes every socket it opened: a session registers a [`Ticket`] under
//! its identity's key, waits on [`Ticket::revoked`] beside its work, and
//! says [`Ticket::closed`] once its close frame is sent. [`Live::revoke`]
//! signals every ticket of a key and returns when each has closed (or a
//! bound has passed), so the revoking request can answer after the closes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// One session's signals.
#[derive(Debug, Default)]
struct Session {
    /// Set by a revocation.
    revoked: CancellationToken,
    /// Set by the session once its close is sent (or when it ends).
    closed: CancellationToken,
}

/// The open sessions, by credential key.
#[derive(Debug, Default)]
pub struct Live {
    sessions: Mutex<HashMap<String, HashMap<u64, Arc<Session>>>>,
    next: AtomicU64,
}

/// A session's place in [`Live`], removed when dropped.
#[derive(Debug)]
pub struct Ticket {
    live: Arc<Live>,
    key: String,
    id: u64,
    session: Arc<Session>,
}

impl Live {
    /// Registers a session of the credential `key`.
    pub fn register(self: &Arc<Self>, key: String) -> Ticket {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let session = Arc::new(Session::default());
        let mut sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions
            .entry(key.clone())
            .or_default()
            .insert(id, session.clone());
        Ticket {
            live: self.clone(),
            key,
            id,
            session,
        }
    }

    /// Sessions open with the credential `key`.
    pub fn count(&self, key: &str) -> usize {
        let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.get(key).map_or(0, HashMap::len)
    }

    /// Tells every session of `key` to close and waits until each has
    /// sent its close, at most `wait` in all. Returns how many there were.
    pub async fn revoke(&self, key: &str, wait: Duration) -> usize {
        let signalled: Vec<Arc<Session>> = {
            let sessions = self.sessions.lock().unwrap_or_else(PoisonError::into_inner);
            sessions
                .get(key)
                .map(|open| open.values().cloned().collect())
                .unwrap_or_default()
        };
        for session in &signalled {
            session.revoked.cancel();
        }
        let all_closed = async {
            for session in &signalled {
                session.closed.cancelled().await;
            }
        };
        if tokio::time::timeout(wait, all_closed).await.is_err() {
            tracing::warn!(
                credential = key,
                "not every session closed within {} s of the revocation",
                wait.as_secs()
            );
        }
        signalled.len()
    }
}

impl Ticket {
    /// Completes when the credential is revoked.
    pub async fn revoked(&self) {
        self.session.revoked.cancelled().await;
    }

    /// Says the session's close has been sent.
    pub fn closed(&self) {
        self.session.closed.cancel();
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        self.session.closed.cancel();
        let mut sessions = self
            .live
            .sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(open) = sessions.get_mut(&self.key) {
            open.remove(&self.id);
            if open.is_empty() {
                sessions.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_revocation_waits_for_every_close_of_its_key_only() {
        let live = Arc::new(Live::default());
        let tickets: Vec<Ticket> = (0..3).map(|_| live.register("managed:a".into())).collect();
        let other = live.register("managed:b".into());
        assert_eq!(live.count("managed:a"), 3);
        let closer = tokio::spawn(async move {
            for ticket in &tickets {
                ticket.revoked().await;
                ticket.closed();
            }
            tickets
        });
        assert_eq!(live.revoke("managed:a", Duration::from_secs(60)).await, 3);
        let tickets = closer.await.unwrap();
        drop(tickets);
        assert_eq!(live.count("managed:a"), 0);
        assert_eq!(live.count("managed:b"), 1);
        assert!(
            tokio::time::timeout(Duration::from_millis(1), other.revoked())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_that_never_closes_does_not_hold_the_revocation() {
        let live = Arc::new(Live::default());
        let _stuck = live.register("jwt:x".into());
        assert_eq!(live.revoke("jwt:x", Duration::from_secs(5)).await, 1);
        assert_eq!(live.revoke("jwt:none", Duration::from_secs(5)).await, 0);
    }
}
