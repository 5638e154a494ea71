//! The task that keeps the ledger in step with the state directory: a
//! [`Ledger::sync`] every [`SYNC_INTERVAL`] until the gateway shuts down
//! (`main` syncs once more after the children stopped, so their last
//! spend is kept).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use super::Ledger;
use crate::shutdown::Shutdown;

/// Time between two syncs: how long this gateway's spend may go unwritten,
/// and how old the other gateways' spend it counts may be.
pub const SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Syncs `ledger` every [`SYNC_INTERVAL`] on a task `shutdown` tracks.
pub fn spawn_keeper(ledger: Arc<Ledger>, shutdown: &Shutdown) {
    let stop: CancellationToken = shutdown.token().clone();
    shutdown.spawn(async move {
        let mut every = tokio::time::interval(SYNC_INTERVAL);
        every.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => ledger.sync().await,
            }
        }
    });
}
