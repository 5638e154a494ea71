//! Managed tokens: made and revoked at run time through the admin API,
//! kept in `STATE/tokens/NAME.json` as their SHA-256 digest and what they
//! grant (never the token), so they survive restarts and every gateway
//! sharing the state directory honours them.
//!
//! Several gateways may write the directory at once, over a network file
//! system: each token is one file, made with `link(2)` from a unique
//! temporary file (exactly one of two creators of a name wins) and revoked
//! by removing it. Every gateway re-reads the directory when its
//! modification time changes, or while that time is too recent to trust
//! (a second change within one tick of the file system's clock leaves it
//! as it was), checked every [`POLL`]: a token made or revoked elsewhere
//! counts here within that period (plus the file system's attribute
//! caching). There is no lock and no cluster protocol.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::net::IpAddr;
use std::path::Path;
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{digest, Identity, Kind, ProjectScope};
use crate::auth::Role;
use crate::statefs::{self, StateFsError};

/// The directory under the state directory.
pub const DIR: &str = "tokens";
/// How often the directory is checked for changes made elsewhere.
pub const POLL: Duration = Duration::from_secs(1);
/// Most managed tokens; a create beyond is refused.
pub const MAX_TOKENS: usize = 10_000;
/// Largest token file read (a record is a few hundred bytes).
const MAX_FILE_BYTES: u64 = 16 * 1024;
/// A directory modification time this close to now (or later) is not
/// trusted to say "unchanged" next time: another change within the same
/// tick of the file system's clock (a jiffy locally, up to a second on
/// some NFS servers) leaves it as it was, and that change (a revocation)
/// would never be read. Gateways and the file server are assumed to keep
/// their clocks within this of each other (NTP).
const RACY: Duration = Duration::from_secs(2);

/// One managed token as kept: what it grants, and the digest of its secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub name: String,
    /// SHA-256 of the token, 64 lower-case hex digits.
    pub sha256: String,
    pub role: Role,
    /// Project names and globs; empty opens nothing.
    pub projects: Vec<String>,
    /// Seconds since the epoch when it stops working; `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_usd: Option<f64>,
    /// Seconds since the epoch when it was made.
    pub created: u64,
    /// Who made it (an identity's name).
    pub created_by: String,
}

impl Record {
    /// The identity the token proves. An expiry the clock cannot hold
    /// makes the record invalid (adding it would panic, and a reload that
    /// panics would stop every later revocation from being seen).
    pub fn identity(&self) -> Result<Identity, String> {
        let scope = ProjectScope::parse(&self.projects).map_err(|e| e.to_string())?;
        let expires = match self.expires {
            Some(secs) => Some(
                UNIX_EPOCH
                    .checked_add(Duration::from_secs(secs))
                    .ok_or_else(|| format!("expires {secs} is beyond the clock's range"))?,
            ),
            None => None,
        };
        Ok(Identity {
            name: self.name.clone(),
            kind: Kind::Managed,
            role: self.role,
            scope,
            expires,
            budget_usd: self.budget_usd,
        })
    }

    fn digest(&self) -> Option<[u8; 32]> {
        digest::parse(&self.sha256)
    }
}

/// Why a token could not be made or revoked.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("a token named {0:?} exists already")]
    Exists(String),
    #[error("no managed token is named {0:?}")]
    NotFound(String),
    #[error("there are {MAX_TOKENS} managed tokens already; revoke some first")]
    Full,
    #[error("{0}")]
    Io(#[from] StateFsError),
    #[error("cannot write the token record: {0}")]
    Encode(String),
}

/// Where a token was last used from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastUse {
    pub at: SystemTime,
    pub from: IpAddr,
}

#[derive(Debug, Default)]
struct Loaded {
    by_digest: HashMap<[u8; 32], Identity>,
    records: BTreeMap<String, Record>,
    /// The directory's modification time when it was read; `None` when
    /// it was too recent to trust (see `RACY`), so the next look reads
    /// again.
    stamp: Option<(i64, u64)>,
}

/// The managed tokens, as last read from `STATE/tokens`.
#[derive(Debug)]
pub struct Store {
    dir: statefs::Dir,
    loaded: RwLock<Loaded>,
    /// Last use of each token on this gateway since it started.
    used: Mutex<HashMap<String, LastUse>>,
    /// Tokens found gone by any read (a create's or a revoke's too) and
    /// not yet reported by [`Store::reload`], so that no revocation made
    /// elsewhere escapes the follower that closes its sessions.
    gone: Mutex<Vec<String>>,
}

