//! The admin API's per-project egress overrides (`--tool-network proxy`):
//!
//! - `GET /v1/projects/{project}/egress` — the project's override (or
//!   `null`) and the policy in force for it.
//! - `PUT /v1/projects/{project}/egress` — sets the override, e.g.
//!   `{"allow": ["registry.example.com:443"], "deny": ["*.example.net"],
//!   "methods": ["GET", "HEAD"]}`: `allow` replaces the operator's
//!   allowlist for the project (narrower or wider), `deny` adds to the
//!   operator's, `methods` replaces the method list. No override can lift
//!   an always-refused range: only the operator's own allow rules can.
//! - `DELETE /v1/projects/{project}/egress` — back to the operator's policy.
//!
//! Overrides apply to the next request decided, on open connections too,
//! are kept on disk (`crate::egress::kept`), and are recorded in the
//! audit log with the admin who set them.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde_json::{json, Value};

use crate::access::{Action, Identity};
use crate::audit::{self, Entry, Outcome};
use crate::client_addr::ClientAddr;
use crate::egress::{EgressAdmin, Override, Policy, Registry};
use crate::offload::{self, Lane};
use crate::projects;
use crate::state::AppState;

/// Largest accepted override body.
pub const MAX_BODY: usize = 64 * 1024;
/// Most allow (and, separately, deny) rules one override may hold.
pub const MAX_RULES: usize = 256;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route(
            "/v1/projects/{project}/egress",
            get(show).put(set).delete(remove),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

/// The admin's refusal, a bad name, or the proxy not in use; else the
/// admin and the registry.
fn guard(
    state: &AppState,
    headers: &HeaderMap,
    addr: ClientAddr,
    project: &str,
) -> Result<(Identity, EgressAdmin), Box<Response>> {
    let who = crate::guard::admin(state, headers, addr, Action::Administer(project))?;
    if let Err(e) = projects::validate_name(project) {
        return Err(Box::new(error(StatusCode::BAD_REQUEST, &e.to_string())));
    }
    let egress = state.egress.clone().ok_or_else(|| {
        Box::new(error(
            StatusCode::CONFLICT,
            "the egress proxy is not in use: tools reach the network with --tool-network on or not at all with off; per-project egress rules need --tool-network proxy",
        ))
    })?;
    Ok((who, egress))
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// What `GET` and a successful `PUT`/`DELETE` answer.
fn view(registry: &Registry, project: &str) -> Value {
    json!({
        "project": project,
        "override": registry.override_of(project),
        "effective": policy_json(&registry.policy_for(project)),
    })
}

fn policy_json(policy: &Policy) -> Value {
    let texts = |rules: &[crate::egress::Rule]| -> Vec<String> {
        rules.iter().map(ToString::to_string).collect()
    };
    json!({
        "allow": texts(policy.allow()),
        "deny": texts(policy.deny()),
        "methods": policy.methods().map(|m| m.iter().map(|m| m.as_str()).collect::<Vec<_>>()),
        "exceptions": texts(policy.exceptions()),
    })
}

async fn show(
    State(state): State<Arc<AppState>>,
    UrlPath(project): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    match guard(&state, &headers, addr, &project) {
        Ok((_, egress)) => Json(view(&egress.registry, &project)).into_response(),
        Err(response) => *response,
    }
}

async fn set(
    State(state): State<Arc<AppState>>,
    UrlPath(project): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (who, egress) = match guard(&state, &headers, addr, &project) {
        Ok(guarded) => guarded,
        Err(response) => return *response,
    };
    let change: Override = match serde_json::from_slice(&body) {
        Ok(change) => change,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                &format!("not an egress override ({e}); send {{\"allow\": [RULE…], \"deny\": [RULE…], \"methods\": [METHOD…]}}, each field optional"),
            )
        }
    };
    let allowed = change.allow.as_ref().map_or(0, Vec::len);
    if allowed > MAX_RULES || change.deny.len() > MAX_RULES {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("at most {MAX_RULES} allow and {MAX_RULES} deny rules per project"),
        );
    }
    let entry = audited(&who, addr, &project, Some(&change));
    let answer = commit(egress, project, Some(change)).await;
    record(&state, entry, &answer);
    answer
}

async fn remove(
    State(state): State<Arc<AppState>>,
    UrlPath(project): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    match guard(&state, &headers, addr, &project) {
        Ok((who, egress)) => {
            let entry = audited(&who, addr, &project, None);
            let answer = commit(egress, project, None).await;
            record(&state, entry, &answer);
            answer
        }
        Err(response) => *response,
    }
}

/// The audit entry of `who` (from `addr`) setting `project`'s override
/// to `change` (`None`: removing it).
fn audited(who: &Identity, addr: ClientAddr, project: &str, change: Option<&Override>) -> Entry {
    let entry = Entry::new(audit::Action::EgressChanged)
        .by(who)
        .source(addr.0)
        .project(project);
    match change.map(serde_json::to_value) {
        Some(Ok(rules)) => entry.detail("override", rules),
        Some(Err(_)) => entry.detail("override", "set"),
        None => entry.detail("override", Value::Null),
    }
}

/// Records `entry` with the outcome `answer` says: an override in force
/// but not kept across restarts is an error.
fn record(state: &AppState, entry: Entry, answer: &Response) {
    let entry = match answer.status().is_success() {
        true => entry,
        false => entry
            .outcome(Outcome::Error)
            .detail("status", answer.status().as_u16()),
    };
    state.audit.record(entry);
}

/// Applies `change`, keeps every override on disk, answers the new view.
async fn commit(egress: EgressAdmin, project: String, change: Option<Override>) -> Response {
    let what = match &change {
        Some(_) => "set",
        None => "removed",
    };
    egress.registry.set_override(&project, change);
    let (registry, dir) = (egress.registry.clone(), egress.dir.clone());
    let saved = offload::run(Lane::Files, move || {
        crate::egress::kept::save(&registry, &dir)
    })
    .await;
    match saved {
        Ok(Ok(())) => {
            tracing::info!(%project, "egress override {what}");
            Json(view(&egress.registry, &project)).into_response()
        }
        Ok(Err(e)) => {
            tracing::warn!(%project, "egress override {what} but not kept: {e}");
            error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the override is in force but not kept across restarts: {e}"),
            )
        }
        Err(lost) => {
            tracing::warn!(%project, "egress override {what} but not kept: {lost}");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "the override is in force but not kept across restarts: the gateway is busy",
            )
        }
    }
}
