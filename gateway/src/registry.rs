//! The running projects: project name → hub, created on the first
//! authenticated client, and each project's event counter, which outlives
//! its hubs so `seq` keeps increasing across restarts and reaps.
//!
//! `--max-children` is a hard bound on children that exist: starting,
//! running, backing off, stopping and evicted-but-not-exited ones all hold
//! a slot. A full registry evicts the least recently used idle hub (nobody
//! attached or attaching, no run, not starting) and waits for its child to
//! exit; with nothing to evict the attach is refused before any hello
//! succeeds.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::auth::Role;
use crate::dialect::OwnRuns;
use crate::events::EventLog;
use crate::hub::{
    AttachError, Attached, ChildState, HubHandle, HubSettings, HubStatus, Join, StopReason,
};
use crate::shutdown::Shutdown;
use crate::ws::close::CloseCode;

/// Why a client could not be attached.
#[derive(Debug, Clone, thiserror::Error)]
pub enum RegistryError {
    #[error(transparent)]
    Attach(#[from] AttachError),
    #[error(
        "too many running agents ({0}, the --max-children limit) and none is idle; try again later"
    )]
    Full(usize),
    #[error("the gateway is shutting down")]
    ShuttingDown,
}

impl RegistryError {
    /// The WebSocket close code a refused client gets: 1013 (try again
    /// later) when waiting may help, 1011 otherwise.
    pub fn close_code(&self) -> CloseCode {
        match self {
            RegistryError::Full(_)
            | RegistryError::ShuttingDown
            | RegistryError::Attach(AttachError::Elsewhere(_))
            | RegistryError::Attach(AttachError::Unavailable(_)) => CloseCode::TryAgain,
            RegistryError::Attach(_) => CloseCode::Internal,
        }
    }
}

pub struct Registry {
    settings: Arc<HubSettings>,
    max_children: usize,
    inner: Mutex<Inner>,
    /// Refuses attaches once started; tracks every hub task and eviction
    /// so the gateway waits for them before it exits.
    shutdown: Shutdown,
    /// Recent gateway events (children started and exited, slow clients
    /// closed), fed by a watcher per hub, for `/v1/events`.
    events: Arc<EventLog>,
}

/// A project's hub and the attaches on their way into it.
struct Entry {
    hub: HubHandle,
    /// Clients between "this hub is theirs" and a finished attach: a hub
    /// someone is about to join is never evicted.
    pending: usize,
}

#[derive(Default)]
struct Inner {
    hubs: HashMap<String, Entry>,
    /// Hubs evicted to make room whose child has not exited yet: they
    /// still hold a slot.
    leaving: Vec<HubHandle>,
    /// Per-project `seq` counters, kept for the gateway's lifetime.
    seqs: HashMap<String, Arc<AtomicU64>>,
}

impl Inner {
    /// Forgets hubs whose task (and so whose child) has ended.
    fn prune(&mut self) {
        self.hubs.retain(|_, entry| !entry.hub.is_closed());
        self.leaving.retain(|hub| !hub.is_closed());
    }

    /// Children that exist or may exist: starting, running, backing off,
    /// stopping, or evicted and not yet exited.
    fn slots(&self) -> usize {
        self.hubs.len() + self.leaving.len()
    }
}

/// Where an attach finds its hub: what [`Registry::claim`] decided.
enum HubSlot {
    Hub(HubHandle),
    /// No slot now; one frees when this hub's child has exited.
    WaitFor(HubHandle),
}

/// Holds a hub's place for one attach until it is over (or abandoned).
struct AttachHold<'a> {
    registry: &'a Registry,
    hub: HubHandle,
}

impl Drop for AttachHold<'_> {
    fn drop(&mut self) {
        let mut inner = self.registry.inner();
        if let Some(entry) = inner.hubs.get_mut(&self.hub.project) {
            if entry.hub.same(&self.hub) {
                entry.pending = entry.pending.saturating_sub(1);
            }
        }
    }
}

impl Registry {
    pub fn new(settings: Arc<HubSettings>, max_children: usize, shutdown: Shutdown) -> Registry {
        Registry {
            settings,
            max_children: max_children.max(1),
            inner: Mutex::new(Inner::default()),
            shutdown,
            events: Arc::new(EventLog::new()),
        }
    }

