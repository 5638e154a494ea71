//! Prometheus metrics, all prefixed `corral_`, in one registry (plus the
//! `process_*` metrics of the gateway itself, and the memory headroom of
//! [`memory`] for alerts).
//!
//! Counters and histograms are updated where things happen (connections,
//! hubs, the supervisor). Gauges that describe the current set of children
//! (`children{state}`, `clients`, `child_resident_bytes`), the children's
//! CPU counter and the work off the event loop (`blocking_jobs`) are
//! computed when `/metrics` is scraped.
//! Label values come from small fixed sets only, except `project` on the
//! egress counter (bounded by the projects that exist, plus
//! [`EGRESS_UNKNOWN_PROJECT`]).

pub mod memory;
pub mod spares;

use prometheus::core::Collector;

use crate::auth::AuthFailure;
use crate::offload::{Jobs, Lane};
use prometheus::{
    Counter, Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGauge, IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Which hop a frame crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    ClientToGateway,
    GatewayToChild,
    ChildToGateway,
    GatewayToClient,
}

impl Direction {
    pub const ALL: [Direction; 4] = [
        Direction::ClientToGateway,
        Direction::GatewayToChild,
        Direction::ChildToGateway,
        Direction::GatewayToClient,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Direction::ClientToGateway => "client_to_gateway",
            Direction::GatewayToChild => "gateway_to_child",
            Direction::ChildToGateway => "child_to_gateway",
            Direction::GatewayToClient => "gateway_to_client",
        }
    }
}

/// Child states as `children{state}` reports them.
pub const CHILD_STATES: [&str; 6] = ["starting", "idle", "busy", "stopping", "backoff", "failed"];
/// Reasons of `child_exits_total{reason}`; `memory_limit` and
/// `pids_limit` are children killed for exceeding `--child-memory-max` or
/// `--child-pids-max`.
pub const EXIT_REASONS: [&str; 9] = [
    "normal",
    "crash",
    "killed",
    "idle",
    "health",
    "admin",
    "shutdown",
    "memory_limit",
    "pids_limit",
];
/// Reasons of `auth_failures_total{reason}` ([`AuthFailure`]):
/// `invalid_token` counts every token that was checked and wrong (at most
/// `--auth-failure-burst` + `--auth-failure-rate` per second from one
/// source), `throttled` attempts refused unchecked because their source's
/// failure budget was empty, `hello_too_large` a client that sent more
/// than `--max-hello-bytes` before authenticating, `forbidden` a valid
/// credential asking for a project outside its scope, a role it lacks, or
/// presented after it expired.
pub const AUTH_REASONS: [AuthFailure; 8] = AuthFailure::ALL;
/// Who sent an invalid frame (`invalid_frames_total{source}`).
pub const FRAME_SOURCES: [&str; 2] = ["client", "child"];
/// Why a frame was invalid (`invalid_frames_total{reason}`): not a JSON
/// object, a binary frame, or larger than the limit.
pub const FRAME_REASONS: [&str; 3] = ["malformed", "binary", "too_large"];
/// Why a connection was refused or closed early
/// (`connections_refused_total{reason}`): `max_connections` found every
/// place protected (it was served from the ops reserve, or refused),
/// `evicted` was closed to make room, `per_token` was an authenticated
/// WebSocket over `--max-connections-per-token`.
pub const REFUSAL_REASONS: [&str; 5] = [
    "max_connections",
    "header_timeout",
    "evicted",
    "no_descriptors",
    "per_token",
];
/// Reasons of `requests_refused_total{reason}`: over the per-client bound
/// of requests in flight, or the child's input queue is full.
pub const REQUEST_REFUSALS: [&str; 4] = ["in_flight", "child_busy", "rate_limit", "budget"];
/// `reason` labels of `corral_client_buffer_closes_total`: which byte
/// bound a client went over (the hub's `budget::Overflow`, whose tests
/// check it names exactly these).
pub const CLIENT_BUFFER_CLOSES: [&str; 2] = ["client_buffer", "total_client_buffer"];
/// `decision` labels of `egress_requests_total`: `allowed` by the policy,
/// or `refused` (by the policy, over a connection limit, a malformed
/// request, or a connection without a valid secret).
pub const EGRESS_DECISIONS: [&str; 2] = ["allowed", "refused"];
/// The `project` label of egress requests whose project is not known: a
/// connection without a valid secret, or over the total connection limit
/// before its secret was read. The parentheses keep it apart from every
/// project name, which may hold only letters, digits, `.`, `_` and `-`.
pub const EGRESS_UNKNOWN_PROJECT: &str = "(unknown)";
/// `scope` labels of the budget metrics ([`crate::spend::Scope`]): the
/// budgets' names (projects, identities) are not labels, since identity
/// names are unbounded; the admin API shows each budget.
pub const BUDGET_SCOPES: [&str; 2] = ["project", "identity"];
/// Outcomes of `audit_entries_total{outcome}`: `written` (durable in the
/// audit file), `dropped` (the queue was full, or the gateway stopping),
/// `failed` (the file could not be written).
pub const AUDIT_OUTCOMES: [&str; 3] = ["written", "dropped", "failed"];
/// Outcomes of `mcp_calls_total{outcome}`: the call's result, or a
/// failed one (the server's `isError`, a timeout, a crash, a refusal).
pub const MCP_OUTCOMES: [&str; 2] = ["ok", "error"];
/// Kinds of `tokens_total{kind}`.
pub const TOKEN_KINDS: [&str; 5] = ["input", "output", "reasoning", "cache_read", "cache_write"];

