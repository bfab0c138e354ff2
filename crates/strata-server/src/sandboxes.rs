//! The Sandbox routes: create, list, get, logs, restart, close, through
//! strata-sdk (Sandboxes outlive the server: a restarted server finds them
//! again through the backend's records), and which Sandboxes a token sees.
//!
//! Only Sandboxes of this server's Store are served. A token scoped to
//! projects sees only the Sandboxes created for one of its projects (the
//! label [`PROJECT_LABEL`]); every other ID reads as not found, with the
//! same message as an ID that does not exist.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use strata_sdk::{Sandbox, SandboxFilter, SandboxSpec};

use crate::api::*;
use crate::error::ApiError;
use crate::routes::{ApiJson, ApiPath, ApiQuery, AppResult, St};
use crate::scope::{Caller, Scope};
use crate::ServerState;

/// How long `GET /v1/sandboxes/{id}` waits for the daemon's Workspace
/// list: a hung Sandbox must not hang the call.
const DAEMON_LOOKUP: Duration = Duration::from_secs(2);
/// Smallest limits a created Sandbox may ask for.
const MIN_MEMORY: u64 = 64 << 20;
const MIN_PIDS: u64 = 64;

/// Where a Sandbox's daemon answers, and for which project.
pub(crate) struct Daemon {
    pub id: String,
    pub socket: PathBuf,
    /// The daemon's bearer token: used by the server only, never sent to
    /// a client.
    pub token: String,
    /// The `strata.project` label.
    pub project: Option<String>,
    /// Connections to the daemon kept open for the next relayed request
    /// (strata-sdk's pool.rs).
    pub pool: strata_sdk::pool::Pool<axum::body::Body>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon")
            .field("id", &self.id)
            .field("socket", &self.socket)
            .finish_non_exhaustive()
    }
}

/// Does `scope` see a Sandbox with these labels?
fn visible(scope: &Scope, labels: &BTreeMap<String, String>) -> bool {
    match scope {
        Scope::All => true,
        Scope::Projects(p) => labels.get(PROJECT_LABEL).is_some_and(|l| p.contains(l)),
    }
}

fn not_found(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "sandbox not found: {id}; GET /v1/sandboxes lists the Sandboxes this token sees"
    ))
}

/// An SDK error as an API error: the client's mistakes are 4xx; a backend
/// that fails (it could not start a Sandbox) is 502, the server's own
/// I/O 500.
pub(crate) fn sdk_error(e: strata_sdk::Error) -> ApiError {
    use strata_sdk::Error as E;
    let msg = e.to_string();
    match e {
        E::NotFound { .. } => ApiError::not_found(msg),
        E::InvalidInput { .. } => ApiError::invalid(msg),
        E::Busy { .. } => ApiError::new(StatusCode::CONFLICT, ErrorCode::Busy, msg),
        E::Conflict { actual_head, .. } => {
            let mut a = ApiError::new(StatusCode::CONFLICT, ErrorCode::Conflict, msg);
            a.detail.actual_head = Some(actual_head);
            a
        }
        E::Backend { what, log_tail, .. } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            ErrorCode::Backend,
            format!("{what}\n--- daemon log tail ---\n{log_tail}"),
        ),
        _ => ApiError::internal(msg),
    }
}

fn same_store(a: &Path, b: &Path) -> bool {
    a == b || a.canonicalize().ok().as_deref() == Some(b)
}

/// The Sandbox `id` if this token sees it (else 404), opened.
pub(crate) async fn open(st: &ServerState, caller: &Caller, id: &str) -> AppResult<Sandbox> {
    let sb = Sandbox::open_in(id, st.sandbox_root.clone())
        .await
        .map_err(|e| match e {
            strata_sdk::Error::NotFound { .. } | strata_sdk::Error::InvalidInput { .. } => {
                not_found(id)
            }
            other => sdk_error(other),
        })?;
    let info = sb.info();
    if !same_store(&info.config.store, &st.store_dir) || !visible(&caller.scope, &info.labels) {
        return Err(not_found(id));
    }
    Ok(sb)
}