    pub fn events(&self) -> &Arc<EventLog> {
        &self.events
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// How long an attach waits for an evicted child to exit: its whole
    /// graceful stop and a margin.
    fn eviction_wait(&self) -> Duration {
        self.settings.stop_grace * 2 + Duration::from_secs(2)
    }

    /// Attaches a client to `project`, starting its hub (and child) if none
    /// runs. Waits until the child is ready. Refused with
    /// [`RegistryError::Full`] when `--max-children` children exist and
    /// none of them may be evicted.
    pub async fn attach(
        &self,
        project: &str,
        dir: PathBuf,
        join: Join,
    ) -> Result<(HubHandle, Attached), RegistryError> {
        // A hub that is stopping answers `Gone`; the retry gets a new one.
        for _ in 0..3 {
            let pending = self.hub_for(project, &dir).await?;
            let hub = pending.hub.clone();
            let attached = hub.attach(join.clone()).await;
            drop(pending);
            match attached {
                Ok(attached) => return Ok((hub, attached)),
                Err(AttachError::Gone) => {
                    self.inner().prune();
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(AttachError::Gone.into())
    }

    /// The project's hub, claimed for one attach; waits (bounded) for an
    /// evicted child to exit when that is what frees a slot.
    async fn hub_for(&self, project: &str, dir: &Path) -> Result<AttachHold<'_>, RegistryError> {
        let deadline = tokio::time::Instant::now() + self.eviction_wait();
        loop {
            match self.claim(project, dir)? {
                HubSlot::Hub(hub) => {
                    return Ok(AttachHold {
                        registry: self,
                        hub,
                    })
                }
                HubSlot::WaitFor(leaving) => {
                    if tokio::time::timeout_at(deadline, leaving.closed())
                        .await
                        .is_err()
                    {
                        tracing::warn!(project = %leaving.project, "an evicted agent did not exit in time");
                        return Err(RegistryError::Full(self.max_children));
                    }
                }
            }
        }
    }

    /// One decision under the lock: the existing hub, a new one in a free
    /// slot, or an idle hub evicted (the caller waits for it to exit).
    fn claim(&self, project: &str, dir: &Path) -> Result<HubSlot, RegistryError> {
        let mut inner = self.inner();
        // Checked under the lock: `shutdown` starts before it takes the
        // lock, so no hub is added after it has taken them all.
        if self.shutdown.is_started() {
            return Err(RegistryError::ShuttingDown);
        }
        inner.prune();
        if let Some(entry) = inner.hubs.get_mut(project) {
            entry.pending += 1;
            return Ok(HubSlot::Hub(entry.hub.clone()));
        }
        if inner.slots() < self.max_children {
            let seq = inner.seqs.entry(project.to_string()).or_default().clone();
            let hub = HubHandle::spawn(
                project.to_string(),
                dir.to_path_buf(),
                self.settings.clone(),
                seq,
                self.shutdown.tasks(),
            );
            self.shutdown
                .spawn(crate::events::watch_hub(hub.clone(), self.events.clone()));
            let entry = Entry {
                hub: hub.clone(),
                pending: 1,
            };
            inner.hubs.insert(project.to_string(), entry);
            return Ok(HubSlot::Hub(hub));
        }
        let candidates = inner
            .hubs
            .values()
            .filter(|entry| entry.pending == 0)
            .map(|entry| (entry.hub.clone(), entry.hub.status()));
        if let Some(victim) = pick_victim(candidates) {
            tracing::info!(project = %victim.project, "stopping the least recently used idle agent to make room");
            inner.hubs.remove(&victim.project);
            inner.leaving.push(victim.clone());
            let stopping = victim.clone();
            self.shutdown
                .spawn(async move { stopping.stop(StopReason::Evicted).await });
            return Ok(HubSlot::WaitFor(victim));
        }
        match inner.leaving.first() {
            Some(leaving) => Ok(HubSlot::WaitFor(leaving.clone())),
            None => Err(RegistryError::Full(self.max_children)),
        }
    }

    /// Starts `project`'s child without a client (an admin's Start): a
    /// transient observer attaches, which waits until the child is ready
    /// under the same `--max-children` rules as any client, and leaves.
    /// A project that runs already is left as it is.
    pub async fn start(
        &self,
        project: &str,
        dir: PathBuf,
        who: Arc<crate::access::Identity>,
    ) -> Result<(), RegistryError> {
        let join = Join {
            who,
            peer: None,
            role: Role::Observer,
            resume_after: None,
            hello: None,
            own_runs: OwnRuns::default(),
        };
        let (hub, attached) = self.attach(project, dir, join).await?;
        hub.detach(attached.client).await;
        Ok(())
    }

    /// Status of every live hub, sorted by project.
    pub fn list(&self) -> Vec<HubStatus> {
        let mut all: Vec<HubStatus> = self
            .inner()
            .hubs
            .values()
            .filter(|entry| !entry.hub.is_closed())
            .map(|entry| entry.hub.status())
            .filter(|status| status.state != ChildState::Exited)
            .collect();
        all.sort_by(|a, b| a.project.cmp(&b.project));
        all
    }

    pub fn get(&self, project: &str) -> Option<HubHandle> {
        self.inner()
            .hubs
            .get(project)
            .filter(|entry| !entry.hub.is_closed())
            .map(|entry| entry.hub.clone())
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_started()
    }

    /// Starts the gateway's shutdown if it has not (so no client is
    /// attached any more) and stops every child gracefully, concurrently.
    pub async fn shutdown(&self) {
        self.shutdown.start();
        let hubs: Vec<HubHandle> = {
            let mut inner = self.inner();
            let mut hubs: Vec<HubHandle> = inner.hubs.drain().map(|(_, entry)| entry.hub).collect();
            hubs.append(&mut inner.leaving);
            hubs
        };
        let stops = hubs.iter().map(|hub| hub.stop(StopReason::Shutdown));
        futures_util::future::join_all(stops).await;
    }
}

/// The hub to evict for a new project: the least recently used one that
/// nobody is attached or attaching to, with no run active and no child
/// starting.
fn pick_victim(candidates: impl Iterator<Item = (HubHandle, HubStatus)>) -> Option<HubHandle> {
    candidates
        .filter(|(_, status)| evictable(status))
        .min_by_key(|(_, status)| status.last_activity)
        .map(|(hub, _)| hub)
}

fn evictable(status: &HubStatus) -> bool {
    status.clients == 0
        && !status.busy
        && !matches!(status.state, ChildState::Starting | ChildState::Stopping)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::SystemTime;

    fn status(state: ChildState, clients: usize, busy: bool) -> HubStatus {
        HubStatus {
            project: "p".into(),
            pid: None,
            state,
            busy,
            busy_since: None,
            clients,
            client_list: Vec::new(),
            restarts: 0,
            ready_since: None,
            last_activity: SystemTime::UNIX_EPOCH,
            last_seq: 0,
            last_exit: None,
            model: None,
            usage: None,
            stderr_tail: None,
            mcp: Vec::new(),
        }
    }

    #[test]
    fn only_idle_settled_hubs_are_evicted() {
        assert!(evictable(&status(ChildState::Ready, 0, false)));
        assert!(evictable(&status(ChildState::Backoff, 0, false)));
        assert!(!evictable(&status(ChildState::Ready, 1, false)), "a client");
        assert!(!evictable(&status(ChildState::Ready, 0, true)), "a run");
        assert!(!evictable(&status(ChildState::Starting, 0, false)));
        assert!(!evictable(&status(ChildState::Stopping, 0, false)));
    }

    #[test]
    fn refusals_say_when_to_try_again() {
        assert_eq!(RegistryError::Full(2).close_code(), CloseCode::TryAgain);
        assert_eq!(
            RegistryError::ShuttingDown.close_code(),
            CloseCode::TryAgain
        );
        let elsewhere = AttachError::Elsewhere("in use".into());
        assert_eq!(
            RegistryError::Attach(elsewhere).close_code(),
            CloseCode::TryAgain
        );
        let failed = AttachError::StartFailed("exit 3".into());
        assert_eq!(
            RegistryError::Attach(failed).close_code(),
            CloseCode::Internal
        );
    }
}
