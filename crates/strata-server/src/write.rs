//! `POST /v1/projects/{project}/branches/{branch}/commits`: a change set
//! (put files, symlinks, directories, modes, deletes) as ONE commit,
//! published by compare-and-swap on `expected_head` (ARCHITECTURE.md: a
//! branch head never moves except by compare-and-swap). File contents are
//! written as objects first, under a write session so gc cannot take them
//! before the commit names them; the tree is built by
//! `Store::edit_tree`; a lost race is 409 with the actual head, and then
//! no branch refers to anything written.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use base64::Engine;
use strata_store::{BranchRef, EditOp, EntryKind, ObjectId, Store, StoreError, TreeEdit};

use crate::api::{Change, ChangeSet, CommitResponse, ErrorBody};
use crate::error::ApiError;
use crate::routes::{blocking, ApiJson, ApiPath, AppResult, St};
use crate::scope::Caller;

/// Metadata key naming the token that made a commit through the server.
pub const TOKEN_METADATA: &str = "strata.serve.token";

fn mode_of(i: usize, path: &str, mode: Option<u32>, default: u32) -> AppResult<u32> {
    match mode {
        None => Ok(default),
        Some(m) if m <= 0o7777 => Ok(m),
        Some(m) => Err(ApiError::invalid(format!(
            "change {i} ({path:?}): mode {m} is not permission bits (0 to 4095, i.e. 0o7777)"
        ))),
    }
}

#[utoipa::path(post, tag = "store", path = "/v1/projects/{project}/branches/{branch}/commits", request_body = ChangeSet,
    params(("project" = String, Path, description = "Project name"),
           ("branch" = String, Path, description = "Branch name")),
    responses(
        (status = 201, description = "Committed; the branch's head is `commit`", body = CommitResponse),
        (status = 400, description = "Malformed JSON, a bad path, mode or content", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project or branch", body = ErrorBody),
        (status = 409, description = "The head is not `expected_head` (see `actual_head`); nothing was written", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/json", body = ErrorBody),
        (status = 422, description = "Unknown or missing fields", body = ErrorBody)))]
pub(crate) async fn commit(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath((project, branch)): ApiPath<(String, String)>,
    ApiJson(set): ApiJson<ChangeSet>,
) -> AppResult<(StatusCode, Json<CommitResponse>)> {
    caller.scope.check(&project)?;
    let store = st.store.clone();
    let resp = blocking(move || {
        let b = BranchRef::new(&project, &branch)?;
        let expected = ObjectId::from_hex(&set.expected_head).ok_or_else(|| {
            ApiError::invalid(format!(
                "expected_head {:?} is not a commit id (64 hex digits); read the branch's head first",
                set.expected_head
            ))
        })?;
        if set.changes.is_empty() {
            return Err(ApiError::invalid(
                "changes is empty: give at least one put, symlink, mkdir, chmod or delete",
            ));
        }
        let _session = store.write_session()?;
        check_head(&store, &b, expected)?;
        let base_tree = store.read_commit(expected)?.tree;
        let mut edits = Vec::with_capacity(set.changes.len());
        for (i, c) in set.changes.into_iter().enumerate() {
            let edit = match c {
                Change::Put {
                    path,
                    content,
                    content_base64,
                    mode,
                } => {
                    let mode = mode_of(i, &path, mode, 0o644)?;
                    let bytes = match (content, content_base64) {
                        (Some(t), None) => t.into_bytes(),
                        (None, Some(b)) => base64::engine::general_purpose::STANDARD
                            .decode(b.as_bytes())
                            .map_err(|e| {
                                ApiError::invalid(format!(
                                    "change {i} ({path:?}): content_base64 is not standard base64: {e}"
                                ))
                            })?,
                        _ => {
                            return Err(ApiError::invalid(format!(
                                "change {i} ({path:?}): give exactly one of content (UTF-8 text) and content_base64"
                            )))
                        }
                    };
                    strata_store::split_path(path.as_bytes())?;
                    // The previous version, if a file, lets the Store store a delta.
                    let prev = match store.lookup_path(base_tree, path.as_bytes()) {
                        Ok(Some(e)) => match e.kind {
                            EntryKind::File(fc) => Some(fc),
                            _ => None,
                        },
                        _ => None,
                    };
                    let content = store.write_file_bytes(&bytes, prev.as_ref())?;
                    TreeEdit {
                        path: path.into_bytes(),
                        op: EditOp::File { content, mode },
                    }
                }
                Change::Symlink { path, target } => TreeEdit {
                    path: path.into_bytes(),
                    op: EditOp::Symlink {
                        target: target.into_bytes(),
                    },
                },
                Change::Mkdir { path, mode } => {
                    let mode = mode_of(i, &path, mode, 0o755)?;
                    TreeEdit {
                        path: path.into_bytes(),
                        op: EditOp::Mkdir { mode },
                    }
                }
                Change::Chmod { path, mode } => {
                    let mode = mode_of(i, &path, Some(mode), 0)?;
                    TreeEdit {
                        path: path.into_bytes(),
                        op: EditOp::Chmod { mode },
                    }
                }
                Change::Delete { path } => TreeEdit {
                    path: path.into_bytes(),
                    op: EditOp::Delete,
                },
            };
            edits.push(edit);
        }
        let message = set.message.unwrap_or_else(|| "commit via strata serve".into());
        commit_edits(&store, b, expected, base_tree, &edits, &message, &caller)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(resp)))
}

/// The compare-and-swap precondition of every write: the branch's head is
/// still `expected`, else 409 with the actual head. Called under the
/// caller's write session.
pub(crate) fn check_head(store: &Store, b: &BranchRef, expected: ObjectId) -> AppResult<()> {
    let actual = store.branch_head(b)?;
    if actual != expected {
        return Err(StoreError::Conflict {
            project: b.project.clone(),
            branch: b.branch.clone(),
            expected,
            actual,
        }
        .into());
    }
    Ok(())
}

/// Applies `edits` to `base_tree` and publishes the result as the
/// branch's next commit by compare-and-swap on `expected`, recording the
/// caller's token in the commit metadata (`TOKEN_METADATA`).
pub(crate) fn commit_edits(
    store: &Store,
    b: BranchRef,
    expected: ObjectId,
    base_tree: ObjectId,
    edits: &[TreeEdit],
    message: &str,
    caller: &Caller,
) -> AppResult<CommitResponse> {
    let tree = store.edit_tree(base_tree, edits).map_err(|e| match e {
        // A delete or chmod of a missing path is a bad change set, not
        // a missing resource of the URL.
        StoreError::NotFound { .. } => ApiError::invalid(format!("{e}; nothing was written")),
        other => other.into(),
    })?;
    let mut meta = BTreeMap::new();
    meta.insert(TOKEN_METADATA.to_string(), caller.token_id.clone());
    let commit = store.commit_tree(&b, expected, tree, message, meta)?;
    Ok(CommitResponse {
        project: b.project,
        branch: b.branch,
        commit: commit.to_hex(),
        tree: tree.to_hex(),
        parent: expected.to_hex(),
    })
}