/// The daemon of Sandbox `id` if this token sees it (else 404).
pub(crate) async fn daemon(st: &ServerState, caller: &Caller, id: &str) -> AppResult<Arc<Daemon>> {
    let cached = st.daemons.lock().unwrap().get(id).cloned();
    let d = match cached {
        Some(d) => d,
        None => {
            // Reopen through the backend (e.g. after a server restart).
            let sb = open(
                st,
                &Caller {
                    token_id: caller.token_id.clone(),
                    scope: Scope::All,
                },
                id,
            )
            .await?;
            let d = Arc::new(endpoint(&sb)?);
            st.daemons.lock().unwrap().insert(id.to_string(), d.clone());
            d
        }
    };
    let labels: BTreeMap<String, String> = d
        .project
        .iter()
        .map(|p| (PROJECT_LABEL.to_string(), p.clone()))
        .collect();
    if !visible(&caller.scope, &labels) {
        return Err(not_found(id));
    }
    Ok(d)
}

pub(crate) fn forget(st: &ServerState, id: &str) {
    st.daemons.lock().unwrap().remove(id);
}

/// The daemon's socket and token, as the SDK's own client finds them.
fn endpoint(sb: &Sandbox) -> AppResult<Daemon> {
    let (socket, token) = sb.daemon_endpoint().map_err(sdk_error)?;
    let info = sb.info();
    Ok(Daemon {
        id: info.id.as_str().to_string(),
        socket,
        token,
        project: info.labels.get(PROJECT_LABEL).cloned(),
        pool: strata_sdk::pool::Pool::new(),
    })
}

/// A record as the wire shows it: no host paths.
fn wire(i: &strata_sdk::SandboxInfo) -> SandboxInfo {
    let state = match serde_json::to_value(i.state)
        .ok()
        .as_ref()
        .and_then(|v| v.as_str())
    {
        Some("running") => SandboxState::Running,
        Some("created") => SandboxState::Created,
        _ => SandboxState::Stopped,
    };
    let backend = serde_json::to_value(i.backend)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    let limits = i.config.limits;
    SandboxInfo {
        id: i.id.as_str().to_string(),
        name: i.name.clone(),
        state,
        labels: i.labels.clone(),
        project: i.labels.get(PROJECT_LABEL).cloned(),
        backend,
        created_unix_ms: i.created_unix_ms,
        network: match i.config.network {
            strata_sdk::Network::Host => SandboxNetwork::Host,
            _ => SandboxNetwork::None,
        },
        memory: limits.memory_bytes,
        pids: limits.pids,
        cpus: limits.cpu_millis.map(|m| m as f64 / 1000.0),
        image: i.config.image.clone(),
        workspaces: None,
    }
}

/// The record and, when the daemon answers within [`DAEMON_LOOKUP`], the
/// mounted Workspaces.
async fn detailed(sb: &Sandbox) -> SandboxInfo {
    let mut w = wire(sb.info());
    if let Ok(Ok(list)) = tokio::time::timeout(DAEMON_LOOKUP, sb.workspaces()).await {
        w.workspaces = Some(
            list.iter()
                .map(|ws| SandboxWorkspace {
                    id: ws.id().to_string(),
                    path: ws.path().to_string(),
                    branch: ws.branch().to_string(),
                    base: ws.base().to_string(),
                    transport: ws.transport().map(str::to_string),
                })
                .collect(),
        );
    }
    w
}

#[utoipa::path(post, tag = "sandboxes", path = "/v1/sandboxes", request_body = CreateSandbox,
    responses(
        (status = 201, description = "Created and running", body = SandboxInfo),
        (status = 400, description = "Invalid name, label or limit, malformed JSON, or a scoped token without `project`", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project (or not in the token's scope)", body = ErrorBody),
        (status = 409, description = "The name is taken", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 422, description = "Unknown or missing fields", body = ErrorBody),
        (status = 502, description = "The backend could not start the Sandbox", body = ErrorBody)))]