/// Every metric of the gateway.
pub struct Metrics {
    registry: Registry,
    pub children: IntGaugeVec,
    pub child_spawns: IntCounter,
    pub child_exits: IntCounterVec,
    pub child_restarts: IntCounter,
    pub child_spawn_seconds: Histogram,
    pub crash_loops: IntCounter,
    pub clients: IntGauge,
    pub client_connections: IntCounter,
    pub auth_failures: IntCounterVec,
    pub slow_client_catchups: IntCounter,
    pub slow_client_disconnects: IntCounter,
    /// Bytes queued for clients and not yet written to their sockets.
    pub client_buffer_bytes: IntGauge,
    /// Clients closed for their outbox bytes, by the bound they went over.
    pub client_buffer_closes: IntCounterVec,
    pub replayed_events: IntCounter,
    pub replay_gaps: IntCounter,
    pub frames: IntCounterVec,
    pub bytes: IntCounterVec,
    /// By `source` and `reason`; count through [`Metrics::invalid_frame`].
    invalid_frames: IntCounterVec,
    /// Open TCP connections of the main listener.
    pub connections: IntGauge,
    pub connections_refused: IntCounterVec,
    /// Client requests the hub refused without sending them to the
    /// child, by `reason`; count through [`Metrics::requests_refused`].
    requests_refused: IntCounterVec,
    /// Authentications accepted although their source's failure budget
    /// was empty, because the credential had succeeded from there before.
    pub auth_remembered: IntCounter,
    /// Sources whose failure budget is empty (set when scraped).
    pub auth_throttled_sources: IntGauge,
    pub request_duration: HistogramVec,
    pub prompt_duration: Histogram,
    pub tokens: IntCounterVec,
    pub cost_usd: Counter,
    pub child_resident_bytes: IntGauge,
    pub child_cpu_seconds: Counter,
    /// Jobs off the event loop by `lane` and `state` (set when scraped).
    blocking_jobs: IntGaugeVec,
    /// Tool requests through the egress proxy by `project` and
    /// `decision`; count through [`Metrics::egress_request`].
    egress_requests: IntCounterVec,
    /// Open tool connections to the egress proxy (each holds two of the
    /// gateway's descriptors while it tunnels or forwards).
    pub egress_connections: IntGauge,
    /// Requests to the model-key broker by `provider` and `outcome`
    /// ([`crate::broker::Outcome`]); no series until the first request, so
    /// a gateway without the broker shows none.
    pub broker_requests: IntCounterVec,
    /// USD spent since the last reset, summed over the budgets of each
    /// `scope`, as every gateway on the state directory counts it (set at
    /// each sync of the ledger).
    pub budget_spent: GaugeVec,
    /// Budgets crossed by a charge of this gateway, by `scope`.
    pub budget_exhausted: IntCounterVec,
    /// Model calls the broker priced 0: the catalogue does not know the
    /// model.
    pub budget_unpriced_calls: IntCounter,
    /// Audit log entries by outcome ([`AUDIT_OUTCOMES`]); the writer
    /// thread and `Audit::record` count into it.
    pub audit_entries: IntCounterVec,
    /// Streamable HTTP connections of the ACP endpoint
    /// ([`crate::acp_remote`]) open now.
    pub acp_http_connections: IntGauge,
    /// Streamable HTTP connections of the ACP endpoint ended by the
    /// gateway because no stream was open and no request came for their
    /// idle grace.
    pub acp_http_idle_closes: IntCounter,
    /// MCP tool calls by operator `server` and `outcome` ([`MCP_OUTCOMES`]);
    /// count through [`Metrics::mcp_call`].
    mcp_calls: IntCounterVec,
    /// MCP tool calls' time from start to end, by operator `server`.
    mcp_call_seconds: HistogramVec,
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace("corral")
}

