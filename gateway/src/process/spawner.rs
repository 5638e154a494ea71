//! Where children are started: one long-lived thread, so a start (and
//! the cgroup set-up before it) never stalls the gateway's async thread, plus
//! the bound on how many children start at once, so a burst of first
//! connects is a queue rather than thousands of processes competing for
//! the CPU with the clients already attached.
//!
//! The thread never exits: `PR_SET_PDEATHSIG` fires when the thread that
//! started a child ends, so the starting thread must live as long as the
//! gateway (a `spawn_blocking` thread would not: it ends when idle).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::mpsc;
use std::sync::OnceLock;

use tokio::runtime::Handle;
#[cfg(test)]
use tokio::sync::oneshot;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Cores per child between its start and its answered hello, by default
/// (`--max-starting`). Two: during bursts of 300 first connects on two
/// cores, an attached client's ping p99 was 5.2–16.4 ms over eight runs
/// with one child starting at a time, against 16.9–35.9 ms over five
/// with two (and 22–34 ms with eight), while 2,000 first connects still
/// took only 0.59–0.72× the time of a plain loop starting the same agents
/// one by one (bench-scale's pings and burst sections). Starting children are
/// kernel work (namespaces, mounts) the scheduler cannot weigh against
/// the gateway's; a core left to the running children is what keeps them
/// answering.
const CORES_PER_START: usize = 2;

/// One piece of blocking work for the spawner thread, run inside the
/// runtime of the task that asked (a child's socket and its reaping are
/// registered with that runtime).
struct Job {
    runtime: Handle,
    work: Box<dyn FnOnce() + Send>,
}

/// The spawner thread could not be started or has gone.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the gateway's spawner thread is unavailable")]
pub struct SpawnerGone;

/// The queue to the spawner thread, started on first use.
static QUEUE: OnceLock<Option<mpsc::Sender<Job>>> = OnceLock::new();
/// Slots for children starting at once.
static STARTING: OnceLock<Semaphore> = OnceLock::new();

fn queue() -> Option<&'static mpsc::Sender<Job>> {
    QUEUE
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Job>();
            let started = std::thread::Builder::new()
                .name("corral-spawner".into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        let _runtime = job.runtime.enter();
                        // A panic must not end the thread: that would
                        // deliver the parent-death signal to its children.
                        if catch_unwind(AssertUnwindSafe(job.work)).is_err() {
                            tracing::error!("a spawn panicked on the spawner thread");
                        }
                    }
                });
            match started {
                Ok(_) => Some(tx),
                Err(e) => {
                    tracing::error!(error = %e, "cannot start the spawner thread");
                    None
                }
            }
        })
        .as_ref()
}

/// Queues `work` for the spawner thread. Must be called from a task on a
/// tokio runtime.
pub(super) fn submit(work: impl FnOnce() + Send + 'static) -> Result<(), SpawnerGone> {
    let job = Job {
        runtime: Handle::current(),
        work: Box::new(work),
    };
    queue()
        .ok_or(SpawnerGone)?
        .send(job)
        .map_err(|_| SpawnerGone)
}

/// Runs `work` on the spawner thread and returns its result (dropped
/// there if the caller stopped waiting).
#[cfg(test)]
async fn run<T, F>(work: F) -> Result<T, SpawnerGone>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    submit(move || {
        let _ = tx.send(work());
    })?;
    rx.await.map_err(|_| SpawnerGone)
}

/// How many children may start at once on a machine with `cores` cores
/// unless `--max-starting` says.
pub fn starting_limit(cores: usize) -> usize {
    (cores / CORES_PER_START).max(1)
}

/// The default of `--max-starting` on this machine.
pub fn default_starting_limit() -> usize {
    starting_limit(std::thread::available_parallelism().map_or(1, usize::from))
}

/// Sets how many children may start at once (`--max-starting`, at least
/// one); must come before the first start. Returns false if the slots
/// were already made (the first setting stays).
pub fn set_starting_limit(limit: usize) -> bool {
    STARTING
        .set(Semaphore::new(limit.clamp(1, Semaphore::MAX_PERMITS)))
        .is_ok()
}

/// Waits for a start slot: hold it from before the spawn until the child
/// answered its hello (or failed to). `None` never happens in practice
/// (the slots are never closed); the start then goes ahead unbounded.
pub async fn start_slot() -> Option<SemaphorePermit<'static>> {
    let slots = STARTING.get_or_init(|| Semaphore::new(default_starting_limit()));
    slots.acquire().await.ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_child_starts_at_a_time_per_two_cores() {
        assert_eq!(starting_limit(0), 1);
        assert_eq!(starting_limit(1), 1);
        assert_eq!(starting_limit(2), 1);
        assert_eq!(starting_limit(3), 1);
        assert_eq!(starting_limit(8), 4);
    }

    #[tokio::test]
    async fn runs_work_on_one_long_lived_thread() {
        let first = run(|| std::thread::current().id()).await.unwrap();
        let second = run(|| std::thread::current().id()).await.unwrap();
        assert_eq!(first, second);
        assert_ne!(first, std::thread::current().id());
    }

    #[tokio::test]
    async fn a_panic_does_not_end_the_thread() {
        let panicked = run(|| panic!("boom")).await;
        assert!(panicked.is_err());
        assert_eq!(run(|| 7).await.unwrap(), 7);
    }
}
