//! Routes, authentication, extractors and the read handlers. The write
//! handler (a change set as one commit) is in `write.rs`.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{any, delete, get, post};
use axum::{Extension, Json, Router};
use serde::de::DeserializeOwned;
use strata_api::range::{parse_range, Unsatisfiable};
use strata_store::{BranchRef, EntryKind, ObjectId, Store, StoreError, TreeEntry};

use crate::api::*;
use crate::error::ApiError;
use crate::scope::{Caller, Scope};
use crate::ServerState;

pub(crate) type St = State<Arc<ServerState>>;
pub(crate) type AppResult<T> = Result<T, ApiError>;

pub(crate) fn router(state: Arc<ServerState>) -> Router {
    let authed = Router::new()
        .route("/v1/openapi.json", get(openapi_json))
        .route("/v1/projects", get(list_projects).post(create_project))
        .route(
            "/v1/projects/{project}/branches",
            get(list_branches).post(create_branch),
        )
        .route(
            "/v1/projects/{project}/branches/{branch}",
            delete(delete_branch),
        )
        .route(
            "/v1/projects/{project}/branches/{branch}/commits",
            post(crate::write::commit),
        )
        .route(
            "/v1/projects/{project}/branches/{branch}/tar",
            post(crate::tarball::import),
        )
        .route("/v1/projects/{project}/tar", get(crate::tarball::export))
        .route("/v1/projects/{project}/log", get(log))
        .route("/v1/projects/{project}/diff", get(diff))
        .route("/v1/projects/{project}/ls", get(ls))
        .route("/v1/projects/{project}/stat", get(stat))
        .route("/v1/projects/{project}/cat", get(cat))
        .route(
            "/v1/sandboxes",
            get(crate::sandboxes::list).post(crate::sandboxes::create),
        )
        .route(
            "/v1/sandboxes/{id}",
            get(crate::sandboxes::get).delete(crate::sandboxes::close),
        )
        .route("/v1/sandboxes/{id}/logs", get(crate::sandboxes::logs))
        .route(
            "/v1/sandboxes/{id}/restart",
            post(crate::sandboxes::restart),
        )
        .route("/v1/sandboxes/{id}/execs/{eid}/ws", get(crate::relay::ws))
        .route("/v1/sandboxes/{id}/{*rest}", any(crate::relay::relay))
        .fallback(|| async {
            ApiError::not_found("no such route; GET /v1/openapi.json lists the routes")
        })
        .layer(DefaultBodyLimit::max(state.max_body))
        .layer(axum::middleware::from_fn_with_state(state.clone(), auth));
    Router::new()
        .route("/v1/healthz", get(healthz))
        .merge(authed)
        .with_state(state)
}

/// `Authorization: Bearer TOKEN` on every request but the liveness probe.
async fn auth(State(st): St, mut req: Request, next: Next) -> Response {
    let presented = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    let caller = match presented.map(|t| st.tokens.verify(t)) {
        Some(Ok(Some(c))) => c,
        Some(Err(e)) => {
            tracing::error!("token check failed: {e}");
            return ApiError::internal(format!("cannot check tokens: {e}")).into_response();
        }
        _ => {
            let mut r = ApiError::new(
                StatusCode::UNAUTHORIZED,
                ErrorCode::Unauthorized,
                "missing, wrong or revoked token: send `Authorization: Bearer TOKEN` with a token from `strata token create`",
            )
            .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, "Bearer".parse().unwrap());
            return r;
        }
    };
    req.extensions_mut().insert(caller);
    next.run(req).await
}

/// `axum::Json` whose rejections are API errors: 415 without
/// `Content-Type: application/json`, 400 for bad JSON, 422 for a wrong
/// shape (unknown or missing fields, wrong types), 413 past the body limit.
pub(crate) struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rej) => Err(json_rejection(rej)),
        }
    }
}

