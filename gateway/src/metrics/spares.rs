//! The spare agents' figures, read from the process layer when `/metrics`
//! is scraped: `corral_spare_agents_ready`, and how cold starts fared
//! (`corral_spare_agent_assignments_total`: served by a spare;
//! `corral_spare_agent_misses_total`: could have been, found none ready;
//! `corral_spare_agent_failures_total`: spares that did not start, died
//! or could not be assigned).

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{IntCounter, IntGauge, Opts};

use crate::process::spares;

pub struct SparesCollector {
    /// Held while collecting: two scrapes at once would otherwise add the
    /// same difference twice.
    collecting: std::sync::Mutex<()>,
    ready: IntGauge,
    assigned: IntCounter,
    missed: IntCounter,
    failed: IntCounter,
    descs: Vec<Desc>,
}

impl SparesCollector {
    pub fn new() -> Result<SparesCollector, prometheus::Error> {
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace("corral");
        let ready = IntGauge::with_opts(opts(
            "spare_agents_ready",
            "Spare agents started ahead of any project and ready to take a cold start's (--spare-agents).",
        ))?;
        let assigned = IntCounter::with_opts(opts(
            "spare_agent_assignments_total",
            "Cold starts served by a spare agent.",
        ))?;
        let missed = IntCounter::with_opts(opts(
            "spare_agent_misses_total",
            "Cold starts a spare agent could have served that found none ready (a new agent was started).",
        ))?;
        let failed = IntCounter::with_opts(opts(
            "spare_agent_failures_total",
            "Spare agents that did not start, died waiting, or could not be sent their project.",
        ))?;
        let descs = [
            &ready.desc(),
            &assigned.desc(),
            &missed.desc(),
            &failed.desc(),
        ]
        .into_iter()
        .flatten()
        .map(|d| (*d).clone())
        .collect();
        Ok(SparesCollector {
            collecting: std::sync::Mutex::new(()),
            ready,
            assigned,
            missed,
            failed,
            descs,
        })
    }
}

impl Collector for SparesCollector {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _collecting = self
            .collecting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stats = spares::stats();
        let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.ready.set(clamp(stats.ready as u64));
        // Counters kept by the process layer: brought up to its totals.
        for (counter, total) in [
            (&self.assigned, stats.assigned),
            (&self.missed, stats.missed),
            (&self.failed, stats.failed),
        ] {
            counter.inc_by(total.saturating_sub(counter.get()));
        }
        [
            &self.ready.collect(),
            &self.assigned.collect(),
            &self.missed.collect(),
            &self.failed.collect(),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect()
    }
}
