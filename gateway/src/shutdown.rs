//! The shutdown tree: one root [`CancellationToken`] that every
//! long-lived part watches, one [`TaskTracker`] holding every task that
//! must finish before the process exits (hubs, WebSocket and HTTP
//! connections, evictions, admin stops, the metrics listener, the orphan
//! sweeper), and the process's only SIGTERM/SIGINT listener.
//!
//! Order: signal → [`Shutdown::start`] (the root is cancelled: the accept
//! loops end, new attaches are refused) → the server stops every child →
//! [`Shutdown::drain`] waits for the tracked tasks, bounded → exit.

use std::future::Future;
use std::time::Duration;

use tokio::signal::unix::{signal, SignalKind};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// What ends the tracked tasks, and what waits for them.
#[derive(Debug, Clone, Default)]
pub struct Shutdown {
    /// The root: cancelled once, when shutdown starts.
    token: CancellationToken,
    /// Every task the gateway waits for before it exits.
    tasks: TaskTracker,
}

impl Shutdown {
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// The root token (cancelled when shutdown starts).
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// A token cancelled with the root, that a part may also cancel alone.
    pub fn child_token(&self) -> CancellationToken {
        self.token.child_token()
    }

    /// The tracker every task the shutdown waits for is spawned on.
    pub fn tasks(&self) -> &TaskTracker {
        &self.tasks
    }

    /// Spawns `task` on the tracker.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.tasks.spawn(task)
    }

    /// Starts the shutdown: cancels the root and everything under it.
    pub fn start(&self) {
        self.token.cancel();
    }

    pub fn is_started(&self) -> bool {
        self.token.is_cancelled()
    }

    /// Completes once the shutdown has started.
    pub async fn started(&self) {
        self.token.cancelled().await;
    }

    /// Waits until every tracked task has ended, at most `bound`. No task
    /// may be tracked after this is called. `Err` holds how many were
    /// still running at the bound.
    pub async fn drain(&self, bound: Duration) -> Result<(), usize> {
        self.tasks.close();
        match tokio::time::timeout(bound, self.tasks.wait()).await {
            Ok(()) => Ok(()),
            Err(_) => Err(self.tasks.len()),
        }
    }

    /// Starts the shutdown on the first SIGTERM or SIGINT; `on_signal`
    /// runs first (e.g. to tell the service manager). This is the
    /// process's one listener for those signals.
    pub fn on_signals(&self, on_signal: impl FnOnce() + Send + 'static) -> std::io::Result<()> {
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let shutdown = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = int.recv() => tracing::info!("SIGINT: shutting down"),
                () = shutdown.started() => return,
            }
            on_signal();
            shutdown.start();
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn drain_waits_for_every_tracked_task() {
        let shutdown = Shutdown::new();
        let child = shutdown.child_token();
        let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
        for delay in [1u64, 3, 2] {
            let token = child.clone();
            let done = done_tx.clone();
            shutdown.spawn(async move {
                token.cancelled().await;
                tokio::time::sleep(Duration::from_secs(delay)).await;
                done.send(delay).unwrap();
            });
        }
        drop(done_tx);
        assert!(!child.is_cancelled());
        shutdown.start();
        assert!(shutdown.is_started() && child.is_cancelled());
        assert_eq!(shutdown.drain(Duration::from_secs(60)).await, Ok(()));
        let mut ended = Vec::new();
        while let Some(delay) = done_rx.recv().await {
            ended.push(delay);
        }
        assert_eq!(ended, [1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn drain_is_bounded_and_counts_the_stragglers() {
        let shutdown = Shutdown::new();
        shutdown.spawn(std::future::pending::<()>());
        shutdown.spawn(async {});
        shutdown.start();
        assert_eq!(shutdown.drain(Duration::from_secs(5)).await, Err(1));
    }

    #[tokio::test]
    async fn a_started_shutdown_ends_the_signal_listener() {
        let shutdown = Shutdown::new();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        shutdown
            .on_signals(move || {
                let _ = tx.send(());
            })
            .unwrap();
        shutdown.start();
        // The listener ended without running `on_signal`: its sender dropped.
        assert!(rx.await.is_err());
    }
}
