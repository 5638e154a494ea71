//! The runs of one hub's child, in one place: which client each run
//! belongs to (the [`RunBook`]), which runs are in flight and since when
//! the child is busy. Pure state, no I/O.
//!
//! Invariant: the child is busy exactly while a run is in flight, and
//! `busy_since` is set exactly then; [`Runs::reset`] clears all of it at
//! once when the child cannot finish its runs any more.

use std::collections::VecDeque;
use std::time::{Duration, Instant, SystemTime};

use super::client_id::ClientId;
use super::gateway_id::GatewayId;
use super::runs::{Answer, Claim, Run, RunBook, RunId};
use super::trace::RequestSpan;

/// The runs of one child.
#[derive(Debug, Default)]
pub(super) struct Runs {
    /// Which client each run belongs to.
    book: RunBook,
    /// Start instants of the runs in flight, oldest first, with the trace
    /// span of the request that started each when its answer came first
    /// (zut's `started`), so that span lasts as long as its run.
    in_flight: VecDeque<(Instant, RequestSpan)>,
    /// Since when a run is in flight (for the admin API).
    busy_since: Option<SystemTime>,
}

/// Runs cut short by [`Runs::reset`].
#[derive(Debug)]
pub(super) struct CutShort {
    /// The run in progress, if the book knew it.
    pub run: Option<Run>,
}

impl Runs {
    /// Whether a run is in flight.
    pub fn busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    pub fn busy_since(&self) -> Option<SystemTime> {
        self.busy_since
    }

    /// A run began; `span` (of the request that started it) ends with it.
    pub fn started(&mut self, span: RequestSpan) {
        if self.in_flight.is_empty() {
            self.busy_since = Some(SystemTime::now());
        }
        self.in_flight.push_back((Instant::now(), span));
    }

    /// The oldest run in flight ended; returns how long it ran (`None`
    /// when none was in flight).
    pub fn done(&mut self) -> Option<Duration> {
        let (started, _span) = self.in_flight.pop_front()?;
        if self.in_flight.is_empty() {
            self.busy_since = None;
        }
        Some(started.elapsed())
    }

    /// The child is gone: nothing in flight or queued will finish. Returns
    /// what was cut short, if a run was in flight.
    pub fn reset(&mut self) -> Option<CutShort> {
        let cut = self.busy().then(|| CutShort {
            run: self.book.active().cloned(),
        });
        self.book.reset();
        self.in_flight.clear();
        self.busy_since = None;
        cut
    }

    /// The run in progress.
    pub fn active(&self) -> Option<&Run> {
        self.book.active()
    }

    /// The run that ended last.
    pub fn last(&self) -> Option<&Run> {
        self.book.last()
    }

    /// A run-start event: the run that begins.
    pub fn start(&mut self) -> &Run {
        self.book.start()
    }

    /// A run-end event.
    pub fn end(&mut self) {
        self.book.end();
    }

    /// See [`RunBook::forwarded`].
    pub fn forwarded(&mut self, gid: GatewayId, command: &str, owner: ClientId, claim: Claim) {
        self.book.forwarded(gid, command, owner, claim);
    }

    /// See [`RunBook::answered`].
    pub fn answered(&mut self, gid: GatewayId, answer: Answer, last: bool) -> Option<RunId> {
        self.book.answered(gid, answer, last)
    }

    /// See [`RunBook::command`].
    pub fn command(&self, gid: GatewayId) -> Option<&str> {
        self.book.command(gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_while_any_run_is_in_flight() {
        let mut runs = Runs::default();
        assert!(!runs.busy() && runs.busy_since().is_none());
        assert!(runs.done().is_none(), "nothing to end");
        runs.started(RequestSpan::default());
        let since = runs.busy_since();
        assert!(runs.busy() && since.is_some());
        runs.started(RequestSpan::default());
        assert_eq!(runs.busy_since(), since, "busy since the first");
        assert!(runs.done().is_some());
        assert!(runs.busy(), "one still in flight");
        assert!(runs.done().is_some());
        assert!(!runs.busy() && runs.busy_since().is_none());
    }

    #[test]
    fn a_reset_clears_runs_in_flight_and_queued_at_once() {
        let mut runs = Runs::default();
        assert!(runs.reset().is_none(), "nothing in flight, nothing cut");
        let a = ClientId::named(1);
        runs.forwarded(GatewayId::Request(1), "prompt", a, Claim::May);
        runs.forwarded(GatewayId::Request(2), "prompt", a, Claim::May);
        let run = runs.start().clone();
        runs.started(RequestSpan::default());
        let cut = runs.reset().expect("a run was in flight");
        assert_eq!(cut.run, Some(run));
        assert!(!runs.busy() && runs.busy_since().is_none());
        assert!(runs.active().is_none());
        assert_eq!(
            runs.command(GatewayId::Request(2)),
            None,
            "queued claims dropped"
        );
        assert!(runs.done().is_none());
    }
}