pub(crate) async fn create(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateSandbox>,
) -> AppResult<(StatusCode, Json<SandboxInfo>)> {
    if body.labels.contains_key(PROJECT_LABEL) {
        return Err(ApiError::invalid(format!(
            "the label {PROJECT_LABEL} is set by the server from `project`; give `project` instead"
        )));
    }
    match (&caller.scope, &body.project) {
        (Scope::Projects(_), None) => {
            return Err(ApiError::invalid(
                "this token is scoped to projects: give `project`, one of them, for the Sandbox",
            ))
        }
        (_, Some(p)) => {
            caller.scope.check(p)?;
            let store = st.store.clone();
            let p2 = p.clone();
            let exists = crate::routes::blocking(move || Ok(store.list_projects()?))
                .await?
                .contains(&p2);
            if !exists {
                return Err(ApiError::not_found(format!("project not found: {p}")));
            }
        }
        (Scope::All, None) => {}
    }
    let cpu_millis = match body.cpus {
        None => None,
        Some(c) if c.is_finite() && (0.01..=4096.0).contains(&c) => {
            Some((c * 1000.0).round() as u64)
        }
        Some(c) => {
            return Err(ApiError::invalid(format!(
                "cpus {c}: give a number of CPUs from 0.01 to 4096, e.g. 0.5 or 2"
            )))
        }
    };
    // Below these the Sandbox's own init and daemon cannot start (the
    // backend would fail it with a 502 that is the request's fault).
    if body.memory.is_some_and(|m| m < MIN_MEMORY) {
        return Err(ApiError::invalid(format!(
            "memory {}: at least {MIN_MEMORY} bytes (64 MiB): the Sandbox's daemon runs within the limit too; leave it out for the default",
            body.memory.unwrap_or(0)
        )));
    }
    if body.pids.is_some_and(|p| p < MIN_PIDS) {
        return Err(ApiError::invalid(format!(
            "pids {}: at least {MIN_PIDS}: the Sandbox's init and daemon threads count too; leave it out for the default",
            body.pids.unwrap_or(0)
        )));
    }
    let mut spec = SandboxSpec::new(st.store.dir());
    spec.name = body.name;
    spec.labels = body.labels;
    if let Some(p) = &body.project {
        spec.labels.insert(PROJECT_LABEL.into(), p.clone());
    }
    spec.network = match body.network {
        SandboxNetwork::None => strata_sdk::Network::None,
        SandboxNetwork::Host => strata_sdk::Network::Host,
    };
    spec.limits = strata_sdk::Limits {
        memory_bytes: body.memory,
        pids: body.pids,
        cpu_millis,
    };
    spec.no_limits = body.no_limits;
    spec.docker_image = body.image;
    spec.state_dir = st.sandbox_root.clone();
    spec.daemon_exe = st.daemon_exe.clone();
    let sb = Sandbox::create(spec).await.map_err(sdk_error)?;
    let mut info = wire(sb.info());
    info.workspaces = Some(Vec::new());
    tracing::info!(sandbox = %info.id, token = %caller.token_id, "sandbox created");
    Ok((StatusCode::CREATED, Json(info)))
}

#[utoipa::path(get, tag = "sandboxes", path = "/v1/sandboxes", params(SandboxListQuery),
    responses(
        (status = 200, description = "The Sandboxes of this Store the token sees, oldest first", body = SandboxList),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody)))]
