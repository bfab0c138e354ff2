//! Routes, authentication and the handlers.

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
use crate::error::{ws_error, ApiError};
use crate::exec::{Exec, Launch, LaunchError, StdinError};
use crate::recover;

/// Most finished execs kept for status/wait before the oldest are dropped.
const KEEP_FINISHED: usize = 1000;

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
        .layer(DefaultBodyLimit::max(8 << 20))
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

fn ws_info(id: &str, e: &WsEntry) -> WorkspaceInfo {
    WorkspaceInfo {
        id: id.into(),
        path: e.path.display().to_string(),
        branch: e.ws.branch().to_string(),
        base: e.ws.base().to_hex(),
    }
}

async fn mount(
    State(st): St,
    Json(req): Json<MountRequest>,
) -> AppResult<(StatusCode, Json<WorkspaceInfo>)> {
    let at = match &req.at {
        Some(a) => clean_absolute(a, "mount path")?,
        None => st.config.default_mount(),
    };
    {
        let map = st.workspaces.lock();
        if let Some((id, _)) = map
            .iter()
            .find(|(_, e)| e.path.starts_with(&at) || at.starts_with(&e.path))
        {
            return Err(ApiError::busy(format!(
                "{} overlaps the mount of workspace {id}",
                at.display()
            ))
            .hint("unmount it first or choose another path"));
        }
    }
    let st2 = st.clone();
    let info = blocking(move || {
        recover::prepare_mountpoint(&at)?;
        let opts = recover::workspace_options(&st2.config);
        let ws = Workspace::create(&st2.store, &req.reference, &st2.config.scratch_dir, &opts)
            .map_err(ws_error)?;
        // Recorded before it is served: a daemon that dies from here on is
        // restarted with this Workspace mounted again.
        let recorded = recover::record_mount(&st2.config, ws.id(), &at, &ws.branch().to_string());
        let handle = match recorded.and_then(|()| recover::mount_checked(&ws, &at)) {
            Ok(h) => h,
            Err(e) => {
                let _ = recover::forget_mount(&st2.config, ws.id());
                let _ = ws.discard();
                return Err(e);
            }
        };
        let id = ws.id().to_string();
        let entry = WsEntry {
            ws,
            handle: Some(handle),
            path: at,
        };
        let info = ws_info(&id, &entry);
        st2.workspaces.lock().insert(id, entry);
        Ok(info)
    })
    .await?;
    tracing::info!(workspace = %info.id, path = %info.path, branch = %info.branch, "mounted");
    Ok((StatusCode::CREATED, Json(info)))
}

async fn list_workspaces(State(st): St) -> Json<Vec<WorkspaceInfo>> {
    let map = st.workspaces.lock();
    let mut v: Vec<_> = map.iter().map(|(id, e)| ws_info(id, e)).collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    Json(v)
}

fn find_ws(st: &AppState, id: &str) -> AppResult<Workspace> {
    st.workspaces
        .lock()
        .get(id)
        .map(|e| e.ws.clone())
        .ok_or_else(|| {
            ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
                .hint("list them with GET /v1/workspaces")
        })
}

async fn get_workspace(
    State(st): St,
    UrlPath(id): UrlPath<String>,
) -> AppResult<Json<WorkspaceInfo>> {
    let map = st.workspaces.lock();
    let e = map.get(&id).ok_or_else(|| {
        ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
    })?;
    Ok(Json(ws_info(&id, e)))
}

async fn ws_status(State(st): St, UrlPath(id): UrlPath<String>) -> AppResult<Json<StatusResponse>> {
    let ws = find_ws(&st, &id)?;
    blocking(move || {
        let changes = ws.status().map_err(ws_error)?;
        let b64 = base64::engine::general_purpose::STANDARD;
        Ok(Json(StatusResponse {
            id: id.into(),
            base: ws.base().to_hex(),
            changes: changes
                .into_iter()
                .map(|c| ChangeEntry {
                    path: String::from_utf8_lossy(&c.path).into_owned(),
                    path_b64: b64.encode(&c.path),
                    kind: c.kind.as_str().into(),
                })
                .collect(),
        }))
    })
    .await
}

