//! Which client each run belongs to: the gateway's run ids and the
//! audience of every event, for clients that asked for their own runs
//! only. Pure logic, no I/O; the project's dialect says what a request
//! may do to runs ([`Claim`]) and what its answer says ([`Answer`]).
//!
//! A request that may start a run is a *claim*, kept in the order the
//! child reads requests. A run begins either with an answer (zut's
//! `started:true`: [`Answer::Now`]) or with a run-start event, which takes
//! the oldest claim. Input for a run (letscode `steer`, Zi `continue`,
//! `steer`, `follow_up`) makes its sender a member of the run in progress,
//! or of the next one. A run with no claim left to take continues the
//! previous run and keeps its audience.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::client_id::ClientId;
use super::gateway_id::GatewayId;
pub use crate::dialect::runs::{Answer, Claim};

/// Run ids issued by this process: unique across projects and hubs.
static RUN_IDS: AtomicU64 = AtomicU64::new(0);
/// How many answered-after-start run ids are remembered.
const NAMED: usize = 256;

/// Who receives an event when a client asked for its own runs only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Audience {
    /// Not part of a run (gateway lifecycle events, session-wide events).
    #[default]
    Everyone,
    /// Part of a run: the clients (by client id) it belongs to.
    Run(Arc<[ClientId]>),
}

impl Audience {
    /// Whether a client with id `client` that filters by runs gets it.
    pub fn includes(&self, client: ClientId) -> bool {
        match self {
            Audience::Everyone => true,
            Audience::Run(members) => members.contains(&client),
        }
    }
}

/// A run's id as clients see it (`run-N`), unique in this process.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId(Arc<str>);

impl RunId {
    fn mint() -> RunId {
        let n = RUN_IDS.fetch_add(1, Ordering::Relaxed) + 1;
        RunId(Arc::from(format!("run-{n}")))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A run: its id and the clients it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub id: RunId,
    pub members: Arc<[ClientId]>,
}

impl Run {
    pub fn audience(&self) -> Audience {
        Audience::Run(self.members.clone())
    }
}

/// A request that may start or join a run, until a run takes it.
#[derive(Debug)]
struct RunRequest {
    /// The request's gateway id.
    gid: GatewayId,
    /// Forwarding order.
    order: u64,
    /// The command, to read answers that nobody waits for any more.
    command: String,
    client: ClientId,
    /// Minted when the answer or the run start came.
    run: Option<RunId>,
}

/// The runs of one project's child.
#[derive(Debug, Default)]
pub struct RunBook {
    next_order: u64,
    /// Claims not yet taken by a run, in forwarding order.
    claims: VecDeque<RunRequest>,
    /// Senders of input for the next run to start (Zi input while idle).
    joiners: Vec<RunRequest>,
    /// Interruptions awaiting their answer: gateway id → forwarding order
    /// and command.
    barriers: HashMap<GatewayId, (u64, String)>,
    /// Run ids of requests whose run started or that joined one, by
    /// gateway id, until their last answer.
    named: VecDeque<(GatewayId, RunId)>,
    active: Option<Run>,
    /// The run that ended last.
    last: Option<Run>,
}

/// `members` with `client` added.
fn with(members: &Arc<[ClientId]>, client: ClientId) -> Arc<[ClientId]> {
    if members.contains(&client) {
        return members.clone();
    }
    let mut all = members.to_vec();
    all.push(client);
    all.into()
}

impl RunBook {
    /// The run in progress.
    pub fn active(&self) -> Option<&Run> {
        self.active.as_ref()
    }

    /// The run that ended last.
    pub fn last(&self) -> Option<&Run> {
        self.last.as_ref()
    }

    /// The command of a claim or interruption not yet fully answered.
    pub fn command(&self, gid: GatewayId) -> Option<&str> {
        let waiting = self.claims.iter().chain(&self.joiners);
        match waiting.into_iter().find(|c| c.gid == gid) {
            Some(claim) => Some(&claim.command),
            None => self.barriers.get(&gid).map(|(_, command)| command.as_str()),
        }
    }