impl Store {
    /// Opens (making it if missing, mode 0700) `STATE/tokens` and reads it.
    pub fn open(state_dir: &Path) -> Result<Store, StateFsError> {
        let dir = statefs::Dir::open_root(state_dir)?.subdir(DIR, 0o700)?;
        let store = Store {
            dir,
            loaded: RwLock::new(Loaded::default()),
            used: Mutex::new(HashMap::new()),
            gone: Mutex::new(Vec::new()),
        };
        store.refresh()?;
        Ok(store)
    }

    /// The identity of the token whose digest is `digest`.
    pub fn find(&self, digest: &[u8; 32]) -> Option<Identity> {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded.by_digest.get(digest).cloned()
    }

    /// Whether a token named `name` is current.
    pub fn has(&self, name: &str) -> bool {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        loaded.records.contains_key(name)
    }

    /// Every token, read again if the directory changed (a token made or
    /// revoked on another gateway a moment ago included), with its last
    /// use here. Blocking file I/O: call off the event loop.
    pub fn current(&self) -> Result<Vec<(Record, Option<LastUse>)>, StateFsError> {
        self.refresh()?;
        Ok(self.list())
    }

    /// Every token as last read, with its last use here.
    pub fn list(&self) -> Vec<(Record, Option<LastUse>)> {
        let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
        let used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        loaded
            .records
            .values()
            .map(|r| (r.clone(), used.get(&r.name).copied()))
            .collect()
    }

    /// Notes that the token `name` was used from `from`.
    pub fn note_use(&self, name: &str, from: IpAddr, at: SystemTime) {
        let mut used = self.used.lock().unwrap_or_else(PoisonError::into_inner);
        used.insert(name.to_string(), LastUse { at, from });
    }

    /// Keeps a new token (blocking file I/O: call off the event loop).
    pub fn create(&self, record: &Record) -> Result<(), StoreError> {
        self.refresh()?;
        if self.has(&record.name) {
            return Err(StoreError::Exists(record.name.clone()));
        }
        if self.list().len() >= MAX_TOKENS {
            return Err(StoreError::Full);
        }
        let text =
            serde_json::to_string_pretty(record).map_err(|e| StoreError::Encode(e.to_string()))?;
        match self
            .dir
            .create_new_file(&file_name(&record.name), &format!("{text}\n"), 0o600)
        {
            Ok(()) => {}
            Err(e) if e.errno_is_exists() => return Err(StoreError::Exists(record.name.clone())),
            Err(e) => return Err(e.into()),
        }
        self.refresh()?;
        Ok(())
    }

    /// Forgets the token `name` (blocking file I/O: call off the event
    /// loop). Returns its record.
    pub fn revoke(&self, name: &str) -> Result<Record, StoreError> {
        self.revoke_if(name, |_| true)
    }

    /// Forgets the token `name` if its record, as read now (a token made
    /// on another gateway a moment ago included), passes `allowed`;
    /// a record that does not is answered as missing.
    pub fn revoke_if(
        &self,
        name: &str,
        allowed: impl FnOnce(&Record) -> bool,
    ) -> Result<Record, StoreError> {
        self.refresh()?;
        let record = {
            let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
            loaded.records.get(name).cloned()
        };
        let Some(record) = record.filter(|record| allowed(record)) else {
            return Err(StoreError::NotFound(name.to_string()));
        };
        match self.dir.remove_file(&file_name(name)) {
            Ok(()) => {}
            Err(e) if e.is_not_found() => return Err(StoreError::NotFound(name.to_string())),
            Err(e) => return Err(e.into()),
        }
        self.refresh()?;
        // The caller closes this token's sessions itself.
        self.pending_gone().retain(|gone| gone != name);
        Ok(record)
    }

    /// Reads the directory again if it changed; returns the names of the
    /// tokens that are gone since the last reload (revoked elsewhere),
    /// whichever read found them gone. Blocking file I/O: call off the
    /// event loop.
    pub fn reload(&self) -> Result<Vec<String>, StateFsError> {
        self.refresh()?;
        let mut gone = std::mem::take(&mut *self.pending_gone());
        gone.sort();
        gone.dedup();
        Ok(gone)
    }