fn json_rejection(rej: JsonRejection) -> ApiError {
    let status = rej.status();
    let text = rej.body_text();
    match status {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
            status,
            ErrorCode::PayloadTooLarge,
            "the request body is larger than this server accepts (strata serve --max-body-mib); split the change set into several commits",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ApiError::new(
            status,
            ErrorCode::UnsupportedMediaType,
            "send the body as JSON with `Content-Type: application/json`",
        ),
        StatusCode::UNPROCESSABLE_ENTITY => ApiError::new(
            status,
            ErrorCode::InvalidInput,
            format!("{text}; GET /v1/openapi.json describes the accepted fields"),
        ),
        _ if status.is_client_error() => {
            ApiError::new(status, ErrorCode::InvalidJson, format!("{text}; send valid JSON"))
        }
        _ => ApiError::internal(text),
    }
}

/// `axum::extract::Query` whose rejection is a 400 API error.
pub(crate) struct ApiQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|q| ApiQuery(q.0))
            .map_err(|e| {
                ApiError::invalid(format!(
                    "{}; GET /v1/openapi.json describes the query parameters",
                    e.body_text()
                ))
            })
    }
}

/// `axum::extract::Path` whose rejection is a 400 API error.
pub(crate) struct ApiPath<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for ApiPath<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|p| ApiPath(p.0))
            .map_err(|e| ApiError::invalid(e.body_text()))
    }
}

/// Run Store work on the blocking pool.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> AppResult<T> + Send + 'static,
) -> AppResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("a Store task failed: {e}")))?
}

/// The commit a REF names inside `project`: a branch of the project, or a
/// commit id (8 to 64 hex digits). For a scoped token a commit id counts
/// only if a branch of `project` reaches it (any parent), so ids of other
/// projects' history read as not found.
pub(crate) fn resolve_in(
    store: &Store,
    scope: &Scope,
    project: &str,
    reference: &str,
) -> AppResult<ObjectId> {
    scope.check(project)?;
    let not_found = || {
        ApiError::not_found(format!(
            "ref {reference:?} not found in project {project}: give a branch of {project} or a commit id (8 to 64 hex digits) of its history"
        ))
    };
    let heads: Vec<ObjectId> = store
        .list_branches(Some(project))?
        .into_iter()
        .map(|(_, head)| head)
        .collect();
    // A branch of this project by that name?
    if strata_store::validate_name("branch", reference).is_ok() {
        if let Ok(b) = BranchRef::new(project, reference) {
            match store.branch_head(&b) {
                Ok(h) => return Ok(h),
                Err(StoreError::NotFound { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    let is_hex =
        (8..=64).contains(&reference.len()) && reference.bytes().all(|c| c.is_ascii_hexdigit());
    if !is_hex {
        return Err(not_found());
    }
    let commit = match store.resolve(&reference.to_ascii_lowercase()) {
        Ok(r) => r.commit,
        Err(StoreError::NotFound { .. }) => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    if *scope == Scope::All {
        return Ok(commit);
    }
    // Breadth-first over parents from every head of the project.
    let mut seen: HashSet<ObjectId> = HashSet::new();
    let mut queue: VecDeque<ObjectId> = heads.into_iter().collect();
    while let Some(c) = queue.pop_front() {
        if !seen.insert(c) {
            continue;
        }
        if c == commit {
            return Ok(commit);
        }
        queue.extend(store.read_commit(c)?.parents);
    }
    Err(not_found())
}

pub(crate) fn commit_info(id: ObjectId, c: strata_store::Commit) -> CommitInfo {
    CommitInfo {
        id: id.to_hex(),
        tree: c.tree.to_hex(),
        parents: c.parents.iter().map(|p| p.to_hex()).collect(),
        message: c.message,
        time_ns: c.time_ns,
        metadata: c.metadata,
        file_bytes: c.file_bytes,
        entries: c.entries,
    }
}

fn entry(e: &TreeEntry) -> Entry {
    let (kind, target) = match &e.kind {
        EntryKind::File(_) => ("file", None),
        EntryKind::Dir(_) => ("dir", None),
        EntryKind::Symlink(t) => ("symlink", Some(String::from_utf8_lossy(t).into_owned())),
        EntryKind::Fifo => ("fifo", None),
        EntryKind::Socket => ("socket", None),
    };
    let hex_if_not_utf8 = |b: &[u8]| std::str::from_utf8(b).is_err().then(|| hex::encode(b));
    Entry {
        name: String::from_utf8_lossy(&e.name).into_owned(),
        name_hex: hex_if_not_utf8(&e.name),
        target_hex: match &e.kind {
            EntryKind::Symlink(t) => hex_if_not_utf8(t),
            _ => None,
        },
        link_group: (e.link_group != 0).then_some(e.link_group),
        xattrs: e
            .xattrs
            .iter()
            .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
            .collect(),
        kind: kind.into(),
        mode: e.mode & 0o7777,
        size: e.size(),
        uid: e.uid,
        gid: e.gid,
        mtime_ns: e.mtime_ns,
        target,
    }
}

/// The entry at `path` in `commit`, or 404 naming the path.
fn entry_at(store: &Store, commit: ObjectId, path: &str, reference: &str) -> AppResult<TreeEntry> {
    strata_store::split_path(path.as_bytes())?;
    store
        .read_path(commit, path.as_bytes())?
        .ok_or_else(|| ApiError::not_found(format!("path not found: {path:?} in {reference}")))
}

#[utoipa::path(get, tag = "server", path = "/v1/healthz", security(()),
    responses((status = 200, description = "The server answers", body = Healthz)))]
pub(crate) async fn healthz() -> Json<Healthz> {
    Json(Healthz {
        status: "ok".into(),
    })
}

#[utoipa::path(get, tag = "server", path = "/v1/openapi.json",
    responses(
        (status = 200, description = "This document (OpenAPI 3.1)", content_type = "application/json"),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody)))]
pub(crate) async fn openapi_json() -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::document(),
    )
        .into_response()
}

