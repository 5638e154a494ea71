//! Where spend and limits live, between runs and between gateways that
//! share one state directory (on a network file system too), with no
//! protocol between them but files replaced atomically:
//!
//! - `STATE/budgets/spent/<instance>.json` — one file per gateway process
//!   (`<instance>` is random, made at start), written only by it: its
//!   [`Tally`], replaced (temp file, flush, rename) when it changed, at
//!   most once per sync, and at least every [`HEARTBEAT`]. The total
//!   spend is the sum over every file, read again at each sync.
//! - `STATE/budgets/limits.json` — the admins' overrides and reset
//!   baselines, replaced whole by whichever gateway an admin asked; last
//!   writer wins.
//!
//! A file not written for [`STALE_AFTER`] (by the clock of the file
//! system, compared with a file just written) is a dead gateway's: a
//! starting gateway takes one over by renaming it to its own name, so
//! the count of files stays that of the gateways that ran at once, and
//! its spend is never counted twice nor dropped (a rename is atomic, and
//! only one of several gateways starting at once wins it; the taker
//! writes the file again at once, so the next one to start sees it
//! live: only two starts within those milliseconds could both take it,
//! which would count its spend twice, never less). A gateway
//! that finds its own file taken (it was stopped longer than
//! [`STALE_AFTER`]) starts a new file with only what it counted since.

use std::collections::{HashMap, HashSet};
use std::io::Read as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use super::tally::{Limits, Tally};
use crate::statefs::{self, Dir, StateFsError};

/// Longest a live gateway leaves its file unwritten.
pub const HEARTBEAT: Duration = Duration::from_secs(60);
/// A file not written for this long is a dead gateway's.
pub const STALE_AFTER: Duration = Duration::from_secs(15 * 60);
/// Largest spend or limits file read; a larger one is left out (logged).
pub const MAX_FILE_BYTES: u64 = 64 << 20;
/// Most files of `STATE/budgets/spent` read.
pub const MAX_SPENT_FILES: usize = 10_000;

const LIMITS: &str = "limits.json";

/// Why the budgets' files cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SpendError {
    #[error(transparent)]
    Fs(#[from] StateFsError),
    #[error("{path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("cannot make the gateway's instance id: {0}")]
    Random(#[from] crate::auth::RandomError),
    #[error(transparent)]
    Lost(#[from] crate::offload::WorkLost),
}

/// A spend file as written.
#[derive(Serialize, Deserialize)]
struct SpentFile {
    #[serde(default)]
    version: u32,
    #[serde(flatten)]
    tally: Tally,
}

/// What says a file changed: its inode, size and modification time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Stamp {
    ino: u64,
    len: u64,
    modified: Option<SystemTime>,
}

fn stamp(file: &std::fs::File) -> std::io::Result<Stamp> {
    use std::os::unix::fs::MetadataExt as _;
    let meta = file.metadata()?;
    Ok(Stamp {
        ino: meta.ino(),
        len: meta.len(),
        modified: meta.modified().ok(),
    })
}

/// The files of one gateway process.
#[derive(Debug)]
pub struct Store {
    /// `STATE/budgets`.
    budgets: Dir,
    /// `STATE/budgets/spent`.
    spent: Dir,
    /// This process's id: its file is `spent/<instance>.json`.
    instance: String,
    /// What the own file holds, as last written.
    written: Tally,
    /// When the own file was last written.
    last_write: Instant,
    /// The other gateways' files as last read, by name.
    cache: HashMap<String, (Stamp, Tally)>,
    /// Files found unreadable (name and stamp), logged once each.
    warned: HashSet<(String, Option<SystemTime>)>,
}

/// A fresh instance id: 16 random hex digits.
fn new_instance() -> Result<String, SpendError> {
    let mut token = crate::auth::random_token()?;
    token.truncate(16);
    Ok(token)
}

/// The instance a name in `spent/` is the file of.
fn instance_of(name: &str) -> Option<&str> {
    let id = name.strip_suffix(".json")?;
    let hex = |b: u8| b.is_ascii_digit() || (b'a'..=b'f').contains(&b);
    (!id.is_empty() && id.len() <= 64 && id.bytes().all(hex)).then_some(id)
}

fn file_name(instance: &str) -> String {
    format!("{instance}.json")
}

/// Reads a whole file of at most [`MAX_FILE_BYTES`].
fn read_bounded(dir: &Dir, name: &str) -> Result<(Stamp, String), SpendError> {
    let path = || dir.path().join(name).display().to_string();
    let file = dir.read_file(name)?;
    let stamp = stamp(&file).map_err(|e| statefs::io_error(dir.path().join(name), &e))?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| SpendError::Unreadable {
            path: path(),
            reason: e.to_string(),
        })?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(SpendError::Unreadable {
            path: path(),
            reason: format!("larger than {MAX_FILE_BYTES} bytes"),
        });
    }
    Ok((stamp, text))
}