    fn name(&mut self, gid: GatewayId, run: RunId) {
        if self.named.len() >= NAMED {
            self.named.pop_front();
        }
        self.named.push_back((gid, run));
    }

    /// A request `command` with gateway id `gid` from `client` went to
    /// the child.
    pub fn forwarded(&mut self, gid: GatewayId, command: &str, client: ClientId, claim: Claim) {
        self.next_order += 1;
        let pending = RunRequest {
            gid,
            order: self.next_order,
            command: command.to_string(),
            client,
            run: None,
        };
        match claim {
            Claim::None => {}
            Claim::Join | Claim::Input if self.active.is_some() => {
                if let Some(run) = self.active.as_mut() {
                    run.members = with(&run.members, client);
                    let id = run.id.clone();
                    self.name(pending.gid, id);
                }
            }
            Claim::May | Claim::Join => self.claims.push_back(pending),
            Claim::Input => self.joiners.push(pending),
            Claim::Interrupt => {
                self.barriers
                    .insert(pending.gid, (pending.order, pending.command));
            }
        }
    }

    /// The child answered request `gid`; `last` when no more answers to
    /// it follow. Returns the run id the answer names, if any.
    pub fn answered(&mut self, gid: GatewayId, answer: Answer, last: bool) -> Option<RunId> {
        let at = self.claims.iter().position(|c| c.gid == gid);
        let named = self
            .named
            .iter()
            .find(|(g, _)| *g == gid)
            .map(|(_, run)| run.clone());
        let run = match (answer, at) {
            (Answer::Now, Some(at)) => self.claims.remove(at).map(|claim| {
                let id = claim.run.unwrap_or_else(RunId::mint);
                self.active = Some(Run {
                    id: id.clone(),
                    members: Arc::from([claim.client]),
                });
                id
            }),
            (Answer::Next, Some(at)) => self.claims.remove(at).map(|mut claim| {
                let id = claim.run.get_or_insert_with(RunId::mint).clone();
                self.claims.push_front(claim);
                id
            }),
            (Answer::Queued, Some(at)) => {
                Some(self.claims[at].run.get_or_insert_with(RunId::mint).clone())
            }
            (Answer::NoRun, Some(at)) => {
                self.claims.remove(at);
                None
            }
            (Answer::NoRun, None) => {
                self.joiners.retain(|j| j.gid != gid);
                None
            }
            (Answer::Interrupted, _) => {
                if let Some((barrier, _)) = self.barriers.remove(&gid) {
                    self.claims.retain(|c| c.order > barrier);
                    self.joiners.retain(|c| c.order > barrier);
                }
                None
            }
            (_, Some(at)) => self.claims[at].run.clone(),
            (_, None) => named,
        };
        if last {
            self.barriers.remove(&gid);
            self.named.retain(|(g, _)| *g != gid);
        }
        run
    }

    /// A run-start event: the oldest claim's run begins, joined by the
    /// senders of input waiting for it.
    pub fn start(&mut self) -> &Run {
        let mut run = match self.claims.pop_front() {
            Some(claim) => {
                let id = claim.run.unwrap_or_else(RunId::mint);
                self.name(claim.gid, id.clone());
                Run {
                    id,
                    members: Arc::from([claim.client]),
                }
            }
            None => Run {
                id: RunId::mint(),
                members: self
                    .last
                    .as_ref()
                    .map_or_else(|| Arc::from([]), |r| r.members.clone()),
            },
        };
        for joiner in std::mem::take(&mut self.joiners) {
            run.members = with(&run.members, joiner.client);
            self.name(joiner.gid, run.id.clone());
        }
        self.active.insert(run)
    }

    /// The run in progress ended.
    pub fn end(&mut self) {
        if let Some(run) = self.active.take() {
            self.last = Some(run);
        }
    }