fn hopts(name: &str, help: &str, buckets: Vec<f64>) -> HistogramOpts {
    HistogramOpts::new(name, help)
        .namespace("corral")
        .buckets(buckets)
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let latency = vec![
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0,
        ];
        let long = vec![
            0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
        ];
        let mcp_latency = vec![
            0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
        ];
        let metrics = Metrics {
            registry: Registry::new(),
            children: IntGaugeVec::new(opts("children", "Children by state."), &["state"])?,
            child_spawns: IntCounter::with_opts(opts("child_spawns_total", "Child processes spawned."))?,
            child_exits: IntCounterVec::new(opts("child_exits_total", "Child exits by reason."), &["reason"])?,
            child_restarts: IntCounter::with_opts(opts("child_restarts_total", "Restarts after a crash or on request."))?,
            child_spawn_seconds: Histogram::with_opts(hopts(
                "child_spawn_seconds",
                "Time from spawn to the child's hello answered.",
                latency.clone(),
            ))?,
            crash_loops: IntCounter::with_opts(opts("crash_loops_total", "Times a child was marked failed for crash-looping."))?,
            clients: IntGauge::with_opts(opts("clients", "Attached WebSocket clients."))?,
            client_connections: IntCounter::with_opts(opts("client_connections_total", "Clients attached since start."))?,
            auth_failures: IntCounterVec::new(opts("auth_failures_total", "Refused authentications by reason."), &["reason"])?,
            slow_client_catchups: IntCounter::with_opts(opts(
                "slow_client_catchups_total",
                "Times a client fell behind the live stream and was caught up from the replay ring.",
            ))?,
            slow_client_disconnects: IntCounter::with_opts(opts(
                "slow_client_disconnects_total",
                "Clients disconnected as too slow: they fell out of the replay ring or went over an outbox byte bound.",
            ))?,
            client_buffer_bytes: IntGauge::with_opts(opts(
                "client_buffer_bytes",
                "Bytes queued for clients and not yet written to their sockets (bounded by --total-client-buffer-bytes).",
            ))?,
            client_buffer_closes: IntCounterVec::new(opts(
                "client_buffer_closes_total",
                "Clients closed with 4000 for the bytes waiting for them: over --client-buffer-bytes (client_buffer) or holding the most when all clients together were over --total-client-buffer-bytes (total_client_buffer).",
            ), &["reason"])?,
            replayed_events: IntCounter::with_opts(opts("replayed_events_total", "Events replayed to reconnecting clients."))?,
            replay_gaps: IntCounter::with_opts(opts("replay_gaps_total", "Reconnects whose missed events were partly evicted."))?,
            frames: IntCounterVec::new(opts("frames_total", "Frames by hop."), &["direction"])?,
            bytes: IntCounterVec::new(opts("bytes_total", "Frame bytes by hop."), &["direction"])?,
            invalid_frames: IntCounterVec::new(opts("invalid_frames_total", "Invalid frames by source and reason."), &["source", "reason"])?,
            connections: IntGauge::with_opts(opts("connections", "Open connections of the main listener, and Streamable HTTP connections of the ACP endpoint (each holds a place under --max-connections)."))?,
            connections_refused: IntCounterVec::new(opts(
                "connections_refused_total",
                "Connections refused or closed early: over --max-connections with every connection authenticated (max_connections), closed to make room (evicted), no headers within --header-timeout (header_timeout), no descriptor left (no_descriptors), a WebSocket session over --max-connections-per-token (per_token).",
            ), &["reason"])?,
            requests_refused: IntCounterVec::new(opts(
                "requests_refused_total",
                "Client requests refused by the gateway without reaching the agent: over --max-client-requests in flight (in_flight), the agent's input queue was full (child_busy), a prompt over its identity's --max-prompts-per-minute (rate_limit) or over a spent budget (budget).",
            ), &["reason"])?,
            auth_remembered: IntCounter::with_opts(opts("auth_remembered_total", "Authentications accepted while their source's failure budget was empty, because the same credential had succeeded from that source before."))?,
            auth_throttled_sources: IntGauge::with_opts(opts("auth_throttled_sources", "Source addresses whose failure budget is empty: their next attempts are refused unchecked (unless with a credential that worked from there)."))?,
            request_duration: HistogramVec::new(
                hopts("request_duration_seconds", "Request forwarded to the child until its response.", latency),
                &["command"],
            )?,
            prompt_duration: Histogram::with_opts(hopts(
                "prompt_duration_seconds",
                "A run from its started response to its done.",
                long,
            ))?,
            tokens: IntCounterVec::new(opts("tokens_total", "Model tokens reported by the children, by kind."), &["kind"])?,
            cost_usd: Counter::with_opts(opts("cost_usd_total", "Model cost reported by the children, in US dollars."))?,
            child_resident_bytes: IntGauge::with_opts(opts("child_resident_bytes", "Resident memory of all children."))?,
            child_cpu_seconds: Counter::with_opts(opts("child_cpu_seconds_total", "CPU time used by children, live and exited."))?,
            broker_requests: IntCounterVec::new(opts("broker_requests_total", "Requests to the model-key broker by provider (anthropic, openai, none: no provider path) and outcome (forwarded: the provider answered, whatever its status; unauthorized: no or an unknown placeholder key; refused: not a provider path or method; no_key: the gateway holds no key for that provider; too_large; slow: the body did not arrive in time; busy: the project had too many calls open; upstream_error: the provider could not be reached)."), &["provider", "outcome"])?,
            blocking_jobs: IntGaugeVec::new(opts("blocking_jobs", "Blocking work run off the event loop, by lane (files: project and state directories; proc: /proc reads) and state (running, waiting for one of the lane's places)."), &["lane", "state"])?,
            egress_requests: IntCounterVec::new(opts(
                "egress_requests_total",
                "Tool requests through the egress proxy, by project and decision: allowed by the policy, or refused (by the policy, over a connection limit, malformed, or without a valid secret: project \"(unknown)\").",
            ), &["project", "decision"])?,
            egress_connections: IntGauge::with_opts(opts("egress_connections", "Open tool connections to the egress proxy."))?,
            budget_spent: GaugeVec::new(opts("budget_spent_usd", "USD spent on models since the budgets' last reset, summed over the budgets of each scope (project: every project; identity: every token name or JWT subject), as all gateways on the state directory count it."), &["scope"])?,
            budget_exhausted: IntCounterVec::new(opts("budget_exhausted_total", "Budgets found spent when this gateway counted a model call's cost (the call crossed the limit), by scope (project or identity)."), &["scope"])?,
            budget_unpriced_calls: IntCounter::with_opts(opts("budget_unpriced_calls_total", "Model calls through the broker priced $0 because the model catalogue has no price for the model."))?,
            audit_entries: IntCounterVec::new(opts("audit_entries_total", "Audit log entries by outcome: written (durable in --audit-log), dropped (its queue was full: the audit never stalls the gateway), failed (the file could not be written)."), &["outcome"])?,
            acp_http_connections: IntGauge::with_opts(opts(
                "acp_http_connections",
                "Open Streamable HTTP connections of the ACP endpoint (/v1/projects/NAME/acp); its WebSocket clients count in clients.",
            ))?,
            acp_http_idle_closes: IntCounter::with_opts(opts(
                "acp_http_idle_closes_total",
                "Streamable HTTP connections of the ACP endpoint closed because no stream was open and no request came within their idle grace.",
            ))?,
            mcp_calls: IntCounterVec::new(opts(
                "mcp_calls_total",
                "MCP tool calls of agents, by server (only names of --mcp-servers) and outcome (ok, or error: the server's isError, a timeout, a crash, a refusal).",
            ), &["server", "outcome"])?,
            mcp_call_seconds: HistogramVec::new(
                hopts("mcp_call_seconds", "MCP tool calls from their start to their result, by server (only names of --mcp-servers).", mcp_latency),
                &["server"],
            )?,
        };
        metrics.register_all()?;
        metrics.initialise_labels();
        Ok(metrics)
    }

    fn register_all(&self) -> Result<(), prometheus::Error> {
        let collectors: Vec<Box<dyn Collector>> = vec![
            Box::new(self.children.clone()),
            Box::new(self.child_spawns.clone()),
            Box::new(self.child_exits.clone()),
            Box::new(self.child_restarts.clone()),
            Box::new(self.child_spawn_seconds.clone()),
            Box::new(self.crash_loops.clone()),
            Box::new(self.clients.clone()),
            Box::new(self.client_connections.clone()),
            Box::new(self.auth_failures.clone()),
            Box::new(self.slow_client_catchups.clone()),
            Box::new(self.slow_client_disconnects.clone()),
            Box::new(self.client_buffer_bytes.clone()),
            Box::new(self.client_buffer_closes.clone()),
            Box::new(self.replayed_events.clone()),
            Box::new(self.replay_gaps.clone()),
            Box::new(self.frames.clone()),
            Box::new(self.bytes.clone()),
            Box::new(self.invalid_frames.clone()),
            Box::new(self.connections.clone()),
            Box::new(self.connections_refused.clone()),
            Box::new(self.requests_refused.clone()),
            Box::new(self.auth_remembered.clone()),
            Box::new(self.auth_throttled_sources.clone()),
            Box::new(self.request_duration.clone()),
            Box::new(self.prompt_duration.clone()),
            Box::new(self.tokens.clone()),
            Box::new(self.cost_usd.clone()),
            Box::new(self.child_resident_bytes.clone()),
            Box::new(self.child_cpu_seconds.clone()),
            Box::new(self.blocking_jobs.clone()),
            Box::new(self.egress_requests.clone()),
            Box::new(self.egress_connections.clone()),
            Box::new(self.broker_requests.clone()),
            Box::new(self.budget_spent.clone()),
            Box::new(self.budget_exhausted.clone()),
            Box::new(self.budget_unpriced_calls.clone()),
            Box::new(self.audit_entries.clone()),
            Box::new(self.acp_http_connections.clone()),
            Box::new(self.acp_http_idle_closes.clone()),
            Box::new(self.mcp_calls.clone()),
            Box::new(self.mcp_call_seconds.clone()),
        ];
        for collector in collectors {
            self.registry.register(collector)?;
        }
        self.registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        self.registry
            .register(Box::new(memory::MemoryCollector::new()?))?;
        self.registry
            .register(Box::new(spares::SparesCollector::new()?))?;
        Ok(())
    }

    /// Every label value exists from the start, so series show 0 instead of
    /// being absent until the first event.
    fn initialise_labels(&self) {
        for state in CHILD_STATES {
            self.children.with_label_values(&[state]).set(0);
        }
        for reason in EXIT_REASONS {
            self.child_exits.with_label_values(&[reason]);
        }
        for reason in AUTH_REASONS {
            self.auth_failures.with_label_values(&[reason.as_label()]);
        }
        for direction in Direction::ALL {
            self.frames.with_label_values(&[direction.as_str()]);
            self.bytes.with_label_values(&[direction.as_str()]);
        }
        for source in FRAME_SOURCES {
            for reason in FRAME_REASONS {
                self.invalid_frames.with_label_values(&[source, reason]);
            }
        }
        for reason in REFUSAL_REASONS {
            self.connections_refused.with_label_values(&[reason]);
        }
        for kind in TOKEN_KINDS {
            self.tokens.with_label_values(&[kind]);
        }
        for reason in REQUEST_REFUSALS {
            self.requests_refused.with_label_values(&[reason]);
        }
        for lane in Lane::ALL {
            self.set_blocking_jobs(lane, Jobs::default());
        }
        for scope in BUDGET_SCOPES {
            self.budget_spent.with_label_values(&[scope]).set(0.0);
            self.budget_exhausted.with_label_values(&[scope]);
        }
        for outcome in AUDIT_OUTCOMES {
            self.audit_entries.with_label_values(&[outcome]);
        }
        for why in CLIENT_BUFFER_CLOSES {
            self.client_buffer_closes.with_label_values(&[why]);
        }
        // Projects appear with their first request; this series makes the
        // family visible (and alertable) from the start.
        self.egress_requests
            .with_label_values(&[EGRESS_UNKNOWN_PROJECT, "refused"]);
    }

    /// Counts one egress request of `project` (or
    /// [`EGRESS_UNKNOWN_PROJECT`]), allowed or refused.
    pub fn egress_request(&self, project: &str, allowed: bool) {
        let decision = EGRESS_DECISIONS[usize::from(!allowed)];
        self.egress_requests
            .with_label_values(&[project, decision])
            .inc();
    }

    /// Egress requests counted for `project` with `decision` (one of
    /// [`EGRESS_DECISIONS`]), for `/v1/stats` and tests.
    pub fn egress_requests_of(&self, project: &str, decision: &str) -> u64 {
        self.egress_requests
            .with_label_values(&[project, decision])
            .get()
    }

    /// Counts one frame of `len` bytes crossing `direction`.
    pub fn frame(&self, direction: Direction, len: usize) {
        self.frames.with_label_values(&[direction.as_str()]).inc();
        self.bytes
            .with_label_values(&[direction.as_str()])
            .inc_by(u64::try_from(len).unwrap_or(u64::MAX));
    }

    pub fn auth_failure(&self, reason: AuthFailure) {
        self.auth_failures
            .with_label_values(&[reason.as_label()])
            .inc();
    }

    /// Counts an invalid frame; `source` and `reason` come from
    /// [`FRAME_SOURCES`] and [`FRAME_REASONS`].
    pub fn invalid_frame(&self, source: &'static str, reason: &'static str) {
        self.invalid_frames
            .with_label_values(&[source, reason])
            .inc();
    }

    /// Invalid frames from `source`, whatever the reason (for `/v1/stats`).
    pub fn invalid_frames_from(&self, source: &str) -> u64 {
        FRAME_REASONS
            .iter()
            .map(|reason| {
                self.invalid_frames
                    .with_label_values(&[source, reason])
                    .get()
            })
            .sum()
    }

    /// Counts a client request refused by the hub; `reason` is one of
    /// [`REQUEST_REFUSALS`].
    pub fn requests_refused(&self, reason: &'static str) {
        self.requests_refused.with_label_values(&[reason]).inc();
    }

    pub fn connection_refused(&self, reason: &'static str) {
        self.connections_refused.with_label_values(&[reason]).inc();
    }

    /// Counts an MCP call of the operator's `server` (the caller checks
    /// the name is one) that took `seconds`.
    pub fn mcp_call(&self, server: &str, ok: bool, seconds: f64) {
        let outcome = MCP_OUTCOMES[usize::from(!ok)];
        self.mcp_calls.with_label_values(&[server, outcome]).inc();
        self.mcp_call_seconds
            .with_label_values(&[server])
            .observe(seconds);
    }

    pub fn child_exit(&self, reason: &'static str) {
        self.child_exits.with_label_values(&[reason]).inc();
    }

    /// Observes a request's round trip under its command's `label` (the
    /// dialect's: known names, and one label for the rest).
    pub fn request_done(&self, label: &str, seconds: f64) {
        self.request_duration
            .with_label_values(&[label])
            .observe(seconds);
    }

    /// Adds a `usage` event's per-turn counters.
    pub fn usage(&self, event: &serde_json::Value) {
        for kind in TOKEN_KINDS {
            if let Some(n) = event.get(kind).and_then(serde_json::Value::as_u64) {
                self.tokens.with_label_values(&[kind]).inc_by(n);
            }
        }
        if let Some(cost) = event.get("cost_usd").and_then(serde_json::Value::as_f64) {
            if cost.is_finite() && cost > 0.0 {
                self.cost_usd.inc_by(cost);
            }
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let families = self.registry.gather();
        if let Err(e) = TextEncoder::new().encode(&families, &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }

    /// Sets the `blocking_jobs` gauges of `lane`.
    pub fn set_blocking_jobs(&self, lane: Lane, jobs: Jobs) {
        let set = |state: &str, n: i64| {
            self.blocking_jobs
                .with_label_values(&[lane.as_str(), state])
                .set(n);
        };
        set("running", jobs.running);
        set("waiting", jobs.waiting);
    }

    /// Current value of a labelled counter (for `/v1/stats`).
    pub fn counter_value(vec: &IntCounterVec, label: &str) -> u64 {
        vec.with_label_values(&[label]).get()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_every_family_with_the_prefix() {
        let metrics = Metrics::new().unwrap();
        metrics.frame(Direction::ChildToGateway, 10);
        metrics.usage(
            &serde_json::json!({"input": 3, "output": 4, "reasoning": null, "cost_usd": 0.5}),
        );
        metrics.request_done("ping", 0.001);
        metrics.request_done("other", 0.001);
        let text = metrics.render();
        for name in [
            "corral_children{state=\"busy\"} 0",
            "corral_frames_total{direction=\"child_to_gateway\"} 1",
            "corral_bytes_total{direction=\"child_to_gateway\"} 10",
            "corral_tokens_total{kind=\"output\"} 4",
            "corral_cost_usd_total 0.5",
            "corral_request_duration_seconds_count{command=\"other\"} 1",
            "corral_child_exits_total{reason=\"crash\"} 0",
            "corral_auth_failures_total{reason=\"hello_timeout\"} 0",
            "corral_blocking_jobs{lane=\"files\",state=\"waiting\"} 0",
            "corral_egress_requests_total{decision=\"refused\",project=\"(unknown)\"} 0",
            "corral_egress_connections 0",
            "corral_audit_entries_total{outcome=\"dropped\"} 0",
            "corral_memory_limit_bytes ",
            "corral_memory_available_bytes ",
            "process_open_fds ",
            "process_max_fds ",
        ] {
            assert!(text.contains(name), "missing {name}");
        }
    }
}