    fn pending_gone(&self) -> std::sync::MutexGuard<'_, Vec<String>> {
        self.gone.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Reads the directory again if it changed, keeping the names of the
    /// tokens gone since the last read for [`Store::reload`].
    fn refresh(&self) -> Result<(), StateFsError> {
        let stamp = self.dir.modified()?;
        {
            let loaded = self.loaded.read().unwrap_or_else(PoisonError::into_inner);
            if loaded.stamp == Some(stamp) {
                return Ok(());
            }
        }
        let mut fresh = Loaded {
            stamp: (!racy(stamp, SystemTime::now())).then_some(stamp),
            ..Loaded::default()
        };
        let mut unread = Vec::new();
        for name in self.dir.names(2 * MAX_TOKENS)? {
            let Some(token) = name.strip_suffix(".json") else {
                continue;
            };
            if name.starts_with('.') {
                continue;
            }
            match self.read_record(&name) {
                Ok(Some(record)) if record.name == token => {
                    match (record.digest(), record.identity()) {
                        (Some(digest), Ok(identity)) => {
                            fresh.by_digest.insert(digest, identity);
                            fresh.records.insert(record.name.clone(), record);
                        }
                        _ => {
                            tracing::warn!(file = %name, "a managed token's record is invalid; it is ignored")
                        }
                    }
                }
                Ok(Some(_)) => {
                    tracing::warn!(file = %name, "a managed token's record names another token; it is ignored");
                }
                Ok(None) => {}
                Err(Unread::Bad(e)) => tracing::warn!("a managed token's record is ignored: {e}"),
                Err(Unread::Failed(e)) => {
                    tracing::warn!("cannot read a managed token now; it stays as last read: {e}");
                    unread.push(token.to_string());
                }
            }
        }
        let mut loaded = self.loaded.write().unwrap_or_else(PoisonError::into_inner);
        if !unread.is_empty() {
            keep_unread(&loaded, &mut fresh, &unread);
            fresh.stamp = None;
        }
        // Gone: no longer there, or there with another secret (revoked
        // and made again under its name: the old secret's sessions end).
        let gone = loaded
            .records
            .iter()
            .filter(|(name, old)| {
                fresh
                    .records
                    .get(*name)
                    .is_none_or(|new| new.digest() != old.digest())
            })
            .map(|(name, _)| name.clone());
        self.pending_gone().extend(gone);
        *loaded = fresh;
        Ok(())
    }

    /// One record; `None` when it went away meanwhile.
    fn read_record(&self, file: &str) -> Result<Option<Record>, Unread> {
        let opened = match self.dir.read_file(file) {
            Ok(opened) => opened,
            Err(e) if e.is_not_found() => return Ok(None),
            Err(e) if e.is_wrong_kind() => return Err(Unread::Bad(e.to_string())),
            Err(e) => return Err(Unread::Failed(e.to_string())),
        };
        let mut text = String::new();
        opened
            .take(MAX_FILE_BYTES)
            .read_to_string(&mut text)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidData => Unread::Bad(format!("{file}: {e}")),
                _ => Unread::Failed(format!("{file}: {e}")),
            })?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| Unread::Bad(format!("{file}: {e}")))
    }
}

/// Why a record was not read.
#[derive(Debug)]
enum Unread {
    /// The file is not a record (a link, a directory, not JSON): ignored.
    Bad(String),
    /// The system failed to read it (out of descriptors, an I/O error, a
    /// stale network handle): it says nothing about the token.
    Failed(String),
}

/// Keeps in `fresh`, as `previous` had them, the tokens whose record
/// could not be read just now: a passing failure (descriptors running
/// out under a flood of connections, a network file system's hiccup)
/// must not revoke them and close their sessions.
fn keep_unread(previous: &Loaded, fresh: &mut Loaded, unread: &[String]) {
    for name in unread {
        let Some(record) = previous.records.get(name) else {
            continue;
        };
        let Some(digest) = record.digest() else {
            continue;
        };
        if let Some(identity) = previous.by_digest.get(&digest) {
            fresh.by_digest.insert(digest, identity.clone());
            fresh.records.insert(name.clone(), record.clone());
        }
    }
}

