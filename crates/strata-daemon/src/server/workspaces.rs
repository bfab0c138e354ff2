//! The Workspace routes: mount, list, status, commit, unmount.

use super::*;

pub(super) fn ws_info(id: &str, e: &WsEntry) -> WorkspaceInfo {
    WorkspaceInfo {
        id: id.into(),
        path: e.path.display().to_string(),
        branch: e.ws.branch().to_string(),
        base: e.ws.base().to_hex(),
        transport: e.handle.as_ref().map(|h| h.transport().to_string()),
    }
}

pub(super) async fn mount(
    State(st): St,
    ApiJson(req): ApiJson<MountRequest>,
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
        // The branch first: a request naming no branch of this Store is a
        // 404 before anything is created at `at`.
        let branch = strata_store::BranchRef::parse(&req.reference).map_err(store_error)?;
        st2.store.branch_head(&branch).map_err(store_error)?;
        recover::prepare_mountpoint(&at)?;
        let opts = recover::workspace_options(&st2.config);
        let ws = Workspace::create(&st2.store, &req.reference, &st2.config.scratch_dir, &opts)
            .map_err(ws_error)?;
        // Recorded before it is served: a daemon that dies from here on is
        // restarted with this Workspace mounted again.
        let recorded = recover::record_mount(&st2.config, ws.id(), &at, &ws.branch().to_string());
        let handle = match recorded.and_then(|()| recover::mount_checked(&st2.config, &ws, &at)) {
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

pub(super) async fn list_workspaces(State(st): St) -> Json<Vec<WorkspaceInfo>> {
    let map = st.workspaces.lock();
    let mut v: Vec<_> = map.iter().map(|(id, e)| ws_info(id, e)).collect();
    v.sort_by(|a, b| a.id.cmp(&b.id));
    Json(v)
}

pub(super) fn find_ws(st: &AppState, id: &str) -> AppResult<Workspace> {
    st.workspaces
        .lock()
        .get(id)
        .map(|e| e.ws.clone())
        .ok_or_else(|| {
            ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
                .hint("list them with GET /v1/workspaces")
        })
}

pub(super) async fn get_workspace(
    State(st): St,
    ApiPath(id): ApiPath<String>,
) -> AppResult<Json<WorkspaceInfo>> {
    let map = st.workspaces.lock();
    let e = map.get(&id).ok_or_else(|| {
        ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
    })?;
    Ok(Json(ws_info(&id, e)))
}

pub(super) async fn ws_status(
    State(st): St,
    ApiPath(id): ApiPath<String>,
) -> AppResult<Json<StatusResponse>> {
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

pub(super) async fn ws_commit(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<CommitRequest>,
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

pub(super) async fn ws_unmount(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiBytes(body): ApiBytes,
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