fn parse<T: serde::de::DeserializeOwned>(
    dir: &Dir,
    name: &str,
    text: &str,
) -> Result<T, SpendError> {
    serde_json::from_str(text).map_err(|e| SpendError::Unreadable {
        path: dir.path().join(name).display().to_string(),
        reason: e.to_string(),
    })
}

/// Whether `name` was last written [`STALE_AFTER`] or more before `now`.
fn is_stale(dir: &Dir, name: &str, now: SystemTime) -> bool {
    dir.read_file(name)
        .ok()
        .and_then(|file| stamp(&file).ok())
        .and_then(|s| s.modified)
        .and_then(|modified| now.duration_since(modified).ok())
        .is_some_and(|age| age >= STALE_AFTER)
}

/// Removes the temporary files of writes a crash interrupted.
fn remove_stale_temporaries(dir: &Dir, now: SystemTime) -> Result<(), SpendError> {
    for name in dir.names(MAX_SPENT_FILES)? {
        if name.ends_with(".tmp") && is_stale(dir, &name, now) {
            let _ = dir.remove_file(&name);
        }
    }
    Ok(())
}

impl Store {
    /// Makes `STATE/budgets/spent` if missing, starts this process's file
    /// (taking over one dead gateway's, if any) and returns the store with
    /// the counts that file holds.
    pub fn open(state_dir: &Path) -> Result<(Store, Tally), SpendError> {
        let budgets = Dir::open_root(state_dir)?.subdir("budgets", 0o755)?;
        let spent = budgets.subdir("spent", 0o755)?;
        let mut store = Store {
            budgets,
            spent,
            instance: new_instance()?,
            written: Tally::default(),
            last_write: Instant::now(),
            cache: HashMap::new(),
            warned: HashSet::new(),
        };
        store.write(&Tally::default())?;
        let own = store.take_over_a_dead_file()?;
        Ok((store, own))
    }

    /// The id of this process's file.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Renames one dead gateway's file to this process's (whose file,
    /// just written, gives the file system's time); returns what it holds.
    fn take_over_a_dead_file(&mut self) -> Result<Tally, SpendError> {
        let own = file_name(&self.instance);
        let now = read_bounded(&self.spent, &own)?.0.modified;
        let Some(now) = now else {
            return Ok(Tally::default());
        };
        remove_stale_temporaries(&self.budgets, now)?;
        remove_stale_temporaries(&self.spent, now)?;
        for name in self.spent.names(MAX_SPENT_FILES)? {
            if name == own || instance_of(&name).is_none() || !is_stale(&self.spent, &name, now) {
                continue;
            }
            match self.spent.rename(&name, &own) {
                Ok(()) => {}
                // Another gateway starting took it first.
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            }
            let (_, text) = read_bounded(&self.spent, &own)?;
            let tally = match parse::<SpentFile>(&self.spent, &own, &text) {
                Ok(file) => file.tally,
                Err(e) => {
                    tracing::warn!(error = %e, "budgets: a dead gateway's spend file is unreadable; its spend is no longer counted");
                    Tally::default()
                }
            };
            tracing::info!(file = %name, "budgets: took over a stopped gateway's spend file");
            // Written again at once, so that it no longer looks dead to
            // the next gateway that starts.
            self.write(&tally)?;
            return Ok(tally);
        }
        Ok(Tally::default())
    }