async fn ws_commit(
    State(st): St,
    UrlPath(id): UrlPath<String>,
    Json(req): Json<CommitRequest>,
) -> AppResult<Json<CommitResponse>> {
    let ws = find_ws(&st, &id)?;
    let r = blocking(move || {
        let out = ws.commit(&req.message).map_err(ws_error)?;
        let branch = ws.branch().to_string();
        Ok(match out {
            CommitOutcome::Committed(c) => CommitResponse {
                outcome: crate::api::Outcome::Committed,
                commit: c.to_hex(),
                branch,
            },
            CommitOutcome::UpToDate => CommitResponse {
                outcome: crate::api::Outcome::UpToDate,
                commit: ws.base().to_hex(),
                branch,
            },
        })
    })
    .await?;
    tracing::info!(workspace = %id, commit = %r.commit, outcome = %r.outcome, "commit");
    Ok(Json(r))
}

async fn ws_unmount(
    State(st): St,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> AppResult<Json<UnmountResponse>> {
    let discard = optional_json::<UnmountRequest>(&body)?
        .map(|b| b.discard)
        .unwrap_or(false);
    if !discard {
        // Unmounting must not lose work silently: the scratch of a Sandbox
        // is deleted when the Sandbox is closed, so uncommitted changes are
        // refused here (as `strata ws unmount` does on the host) unless the
        // caller says discard.
        let ws = find_ws(&st, &id)?;
        let changes = blocking(move || ws.status().map_err(ws_error)).await?;
        if !changes.is_empty() {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                crate::api::ErrorCode::Uncommitted,
                format!("workspace {id} has {} uncommitted change(s)", changes.len()),
            )
            .hint("commit them first, or unmount with \"discard\": true to drop them"));
        }
    }
    find_ws(&st, &id)?;
    // Forgotten first: a crash after this point leaves the Workspace
    // unmounted at the next start (its scratch kept unless discarded),
    // never mounted again against the caller's request.
    recover::forget_mount(&st.config, &id)?;
    let entry = st.workspaces.lock().remove(&id).ok_or_else(|| {
        ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
    })?;
    blocking(move || unmount_entry(entry, discard)).await?;
    tracing::info!(workspace = %id, discard, "unmounted");
    Ok(Json(UnmountResponse {
        id: id.into(),
        discarded: discard,
    }))
}

pub(crate) fn unmount_entry(mut entry: WsEntry, discard: bool) -> AppResult<()> {
    if let Some(h) = entry.handle.take() {
        h.unmount().map_err(ws_error)?;
    }
    if discard {
        entry.ws.discard().map_err(ws_error)?;
    }
    // The mount directory was created by us or was empty: leave it.
    Ok(())
}

/// An optional JSON body: empty means "all defaults".
fn optional_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> AppResult<Option<T>> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("request body: {e}")))
}

fn parse_user(u: &str) -> AppResult<strata_sandbox::Identity> {
    let bad = || ApiError::invalid(format!("user {u:?}: expected UID:GID, e.g. 1500:1500"));
    let (a, b) = u.split_once(':').ok_or_else(bad)?;
    let uid: u32 = a.parse().map_err(|_| bad())?;
    let gid: u32 = b.parse().map_err(|_| bad())?;
    strata_sandbox::Identity::new(uid, gid).map_err(|e| ApiError::invalid(e.to_string()))
}

fn new_exec_id() -> String {
    format!("x{:016x}", rand::random::<u64>())
}