pub(crate) async fn list(
    State(st): St,
    Extension(caller): Extension<Caller>,
    RawQuery(q): RawQuery,
) -> AppResult<Json<SandboxList>> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(q.as_deref().unwrap_or(""))
        .map_err(|e| ApiError::invalid(format!("query: {e}")))?;
    let mut labels = BTreeMap::new();
    for (k, v) in pairs {
        if k != "label" {
            return Err(ApiError::invalid(format!(
                "unknown query parameter {k:?}: the only one is label=KEY=VALUE (repeatable)"
            )));
        }
        let Some((lk, lv)) = v.split_once('=') else {
            return Err(ApiError::invalid(format!(
                "label {v:?}: expected KEY=VALUE"
            )));
        };
        labels.insert(lk.to_string(), lv.to_string());
    }
    let all = Sandbox::list(SandboxFilter {
        labels,
        name_prefix: None,
        state_dir: st.sandbox_root.clone(),
    })
    .await
    .map_err(sdk_error)?;
    Ok(Json(SandboxList {
        sandboxes: all
            .iter()
            .filter(|i| same_store(&i.config.store, &st.store_dir))
            .filter(|i| visible(&caller.scope, &i.labels))
            .map(wire)
            .collect(),
    }))
}

#[utoipa::path(get, tag = "sandboxes", path = "/v1/sandboxes/{id}",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses(
        (status = 200, description = "The Sandbox, with its Workspaces when its daemon answers", body = SandboxInfo),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such Sandbox (or not in the token's scope)", body = ErrorBody)))]
pub(crate) async fn get(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> AppResult<Json<SandboxInfo>> {
    let sb = open(&st, &caller, &id).await?;
    Ok(Json(detailed(&sb).await))
}

#[utoipa::path(get, tag = "sandboxes", path = "/v1/sandboxes/{id}/logs",
    params(("id" = String, Path, description = "Sandbox ID"), SandboxLogsQuery),
    responses(
        (status = 200, description = "The last lines of the daemon's log (also when it is dead)", content_type = "text/plain"),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such Sandbox (or not in the token's scope)", body = ErrorBody)))]
pub(crate) async fn logs(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<SandboxLogsQuery>,
) -> AppResult<Response> {
    let sb = open(&st, &caller, &id).await?;
    let text = sb
        .logs(q.lines.unwrap_or(100).min(10_000))
        .await
        .map_err(sdk_error)?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

#[utoipa::path(post, tag = "sandboxes", path = "/v1/sandboxes/{id}/restart",
    params(("id" = String, Path, description = "Sandbox ID")),
    responses(
        (status = 200, description = "Running again, its Workspaces mounted again", body = SandboxInfo),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such Sandbox (or not in the token's scope)", body = ErrorBody),
        (status = 409, description = "It is running (only a stopped Sandbox restarts)", body = ErrorBody),
        (status = 502, description = "Its daemon did not come up", body = ErrorBody)))]
pub(crate) async fn restart(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> AppResult<Json<SandboxInfo>> {
    let mut sb = open(&st, &caller, &id).await?;
    forget(&st, &id);
    sb.restart().await.map_err(sdk_error)?;
    Ok(Json(detailed(&sb).await))
}

/// Query of `DELETE /v1/sandboxes/{id}`.
#[derive(Debug, serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct CloseQuery {
    /// Drop the Workspaces' uncommitted changes (without it, a Sandbox
    /// with uncommitted work is refused with 409).
    #[serde(default)]
    discard: Option<bool>,
}

#[utoipa::path(delete, tag = "sandboxes", path = "/v1/sandboxes/{id}",
    params(("id" = String, Path, description = "Sandbox ID"), CloseQuery),
    responses(
        (status = 204, description = "Closed: its daemon, mounts and scratch are gone; the Store is untouched"),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such Sandbox (or not in the token's scope)", body = ErrorBody),
        (status = 409, description = "A Workspace has uncommitted changes (commit them, or ?discard=true)", body = ErrorBody)))]
pub(crate) async fn close(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<CloseQuery>,
) -> AppResult<StatusCode> {
    let sb = open(&st, &caller, &id).await?;
    forget(&st, &id);
    if q.discard.unwrap_or(false) {
        sb.close_discard().await
    } else {
        sb.close().await
    }
    .map_err(sdk_error)?;
    tracing::info!(sandbox = %id, token = %caller.token_id, "sandbox closed");
    Ok(StatusCode::NO_CONTENT)
}
