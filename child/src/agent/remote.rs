//! A cloneable handle to an agent for tasks that outlive one request (the
//! Zi dialect's settlement tasks): abort the active run, read the session.

use std::sync::{Arc, MutexGuard};

use super::{Agent, Session, Shared};

/// Acts on an agent without holding the [`Agent`] itself.
#[derive(Clone)]
pub struct AgentRemote {
    shared: Arc<Shared>,
}

impl AgentRemote {
    /// Cancels the run executing right now, if any; queued runs are
    /// unaffected. Returns whether a run was cancelled.
    pub fn abort(&self) -> bool {
        self.shared.abort_current()
    }

    /// Locks the session state for a quick read.
    pub fn session(&self) -> MutexGuard<'_, Session> {
        self.shared.session()
    }
}

impl Agent {
    /// A cloneable handle for tasks that outlive one request.
    pub fn remote(&self) -> AgentRemote {
        AgentRemote {
            shared: self.shared.clone(),
        }
    }
}