    fn write(&mut self, tally: &Tally) -> Result<(), SpendError> {
        let file = SpentFile {
            version: 1,
            tally: tally.clone(),
        };
        let text = serde_json::to_string(&file).map_err(|e| SpendError::Unreadable {
            path: file_name(&self.instance),
            reason: e.to_string(),
        })?;
        let name = file_name(&self.instance);
        self.spent
            .replace_file_durably(&name, &format!("{name}.tmp"), &format!("{text}\n"))?;
        self.written = tally.clone();
        self.last_write = Instant::now();
        Ok(())
    }

    /// Writes `own` if it changed since the last write or the heartbeat is
    /// due. If another gateway took this process's file (it took it for
    /// a dead one's), writes the rest to a new file and returns what
    /// the other took.
    pub fn write_own(&mut self, own: &Tally) -> Result<Option<Tally>, SpendError> {
        if *own == self.written && self.last_write.elapsed() < HEARTBEAT {
            return Ok(None);
        }
        let taken = match self.spent.read_file(&file_name(&self.instance)) {
            Err(e) if e.is_not_found() => {
                let taken = std::mem::take(&mut self.written);
                self.instance = new_instance()?;
                tracing::warn!(instance = %self.instance, "budgets: another gateway took this one's spend file (this gateway was stopped for more than {}s); counting on in a new file", STALE_AFTER.as_secs());
                Some(taken)
            }
            _ => None,
        };
        let mut rest = own.clone();
        if let Some(taken) = &taken {
            rest.subtract(taken);
        }
        self.write(&rest)?;
        Ok(taken)
    }

    /// The sum of every other gateway's file (unchanged files are not
    /// read again). An unreadable file is left out and logged once.
    pub fn read_others(&mut self) -> Result<Tally, SpendError> {
        let own = file_name(&self.instance);
        let names: Vec<String> = self
            .spent
            .names(MAX_SPENT_FILES)?
            .into_iter()
            .filter(|name| *name != own && instance_of(name).is_some())
            .collect();
        self.cache.retain(|name, _| names.contains(name));
        let mut sum = Tally::default();
        for name in names {
            let file = match self.spent.read_file(&name) {
                Ok(file) => file,
                // Taken over or replaced between the listing and now.
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            };
            let now = stamp(&file).ok();
            if let Some((seen, tally)) = self.cache.get(&name) {
                if Some(*seen) == now {
                    sum.absorb(tally);
                    continue;
                }
            }
            let read = read_bounded(&self.spent, &name).and_then(|(stamp, text)| {
                Ok((stamp, parse::<SpentFile>(&self.spent, &name, &text)?))
            });
            match read {
                Ok((stamp, file)) => {
                    sum.absorb(&file.tally);
                    self.cache.insert(name, (stamp, file.tally));
                }
                Err(SpendError::Fs(e)) if e.is_not_found() => {}
                Err(e) => {
                    if self.warned.insert((name, now.and_then(|s| s.modified))) {
                        tracing::warn!(error = %e, "budgets: a spend file is unreadable; its spend is not counted");
                    }
                }
            }
        }
        Ok(sum)
    }

    /// `limits.json` (none yet: no limits set).
    pub fn read_limits(&self) -> Result<Limits, SpendError> {
        match read_bounded(&self.budgets, LIMITS) {
            Ok((_, text)) => parse(&self.budgets, LIMITS, &text),
            Err(SpendError::Fs(e)) if e.is_not_found() => Ok(Limits::default()),
            Err(e) => Err(e),
        }
    }

    /// Replaces `limits.json`.
    pub fn write_limits(&self, limits: &Limits) -> Result<(), SpendError> {
        let text = serde_json::to_string_pretty(limits).map_err(|e| SpendError::Unreadable {
            path: LIMITS.into(),
            reason: e.to_string(),
        })?;
        let tmp = format!("{LIMITS}.{}.tmp", self.instance);
        self.budgets
            .replace_file_durably(LIMITS, &tmp, &format!("{text}\n"))?;
        Ok(())
    }
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
