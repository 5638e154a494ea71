//! The admin API (admin token as `Authorization: Bearer`, JSON):
//! - `GET /v1/projects` — every running project: state, pid, uptime,
//!   restarts, last exit, busy and since when, clients, model, cumulative
//!   usage and cost, resident memory and CPU. With `?all=true`, also every
//!   project directory that has no child (`running: false`).
//! - `GET /v1/projects/{project}` — the same for one project, plus each
//!   client's role and lag and the last lines of the child's stderr.
//! - `POST /v1/projects/{project}/start` — starts the child without a
//!   client: 200 once it is ready (or if it ran already), 400/404 for a
//!   name a client could not attach to, 503 when no slot is free.
//! - `POST /v1/projects/{project}/restart|stop|abort` — 202 when sent.
//! - `GET|PUT|DELETE /v1/projects/{project}/egress` — the project's
//!   egress override (`crate::egress_admin`).
//! - `GET /v1/events[?after=SEQ]` — recent gateway events (children
//!   started and exited, crash loops, slow clients closed, egress
//!   refusals).
//! - `GET /v1/stats` — gateway-wide counters for the dashboard, and how
//!   children are confined (`sandbox`).
//! - `GET /metrics` — Prometheus text (unless `--metrics-listen` serves it
//!   elsewhere without a token).
//! - `GET /v1/openapi.json` — an OpenAPI description of these endpoints.
//!
//! Every start, restart, stop and abort is recorded in the audit log
//! with the admin who asked (`crate::audit`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::access::{Action as Admin, Identity};
use crate::audit::{self, Entry, Outcome};
use crate::client_addr::ClientAddr;
use crate::guard::{self, admin_refusal};
use crate::hub::{AttachError, ChildState, HubHandle, HubStatus, StopReason};
use crate::metrics::{Direction, Metrics, CHILD_STATES, TOKEN_KINDS};
use crate::offload::{self, Lane, WorkLost};
use crate::process::StderrTail;
use crate::procfs;
use crate::projects;
use crate::registry::RegistryError;
use crate::state::AppState;

const OPENAPI: &str = include_str!("openapi.json");

/// Project directories `?all=true` lists at most.
const MAX_LISTED_DIRS: usize = 10_000;

/// How long `start` waits for the child to be ready before answering 202
/// (it keeps starting): under the HTTP timeout of every admin request.
const START_WAIT: Duration = Duration::from_secs(20);

pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/projects", get(list))
        .route("/v1/projects/{project}", get(detail))
        .route("/v1/projects/{project}/{action}", post(action))
        .route("/v1/stats", get(stats))
        .route("/v1/events", get(events))
        .merge(crate::egress_admin::routes())
        .merge(crate::tokens_admin::routes())
        .merge(crate::budget_admin::routes())
        // Every route above answers only the admin token (a success
        // proves it); the description below is public.
        .route_layer(axum::middleware::from_fn(
            crate::layers::protect_admin_connection,
        ))
        .route("/v1/openapi.json", get(openapi))
}

/// `GET /metrics` on the main listener (admin token required).
pub async fn metrics(
    State(state): State<Arc<AppState>>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = admin_refusal(&state, &headers, addr, Admin::AdministerGateway) {
        return refused;
    }
    metrics_text(state).await
}

/// The Prometheus exposition, with the scrape-time gauges refreshed, off
/// the event loop (it walks `/proc` for every child).
pub async fn metrics_text(state: Arc<AppState>) -> Response {
    let rendered = offload::run(Lane::Proc, move || {
        refresh_gauges(&state);
        state.metrics.render()
    })
    .await;
    match rendered {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                "text/plain; version=0.0.4; charset=utf-8",
            )],
            text,
        )
            .into_response(),
        Err(lost) => (StatusCode::SERVICE_UNAVAILABLE, format!("{lost}\n")).into_response(),
    }
}

/// The answer when work off the event loop did not finish.
fn lost(lost: WorkLost) -> Response {
    let body = Json(json!({"error": lost.to_string()}));
    (StatusCode::SERVICE_UNAVAILABLE, body).into_response()
}

/// The dashboard's state label of a child.
fn state_label(status: &HubStatus) -> Option<&'static str> {
    match status.state {
        ChildState::Starting => Some("starting"),
        ChildState::Ready if status.busy => Some("busy"),
        ChildState::Ready => Some("idle"),
        ChildState::Stopping => Some("stopping"),
        ChildState::Backoff => Some("backoff"),
        ChildState::Failed => Some("failed"),
        ChildState::Exited => None,
    }
}