async fn exec_create(
    State(st): St,
    Json(req): Json<ExecRequest>,
) -> AppResult<(StatusCode, Json<ExecCreated>)> {
    // Bad input, refused before anything starts.
    if req.argv.is_empty() {
        return Err(ApiError::invalid(
            "argv is empty: give at least the program",
        ));
    }
    let mut total = 0usize;
    for (i, a) in req.argv.iter().enumerate() {
        if a.contains('\0') {
            return Err(ApiError::invalid(format!("argv[{i}] contains a NUL byte")));
        }
        total += a.len() + 1;
    }
    let mut env: Vec<(OsString, OsString)> = Vec::with_capacity(req.env.len() + 1);
    for (k, v) in &req.env {
        if k.is_empty() || k.contains('=') || k.contains('\0') {
            return Err(ApiError::invalid(format!(
                "environment variable name {k:?} is empty or contains '=' or NUL"
            )));
        }
        if v.contains('\0') {
            return Err(ApiError::invalid(format!(
                "value of environment variable {k:?} contains a NUL byte"
            )));
        }
        total += k.len() + v.len() + 2;
        env.push((k.into(), v.into()));
    }
    if total > strata_sandbox::exec::MAX_ARGV_ENV_BYTES {
        return Err(ApiError::invalid(format!(
            "argv and env take {total} bytes, more than the limit of {} (1 MiB)",
            strata_sandbox::exec::MAX_ARGV_ENV_BYTES
        )));
    }
    if !req.env.contains_key("PATH") {
        env.push(("PATH".into(), strata_sandbox::exec::DEFAULT_PATH.into()));
    }
    let identity = match &req.user {
        Some(u) => parse_user(u)?,
        None => {
            let (u, g) = st.config.default_user();
            strata_sandbox::Identity::new(u, g).map_err(|e| ApiError::internal(e.to_string()))?
        }
    };
    // Which Workspace, and a cwd inside it.
    let cwd_req = req
        .cwd
        .as_deref()
        .map(|c| clean_absolute(c, "cwd"))
        .transpose()?;
    let (ws_id, cwd) = {
        let map = st.workspaces.lock();
        let (id, entry) = match (&req.workspace, &cwd_req) {
            (Some(id), _) => map.get_key_value(id.as_str()).ok_or_else(|| {
                ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
            })?,
            (None, Some(c)) => map
                .iter()
                .find(|(_, e)| c.starts_with(&e.path))
                .ok_or_else(|| {
                    ApiError::invalid(format!(
                        "cwd {} is outside every mounted workspace",
                        c.display()
                    ))
                    .hint("commands run inside a Workspace: give a cwd under its mount path")
                })?,
            (None, None) => {
                let mut it = map.iter();
                match (it.next(), it.next()) {
                    (Some(one), None) => one,
                    (None, _) => {
                        return Err(ApiError::invalid("no workspace is mounted in this Sandbox")
                            .hint("mount one first (POST /v1/workspaces)"))
                    }
                    _ => {
                        return Err(ApiError::invalid(
                            "several workspaces are mounted: say which (workspace) or give a cwd",
                        ))
                    }
                }
            }
        };
        let cwd = cwd_req.clone().unwrap_or_else(|| entry.path.clone());
        if !cwd.starts_with(&entry.path) {
            return Err(ApiError::invalid(format!(
                "cwd {} is outside workspace {id} (mounted at {})",
                cwd.display(),
                entry.path.display()
            )));
        }
        (id.clone(), cwd)
    };
    let stdin_data = match &req.stdin_data {
        Some(s) => Some(
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(|e| ApiError::invalid(format!("stdin_data is not base64: {e}")))?,
        ),
        None => None,
    };
    let id = new_exec_id();
    let launch = Launch {
        id: id.clone(),
        argv: req.argv.clone(),
        env,
        cwd,
        identity,
        helper_exe: st.helper_exe.clone(),
        stdin_pipe: req.stdin,
        stdin_data,
        tty: req.tty,
        tty_size: req.tty_size,
        timeout: req.timeout_ms.map(Duration::from_millis),
        workspace: Some(ws_id),
        bound: st
            .config
            .output_buffer_bytes
            .unwrap_or(crate::config::DEFAULT_OUTPUT_BUFFER),
    };
    let exec = Exec::start(launch).map_err(|e| match e {
        LaunchError::Spec(m) => ApiError::invalid(m),
        other => ApiError::internal(other.to_string()),
    })?;
    tracing::info!(exec = %id, pid = exec.pid, argv = ?req.argv, "exec started");
    let created = ExecCreated {
        id: id.clone().into(),
        pid: exec.pid,
    };
    let mut execs = st.execs.lock();
    prune(&mut execs);
    execs.insert(id, exec);
    Ok((StatusCode::CREATED, Json(created)))
}

fn prune(execs: &mut HashMap<String, Arc<Exec>>) {
    if execs.len() < KEEP_FINISHED {
        return;
    }
    let mut done: Vec<_> = execs
        .iter()
        .filter_map(|(k, e)| e.finished_at().map(|t| (t, k.clone())))
        .collect();
    done.sort();
    for (_, k) in done.into_iter().take(execs.len() / 2) {
        execs.remove(&k);
    }
}

fn find_exec(st: &AppState, id: &str) -> AppResult<Arc<Exec>> {
    st.execs.lock().get(id).cloned().ok_or_else(|| {
        ApiError::not_found(format!("no exec {id:?} in this Sandbox"))
            .hint("exec IDs come from POST /v1/execs; finished ones are kept for a while")
    })
}

