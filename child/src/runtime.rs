//! The agent's async runtime: one thread, so that nothing it does before
//! serving (the sandbox's last steps among them) happens beside another
//! thread; built by the agent before it serves, or by a spare agent while
//! it waits.

use std::time::Duration;

use tokio::runtime::Runtime;

/// How long a blocking-pool thread (file tools, the journal) stays
/// unused before it ends: a second rather than tokio's ten, so that an
/// idle agent is one kernel task.
const BLOCKING_KEEP_ALIVE: Duration = Duration::from_secs(1);

/// Builds the runtime: current-thread, with I/O, timers and signals. It
/// starts no thread until a blocking task needs one.
pub fn build() -> std::io::Result<Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_keep_alive(BLOCKING_KEEP_ALIVE)
        .build()
}
