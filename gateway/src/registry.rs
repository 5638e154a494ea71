//! The running projects: project name → hub, created on the first
//! authenticated client, with the `--max-children` limit (least recently
//! used idle child evicted first) and each project's event counter, which
//! outlives its hubs so `seq` keeps increasing across restarts and reaps.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde_json::Value;

use crate::auth::Role;
use crate::hub::{
    AttachError, Attached, ChildState, HubHandle, HubSettings, HubStatus, StopReason,
};

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

pub struct Registry {
    settings: Arc<HubSettings>,
    max_children: usize,
    inner: Mutex<Inner>,
    shutting_down: AtomicBool,
}

#[derive(Default)]
struct Inner {
    hubs: HashMap<String, HubHandle>,
    /// Per-project `seq` counters, kept for the gateway's lifetime.
    seqs: HashMap<String, Arc<AtomicU64>>,
}

impl Registry {
    pub fn new(settings: Arc<HubSettings>, max_children: usize) -> Registry {
        Registry {
            settings,
            max_children: max_children.max(1),
            inner: Mutex::new(Inner::default()),
            shutting_down: AtomicBool::new(false),
        }
    }

    fn inner(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Attaches a client to `project`, starting its hub (and child) if none
    /// runs. Waits until the child is ready.
    pub async fn attach(
        &self,
        project: &str,
        dir: PathBuf,
        role: Role,
        resume_after: Option<u64>,
        hello: Option<Option<Value>>,
    ) -> Result<(HubHandle, Attached), RegistryError> {
        // A hub that is stopping answers `Gone`; the retry gets a new one.
        for _ in 0..3 {
            let hub = self.hub_for(project, &dir)?;
            match hub.attach(role, resume_after, hello.clone()).await {
                Ok(attached) => return Ok((hub, attached)),
                Err(AttachError::Gone) => {
                    {
                        let mut inner = self.inner();
                        if inner.hubs.get(project).is_some_and(|h| h.is_closed()) {
                            inner.hubs.remove(project);
                        }
                    }
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(AttachError::Gone.into())
    }

    fn hub_for(&self, project: &str, dir: &std::path::Path) -> Result<HubHandle, RegistryError> {
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(RegistryError::ShuttingDown);
        }
        let mut inner = self.inner();
        inner.hubs.retain(|_, hub| !hub.is_closed());
        if let Some(hub) = inner.hubs.get(project) {
            return Ok(hub.clone());
        }
        if inner.hubs.len() >= self.max_children {
            let victim = inner
                .hubs
                .values()
                .map(|hub| (hub.clone(), hub.status()))
                .filter(|(_, status)| status.clients == 0 && !status.busy)
                .min_by_key(|(_, status)| status.last_activity)
                .map(|(hub, _)| hub);
            let Some(victim) = victim else {
                return Err(RegistryError::Full(self.max_children));
            };
            tracing::info!(project = %victim.project, "stopping the least recently used idle agent to make room");
            inner.hubs.remove(&victim.project);
            tokio::spawn(async move { victim.stop(StopReason::Evicted).await });
        }
        let seq = inner.seqs.entry(project.to_string()).or_default().clone();
        let hub = HubHandle::spawn(
            project.to_string(),
            dir.to_path_buf(),
            self.settings.clone(),
            seq,
        );
        inner.hubs.insert(project.to_string(), hub.clone());
        Ok(hub)
    }

    /// Status of every live hub, sorted by project.
    pub fn list(&self) -> Vec<HubStatus> {
        let mut all: Vec<HubStatus> = self
            .inner()
            .hubs
            .values()
            .filter(|hub| !hub.is_closed())
            .map(HubHandle::status)
            .filter(|status| status.state != ChildState::Exited)
            .collect();
        all.sort_by(|a, b| a.project.cmp(&b.project));
        all
    }

    pub fn get(&self, project: &str) -> Option<HubHandle> {
        self.inner()
            .hubs
            .get(project)
            .filter(|h| !h.is_closed())
            .cloned()
    }

    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Refuses new clients and stops every child gracefully, concurrently.
    pub async fn shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        let hubs: Vec<HubHandle> = self.inner().hubs.drain().map(|(_, hub)| hub).collect();
        let stops = hubs.iter().map(|hub| hub.stop(StopReason::Shutdown));
        futures_util::future::join_all(stops).await;
    }
}