async fn list_execs(State(st): St) -> Json<Vec<api::ExecStatus>> {
    let execs: Vec<_> = st.execs.lock().values().cloned().collect();
    let mut v: Vec<_> = execs.iter().map(|e| e.status()).collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    Json(v)
}

async fn exec_status(
    State(st): St,
    UrlPath(id): UrlPath<String>,
) -> AppResult<Json<api::ExecStatus>> {
    Ok(Json(find_exec(&st, &id)?.status()))
}

#[derive(Deserialize)]
struct WaitQuery {
    timeout_ms: Option<u64>,
}

async fn exec_wait(
    State(st): St,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<WaitQuery>,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    Ok(Json(e.wait(q.timeout_ms.map(Duration::from_millis)).await))
}

#[derive(Deserialize)]
struct OutputQuery {
    /// `false`: end the stream when the buffered output is handed out,
    /// without waiting for more (and without the final frame while the
    /// command runs). Default `true`.
    follow: Option<bool>,
}

async fn exec_output(
    State(st): St,
    UrlPath(id): UrlPath<String>,
    Query(q): Query<OutputQuery>,
) -> AppResult<Response> {
    let e = find_exec(&st, &id)?;
    crate::exec::rearm_end(&e);
    let stream = e.attach(q.follow.unwrap_or(true)).ok_or_else(|| {
        ApiError::busy(format!("exec {id} already has an attached output stream"))
            .hint("one reader at a time: close the other stream first")
    })?;
    let body = futures_util::stream::unfold(stream, |mut s| async move {
        s.next_line()
            .await
            .map(|line| (Ok::<Bytes, Infallible>(line), s))
    });
    Ok((
        [(header::CONTENT_TYPE, api::NDJSON)],
        Body::from_stream(body),
    )
        .into_response())
}

async fn exec_stdin(
    State(st): St,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> AppResult<Json<StdinWritten>> {
    let e = find_exec(&st, &id)?;
    match e.write_stdin(&body).await {
        Ok(n) => Ok(Json(StdinWritten { written: n })),
        Err(StdinError::Closed) => Err(ApiError::new(
            StatusCode::CONFLICT,
            crate::api::ErrorCode::StdinClosed,
            format!("exec {id} has no open stdin (not requested, closed, or the command ended)"),
        )
        .hint("create the exec with \"stdin\": true and write before closing")),
        Err(StdinError::Io(err)) => Err(ApiError::new(
            StatusCode::CONFLICT,
            crate::api::ErrorCode::StdinClosed,
            format!("writing to the stdin of exec {id}: {err} (the command closed it or ended)"),
        )),
    }
}

async fn exec_stdin_close(
    State(st): St,
    UrlPath(id): UrlPath<String>,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    e.close_stdin().await;
    Ok(Json(e.status()))
}

async fn exec_cancel(
    State(st): St,
    UrlPath(id): UrlPath<String>,
    body: Bytes,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    let grace = optional_json::<CancelRequest>(&body)?
        .and_then(|b| b.grace_ms)
        .map(Duration::from_millis)
        .unwrap_or(crate::exec::DEFAULT_GRACE);
    Ok(Json(e.cancel(grace).await))
}

async fn exec_resize(
    State(st): St,
    UrlPath(id): UrlPath<String>,
    Json(req): Json<api::ResizeRequest>,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    if req.rows == 0 || req.cols == 0 {
        return Err(ApiError::invalid("rows and cols must be at least 1"));
    }
    match e.resize(req.rows, req.cols) {
        Ok(true) => Ok(Json(e.status())),
        Ok(false) => Err(ApiError::invalid(format!(
            "exec {id} has no terminal (it was not started with \"tty\": true)"
        ))),
        Err(err) => Err(ApiError::internal(format!(
            "resizing the terminal of {id}: {err}"
        ))),
    }
}

#[derive(Deserialize)]
struct LogQuery {
    tail: Option<usize>,
}

async fn logs(State(st): St, Query(q): Query<LogQuery>) -> AppResult<Response> {
    let n = q.tail.unwrap_or(100).min(10_000);
    let path = st.config.log_file.clone();
    let text = blocking(move || {
        tail_file(&path, n)
            .map_err(|e| ApiError::internal(format!("reading the log {}: {e}", path.display())))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

/// The last `lines` lines of a file (reads at most the last 1 MiB).
pub fn tail_file(path: &Path, lines: usize) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(1 << 20);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    let mut out = all[from..].join("\n");
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
