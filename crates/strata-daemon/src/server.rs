//! Routes, the layers around them (authentication, panics, body limit),
//! health, logs and shutdown; the Workspace handlers are in
//! `server/workspaces.rs`, the exec handlers in `server/execs.rs`.

use std::collections::HashMap;
use std::convert::Infallible;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine;
use serde::Deserialize;
use strata_store::Store;
use strata_workspace::{CommitOutcome, MountHandle, Workspace};

use crate::api::{self, *};
use crate::config::DaemonConfig;
use crate::error::{store_error, ws_error, ApiError};
use crate::exec::{Exec, Launch, LaunchError, StdinError};
use crate::recover;

mod execs;
mod extract;
mod files;
mod workspaces;
use execs::*;
use extract::{ApiBytes, ApiJson, ApiPath, ApiQuery};
use files::*;
pub(crate) use workspaces::unmount_entry;
use workspaces::*;

/// Most finished execs kept for status/wait before the oldest are dropped.
const KEEP_FINISHED: usize = 1000;

/// Largest body a JSON request (or a stdin write) may have; a file written
/// with `PUT .../files` streams and has its own limit
/// (`DaemonConfig::max_write_bytes`).
const MAX_JSON_BODY: usize = 8 << 20;

pub(crate) struct WsEntry {
    pub ws: Workspace,
    pub handle: Option<MountHandle>,
    pub path: PathBuf,
}

pub(crate) struct AppState {
    pub config: DaemonConfig,
    pub token: String,
    pub store: Store,
    pub helper_exe: PathBuf,
    pub workspaces: Mutex<HashMap<String, WsEntry>>,
    /// Workspaces found recorded at start that could not be served again.
    pub unrecovered: Mutex<Vec<api::UnrecoveredWorkspace>>,
    pub execs: Mutex<HashMap<String, Arc<Exec>>>,
    /// The exec helper started ahead of the next exec.
    pub prestart: Arc<crate::prestart::Slot>,
    pub shutdown: tokio::sync::watch::Sender<bool>,
}

type AppResult<T> = Result<T, ApiError>;
type St = State<Arc<AppState>>;

pub(crate) fn router(state: Arc<AppState>) -> Router {
    harden(routes(), state)
}

/// Every route, before the layers [`harden`] adds.
fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/workspaces", post(mount).get(list_workspaces))
        .route("/v1/workspaces/{id}", get(get_workspace))
        .route("/v1/workspaces/{id}/status", get(ws_status))
        .route("/v1/workspaces/{id}/commit", post(ws_commit))
        .route("/v1/workspaces/{id}/unmount", post(ws_unmount))
        .route(
            "/v1/workspaces/{id}/files",
            get(file_read).put(file_write).delete(file_remove),
        )
        .route("/v1/workspaces/{id}/ls", get(file_list))
        .route("/v1/workspaces/{id}/stat", get(file_stat))
        .route("/v1/workspaces/{id}/rename", post(file_rename))
        .route("/v1/workspaces/{id}/mkdir", post(file_mkdir))
        .route("/v1/execs", post(exec_create).get(list_execs))
        .route("/v1/execs/{id}", get(exec_status))
        .route("/v1/execs/{id}/wait", get(exec_wait))
        .route("/v1/execs/{id}/output", get(exec_output))
        .route("/v1/execs/{id}/stdin", post(exec_stdin))
        .route("/v1/execs/{id}/stdin/close", post(exec_stdin_close))
        .route("/v1/execs/{id}/cancel", post(exec_cancel))
        .route("/v1/execs/{id}/resize", post(exec_resize))
        .route("/v1/logs", get(logs))
        .route("/v1/shutdown", post(shutdown))
        .fallback(|| async {
            ApiError::not_found("no such route").hint("see docs/api/openapi.yaml")
        })
}

/// The layers around every route: a panic in a handler answers 500 for
/// that request only, the body limit, and the token check (outermost).
/// The daemon's shared state is behind `parking_lot` mutexes, which are
/// not poisoned by a panic while held: the maps they guard are updated in
/// single statements (insert, remove, extend), so a panic elsewhere never
/// leaves them half-changed, and every later request (health included)
/// still gets them.
fn harden(routes: Router<Arc<AppState>>, state: Arc<AppState>) -> Router {
    routes
        .layer(axum::middleware::from_fn(catch_panic))
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth))
        .with_state(state)
}

