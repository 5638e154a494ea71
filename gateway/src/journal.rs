//! `corral journal check FILE` and `corral journal repair FILE`: judge a
//! session journal with the agent's own line format
//! (`corral_protocol::journal`) and, for one damaged by other means than
//! the agent's writes, keep the valid prefix and move the rest aside into a
//! new file. Nothing is ever deleted.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand};
use corral_protocol::journal::{scan, Damage};
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// `corral journal`.
#[derive(Debug, Args)]
pub struct JournalArgs {
    #[command(subcommand)]
    pub action: JournalAction,
}

#[derive(Debug, Subcommand)]
pub enum JournalAction {
    /// Exit 0 if every line of FILE is a whole journal entry, else 1 and the
    /// first line that is not.
    Check { file: PathBuf },
    /// Keep the entries before the first bad line; move the rest into
    /// FILE.damaged-UNIXTIME (named in the output). Refused while an agent
    /// holds the journal.
    Repair { file: PathBuf },
}

/// Why a journal could not be checked or repaired.
#[derive(Debug, thiserror::Error)]
pub enum JournalToolError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("{path} is in use by a running agent; stop its project before repairing it")]
    InUse { path: PathBuf },
}

/// What [`check`] found.
#[derive(Debug, PartialEq)]
pub struct Verdict {
    /// Whole entries before the damage (or in the file).
    pub entries: usize,
    /// Bytes of those entries.
    pub valid_len: u64,
    pub damage: Option<Damage>,
}

/// What [`repair`] did.
#[derive(Debug, PartialEq)]
pub enum Repair {
    /// Every line was whole; the file is untouched.
    Clean { entries: usize },
    Repaired {
        /// Entries kept in the journal.
        kept: usize,
        /// The first line moved aside, and why it was bad.
        damage: Damage,
        /// Where the rest went, and how many bytes.
        aside: PathBuf,
        moved: u64,
    },
}

/// Reads `path` to the first line that is not a whole entry.
pub fn check(path: &Path) -> Result<Verdict, JournalToolError> {
    let file = File::open(path).map_err(io_at(path))?;
    verdict(path, &file)
}

fn verdict(path: &Path, file: &File) -> Result<Verdict, JournalToolError> {
    let scanned = scan(BufReader::new(file), |_| {}).map_err(io_at(path))?;
    Ok(Verdict {
        entries: scanned.entries,
        valid_len: scanned.valid_len,
        damage: scanned.damage,
    })
}

/// Moves everything from the first bad line on into a new file beside
/// `path` (suffix `.damaged-{now}`), synced before the journal is cut to
/// its valid prefix. Holds the journal's lock throughout, as an agent does.
pub fn repair(path: &Path, now: u64) -> Result<Repair, JournalToolError> {
    let at = io_at(path);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(&at)?;
    let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(locked) => locked,
        Err((_, Errno::EWOULDBLOCK)) => {
            return Err(JournalToolError::InUse {
                path: path.to_path_buf(),
            })
        }
        Err((_, errno)) => return Err(at(io::Error::from(errno))),
    };
    let verdict = verdict(path, &file)?;
    let Some(damage) = verdict.damage else {
        return Ok(Repair::Clean {
            entries: verdict.entries,
        });
    };
    let (aside_path, mut aside) = create_aside(path, now)?;
    file.seek(SeekFrom::Start(verdict.valid_len)).map_err(&at)?;
    let moved = io::copy(&mut *file, &mut aside).map_err(io_at(&aside_path))?;
    aside.sync_all().map_err(io_at(&aside_path))?;
    sync_dir(path)?;
    file.set_len(verdict.valid_len).map_err(&at)?;
    file.sync_all().map_err(&at)?;
    Ok(Repair::Repaired {
        kept: verdict.entries,
        damage,
        aside: aside_path,
        moved,
    })
}

/// A new file `PATH.damaged-NOW` (or `…-NOW-2`, `-3`, … when taken).
fn create_aside(path: &Path, now: u64) -> Result<(PathBuf, File), JournalToolError> {
    let mut n = 1;
    loop {
        let mut name = path.as_os_str().to_owned();
        name.push(format!(".damaged-{now}"));
        if n > 1 {
            name.push(format!("-{n}"));
        }
        let aside = PathBuf::from(name);
        match OpenOptions::new().write(true).create_new(true).open(&aside) {
            Ok(file) => return Ok((aside, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
            Err(e) => return Err(io_at(&aside)(e)),
        }
    }
}

/// Makes the new file's directory entry durable.
fn sync_dir(path: &Path) -> Result<(), JournalToolError> {
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

fn io_at(path: &Path) -> impl Fn(io::Error) -> JournalToolError + '_ {
    move |source| JournalToolError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Runs the subcommand; the report goes to stdout. Returns the exit code.
#[allow(clippy::print_stdout)]
pub fn run(args: JournalArgs, now: u64) -> Result<i32, JournalToolError> {
    match args.action {
        JournalAction::Check { file } => {
            let verdict = check(&file)?;
            let path = file.display();
            match verdict.damage {
                None => {
                    println!("{path}: ok, {} entries", verdict.entries);
                    Ok(0)
                }
                Some(damage) => {
                    println!(
                        "{path}: {damage} ({} whole entries before it); {}",
                        verdict.entries,
                        consequence(&damage)
                    );
                    Ok(1)
                }
            }
        }
        JournalAction::Repair { file } => {
            let path = file.display();
            match repair(&file, now)? {
                Repair::Clean { entries } => {
                    println!("{path}: ok, {entries} entries; nothing to repair");
                }
                Repair::Repaired {
                    kept,
                    damage,
                    aside,
                    moved,
                } => println!(
                    "{path}: {damage}; kept the {kept} entries before it; moved {moved} bytes from line {} on to {}",
                    damage.line(),
                    aside.display()
                ),
            }
            Ok(0)
        }
    }
}

/// What the agent does with a journal damaged this way.
fn consequence(damage: &Damage) -> &'static str {
    match damage {
        Damage::Torn { .. } => "the agent drops that line when it starts",
        Damage::Bad { .. } => {
            "the agent refuses to start on it; `corral journal repair` keeps the entries before it"
        }
    }
}

#[cfg(test)]
#[path = "journal_tests.rs"]
mod tests;