/// Sets the gauges that describe the current children (reads `/proc`:
/// call it off the event loop). One refresh at a time: the CPU counter is
/// advanced by what it lacks, and two refreshes at once (two scrapes, or a
/// scrape and the dashboard's stats) would both add the same difference.
fn refresh_gauges(state: &AppState) {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let metrics: &Metrics = &state.metrics;
    let statuses = state.registry.list();
    for label in CHILD_STATES {
        let count = statuses
            .iter()
            .filter(|s| state_label(s) == Some(label))
            .count();
        metrics
            .children
            .with_label_values(&[label])
            .set(count as i64);
    }
    metrics
        .clients
        .set(statuses.iter().map(|s| s.clients as i64).sum());
    let throttled = state.throttle.throttled_sources(std::time::Instant::now());
    metrics
        .auth_throttled_sources
        .set(i64::try_from(throttled).unwrap_or(i64::MAX));
    let pids: Vec<u32> = statuses.iter().filter_map(|s| s.pid).collect();
    let rss: u64 = pids
        .iter()
        .filter_map(|pid| procfs::tree_resident_bytes(*pid))
        .sum();
    metrics
        .child_resident_bytes
        .set(i64::try_from(rss).unwrap_or(i64::MAX));
    let cpu = procfs::reaped_children_cpu_seconds()
        + pids
            .iter()
            .filter_map(|pid| procfs::tree_cpu_seconds(*pid))
            .sum::<f64>();
    let delta = cpu - metrics.child_cpu_seconds.get();
    if delta > 0.0 {
        metrics.child_cpu_seconds.inc_by(delta);
    }
    for lane in Lane::ALL {
        metrics.set_blocking_jobs(lane, lane.jobs());
    }
}

/// One project's JSON (reads `/proc`: call it off the event loop).
fn project_json(status: &HubStatus, detailed: bool) -> Value {
    let now = SystemTime::now();
    let secs_since = |t: Option<SystemTime>| {
        t.and_then(|t| now.duration_since(t).ok())
            .map(|d| d.as_secs())
    };
    let cost = status
        .usage
        .as_ref()
        .and_then(|u| u.get("cost_usd"))
        .and_then(Value::as_f64)
        .unwrap_or(0.0);
    let mut out = json!({
        "project": status.project,
        "running": true,
        "pid": status.pid,
        "state": status.state,
        "busy": status.busy,
        "busy_since_secs": secs_since(status.busy_since),
        "clients": status.clients,
        "restarts": status.restarts,
        "uptime_secs": status.pid.and(secs_since(status.ready_since)),
        "last_exit": status.last_exit,
        "model": status.model,
        "usage": status.usage,
        "cost_usd": cost,
        "rss_bytes": status.pid.and_then(procfs::tree_resident_bytes),
        "cpu_seconds": status.pid.and_then(procfs::tree_cpu_seconds),
        "last_seq": status.last_seq,
        "mcp": status.mcp,
    });
    if detailed {
        let clients: Vec<Value> = status
            .client_list
            .iter()
            .map(|c| json!({"client_id": c.client.to_string(), "role": c.role, "lag": c.lag(status.last_seq)}))
            .collect();
        let tail: Vec<String> = status
            .stderr_tail
            .as_ref()
            .map(StderrTail::lines)
            .unwrap_or_default();
        out["clients_detail"] = json!(clients);
        out["stderr_tail"] = json!(tail);
    }
    out
}

#[derive(Debug, Default, serde::Deserialize)]
struct ListQuery {
    /// Also list project directories that have no child.
    #[serde(default)]
    all: bool,
}

async fn list(
    State(state): State<Arc<AppState>>,
    Query(query): Query<ListQuery>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    let who = match guard::admin(&state, &headers, addr, Admin::ListProjects) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let mut statuses = state.registry.list();
    statuses.retain(|s| who.sees(&s.project));
    let listed = offload::run(Lane::Proc, move || {
        statuses
            .iter()
            .map(|s| project_json(s, false))
            .collect::<Vec<Value>>()
    });
    let mut projects = match listed.await {
        Ok(projects) => projects,
        Err(e) => return lost(e),
    };
    let dialect = state.dialect.rules().name();
    if !query.all {
        return Json(json!({ "projects": projects, "dialect": dialect })).into_response();
    }
    let root = state.projects_root.clone();
    let listed = offload::run(Lane::Files, move || projects::list(&root, MAX_LISTED_DIRS)).await;
    let Ok(Ok((names, truncated))) = listed else {
        tracing::warn!("cannot read the projects root");
        let error = "cannot read the projects root";
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(json!({ "error": error })),
        )
            .into_response();
    };
    let running: std::collections::HashSet<String> = projects
        .iter()
        .filter_map(|p| p["project"].as_str().map(str::to_string))
        .collect();
    projects.extend(
        names
            .into_iter()
            .filter(|name| !running.contains(name) && who.sees(name))
            .map(|name| json!({"project": name, "running": false, "state": "stopped"})),
    );
    projects.sort_by(|a, b| a["project"].as_str().cmp(&b["project"].as_str()));
    Json(json!({ "projects": projects, "truncated": truncated, "dialect": dialect }))
        .into_response()
}