    /// The child is gone: nothing it queued will run.
    pub fn reset(&mut self) {
        self.end();
        self.claims.clear();
        self.joiners.clear();
        self.barriers.clear();
        self.named.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(run: Option<&Run>) -> Vec<ClientId> {
        run.map(|r| r.members.to_vec()).unwrap_or_default()
    }

    fn g(n: u64) -> GatewayId {
        GatewayId::Request(n)
    }

    fn c(n: u64) -> ClientId {
        ClientId::named(n)
    }

    #[test]
    fn zut_runs_begin_with_their_answer() {
        let mut book = RunBook::default();
        book.forwarded(g(1), "prompt", c(1), Claim::May);
        book.forwarded(g(2), "prompt", c(2), Claim::May);
        book.forwarded(g(3), "ping", c(2), Claim::None);
        assert_eq!(book.command(g(2)), Some("prompt"));
        assert_eq!(book.answered(g(2), Answer::NoRun, true), None);
        let id = book.answered(g(1), Answer::Now, true).unwrap();
        assert_eq!(book.active().map(|r| r.id.clone()), Some(id));
        assert_eq!(members(book.active()), [c(1)]);
        book.end();
        assert!(book.active().is_none());
        assert_eq!(members(book.last()), [c(1)]);
        assert!(Audience::Everyone.includes(c(9)));
        assert!(!book.last().unwrap().audience().includes(c(2)));
    }

    #[test]
    fn letscode_prompt_is_named_by_its_ack_and_done() {
        let mut book = RunBook::default();
        book.forwarded(g(4), "follow_up", c(2), Claim::May);
        book.forwarded(g(5), "prompt", c(1), Claim::May);
        let acked = book.answered(g(5), Answer::Next, false).unwrap();
        assert_eq!(book.start().id, acked, "the acked prompt runs first");
        assert_eq!(book.answered(g(5), Answer::Nothing, true), Some(acked));
        book.end();
        let queued = book.answered(g(4), Answer::Queued, false);
        assert_eq!(book.start().id, queued.unwrap());
        assert_eq!(members(book.active()), [c(2)], "the follow-up's sender");
    }

    #[test]
    fn steering_joins_the_run_in_progress() {
        let mut book = RunBook::default();
        book.forwarded(g(5), "prompt", c(1), Claim::May);
        let run = book.start().id.clone();
        book.forwarded(g(6), "steer", c(2), Claim::Join);
        assert_eq!(members(book.active()), [c(1), c(2)]);
        assert_eq!(book.answered(g(6), Answer::Queued, true), Some(run));
        book.end();
        book.forwarded(g(7), "steer", c(2), Claim::Join);
        book.start();
        assert_eq!(members(book.active()), [c(2)], "no run: it starts one");
    }

    #[test]
    fn zi_input_while_idle_joins_the_next_run() {
        let mut book = RunBook::default();
        book.forwarded(g(8), "session.prompt", c(3), Claim::Input);
        assert_eq!(book.answered(g(8), Answer::Queued, true), None);
        book.forwarded(g(9), "session.prompt", c(4), Claim::Input);
        book.answered(g(9), Answer::NoRun, true);
        book.forwarded(g(10), "session.prompt", c(1), Claim::May);
        // a's run starts before a's response arrives.
        let a = book.start().id.clone();
        assert_eq!(members(book.active()), [c(1), c(3)]);
        assert_eq!(book.answered(g(10), Answer::Queued, true), Some(a));
        book.end();
        // No claim left: a run continues the last one's audience.
        assert_eq!(members(Some(book.start())), [c(1), c(3)]);
    }

    #[test]
    fn an_interruption_discards_the_claims_before_it() {
        let mut book = RunBook::default();
        book.forwarded(g(10), "prompt", c(1), Claim::May);
        book.start();
        book.forwarded(g(11), "prompt", c(2), Claim::May);
        book.forwarded(g(12), "session.interrupt", c(1), Claim::Interrupt);
        book.forwarded(g(13), "prompt", c(3), Claim::May);
        book.end();
        assert_eq!(book.command(g(12)), Some("session.interrupt"));
        book.answered(g(12), Answer::Interrupted, true);
        assert_eq!(members(Some(book.start())), [c(3)]);
        book.reset();
        assert!(book.active().is_none());
        assert_eq!(
            members(Some(book.start())),
            [c(3)],
            "continues the last run"
        );
    }
}