#[utoipa::path(get, tag = "store", path = "/v1/projects",
    responses(
        (status = 200, description = "Projects this token sees", body = ProjectList),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody)))]
pub(crate) async fn list_projects(
    State(st): St,
    Extension(caller): Extension<Caller>,
) -> AppResult<Json<ProjectList>> {
    let store = st.store.clone();
    let projects = blocking(move || Ok(store.list_projects()?)).await?;
    Ok(Json(ProjectList {
        projects: projects
            .into_iter()
            .filter(|p| caller.scope.sees(p))
            .collect(),
    }))
}

#[utoipa::path(post, tag = "store", path = "/v1/projects", request_body = CreateProject,
    responses(
        (status = 201, description = "Created, with an empty `main` branch", body = Project),
        (status = 400, description = "Invalid name or malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 403, description = "The token is scoped to other projects", body = ErrorBody),
        (status = 409, description = "The project exists", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 422, description = "Unknown or missing fields", body = ErrorBody)))]
pub(crate) async fn create_project(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiJson(body): ApiJson<CreateProject>,
) -> AppResult<(StatusCode, Json<Project>)> {
    if !caller.scope.sees(&body.name) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            format!(
                "this token may not create project {:?}: it is scoped to other projects; use a token created with --project {}",
                body.name, body.name
            ),
        ));
    }
    let store = st.store.clone();
    let name = body.name.clone();
    let head = blocking(move || {
        strata_store::validate_name("project", &body.name)?;
        let msg = body.message.unwrap_or_else(|| "create project".into());
        Ok(store.create_project(&body.name, &msg)?)
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(Project {
            name,
            head: head.to_hex(),
        }),
    ))
}

