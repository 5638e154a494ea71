//! The admin API's budgets ([`crate::spend`]):
//!
//! - `GET /v1/budgets` — the default project budget and every budget with
//!   spend or a setting: projects, then identities (token names and JWT
//!   subjects).
//! - `GET /v1/projects/{project}/budget` — `{project, limit_usd,
//!   limit_from, spent_usd, total_usd, source, exhausted}`: the limit in
//!   force (`null`: unlimited) and where it comes from (`default`:
//!   `--project-budget-usd`; `admin`), the spend since the last reset and
//!   since counting began, where it was read (`broker`, `agent`,
//!   `mixed`; `null` before any), and whether new prompts are refused.
//! - `PUT /v1/projects/{project}/budget` — `{"limit_usd": 5}` raises or
//!   lowers the limit, `{"limit_usd": null}` lifts it, `{"reset": true}`
//!   counts from zero again; both may come together.
//! - `DELETE /v1/projects/{project}/budget` — back to the default limit.
//! - `GET|PUT|DELETE /v1/identities/{identity}/budget` — the same for an
//!   identity, whose default is its credential's `budget_usd`
//!   (`limit_from: credential`).
//!
//! Changes apply at once on this gateway and within a second on the
//! others sharing its state directory; they are kept in
//! `STATE/budgets/limits.json` (last writer wins), and recorded in the
//! audit log with the admin who made them.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Deserializer};
use serde_json::{json, Value};

use crate::access::{Action, Identity};
use crate::audit::{self, Entry, Outcome};
use crate::client_addr::ClientAddr;
use crate::config::MAX_BUDGET_USD;
use crate::guard::{self, admin_refusal};
use crate::projects;
use crate::spend::{Change, LimitChange, Scope, SpendError, View};
use crate::state::AppState;

/// Largest accepted request body.
pub const MAX_BODY: usize = 4 * 1024;
/// Longest identity name accepted in a path (token names and JWT
/// subjects are shorter).
pub const MAX_IDENTITY_BYTES: usize = 256;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/budgets", get(list))
        .route(
            "/v1/projects/{project}/budget",
            get(show_project)
                .put(set_project)
                .delete(reset_project_limit),
        )
        .route(
            "/v1/identities/{identity}/budget",
            get(show_identity)
                .put(set_identity)
                .delete(reset_identity_limit),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY))
        // Like every admin route: a success proves the admin token.
        .route_layer(axum::middleware::from_fn(
            crate::layers::protect_admin_connection,
        ))
}

fn error(status: StatusCode, message: &str) -> Response {
    (status, Json(json!({ "error": message }))).into_response()
}

/// The refusal of a name in the path that is not one of its scope's.
fn bad_name(scope: Scope, name: &str) -> Option<Response> {
    let refused = match scope {
        Scope::Project => projects::validate_name(name).err().map(|e| e.to_string()),
        Scope::Identity => (name.is_empty()
            || name.len() > MAX_IDENTITY_BYTES
            || name.chars().any(char::is_control))
        .then(|| {
            format!("an identity is 1 to {MAX_IDENTITY_BYTES} bytes without control characters")
        }),
    };
    refused.map(|reason| error(StatusCode::BAD_REQUEST, &reason))
}

/// USD as JSON: to the billionth, without float noise.
fn usd(amount: f64) -> f64 {
    (amount * 1e9).round() / 1e9
}

fn view_json(view: &View) -> Value {
    let mut out = match view.scope {
        Scope::Project => json!({ "project": view.name }),
        Scope::Identity => json!({ "identity": view.name }),
    };
    out["limit_usd"] = json!(view.limit_usd);
    out["limit_from"] = json!(view.limit_from.label());
    out["spent_usd"] = json!(usd(view.spent_usd));
    out["total_usd"] = json!(usd(view.total_usd));
    if view.scope == Scope::Project {
        out["source"] = json!(view.source);
    }
    out["exhausted"] = json!(view.exhausted);
    out
}

/// What changing or reading a budget is: a project's is administering
/// that project; a person's budget only an admin of every project reads or
/// changes.
fn action_on(scope: Scope, name: &str) -> Action<'_> {
    match scope {
        Scope::Project => Action::Administer(name),
        Scope::Identity => Action::AdministerGateway,
    }
}

