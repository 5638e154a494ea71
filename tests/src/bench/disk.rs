//! What creating a file costs on the disk of the temporary directory,
//! against renaming a file made earlier into place (what the gateway does
//! with its files made ahead), in a new directory. On ext4 a creation
//! allocates an inode, and how long that takes depends on the disk's
//! history (where the free inodes are, what was freed recently): on the
//! project's machine it ranged from ~0.02 ms to over 1 ms per file. A
//! rename allocates nothing.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::stats::Latency;

/// Files created (and renamed) per run.
pub const SAMPLES: usize = 200;
/// Pause between two of them, so the measure spans the better part of a
/// second rather than a burst.
const BETWEEN: Duration = Duration::from_millis(2);

/// Creation and rename, each timed with the open of the file.
pub struct Files {
    pub created: Option<Latency>,
    pub renamed: Option<Latency>,
}

/// `SAMPLES` files created in a new directory under `dir`, alternating
/// with as many made beforehand (in another directory) and renamed into
/// it.
pub fn measure(dir: &Path) -> anyhow::Result<Files> {
    let ahead = dir.join("ahead");
    std::fs::create_dir(&ahead).context("create a directory")?;
    let made: Vec<PathBuf> = (0..SAMPLES)
        .map(|n| {
            let path = ahead.join(format!(".ahead-{n}"));
            File::create(&path).context("create a file")?;
            Ok(path)
        })
        .collect::<anyhow::Result<_>>()?;
    let new = dir.join("new");
    std::fs::create_dir(&new).context("create a directory")?;
    let append = || {
        let mut options = File::options();
        options.append(true);
        options
    };
    let (mut created, mut renamed) = (Vec::new(), Vec::new());
    for (n, from) in made.iter().enumerate() {
        let began = Instant::now();
        append()
            .create(true)
            .open(new.join(format!("c{n}.jsonl")))
            .context("create a file")?;
        created.push(began.elapsed());
        let to = new.join(format!("r{n}.jsonl"));
        let began = Instant::now();
        std::fs::rename(from, &to).context("rename a file")?;
        append().open(&to).context("open a renamed file")?;
        renamed.push(began.elapsed());
        std::thread::sleep(BETWEEN);
    }
    Ok(Files {
        created: Latency::of(created),
        renamed: Latency::of(renamed),
    })
}
