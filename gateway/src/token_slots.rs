//! `--max-connections-per-token`: how many WebSocket sessions one
//! credential may hold open at once, so that one token (a leaked one, or
//! a buggy client reconnecting in a loop) cannot take every place under
//! `--max-connections`. Pure logic plus a guard that frees the place.
//!
//! Sessions are counted per [`Credential`]: a keyed hash of the token,
//! with a key drawn at start, so the table never holds a token and its
//! entries cannot be matched to tokens outside this process. Only
//! authenticated sessions are counted, so the table holds at most one
//! entry per configured token.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::{Arc, Mutex, PoisonError};

/// Which credential a session authenticated with (never the token).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Credential(u64);

/// A session refused because its credential holds `max` already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this token already has {max} connections open (--max-connections-per-token); close one or try again later"
)]
pub struct TokenFull {
    pub max: usize,
}

/// Open sessions per credential.
#[derive(Debug)]
pub struct TokenSlots {
    /// Most sessions per credential; `None` = unlimited.
    max: Option<usize>,
    /// Keys [`Credential`]s; drawn once per process.
    key: RandomState,
    /// Open sessions per credential; an entry goes when its count is 0.
    open: Mutex<HashMap<Credential, usize>>,
}

impl TokenSlots {
    /// `max` sessions per credential; 0 = unlimited.
    pub fn new(max: usize) -> TokenSlots {
        TokenSlots {
            max: (max > 0).then_some(max),
            key: RandomState::new(),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The credential of `token` (a token already checked to be valid).
    pub fn credential(&self, token: &str) -> Credential {
        Credential(self.key.hash_one(token))
    }

    /// A place for one more session of `credential`, held until the
    /// returned guard drops.
    pub fn acquire(self: &Arc<Self>, credential: Credential) -> Result<TokenSlot, TokenFull> {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        let count = open.entry(credential).or_insert(0);
        if let Some(max) = self.max {
            if *count >= max {
                return Err(TokenFull { max });
            }
        }
        *count += 1;
        Ok(TokenSlot {
            slots: self.clone(),
            credential,
        })
    }

    /// Sessions `credential` holds now.
    pub fn open(&self, credential: Credential) -> usize {
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.get(&credential).copied().unwrap_or(0)
    }

    fn release(&self, credential: Credential) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = open.get_mut(&credential) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&credential);
            }
        }
    }
}

/// One session's place under its credential's cap; freed on drop.
#[derive(Debug)]
pub struct TokenSlot {
    slots: Arc<TokenSlots>,
    credential: Credential,
}

impl Drop for TokenSlot {
    fn drop(&mut self) {
        self.slots.release(self.credential);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "token-a-0123456789abcdef";
    const B: &str = "token-b-0123456789abcdef";

    #[test]
    fn a_credential_holds_at_most_max_sessions_and_a_close_frees_one() {
        let slots = Arc::new(TokenSlots::new(2));
        let a = slots.credential(A);
        let first = slots.acquire(a).unwrap();
        let _second = slots.acquire(a).unwrap();
        assert_eq!(slots.acquire(a).unwrap_err(), TokenFull { max: 2 });
        assert_eq!(slots.open(a), 2);
        drop(first);
        assert_eq!(slots.open(a), 1);
        let _third = slots.acquire(a).unwrap();
    }

    #[test]
    fn credentials_are_counted_apart() {
        let slots = Arc::new(TokenSlots::new(1));
        let (a, b) = (slots.credential(A), slots.credential(B));
        assert_ne!(a, b);
        assert_eq!(
            a,
            slots.credential(A),
            "the same token, the same credential"
        );
        let _a = slots.acquire(a).unwrap();
        assert!(slots.acquire(a).is_err());
        let _b = slots.acquire(b).unwrap();
    }

    #[test]
    fn zero_means_unlimited() {
        let slots = Arc::new(TokenSlots::new(0));
        let a = slots.credential(A);
        let held: Vec<_> = (0..1000).map(|_| slots.acquire(a).unwrap()).collect();
        assert_eq!(slots.open(a), 1000);
        drop(held);
        assert_eq!(slots.open(a), 0);
    }

    #[test]
    fn the_table_forgets_credentials_without_sessions() {
        let slots = Arc::new(TokenSlots::new(3));
        let a = slots.credential(A);
        drop(slots.acquire(a).unwrap());
        assert!(slots.open.lock().unwrap().is_empty());
        // Nothing is left behind by a refusal either.
        let full = Arc::new(TokenSlots::new(1));
        let held = full.acquire(a).unwrap();
        assert!(full.acquire(a).is_err());
        drop(held);
        assert!(full.open.lock().unwrap().is_empty());
    }

    #[test]
    fn separate_tables_key_tokens_differently() {
        // The credential says nothing about the token outside its table.
        let (one, two) = (TokenSlots::new(1), TokenSlots::new(1));
        assert_ne!(one.credential(A), two.credential(A));
    }
}