async fn list(
    State(state): State<Arc<AppState>>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    let who = match crate::guard::admin(&state, &headers, addr, Action::ListProjects) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let ledger = &state.spend;
    // A scoped admin sees its projects' budgets, and no person's.
    let views = |scope| {
        ledger
            .list(scope)
            .iter()
            .filter(|view| match scope {
                Scope::Project => who.sees(&view.name),
                Scope::Identity => who.scope.is_everything(),
            })
            .map(view_json)
            .collect::<Vec<_>>()
    };
    Json(json!({
        "default_project_limit_usd": ledger.default_project_limit(),
        "projects": views(Scope::Project),
        "identities": views(Scope::Identity),
    }))
    .into_response()
}

async fn show(
    state: &AppState,
    headers: &HeaderMap,
    addr: ClientAddr,
    scope: Scope,
    name: &str,
) -> Response {
    if let Some(refused) = admin_refusal(state, headers, addr, action_on(scope, name)) {
        return refused;
    }
    if let Some(refused) = bad_name(scope, name) {
        return refused;
    }
    Json(view_json(&state.spend.view(scope, name))).into_response()
}

/// A `PUT` body: `limit_usd` (a number, or `null` for unlimited) and/or
/// `reset`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Put {
    #[serde(default, deserialize_with = "present")]
    limit_usd: Option<Option<f64>>,
    #[serde(default)]
    reset: bool,
}

/// A field that is present, perhaps `null`.
fn present<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<Option<f64>>, D::Error> {
    Option::<f64>::deserialize(deserializer).map(Some)
}

fn parse_put(body: &[u8]) -> Result<Change, String> {
    let usage = "send {\"limit_usd\": USD} (or null for no limit) and/or {\"reset\": true}";
    let put: Put =
        serde_json::from_slice(body).map_err(|e| format!("not a budget change ({e}); {usage}"))?;
    let limit = match put.limit_usd {
        None => LimitChange::Keep,
        Some(None) => LimitChange::Set(None),
        Some(Some(usd)) if usd.is_finite() && (0.0..=MAX_BUDGET_USD).contains(&usd) => {
            LimitChange::Set(Some(usd))
        }
        Some(Some(usd)) => {
            return Err(format!(
                "limit_usd {usd} is not a number of US dollars from 0 to {MAX_BUDGET_USD}"
            ))
        }
    };
    if limit == LimitChange::Keep && !put.reset {
        return Err(format!("nothing to change; {usage}"));
    }
    Ok(Change {
        limit,
        reset: put.reset,
    })
}

async fn set(
    state: &AppState,
    headers: &HeaderMap,
    addr: ClientAddr,
    scope: Scope,
    name: &str,
    body: &[u8],
) -> Response {
    let who = match guard::admin(state, headers, addr, action_on(scope, name)) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    if let Some(refused) = bad_name(scope, name) {
        return refused;
    }
    match parse_put(body) {
        Ok(change) => commit(state, (&who, addr), scope, name, change).await,
        Err(reason) => error(StatusCode::BAD_REQUEST, &reason),
    }
}

async fn back_to_default(
    state: &AppState,
    headers: &HeaderMap,
    addr: ClientAddr,
    scope: Scope,
    name: &str,
) -> Response {
    let who = match guard::admin(state, headers, addr, action_on(scope, name)) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    if let Some(refused) = bad_name(scope, name) {
        return refused;
    }
    let change = Change {
        limit: LimitChange::Default,
        reset: false,
    };
    commit(state, (&who, addr), scope, name, change).await
}

/// The audit entry of `change` to a budget, by `who` from `addr`.
fn audited(who: &Identity, addr: ClientAddr, scope: Scope, name: &str, change: Change) -> Entry {
    let entry = Entry::new(audit::Action::BudgetChanged)
        .by(who)
        .source(addr.0)
        .detail("budget", scope.label());
    let entry = match scope {
        Scope::Project => entry.project(name),
        Scope::Identity => entry.detail("identity", name),
    };
    let entry = match change.limit {
        LimitChange::Keep => entry,
        LimitChange::Set(usd) => entry.detail("limit_usd", usd),
        LimitChange::Default => entry.detail("limit_usd", "default"),
    };
    entry.detail("reset", change.reset)
}

