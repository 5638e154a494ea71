//! The proxy's connection limits: open tool connections in total (each
//! costs the gateway two descriptors: the tool's and the upstream one) and
//! per project. A [`Slot`] is one open connection; dropping it frees its
//! place and updates `corral_egress_connections`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use prometheus::IntGauge;

/// Which limit a connection went over; its [`label`](Over::label) is the
/// rule named in the 503, the log and the event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Over {
    /// `max_connections`, over all projects.
    Total,
    /// `max_per_project`.
    PerProject,
}

impl Over {
    pub fn label(self) -> &'static str {
        match self {
            Over::Total => "over-limit:total",
            Over::PerProject => "over-limit:per-project",
        }
    }
}

/// The counts of open connections, shared by every connection task.
#[derive(Debug)]
pub struct Limits {
    max_total: usize,
    max_per_project: usize,
    /// `corral_egress_connections`: mirrors `Counts::total`.
    gauge: IntGauge,
    counts: Mutex<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Projects with at least one open connection that sent its secret.
    per_project: HashMap<Arc<str>, usize>,
}

/// One open connection; its project once its secret was read.
#[derive(Debug)]
pub struct Slot {
    limits: Arc<Limits>,
    project: Option<Arc<str>>,
}

impl Limits {
    pub fn new(max_total: usize, max_per_project: usize, gauge: IntGauge) -> Arc<Limits> {
        Arc::new(Limits {
            max_total,
            max_per_project,
            gauge,
            counts: Mutex::default(),
        })
    }

    fn counts(&self) -> MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place for a connection just accepted, if the total allows one.
    pub fn open(self: &Arc<Self>) -> Result<Slot, Over> {
        let mut counts = self.counts();
        if counts.total >= self.max_total {
            return Err(Over::Total);
        }
        counts.total += 1;
        self.gauge
            .set(i64::try_from(counts.total).unwrap_or(i64::MAX));
        Ok(Slot {
            limits: self.clone(),
            project: None,
        })
    }
}

impl Slot {
    /// Counts this connection for `project`, if its limit allows one more.
    pub fn claim(&mut self, project: Arc<str>) -> Result<(), Over> {
        let limits = &self.limits;
        let mut counts = limits.counts();
        let open = counts.per_project.entry(project.clone()).or_default();
        if *open >= limits.max_per_project {
            if *open == 0 {
                counts.per_project.remove(&project);
            }
            return Err(Over::PerProject);
        }
        *open += 1;
        drop(counts);
        self.project = Some(project);
        Ok(())
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut counts = self.limits.counts();
        counts.total = counts.total.saturating_sub(1);
        self.limits
            .gauge
            .set(i64::try_from(counts.total).unwrap_or(i64::MAX));
        if let Some(project) = &self.project {
            if let Some(open) = counts.per_project.get_mut(project) {
                *open = open.saturating_sub(1);
                if *open == 0 {
                    counts.per_project.remove(project);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_are_counted_in_total_and_per_project_and_freed_on_drop() {
        let gauge = IntGauge::new("g", "g").unwrap();
        let limits = Limits::new(3, 2, gauge.clone());
        let mut a = limits.open().unwrap();
        let mut b = limits.open().unwrap();
        let mut c = limits.open().unwrap();
        assert_eq!(limits.open().unwrap_err(), Over::Total);
        assert_eq!(gauge.get(), 3);
        a.claim("p".into()).unwrap();
        b.claim("p".into()).unwrap();
        assert_eq!(c.claim("p".into()).unwrap_err(), Over::PerProject);
        c.claim("q".into()).unwrap();
        drop(a);
        assert_eq!(gauge.get(), 2);
        let mut d = limits.open().unwrap();
        d.claim("p".into()).unwrap();
        drop((b, c, d));
        assert_eq!(gauge.get(), 0);
        assert!(limits.counts().per_project.is_empty());
    }
}
