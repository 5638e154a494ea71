//! `/v1/tokens`: managed tokens made, listed and revoked at run time by an
//! admin, and the watch that carries revocations made by other gateways
//! sharing the state directory to this one's sessions.
//!
//! - `POST /v1/tokens {name, role, projects, expires_in?, budget_usd?}`
//!   answers the token once (`201`); only its SHA-256 digest is kept. An
//!   admin grants only within its own scope, expiry and budget.
//! - `GET /v1/tokens` lists the tokens within the caller's scope (config
//!   file entries too), never a secret, with the last use on this gateway.
//! - `DELETE /v1/tokens/{name}` revokes: every session opened with the
//!   token, on this gateway, has been sent close code 4001 when the
//!   answer comes; other gateways close theirs within a poll period.
//!
//! Tokens made and revoked go to the audit log (never a secret), and so
//! does a revocation seen from another gateway, by `gateway`.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::access::store::{self, epoch_secs, Record, Store, StoreError};
use crate::access::{credential_key, digest, Action, Identity, Kind, ProjectScope};
use crate::audit::{self, Entry, Outcome};
use crate::auth::{self, Role};
use crate::client_addr::ClientAddr;
use crate::guard;
use crate::offload::{self, Lane};
use crate::projects;
use crate::state::AppState;

/// Largest request body.
const MAX_BODY: usize = 16 * 1024;
/// How long a revocation waits for its sessions to send their close.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);
/// Longest lifetime a token may be given (ten years).
const MAX_LIFETIME: Duration = Duration::from_secs(10 * 366 * 24 * 3600);

pub fn routes() -> axum::Router<Arc<AppState>> {
    Router::new()
        .route("/v1/tokens", get(list).post(create))
        .route("/v1/tokens/{name}", delete(revoke))
        .layer(DefaultBodyLimit::max(MAX_BODY))
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

/// `expires_in`: seconds, or a duration such as `90m`, `12h`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Lifetime {
    Secs(u64),
    Text(String),
}