/// Whether a directory modified at `stamp` may still change without its
/// modification time changing, seen at `now`.
fn racy((secs, nanos): (i64, u64), now: SystemTime) -> bool {
    let Ok(secs) = u64::try_from(secs) else {
        return false;
    };
    let modified = UNIX_EPOCH
        .checked_add(Duration::new(secs, 0))
        .and_then(|t| t.checked_add(Duration::from_nanos(nanos)));
    modified.is_none_or(|at| !matches!(now.duration_since(at), Ok(age) if age >= RACY))
}

fn file_name(token: &str) -> String {
    format!("{token}.json")
}

/// Seconds since the epoch.
pub fn epoch_secs(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::digest::{hex, sha256};

    fn record(name: &str, secret: &str) -> Record {
        Record {
            name: name.into(),
            sha256: hex(&sha256(secret)),
            role: Role::Client,
            projects: vec!["a-*".into()],
            expires: None,
            budget_usd: Some(1.5),
            created: 1,
            created_by: "admin-token-1".into(),
        }
    }

    #[test]
    fn tokens_are_kept_hashed_and_seen_by_a_second_reader() {
        let state = tempfile::tempdir().unwrap();
        let one = Store::open(state.path()).unwrap();
        let two = Store::open(state.path()).unwrap();
        one.create(&record("alice", "alice-secret-0123456789"))
            .unwrap();
        assert!(matches!(
            one.create(&record("alice", "other-secret-0123456789")),
            Err(StoreError::Exists(_))
        ));
        // Nothing on disk holds the secret.
        let kept = std::fs::read_to_string(state.path().join("tokens/alice.json")).unwrap();
        assert!(!kept.contains("alice-secret"), "{kept}");
        // The other reader sees it once it reads again.
        two.reload().unwrap();
        let who = two.find(&sha256("alice-secret-0123456789")).unwrap();
        assert_eq!((who.name.as_str(), who.kind), ("alice", Kind::Managed));
        assert!(who.sees("a-x") && !who.sees("b-x"));
        // Revoked through one, gone from the other.
        one.revoke("alice").unwrap();
        assert_eq!(two.reload().unwrap(), vec!["alice".to_string()]);
        assert!(two.find(&sha256("alice-secret-0123456789")).is_none());
        assert!(matches!(two.revoke("alice"), Err(StoreError::NotFound(_))));
    }

    /// A revocation made elsewhere is reported by the next reload even
    /// when this gateway read the directory in between for a create or a
    /// revoke of its own (the follower closes sessions only for what a
    /// reload reports).
    #[test]
    fn a_revocation_seen_while_making_another_token_is_still_reported() {
        let state = tempfile::tempdir().unwrap();
        let one = Store::open(state.path()).unwrap();
        let two = Store::open(state.path()).unwrap();
        one.create(&record("alice", "alice-secret-0123456789"))
            .unwrap();
        one.create(&record("carol", "carol-secret-0123456789"))
            .unwrap();
        two.reload().unwrap();
        one.revoke("alice").unwrap();
        two.create(&record("bob", "bob-secret-0123456789ab"))
            .unwrap();
        one.revoke("carol").unwrap();
        two.revoke("bob").unwrap();
        let mut gone = two.reload().unwrap();
        gone.sort();
        assert_eq!(gone, ["alice", "carol"]);
        assert!(two.reload().unwrap().is_empty());
    }

    /// A token revoked and made again under the same name elsewhere
    /// between two reads (a rotation) ends the sessions of the old
    /// secret: it is reported like a revocation.
    #[test]
    fn a_token_made_again_under_its_name_is_reported_gone() {
        let state = tempfile::tempdir().unwrap();
        let one = Store::open(state.path()).unwrap();
        let two = Store::open(state.path()).unwrap();
        one.create(&record("alice", "alice-secret-0123456789"))
            .unwrap();
        two.reload().unwrap();
        one.revoke("alice").unwrap();
        one.create(&record("alice", "rotated-secret-01234567"))
            .unwrap();
        assert_eq!(two.reload().unwrap(), ["alice"]);
        assert!(two.find(&sha256("alice-secret-0123456789")).is_none());
        assert!(two.find(&sha256("rotated-secret-01234567")).is_some());
    }

    /// A change in the same tick of the directory's clock as the read
    /// before it leaves the modification time as it was (coarse
    /// timestamps: a jiffy locally, a second on some NFS servers); it is
    /// still seen, because a time that recent is never trusted.
    #[test]
    fn a_revocation_within_the_same_timestamp_is_seen() {
        let state = tempfile::tempdir().unwrap();
        let dir = state.path().join("tokens");
        let one = Store::open(state.path()).unwrap();
        let two = Store::open(state.path()).unwrap();
        one.create(&record("alice", "alice-secret-0123456789"))
            .unwrap();
        two.reload().unwrap();
        assert!(two.has("alice"));
        let stamp = std::fs::metadata(&dir).unwrap().modified().unwrap();
        one.revoke("alice").unwrap();
        // As a coarse clock would have it: the same time as before.
        std::fs::File::open(&dir)
            .unwrap()
            .set_modified(stamp)
            .unwrap();
        assert_eq!(two.reload().unwrap(), ["alice"]);
        assert!(!two.has("alice"));
    }

    #[test]
    fn a_record_that_cannot_be_read_now_stays_as_last_read() {
        let alice = record("alice", "alice-secret-0123456789");
        let digest = sha256("alice-secret-0123456789");
        let mut previous = Loaded::default();
        previous.by_digest.insert(digest, alice.identity().unwrap());
        previous.records.insert("alice".into(), alice);
        let mut fresh = Loaded::default();
        keep_unread(
            &previous,
            &mut fresh,
            &["alice".into(), "never-read".into()],
        );
        assert_eq!(fresh.by_digest[&digest].name, "alice");
        assert_eq!(fresh.records.keys().collect::<Vec<_>>(), ["alice"]);
    }

    /// What is no record at all (a link, a directory, a FIFO) is ignored
    /// for good, not taken for a passing failure (which would keep its
    /// name and read the directory again at every poll).
    #[test]
    fn what_is_not_a_regular_file_is_bad_not_a_passing_failure() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::open(state.path()).unwrap();
        let tokens = state.path().join("tokens");
        std::fs::create_dir(tokens.join("dir.json")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", tokens.join("link.json")).unwrap();
        let fifo = tokens.join("fifo.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        for file in ["dir.json", "link.json", "fifo.json"] {
            let unread = store.read_record(file).unwrap_err();
            assert!(matches!(unread, Unread::Bad(_)), "{file}: {unread:?}");
        }
    }

    #[test]
    fn a_file_that_is_not_a_record_is_ignored() {
        let state = tempfile::tempdir().unwrap();
        let store = Store::open(state.path()).unwrap();
        std::fs::write(state.path().join("tokens/bad.json"), "{not json").unwrap();
        let mut other = record("other", "x-secret-0123456789ab");
        other.name = "someone-else".into();
        std::fs::write(
            state.path().join("tokens/other.json"),
            serde_json::to_string(&other).unwrap(),
        )
        .unwrap();
        store.reload().unwrap();
        assert!(store.list().is_empty());
    }

    /// A FIFO where a record should be (planted, or left by a tool) is
    /// skipped: opening it must not wait for a writer, which would hold a
    /// file-lane thread and every later reload for good.
    #[test]
    fn a_fifo_in_the_directory_does_not_hang_a_reload() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("tokens")).unwrap();
        let fifo = state.path().join("tokens/pipe.json");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (sender, opened) = std::sync::mpsc::channel();
        let path = state.path().to_path_buf();
        std::thread::spawn(move || sender.send(Store::open(&path).map(|s| s.list().len())));
        let answer = opened.recv_timeout(Duration::from_secs(60));
        if answer.is_err() {
            // Let the stuck open finish before failing.
            let _ = std::fs::OpenOptions::new().write(true).open(&fifo);
        }
        assert_eq!(answer.expect("the reload hung on a FIFO").unwrap(), 0);
    }

    #[test]
    fn an_expiry_beyond_the_clock_is_an_invalid_record_not_a_panic() {
        let state = tempfile::tempdir().unwrap();
        std::fs::create_dir(state.path().join("tokens")).unwrap();
        let mut far = record("far", "far-secret-0123456789ab");
        far.expires = Some(u64::MAX);
        std::fs::write(
            state.path().join("tokens/far.json"),
            serde_json::to_string(&far).unwrap(),
        )
        .unwrap();
        let store = Store::open(state.path()).unwrap();
        assert!(store.find(&sha256("far-secret-0123456789ab")).is_none());
    }
}