/// `POST /v1/projects/{project}/start`: the name is checked as a client's
/// attach checks it; the start runs on (and is not cancelled with) this
/// request, so an answer after [`START_WAIT`] says it is still starting.
async fn start(state: &AppState, project: String, who: Identity) -> Response {
    let dir = match projects::lookup(&state.projects_root, &project).await {
        Ok(dir) => dir,
        Err(e) => {
            let status = StatusCode::from_u16(e.http_status()).unwrap_or(StatusCode::NOT_FOUND);
            return (status, Json(json!({"error": e.to_string()}))).into_response();
        }
    };
    let registry = state.registry.clone();
    let name = project.clone();
    let task = state
        .shutdown
        .spawn(async move { registry.start(&name, dir, Arc::new(who)).await });
    let error = match tokio::time::timeout(START_WAIT, task).await {
        Ok(Ok(Ok(()))) => {
            tracing::info!(%project, "admin action: start");
            return Json(json!({"ok": true})).into_response();
        }
        Err(_) => {
            let body = json!({"ok": true, "starting": true});
            return (StatusCode::ACCEPTED, Json(body)).into_response();
        }
        Ok(Err(_)) => {
            let error = "the start failed";
            return (
                StatusCode::INTERNAL_SERVER_ERROR,
                Json(json!({"error": error})),
            )
                .into_response();
        }
        Ok(Ok(Err(error))) => error,
    };
    tracing::warn!(%project, "admin start refused: {error}");
    let status = match &error {
        RegistryError::Full(_)
        | RegistryError::ShuttingDown
        | RegistryError::Attach(AttachError::Gone | AttachError::Unavailable(_)) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        RegistryError::Attach(AttachError::Elsewhere(_) | AttachError::CrashLoop(_)) => {
            StatusCode::CONFLICT
        }
        RegistryError::Attach(AttachError::StartFailed(_)) => StatusCode::BAD_GATEWAY,
    };
    (status, Json(json!({"error": error.to_string()}))).into_response()
}

/// `entry` with the outcome `answer` says: ok, or an error with its
/// status.
fn outcome_of(entry: Entry, answer: &Response) -> Entry {
    let status = answer.status();
    match status.is_success() {
        true => entry,
        false => entry
            .outcome(Outcome::Error)
            .detail("status", status.as_u16()),
    }
}

fn not_running(project: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(json!({"error": format!("project {project:?} has no running agent")})),
    )
        .into_response()
}

/// The running hub of `project`, or the response to send instead.
fn hub(
    state: &AppState,
    headers: &HeaderMap,
    addr: ClientAddr,
    project: &str,
) -> Result<HubHandle, Box<Response>> {
    if let Some(refused) = admin_refusal(state, headers, addr, Admin::Administer(project)) {
        return Err(Box::new(refused));
    }
    state
        .registry
        .get(project)
        .ok_or_else(|| Box::new(not_running(project)))
}

async fn detail(
    State(state): State<Arc<AppState>>,
    Path(project): Path<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    match hub(&state, &headers, addr, &project) {
        Ok(hub) => {
            let status = hub.status();
            match offload::run(Lane::Proc, move || project_json(&status, true)).await {
                Ok(json) => Json(json).into_response(),
                Err(e) => lost(e),
            }
        }
        Err(response) => *response,
    }
}

/// What `POST /v1/projects/{project}/{action}` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Start the child without a client (no hub needed beforehand).
    Start,
    /// Something the project's running hub does.
    OnHub(HubAction),
}

/// An action on a running project's hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HubAction {
    Restart,
    Stop,
    Abort,
}

impl Action {
    /// What the audit log calls it.
    fn audited(self) -> audit::Action {
        match self {
            Action::Start => audit::Action::AdminStart,
            Action::OnHub(HubAction::Restart) => audit::Action::AdminRestart,
            Action::OnHub(HubAction::Stop) => audit::Action::AdminStop,
            Action::OnHub(HubAction::Abort) => audit::Action::AdminAbort,
        }
    }

    /// The action named by the path segment, if it is one.
    fn parse(name: &str) -> Option<Action> {
        Some(match name {
            "start" => Action::Start,
            "restart" => Action::OnHub(HubAction::Restart),
            "stop" => Action::OnHub(HubAction::Stop),
            "abort" => Action::OnHub(HubAction::Abort),
            _ => return None,
        })
    }
}