impl Lifetime {
    fn duration(&self) -> Result<Duration, String> {
        let lifetime = match self {
            Lifetime::Secs(secs) => Duration::from_secs(*secs),
            Lifetime::Text(text) => {
                crate::config::parse_duration(text).map_err(|e| format!("expires_in: {e}"))?
            }
        };
        if lifetime.is_zero() || lifetime > MAX_LIFETIME {
            return Err("expires_in: give a lifetime between 1 s and ten years".into());
        }
        Ok(lifetime)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
    role: Role,
    #[serde(default)]
    projects: Vec<String>,
    expires_in: Option<Lifetime>,
    budget_usd: Option<f64>,
}

/// The record a request asks for, checked against what `who` may grant.
fn granted(who: &Identity, body: &CreateBody, now: SystemTime) -> Result<Record, String> {
    projects::validate_name(&body.name)
        .map_err(|e| format!("name: {e}").replace("project name", "token name"))?;
    if body.name.starts_with('.') {
        // Its file would be hidden, like the store's temporary files.
        return Err("name: a token name may not start with '.'".into());
    }
    if crate::config::is_static_name(&body.name) {
        return Err(
            "name: names like admin-token-1 are those of the tokens given by flags and variables"
                .into(),
        );
    }
    let scope = ProjectScope::parse(&body.projects).map_err(|e| format!("projects: {e}"))?;
    if !scope.within(&who.scope) {
        return Err(format!(
            "projects: {:?} reach beyond this admin's own projects {:?}",
            body.projects,
            who.scope.patterns()
        ));
    }
    let expires = match &body.expires_in {
        Some(lifetime) => Some(now + lifetime.duration()?),
        None => None,
    };
    if let Some(limit) = who.expires {
        if expires.is_none_or(|at| at > limit) {
            return Err(
                "expires_in: a token may not outlive the admin credential that makes it".into(),
            );
        }
    }
    if let Some(budget) = body.budget_usd {
        if !budget.is_finite() || budget < 0.0 {
            return Err("budget_usd: give a number of dollars, 0 or more".into());
        }
    }
    if let Some(limit) = who.budget_usd {
        if body.budget_usd.is_none_or(|b| b > limit) {
            return Err(format!(
                "budget_usd: at most this admin's own budget, ${limit}"
            ));
        }
    }
    Ok(Record {
        name: body.name.clone(),
        sha256: String::new(),
        role: body.role,
        projects: scope.patterns(),
        expires: expires.map(epoch_secs),
        budget_usd: body.budget_usd,
        created: epoch_secs(now),
        created_by: who.name.clone(),
    })
}

fn store_of(state: &AppState) -> Result<Arc<Store>, Box<Response>> {
    state.keyring.managed.clone().ok_or_else(|| {
        Box::new(error(
            StatusCode::CONFLICT,
            "managed tokens are not in use on this gateway",
        ))
    })
}

async fn create(
    State(state): State<Arc<AppState>>,
    addr: ClientAddr,
    headers: HeaderMap,
    body: Result<Json<CreateBody>, axum::extract::rejection::JsonRejection>,
) -> Response {
    let who = match guard::admin(&state, &headers, addr, Action::ListProjects) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let Json(body) = match body {
        Ok(body) => body,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let store = match store_of(&state) {
        Ok(store) => store,
        Err(refused) => return *refused,
    };
    let audited = Entry::new(audit::Action::TokenCreated)
        .by(&who)
        .source(addr.0)
        .detail("name", body.name.as_str());
    let mut record = match granted(&who, &body, SystemTime::now()) {
        Ok(record) => record,
        Err(message) => {
            let entry = audited.outcome(Outcome::Refused);
            state.audit.record(entry.detail("error", message.as_str()));
            return error(StatusCode::BAD_REQUEST, message);
        }
    };
    let audited = audited
        .detail("role", record.role.as_str())
        .detail("projects", record.projects.clone())
        .detail("expires", record.expires)
        .detail("budget_usd", record.budget_usd);
    let failed = |status: StatusCode, message: String| {
        let entry = audited.clone().outcome(Outcome::Error);
        state.audit.record(entry.detail("error", message.as_str()));
        error(status, message)
    };
    if state.keyring.name_taken_elsewhere(&record.name) {
        let message = format!(
            "a token named {:?} is defined in the configuration",
            record.name
        );
        return failed(StatusCode::CONFLICT, message);
    }
    let secret = match auth::random_token() {
        Ok(secret) => secret,
        Err(e) => return failed(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    record.sha256 = digest::hex(&digest::sha256(&secret));
    let kept = record.clone();
    match offload::run(Lane::Files, move || store.create(&kept)).await {
        Ok(Ok(())) => {}
        Ok(Err(e @ StoreError::Exists(_))) => return failed(StatusCode::CONFLICT, e.to_string()),
        Ok(Err(e @ StoreError::Full)) => return failed(StatusCode::CONFLICT, e.to_string()),
        Ok(Err(e)) => {
            tracing::warn!("cannot keep a managed token: {e}");
            let message = "cannot keep the token".to_string();
            return failed(StatusCode::INTERNAL_SERVER_ERROR, message);
        }
        Err(lost) => return failed(StatusCode::SERVICE_UNAVAILABLE, lost.to_string()),
    }
    tracing::info!(actor = %who.name, token = %record.name, role = %record.role, "token created");
    state.audit.record(audited);
    let mut answer = record_json(&record, None, 0);
    answer["token"] = json!(secret);
    (StatusCode::CREATED, Json(answer)).into_response()
}

/// A token as listed: never its digest.
fn record_json(record: &Record, last_use: Option<store::LastUse>, sessions: usize) -> Value {
    let now = epoch_secs(SystemTime::now());
    json!({
        "name": record.name,
        "kind": Kind::Managed.as_str(),
        "role": record.role,
        "projects": record.projects,
        "expires": record.expires,
        "expired": record.expires.is_some_and(|at| at <= now),
        "budget_usd": record.budget_usd,
        "created": record.created,
        "created_by": record.created_by,
        "last_used": last_use.map(|u| json!({"at": epoch_secs(u.at), "from": u.from.to_string()})),
        "sessions": sessions,
    })
}

async fn list(
    State(state): State<Arc<AppState>>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    let who = match guard::admin(&state, &headers, addr, Action::ListProjects) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let mut tokens = Vec::new();
    for configured in &state.keyring.configured {
        let id = &configured.identity;
        if id.scope.within(&who.scope) {
            tokens.push(json!({
                "name": id.name,
                "kind": Kind::Configured.as_str(),
                "role": id.role,
                "projects": id.scope.patterns(),
                "expires": id.expires.map(epoch_secs),
                "budget_usd": id.budget_usd,
                "sessions": state.live.count(&id.key()),
            }));
        }
    }
    if let Some(store) = state.keyring.managed.clone() {
        let current = match offload::run(Lane::Files, move || store.current()).await {
            Ok(Ok(current)) => current,
            Ok(Err(e)) => {
                tracing::warn!("cannot read the managed tokens: {e}");
                let message = "cannot read the managed tokens".to_string();
                return error(StatusCode::INTERNAL_SERVER_ERROR, message);
            }
            Err(lost) => return error(StatusCode::SERVICE_UNAVAILABLE, lost.to_string()),
        };
        for (record, last_use) in current {
            let within = ProjectScope::parse(&record.projects).is_ok_and(|s| s.within(&who.scope));
            if within {
                let key = credential_key(Kind::Managed, &record.name);
                tokens.push(record_json(&record, last_use, state.live.count(&key)));
            }
        }
    }
    Json(json!({ "tokens": tokens })).into_response()
}

async fn revoke(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
    addr: ClientAddr,
    headers: HeaderMap,
) -> Response {
    let who = match guard::admin(&state, &headers, addr, Action::ListProjects) {
        Ok(who) => who,
        Err(refused) => return *refused,
    };
    let store = match store_of(&state) {
        Ok(store) => store,
        Err(refused) => return *refused,
    };
    let not_found = || {
        error(
            StatusCode::NOT_FOUND,
            format!("no managed token is named {name:?}"),
        )
    };
    let audited = Entry::new(audit::Action::TokenRevoked)
        .by(&who)
        .source(addr.0)
        .detail("name", name.as_str());
    let revoked = {
        let name = name.clone();
        let scope = who.scope.clone();
        // A token beyond the caller's scope is answered as if missing.
        let within = move |record: &Record| {
            ProjectScope::parse(&record.projects).is_ok_and(|s| s.within(&scope))
        };
        offload::run(Lane::Files, move || store.revoke_if(&name, within)).await
    };
    let failed = |status: StatusCode, message: String| {
        let entry = audited.clone().outcome(Outcome::Error);
        state.audit.record(entry.detail("error", message.as_str()));
        error(status, message)
    };
    match revoked {
        Ok(Ok(_)) => {}
        Ok(Err(StoreError::NotFound(_))) => return not_found(),
        Ok(Err(e)) => {
            tracing::warn!("cannot revoke a managed token: {e}");
            let message = "cannot revoke the token".to_string();
            return failed(StatusCode::INTERNAL_SERVER_ERROR, message);
        }
        Err(lost) => return failed(StatusCode::SERVICE_UNAVAILABLE, lost.to_string()),
    }
    let closed = state
        .live
        .revoke(&credential_key(Kind::Managed, &name), CLOSE_WAIT)
        .await;
    tracing::info!(actor = %who.name, token = %name, sessions = closed, "token revoked");
    state
        .audit
        .record(audited.detail("sessions_closed", closed));
    Json(json!({ "revoked": name, "sessions_closed": closed })).into_response()
}

/// Re-reads the managed tokens every [`store::POLL`] and closes the
/// sessions of tokens revoked elsewhere, until shutdown.
pub async fn follow(state: Arc<AppState>) {
    let Some(store) = state.keyring.managed.clone() else {
        return;
    };
    let mut tick = tokio::time::interval(store::POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = state.shutdown.started() => return,
        }
        let reading = store.clone();
        let gone = match offload::run(Lane::Files, move || reading.reload()).await {
            Ok(Ok(gone)) => gone,
            Ok(Err(e)) => {
                tracing::warn!("cannot read the managed tokens: {e}");
                continue;
            }
            Err(_) => continue,
        };
        for name in gone {
            let closed = state
                .live
                .revoke(&credential_key(Kind::Managed, &name), CLOSE_WAIT)
                .await;
            tracing::info!(token = %name, sessions = closed, "token revoked elsewhere");
            // The gateway's own entry: the revoking admin's is in the
            // audit log of the gateway that answered the DELETE.
            let entry = Entry::new(audit::Action::TokenRevoked)
                .detail("name", name.as_str())
                .detail("elsewhere", true)
                .detail("sessions_closed", closed);
            state.audit.record(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admin(scope: &[&str], expires: Option<SystemTime>) -> Identity {
        Identity {
            name: "ops".into(),
            kind: Kind::Configured,
            role: Role::Admin,
            scope: ProjectScope::parse(scope).unwrap(),
            expires,
            budget_usd: None,
        }
    }

    fn body(json: Value) -> CreateBody {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn an_admin_grants_only_within_its_scope_and_expiry() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let scoped = admin(&["a-*"], None);
        let ok = granted(
            &scoped,
            &body(json!({"name": "alice", "role": "client", "projects": ["a-web"], "expires_in": "2h"})),
            now,
        )
        .unwrap();
        assert_eq!(ok.expires, Some(1_000_000 + 7200));
        assert_eq!(ok.created_by, "ops");
        let wider = body(json!({"name": "bob", "role": "client", "projects": ["*"]}));
        assert!(granted(&scoped, &wider, now)
            .unwrap_err()
            .contains("beyond"));
        let expiring = admin(&["*"], Some(now + Duration::from_secs(60)));
        let forever = body(json!({"name": "c", "role": "observer", "projects": ["x"]}));
        assert!(granted(&expiring, &forever, now)
            .unwrap_err()
            .contains("outlive"));
        let short =
            body(json!({"name": "c", "role": "observer", "projects": ["x"], "expires_in": 30}));
        assert!(granted(&expiring, &short, now).is_ok());
        for bad in [
            json!({"name": "../x", "role": "client"}),
            // Kept as .x.json, which every reader skips as a temporary
            // file: made, answered, and never usable.
            json!({"name": ".x", "role": "client"}),
            // The names of the flags' tokens, free or not: the audit log
            // and the logs would show the operator's token acting.
            json!({"name": "admin-token-2", "role": "client"}),
            json!({"name": "client-token-9", "role": "client"}),
            json!({"name": "x", "role": "client", "projects": ["a b"]}),
            json!({"name": "x", "role": "client", "expires_in": 0}),
            json!({"name": "x", "role": "client", "expires_in": "soon"}),
            json!({"name": "x", "role": "client", "budget_usd": -1.0}),
        ] {
            assert!(granted(&scoped, &body(bad.clone()), now).is_err(), "{bad}");
        }
        // Without projects: a token that opens nothing.
        let none = granted(&scoped, &body(json!({"name": "n", "role": "client"})), now).unwrap();
        assert!(none.projects.is_empty());
    }
}