/// Run the handler; if it panics, log the panic and answer 500. Without
/// this, hyper drops the connection with no answer (the task unwinds).
async fn catch_panic(req: Request, next: Next) -> Response {
    use futures_util::FutureExt;
    let route = req.uri().path().to_string();
    match std::panic::AssertUnwindSafe(next.run(req))
        .catch_unwind()
        .await
    {
        Ok(r) => r,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "(no message)".into());
            tracing::error!(%route, panic = %what, "a request handler panicked; answered 500");
            ApiError::internal(format!(
                "the daemon failed on this request (a bug: a handler panicked: {what}); it keeps serving other requests"
            ))
            .hint("see the daemon's log (GET /v1/logs) and report it")
            .into_response()
        }
    }
}

/// Byte comparison whose time does not depend on where the inputs differ
/// (`subtle`; only a length mismatch returns early, and a token's length
/// is public: 64 hex digits).
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    use subtle::ConstantTimeEq;
    a.ct_eq(b).into()
}

/// Every request needs `Authorization: Bearer <token>`; anything else is a
/// bare 401 (no body, no hint about what was wrong).
async fn auth(State(st): St, req: Request, next: Next) -> Response {
    let ok = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.as_bytes().strip_prefix(b"Bearer "))
        .map(|t| constant_time_eq(t, st.token.as_bytes()))
        .unwrap_or(false);
    if !ok {
        tracing::warn!(path = %req.uri().path(), "refused a request without the right token");
        return StatusCode::UNAUTHORIZED.into_response();
    }
    next.run(req).await
}

async fn health(State(st): St) -> Json<Health> {
    let running = st
        .execs
        .lock()
        .values()
        .filter(|e| !e.is_finished())
        .count();
    Json(Health {
        status: "ok".into(),
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION").into(),
        workspaces: st.workspaces.lock().len(),
        running_execs: running,
        unrecovered: st.unrecovered.lock().clone(),
        fuse_transport: Some(st.config.transport().as_str().to_string()),
    })
}

/// A clean absolute path: starts with '/', no '.', '..' or empty parts.
fn clean_absolute(p: &str, what: &str) -> AppResult<PathBuf> {
    if p.contains('\0') {
        return Err(ApiError::invalid(format!(
            "{what} {p:?} contains a NUL byte"
        )));
    }
    let path = PathBuf::from(p);
    if !path.is_absolute()
        || path
            .components()
            .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(ApiError::invalid(format!(
            "{what} {p:?} must be an absolute path without '.' or '..'"
        )));
    }
    // Normalize away duplicate and trailing slashes.
    Ok(path.components().collect())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> AppResult<T> + Send + 'static,
) -> AppResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("worker thread failed: {e}")))?
}

#[derive(Deserialize)]
struct LogQuery {
    tail: Option<usize>,
}

async fn logs(State(st): St, ApiQuery(q): ApiQuery<LogQuery>) -> AppResult<Response> {
    let n = q.tail.unwrap_or(100).min(10_000);
    let path = st.config.log_file.clone();
    let text = blocking(move || {
        tail_file(&path, n)
            .map_err(|e| ApiError::internal(format!("reading the log {}: {e}", path.display())))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// The last `lines` lines of a file (reads at most the last 1 MiB), each
/// ended by a newline: strata-sandbox's one log tail.
pub fn tail_file(path: &Path, lines: usize) -> std::io::Result<String> {
    let mut out = strata_sandbox::backend::state::tail_within(path, lines, 1 << 20)?;
    if !out.is_empty() {
        out.push('\n');
    }
    Ok(out)
}

async fn shutdown(State(st): St, _h: HeaderMap) -> (StatusCode, Json<serde_json::Value>) {
    tracing::info!("shutdown requested over the API");
    let _ = st.shutdown.send(true);
    (
        StatusCode::ACCEPTED,
        Json(serde_json::json!({"status": "shutting_down"})),
    )
}

#[cfg(test)]
#[path = "server_tests.rs"]
mod tests;