/// Applies and keeps `change`, made by `who` from `addr`; answers the
/// budget's new view.
async fn commit(
    state: &AppState,
    (who, addr): (&Identity, ClientAddr),
    scope: Scope,
    name: &str,
    change: Change,
) -> Response {
    let entry = audited(who, addr, scope, name, change);
    match state.spend.change(scope, name, change).await {
        Ok(view) => {
            tracing::info!(budget = scope.label(), name, limit_usd = ?view.limit_usd, reset = change.reset, "budget changed");
            state.audit.record(entry);
            Json(view_json(&view)).into_response()
        }
        Err(SpendError::Lost(_)) => {
            let message = "the budget was not changed: the gateway is busy; try again";
            state
                .audit
                .record(entry.outcome(Outcome::Error).detail("error", message));
            error(StatusCode::SERVICE_UNAVAILABLE, message)
        }
        Err(e) => {
            tracing::warn!(budget = scope.label(), name, error = %e, "budget not changed");
            let message = format!("the budget was not changed: {e}");
            let entry = entry.outcome(Outcome::Error);
            state.audit.record(entry.detail("error", message.as_str()));
            error(StatusCode::INTERNAL_SERVER_ERROR, &message)
        }
    }
}

async fn show_project(
    State(state): State<Arc<AppState>>,
    UrlPath(project): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    show(&state, &headers, addr, Scope::Project, &project).await
}

async fn set_project(
    State(state): State<Arc<AppState>>,
    UrlPath(project): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    set(&state, &headers, addr, Scope::Project, &project, &body).await
}

async fn reset_project_limit(
    State(state): State<Arc<AppState>>,
    UrlPath(project): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    back_to_default(&state, &headers, addr, Scope::Project, &project).await
}

async fn show_identity(
    State(state): State<Arc<AppState>>,
    UrlPath(identity): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    show(&state, &headers, addr, Scope::Identity, &identity).await
}

async fn set_identity(
    State(state): State<Arc<AppState>>,
    UrlPath(identity): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    set(&state, &headers, addr, Scope::Identity, &identity, &body).await
}

async fn reset_identity_limit(
    State(state): State<Arc<AppState>>,
    UrlPath(identity): UrlPath<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    back_to_default(&state, &headers, addr, Scope::Identity, &identity).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spend::LimitFrom;

    #[test]
    fn put_bodies_say_what_changes() {
        let set = |usd| Change {
            limit: LimitChange::Set(usd),
            reset: false,
        };
        assert_eq!(parse_put(br#"{"limit_usd": 5}"#), Ok(set(Some(5.0))));
        assert_eq!(parse_put(br#"{"limit_usd": null}"#), Ok(set(None)));
        assert_eq!(
            parse_put(br#"{"reset": true}"#),
            Ok(Change {
                limit: LimitChange::Keep,
                reset: true
            })
        );
        assert_eq!(
            parse_put(br#"{"limit_usd": 0.5, "reset": true}"#).map(|c| c.reset),
            Ok(true)
        );
        for bad in [
            &br#"{}"#[..],
            br#"{"reset": false}"#,
            br#"{"limit_usd": -1}"#,
            br#"{"limit_usd": 1e12}"#,
            br#"{"limit_usd": "5"}"#,
            br#"{"limit": 5}"#,
            b"not json",
        ] {
            let refused = parse_put(bad).unwrap_err();
            assert!(refused.contains("limit_usd"), "{refused}");
        }
    }

    #[test]
    fn names_are_checked_for_their_scope() {
        assert!(bad_name(Scope::Project, "alpha").is_none());
        assert!(bad_name(Scope::Project, "../x").is_some());
        assert!(bad_name(Scope::Identity, "ana@example.com/ci bot").is_none());
        assert!(bad_name(Scope::Identity, "").is_some());
        assert!(bad_name(Scope::Identity, "a\nb").is_some());
        assert!(bad_name(Scope::Identity, &"x".repeat(MAX_IDENTITY_BYTES + 1)).is_some());
    }

    #[test]
    fn views_render_as_the_api_documents() {
        let view = View {
            scope: Scope::Project,
            name: "alpha".into(),
            limit_usd: Some(0.01),
            limit_from: LimitFrom::Default,
            spent_usd: 0.013_200_000_000_000_002,
            total_usd: 0.0132,
            source: Some("broker"),
            exhausted: true,
        };
        assert_eq!(
            view_json(&view).to_string(),
            r#"{"project":"alpha","limit_usd":0.01,"limit_from":"default","spent_usd":0.0132,"total_usd":0.0132,"source":"broker","exhausted":true}"#
        );
        let identity = View {
            scope: Scope::Identity,
            name: "alice".into(),
            limit_usd: None,
            limit_from: LimitFrom::Credential,
            spent_usd: 0.0,
            total_usd: 0.0,
            source: None,
            exhausted: false,
        };
        assert_eq!(
            view_json(&identity).to_string(),
            r#"{"identity":"alice","limit_usd":null,"limit_from":"credential","spent_usd":0.0,"total_usd":0.0,"exhausted":false}"#
        );
    }
}
