//! The exec routes: create (through the exec helper), status, wait, the
//! output stream, stdin, cancel, resize.

use super::*;

/// An optional JSON body: empty means "all defaults".
pub(super) fn optional_json<T: serde::de::DeserializeOwned>(body: &[u8]) -> AppResult<Option<T>> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| ApiError::invalid(format!("request body: {e}")))
}

/// `UID:GID`, each 1 to 999999999 in plain decimal (no sign, no leading
/// zero): exactly the pattern docs/api/openapi.yaml publishes, so that
/// what the document calls valid is accepted and nothing else.
pub(super) fn parse_user(u: &str) -> AppResult<strata_sandbox::Identity> {
    let bad = || {
        ApiError::invalid(format!(
            "user {u:?}: expected UID:GID in decimal, neither 0, e.g. 1500:1500"
        ))
    };
    let num = |s: &str| -> Option<u32> {
        let ok = !s.is_empty()
            && s.len() <= 9
            && s.bytes().all(|b| b.is_ascii_digit())
            && !s.starts_with('0');
        ok.then(|| s.parse().ok()).flatten()
    };
    let (a, b) = u.split_once(':').ok_or_else(bad)?;
    let uid = num(a).ok_or_else(bad)?;
    let gid = num(b).ok_or_else(bad)?;
    strata_sandbox::Identity::new(uid, gid).map_err(|e| ApiError::invalid(e.to_string()))
}

/// Longest wait, timeout or grace period a request may ask for: u32::MAX
/// milliseconds (49 days). Far larger ones would overflow the clock
/// (`Instant + Duration` panics), so the document and the daemon both
/// stop here.
pub(super) const MAX_MS: u64 = u32::MAX as u64;

pub(super) fn check_ms(ms: Option<u64>, what: &str) -> AppResult<()> {
    match ms {
        Some(v) if v > MAX_MS => Err(ApiError::invalid(format!(
            "{what} is {v}: at most {MAX_MS} milliseconds (49 days)"
        ))),
        _ => Ok(()),
    }
}

pub(super) fn new_exec_id() -> String {
    format!("x{:016x}", rand::random::<u64>())
}