#[utoipa::path(get, tag = "store", path = "/v1/projects/{project}/branches",
    params(("project" = String, Path, description = "Project name")),
    responses(
        (status = 200, description = "Branches and heads", body = BranchList),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project (or not in the token's scope)", body = ErrorBody)))]
pub(crate) async fn list_branches(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
) -> AppResult<Json<BranchList>> {
    caller.scope.check(&project)?;
    let store = st.store.clone();
    let list = blocking(move || Ok(store.list_branches(Some(&project))?)).await?;
    Ok(Json(BranchList {
        branches: list
            .into_iter()
            .map(|(b, head)| Branch {
                project: b.project,
                name: b.branch,
                head: head.to_hex(),
            })
            .collect(),
    }))
}

#[utoipa::path(post, tag = "store", path = "/v1/projects/{project}/branches", request_body = CreateBranch,
    params(("project" = String, Path, description = "Project name")),
    responses(
        (status = 201, description = "Created", body = Branch),
        (status = 400, description = "Invalid name or malformed JSON", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project or REF", body = ErrorBody),
        (status = 409, description = "The branch exists", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 422, description = "Unknown or missing fields", body = ErrorBody)))]
pub(crate) async fn create_branch(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
    ApiJson(body): ApiJson<CreateBranch>,
) -> AppResult<(StatusCode, Json<Branch>)> {
    caller.scope.check(&project)?;
    let store = st.store.clone();
    let p = project.clone();
    let name = body.name.clone();
    let head = blocking(move || {
        let b = BranchRef::new(&p, &body.name)?;
        let from = resolve_in(&store, &caller.scope, &p, &body.from)?;
        store.create_branch(&b, from)?;
        Ok(from)
    })
    .await?;
    Ok((
        StatusCode::CREATED,
        Json(Branch {
            project,
            name,
            head: head.to_hex(),
        }),
    ))
}

#[utoipa::path(delete, tag = "store", path = "/v1/projects/{project}/branches/{branch}",
    params(("project" = String, Path, description = "Project name"),
           ("branch" = String, Path, description = "Branch name")),
    responses(
        (status = 204, description = "Deleted (its commits stay until gc)"),
        (status = 400, description = "Invalid name", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project or branch", body = ErrorBody)))]
pub(crate) async fn delete_branch(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath((project, branch)): ApiPath<(String, String)>,
) -> AppResult<StatusCode> {
    caller.scope.check(&project)?;
    let store = st.store.clone();
    blocking(move || {
        let b = BranchRef::new(&project, &branch)?;
        Ok(store.delete_branch(&b)?)
    })
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[utoipa::path(get, tag = "store", path = "/v1/projects/{project}/log",
    params(("project" = String, Path, description = "Project name"), LogQuery),
    responses(
        (status = 200, description = "Commits, newest first", body = LogResponse),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project or REF", body = ErrorBody)))]
pub(crate) async fn log(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<LogQuery>,
) -> AppResult<Json<LogResponse>> {
    let store = st.store.clone();
    let commits = blocking(move || {
        let c = resolve_in(&store, &caller.scope, &project, &q.reference)?;
        let limit = q.limit.unwrap_or(100).min(10_000);
        Ok(store.log(c, limit)?)
    })
    .await?;
    Ok(Json(LogResponse {
        commits: commits
            .into_iter()
            .map(|(id, c)| commit_info(id, c))
            .collect(),
    }))
}

#[utoipa::path(get, tag = "store", path = "/v1/projects/{project}/diff",
    params(("project" = String, Path, description = "Project name"), DiffQuery),
    responses(
        (status = 200, description = "Changed paths", body = DiffResponse),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project or REF", body = ErrorBody)))]
pub(crate) async fn diff(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<DiffQuery>,
) -> AppResult<Json<DiffResponse>> {
    let store = st.store.clone();
    let (a, b, changes) = blocking(move || {
        let a = resolve_in(&store, &caller.scope, &project, &q.from)?;
        let b = resolve_in(&store, &caller.scope, &project, &q.to)?;
        Ok((a, b, store.diff(a, b)?))
    })
    .await?;
    Ok(Json(DiffResponse {
        from: a.to_hex(),
        to: b.to_hex(),
        changes: changes
            .into_iter()
            .map(|c| PathChange {
                path: String::from_utf8_lossy(&c.path).into_owned(),
                path_hex: std::str::from_utf8(&c.path)
                    .is_err()
                    .then(|| hex::encode(&c.path)),
                kind: c.kind.as_str().into(),
            })
            .collect(),
    }))
}

#[utoipa::path(get, tag = "store", path = "/v1/projects/{project}/ls",
    params(("project" = String, Path, description = "Project name"), PathQuery),
    responses(
        (status = 200, description = "A directory's entries, or the one entry a path names", body = LsResponse),
        (status = 400, description = "Bad query or path", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project, REF or path", body = ErrorBody)))]
pub(crate) async fn ls(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> AppResult<Json<LsResponse>> {
    let store = st.store.clone();
    let entries = blocking(move || {
        let c = resolve_in(&store, &caller.scope, &project, &q.reference)?;
        let tree = match q.path.as_deref().filter(|p| !p.is_empty()) {
            None => store.read_commit(c)?.tree,
            Some(p) => {
                let e = entry_at(&store, c, p, &q.reference)?;
                match e.kind {
                    EntryKind::Dir(t) => t,
                    _ => return Ok(vec![entry(&e)]),
                }
            }
        };
        Ok(store.list_tree(tree)?.iter().map(entry).collect())
    })
    .await?;
    Ok(Json(LsResponse { entries }))
}

#[utoipa::path(get, tag = "store", path = "/v1/projects/{project}/stat",
    params(("project" = String, Path, description = "Project name"), FileQuery),
    responses(
        (status = 200, description = "The entry at `path`", body = Entry),
        (status = 400, description = "Bad query or path (stat needs `path`)", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project, REF or path", body = ErrorBody)))]
pub(crate) async fn stat(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<FileQuery>,
) -> AppResult<Json<Entry>> {
    let store = st.store.clone();
    let e = blocking(move || {
        let path = q.path.as_str();
        if path.is_empty() {
            return Err(ApiError::invalid(
                "stat needs ?path=PATH (a slash-separated path inside the commit)",
            ));
        }
        let c = resolve_in(&store, &caller.scope, &project, &q.reference)?;
        Ok(entry(&entry_at(&store, c, path, &q.reference)?))
    })
    .await?;
    Ok(Json(e))
}

#[utoipa::path(get, tag = "store", path = "/v1/projects/{project}/cat",
    params(("project" = String, Path, description = "Project name"), FileQuery,
           ("Range" = Option<String>, Header, description = "One byte range, `bytes=START-END`, `bytes=START-` or `bytes=-SUFFIX`")),
    responses(
        (status = 200, description = "The file's bytes", content_type = "application/octet-stream"),
        (status = 206, description = "The requested range", content_type = "application/octet-stream"),
        (status = 400, description = "Bad query, path, or not a regular file", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project, REF or path", body = ErrorBody),
        (status = 416, description = "Range outside the file", body = ErrorBody)))]
pub(crate) async fn cat(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<FileQuery>,
    headers: HeaderMap,
) -> AppResult<Response> {
    let store = st.store.clone();
    let content = blocking(move || {
        let path = q.path.as_str();
        if path.is_empty() {
            return Err(ApiError::invalid("cat needs ?path=PATH of a regular file"));
        }
        let c = resolve_in(&store, &caller.scope, &project, &q.reference)?;
        match entry_at(&store, c, path, &q.reference)?.kind {
            EntryKind::File(fc) => Ok(fc),
            _ => Err(ApiError::invalid(format!(
                "{path:?} is not a regular file; use ls or stat for directories and symlinks"
            ))),
        }
    })
    .await?;
    let size = content.size;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, start, end) = match parse_range(range, size) {
        Ok(None) => (StatusCode::OK, 0, size),
        Ok(Some((s, e))) => (StatusCode::PARTIAL_CONTENT, s, e),
        Err(Unsatisfiable) => {
            let mut r = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                ErrorCode::RangeNotSatisfiable,
                format!("the range is outside the file ({size} bytes)"),
            )
            .into_response();
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                format!("bytes */{size}").parse().unwrap(),
            );
            return Ok(r);
        }
    };
    // Read in 1 MiB pieces on the blocking pool; the bounded channel is
    // the back-pressure (a slow client holds at most 4 pieces in memory).
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || {
        let mut off = start;
        while off < end {
            let n = (end - off).min(1 << 20) as usize;
            match store.read_file_range(&content, off, n) {
                Ok(b) if b.is_empty() => break,
                Ok(b) => {
                    off += b.len() as u64;
                    if tx.blocking_send(Ok(Bytes::from(b))).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let _ = tx.blocking_send(Err(std::io::Error::other(e.to_string())));
                    return;
                }
            }
        }
    });
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) });
    let mut r = Response::new(Body::from_stream(stream));
    *r.status_mut() = status;
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        "application/octet-stream".parse().unwrap(),
    );
    h.insert(header::ACCEPT_RANGES, "bytes".parse().unwrap());
    h.insert(header::CONTENT_LENGTH, (end - start).into());
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{size}", end.saturating_sub(1))
                .parse()
                .unwrap(),
        );
    }
    Ok(r)
}