/// `POST /v1/projects/{project}/{action}`: start, restart, stop or abort.
/// An unknown action is said only to the admin token, after the project.
async fn action(
    State(state): State<Arc<AppState>>,
    Path((project, action)): Path<(String, String)>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    let who = match guard::admin(&state, &headers, addr, Admin::Administer(&project)) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let audited = |audit: Action| {
        Entry::new(audit.audited())
            .by(&who)
            .source(addr.0)
            .project(&project)
    };
    let on_hub = match Action::parse(&action) {
        Some(Action::Start) => {
            let entry = audited(Action::Start);
            let answer = start(&state, project, who.clone()).await;
            state.audit.record(outcome_of(entry, &answer));
            return answer;
        }
        Some(Action::OnHub(on_hub)) => Some(on_hub),
        None => None,
    };
    let Some(hub) = state.registry.get(&project) else {
        if let Some(on_hub) = on_hub {
            let entry = audited(Action::OnHub(on_hub)).outcome(Outcome::Error);
            state.audit.record(entry.detail("error", "not_running"));
        }
        return not_running(&project);
    };
    let Some(on_hub) = on_hub else {
        let error = format!("unknown action {action:?}; use start, restart, stop or abort");
        return (StatusCode::NOT_FOUND, Json(json!({ "error": error }))).into_response();
    };
    state.audit.record(audited(Action::OnHub(on_hub)));
    match on_hub {
        HubAction::Restart => hub.restart().await,
        // The stop is graceful and may take the stop grace; answer now.
        HubAction::Stop => drop(
            state
                .shutdown
                .spawn(async move { hub.stop(StopReason::Admin).await }),
        ),
        HubAction::Abort => hub.abort().await,
    }
    tracing::info!(%project, %action, "admin action");
    (StatusCode::ACCEPTED, Json(json!({"ok": true}))).into_response()
}

async fn stats(
    State(state): State<Arc<AppState>>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    if let Some(refused) = admin_refusal(&state, &headers, addr, Admin::AdministerGateway) {
        return refused;
    }
    let refreshed = state.clone();
    if let Err(e) = offload::run(Lane::Proc, move || refresh_gauges(&refreshed)).await {
        return lost(e);
    }
    let metrics = &state.metrics;
    let mut children = serde_json::Map::new();
    for label in CHILD_STATES {
        children.insert(
            label.into(),
            json!(metrics.children.with_label_values(&[label]).get()),
        );
    }
    let mut frames = serde_json::Map::new();
    let mut bytes = serde_json::Map::new();
    for direction in Direction::ALL {
        frames.insert(
            direction.as_str().into(),
            json!(Metrics::counter_value(&metrics.frames, direction.as_str())),
        );
        bytes.insert(
            direction.as_str().into(),
            json!(Metrics::counter_value(&metrics.bytes, direction.as_str())),
        );
    }
    let mut tokens = serde_json::Map::new();
    for kind in TOKEN_KINDS {
        tokens.insert(
            kind.into(),
            json!(Metrics::counter_value(&metrics.tokens, kind)),
        );
    }
    Json(json!({
        "uptime_secs": state.started.elapsed().as_secs(),
        "dialect": state.dialect.rules().name(),
        "children": children,
        "clients": metrics.clients.get(),
        "frames_total": frames,
        "bytes_total": bytes,
        "tokens_total": tokens,
        "cost_usd_total": metrics.cost_usd.get(),
        "sandbox": state.confinement,
    }))
    .into_response()
}

#[derive(Debug, Default, serde::Deserialize)]
struct EventsQuery {
    /// Only events with a greater `seq`.
    #[serde(default)]
    after: u64,
}

/// `GET /v1/events`: the kept events after `?after=`, oldest first, and
/// the newest `seq` (lower than `after` when the gateway restarted).
async fn events(
    State(state): State<Arc<AppState>>,
    Query(query): Query<EventsQuery>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    let who = match guard::admin(&state, &headers, addr, Admin::ListProjects) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let (mut events, last_seq) = state.registry.events().after(query.after);
    events.retain(|e| who.sees(&e.project));
    Json(json!({ "events": events, "last_seq": last_seq })).into_response()
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_four_actions_are_parsed_and_nothing_else() {
        assert_eq!(Action::parse("start"), Some(Action::Start));
        assert_eq!(
            Action::parse("restart"),
            Some(Action::OnHub(HubAction::Restart))
        );
        assert_eq!(Action::parse("stop"), Some(Action::OnHub(HubAction::Stop)));
        assert_eq!(
            Action::parse("abort"),
            Some(Action::OnHub(HubAction::Abort))
        );
        for unknown in ["", "Stop", "kill", "start "] {
            assert_eq!(Action::parse(unknown), None, "{unknown:?}");
        }
    }
}
