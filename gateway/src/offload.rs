//! Blocking work off the event loop. The gateway runs one current-thread
//! runtime, so a `stat`, `open` or `rename` on a slow filesystem (session
//! journals on network storage) or a walk of `/proc` would stall every
//! connection and every project while it lasts. Such work runs here
//! instead: on tokio's blocking pool, in one of two lanes, each bounded
//! by a fixed number of jobs at once (more wait their turn without
//! blocking anything):
//!
//! - [`Lane::Files`] ([`MAX_FILE_JOBS`]): project lookups (a client's
//!   attach, an admin start, the admin `?all=true` listing) and a start's
//!   files (the project directory opened, the journal and home prepared,
//!   the kept session id read and written). Starts are further bounded by
//!   the spawner's start slots. A filesystem that hangs holds at most this
//!   many threads; lookups of other projects then wait, but nothing else
//!   does.
//! - [`Lane::Proc`] ([`MAX_PROC_JOBS`]): `/proc` and cgroup reads for
//!   `/metrics`, `/v1/stats` and the admin project list, so a host with
//!   many children (or a fork bomb's process tree) costs scrapes time,
//!   not the gateway's other work.
//!
//! The bounds are fixed rather than settings: they cap threads, not
//! work, and each job is already bounded by the request or start that
//! asked for it. `corral_blocking_jobs{lane,state}` shows how many run
//! and wait.

use std::sync::atomic::{AtomicI64, Ordering};

use tokio::sync::Semaphore;

/// Filesystem jobs that may run at once.
pub const MAX_FILE_JOBS: usize = 16;
/// `/proc` jobs that may run at once.
pub const MAX_PROC_JOBS: usize = 2;

/// Which bound a piece of blocking work counts against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Project directories and the state directory.
    Files,
    /// `/proc`, cgroup files and the metrics they feed.
    Proc,
}

impl Lane {
    /// Every lane, as metrics label them.
    pub const ALL: [Lane; 2] = [Lane::Files, Lane::Proc];

    pub fn as_str(self) -> &'static str {
        match self {
            Lane::Files => "files",
            Lane::Proc => "proc",
        }
    }

    fn slots(self) -> &'static Slots {
        static FILES: Slots = Slots::new(MAX_FILE_JOBS);
        static PROC: Slots = Slots::new(MAX_PROC_JOBS);
        match self {
            Lane::Files => &FILES,
            Lane::Proc => &PROC,
        }
    }

    /// Jobs of this lane running and waiting for a place now.
    pub fn jobs(self) -> Jobs {
        self.slots().jobs()
    }
}

/// How many jobs of a lane run and wait.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Jobs {
    pub running: i64,
    pub waiting: i64,
}

/// The work panicked, or the runtime is shutting down and dropped it.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the gateway could not finish a filesystem task (it is shutting down or the task failed)")]
pub struct WorkLost;

/// Runs `work` on the blocking pool once `lane` has a place for it, and
/// returns its result. Dropping the future while it waits gives up its
/// turn; once started, the work runs to its end (its result dropped).
pub async fn run<T, F>(lane: Lane, work: F) -> Result<T, WorkLost>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    lane.slots().run(work).await
}

/// A lane's bound and its counts.
struct Slots {
    places: Semaphore,
    running: AtomicI64,
    waiting: AtomicI64,
}

/// Adds one to a count while it lives.
struct Counted<'a>(&'a AtomicI64);

impl<'a> Counted<'a> {
    fn new(count: &'a AtomicI64) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slots {
    const fn new(places: usize) -> Slots {
        Slots {
            places: Semaphore::const_new(places),
            running: AtomicI64::new(0),
            waiting: AtomicI64::new(0),
        }
    }

    fn jobs(&self) -> Jobs {
        Jobs {
            running: self.running.load(Ordering::Relaxed),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }

    async fn run<T, F>(&'static self, work: F) -> Result<T, WorkLost>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let permit = {
            let _waiting = Counted::new(&self.waiting);
            // The semaphore is never closed.
            self.places.acquire().await.map_err(|_| WorkLost)?
        };
        // The place and the count go with the work, not with this future:
        // a caller that stops waiting does not free a thread still busy.
        let running = Counted::new(&self.running);
        tokio::task::spawn_blocking(move || {
            let _place = permit;
            let _running = running;
            work()
        })
        .await
        .map_err(|_| WorkLost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    fn leaked(places: usize) -> &'static Slots {
        Box::leak(Box::new(Slots::new(places)))
    }

    #[tokio::test]
    async fn runs_off_the_runtime_thread_and_returns_the_result() {
        let here = std::thread::current().id();
        let there = run(Lane::Files, || std::thread::current().id())
            .await
            .unwrap();
        assert_ne!(here, there);
    }

    #[tokio::test]
    async fn a_panic_is_work_lost_and_frees_its_place() {
        let slots = leaked(1);
        assert!(slots.run(|| panic!("boom")).await.is_err());
        assert_eq!(slots.run(|| 7).await.unwrap(), 7);
        assert_eq!(
            slots.jobs(),
            Jobs {
                running: 0,
                waiting: 0
            }
        );
    }

    #[tokio::test]
    async fn a_full_lane_queues_without_blocking_the_runtime() {
        let slots = leaked(1);
        let (release, stuck) = mpsc::channel::<()>();
        let first = tokio::spawn(slots.run(move || stuck.recv().is_ok()));
        while slots.jobs().running == 0 {
            tokio::task::yield_now().await;
        }
        let second = tokio::spawn(slots.run(|| 2));
        while slots.jobs().waiting == 0 {
            tokio::task::yield_now().await;
        }
        // The runtime still serves other tasks while both are held.
        assert_eq!(tokio::spawn(async { 3 }).await.unwrap(), 3);
        assert_eq!(
            slots.jobs(),
            Jobs {
                running: 1,
                waiting: 1
            }
        );
        assert!(!second.is_finished());
        release.send(()).unwrap();
        assert!(first.await.unwrap().unwrap());
        assert_eq!(second.await.unwrap().unwrap(), 2);
        assert_eq!(
            slots.jobs(),
            Jobs {
                running: 0,
                waiting: 0
            }
        );
    }

    #[tokio::test]
    async fn a_caller_that_stops_waiting_does_not_free_a_busy_place() {
        let slots = leaked(1);
        let (release, stuck) = mpsc::channel::<()>();
        let first = tokio::spawn(slots.run(move || stuck.recv().is_ok()));
        while slots.jobs().running == 0 {
            tokio::task::yield_now().await;
        }
        first.abort();
        let _ = first.await;
        assert_eq!(slots.jobs().running, 1, "the work still runs");
        let second = tokio::spawn(slots.run(|| 2));
        while slots.jobs().waiting == 0 {
            tokio::task::yield_now().await;
        }
        release.send(()).unwrap();
        assert_eq!(second.await.unwrap().unwrap(), 2);
    }
}