pub(super) async fn exec_create(
    State(st): St,
    ApiJson(req): ApiJson<ExecRequest>,
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
    if req.timeout_ms == Some(0) {
        return Err(ApiError::invalid(
            "timeout_ms is 0: give at least 1 (milliseconds), or leave it out for no timeout",
        ));
    }
    check_ms(req.timeout_ms, "timeout_ms")?;
    if req.tty_size.is_some_and(|[r, c]| r == 0 || c == 0) {
        return Err(ApiError::invalid(
            "tty_size: rows and cols must be at least 1",
        ));
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
        let (id, entry) =
            match (&req.workspace, &cwd_req) {
                (Some(id), _) => map.get_key_value(id.as_str()).ok_or_else(|| {
                    ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
                })?,
                (None, Some(c)) => map
                    .iter()
                    .find(|(_, e)| c.starts_with(&e.path))
                    .ok_or_else(|| {
                        ApiError::not_found(format!(
                            "no mounted workspace contains cwd {}",
                            c.display()
                        ))
                        .hint("commands run inside a Workspace: give a cwd under its mount path")
                    })?,
                (None, None) => {
                    let mut it = map.iter();
                    match (it.next(), it.next()) {
                        (Some(one), None) => one,
                        // Refusals that depend on what is mounted now, not
                        // on the request: 404 and 409 (docs/api/openapi.yaml).
                        (None, _) => {
                            return Err(ApiError::not_found(
                                "no workspace is mounted in this Sandbox",
                            )
                            .hint("mount one first (POST /v1/workspaces)"))
                        }
                        _ => return Err(ApiError::new(
                            StatusCode::CONFLICT,
                            crate::api::ErrorCode::InvalidInput,
                            "several workspaces are mounted: say which (workspace) or give a cwd",
                        )),
                    }
                }
            };
        let cwd = cwd_req.clone().unwrap_or_else(|| entry.path.clone());
        if !cwd.starts_with(&entry.path) {
            // Depends on where the Workspace is mounted, not on the
            // request alone: 409, with the code of bad input.
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                crate::api::ErrorCode::InvalidInput,
                format!(
                    "cwd {} is outside workspace {id} (mounted at {})",
                    cwd.display(),
                    entry.path.display()
                ),
            )
            .hint("give a cwd under the Workspace's mount path, or leave it out"));
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
        // A terminal needs a helper of its own (Exec::start).
        prestarted: if req.tty { None } else { st.prestart.take() },
    };
    let exec = Exec::start(launch);
    // The next helper is started now, after the hand-off (not beside it),
    // and runs its start-up beside the command.
    st.prestart.refill();
    let exec = exec.map_err(|e| match e {
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

pub(super) fn prune(execs: &mut HashMap<String, Arc<Exec>>) {
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

pub(super) fn find_exec(st: &AppState, id: &str) -> AppResult<Arc<Exec>> {
    st.execs.lock().get(id).cloned().ok_or_else(|| {
        ApiError::not_found(format!("no exec {id:?} in this Sandbox"))
            .hint("exec IDs come from POST /v1/execs; finished ones are kept for a while")
    })
}

pub(super) async fn list_execs(State(st): St) -> Json<Vec<api::ExecStatus>> {
    let execs: Vec<_> = st.execs.lock().values().cloned().collect();
    let mut v: Vec<_> = execs.iter().map(|e| e.status()).collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    Json(v)
}

pub(super) async fn exec_status(
    State(st): St,
    ApiPath(id): ApiPath<String>,
) -> AppResult<Json<api::ExecStatus>> {
    Ok(Json(find_exec(&st, &id)?.status()))
}

#[derive(Deserialize)]
pub(super) struct WaitQuery {
    timeout_ms: Option<u64>,
}

pub(super) async fn exec_wait(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<WaitQuery>,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    check_ms(q.timeout_ms, "timeout_ms")?;
    Ok(Json(e.wait(q.timeout_ms.map(Duration::from_millis)).await))
}

#[derive(Deserialize)]
pub(super) struct OutputQuery {
    /// `false`: end the stream when the buffered output is handed out,
    /// without waiting for more (and without the final frame while the
    /// command runs). Default `true`.
    follow: Option<bool>,
}

pub(super) async fn exec_output(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<OutputQuery>,
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

pub(super) async fn exec_stdin(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiBytes(body): ApiBytes,
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

pub(super) async fn exec_stdin_close(
    State(st): St,
    ApiPath(id): ApiPath<String>,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    e.close_stdin().await;
    Ok(Json(e.status()))
}

pub(super) async fn exec_cancel(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiBytes(body): ApiBytes,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    let grace_ms = optional_json::<CancelRequest>(&body)?.and_then(|b| b.grace_ms);
    check_ms(grace_ms, "grace_ms")?;
    let grace = grace_ms
        .map(Duration::from_millis)
        .unwrap_or(crate::exec::DEFAULT_GRACE);
    Ok(Json(e.cancel(grace).await))
}

pub(super) async fn exec_resize(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<api::ResizeRequest>,
) -> AppResult<Json<api::ExecStatus>> {
    let e = find_exec(&st, &id)?;
    if req.rows == 0 || req.cols == 0 {
        return Err(ApiError::invalid("rows and cols must be at least 1"));
    }
    match e.resize(req.rows, req.cols) {
        Ok(true) => Ok(Json(e.status())),
        Ok(false) => Err(ApiError::new(
            StatusCode::CONFLICT,
            crate::api::ErrorCode::InvalidInput,
            format!("exec {id} has no terminal (it was not started with \"tty\": true)"),
        )),
        Err(err) => Err(ApiError::internal(format!(
            "resizing the terminal of {id}: {err}"
        ))),
    }
}
