//! A commit as a tar stream, and a tar stream as a commit.
//!
//! Export (`GET /v1/projects/{project}/tar?ref=REF`) walks the tree with
//! its own stack (no recursion on depth, ARCHITECTURE.md) on the blocking
//! pool and streams the archive through a bounded channel, so a slow
//! client holds a few pieces in memory, never the archive; files of one
//! link group are written once, the others as hard links to it. Import
//! (`POST /v1/projects/{project}/branches/{branch}/tar`) makes the tar's
//! contents the branch's whole next tree, by compare-and-swap on
//! `expected_head`, like a change set.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::unix::ffi::OsStrExt;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use axum::{Extension, Json};
use serde::Deserialize;
use strata_store::{
    BranchRef, EditOp, EntryKind, FileContent, ObjectId, Store, StoreError, TreeEdit,
};
use utoipa::IntoParams;

use crate::api::{CommitResponse, ErrorBody, ErrorCode, PathQuery};
use crate::error::ApiError;
use crate::routes::{blocking, resolve_in, ApiPath, ApiQuery, AppResult, St};
use crate::scope::Caller;
use crate::write::{check_head, commit_edits};

/// Content type of both directions.
pub const TAR: &str = "application/x-tar";

/// Bytes handed to the channel at a time.
const PIECE: usize = 256 << 10;

/// `Write` into the response body's channel.
struct ChanWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>,
    buf: Vec<u8>,
}

impl ChanWriter {
    fn send(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let b = Bytes::from(std::mem::take(&mut self.buf));
        self.tx.blocking_send(Ok(b)).map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client went away")
        })
    }
}

impl Write for ChanWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= PIECE {
            self.send()?;
        }
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.send()
    }
}

/// `Read` over a stored file, piece by piece.
struct FileReader<'a> {
    store: &'a Store,
    content: &'a FileContent,
    off: u64,
}

impl Read for FileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.content.size.saturating_sub(self.off);
        let n = (buf.len() as u64).min(left).min(1 << 20) as usize;
        if n == 0 {
            return Ok(0);
        }
        let b = self
            .store
            .read_file_range(self.content, self.off, n)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        buf[..b.len()].copy_from_slice(&b);
        self.off += b.len() as u64;
        Ok(b.len())
    }
}

fn write_tar(store: &Store, root: ObjectId, out: ChanWriter) -> std::io::Result<()> {
    let mut b = tar::Builder::new(out);
    b.mode(tar::HeaderMode::Complete);
    let mut stack: Vec<(ObjectId, Vec<u8>)> = vec![(root, Vec::new())];
    // Link group -> the path its first file was written at: the group's
    // other files are hard links to it (tar(5) `1` entries), as `tar`
    // writes hard links, so an unpacked export has them linked again.
    let mut groups: HashMap<u64, Vec<u8>> = HashMap::new();
    let other = |e: StoreError| std::io::Error::other(e.to_string());
    while let Some((tree, prefix)) = stack.pop() {
        for e in store.list_tree(tree).map_err(other)? {
            let mut path = prefix.clone();
            if !path.is_empty() {
                path.push(b'/');
            }
            path.extend_from_slice(&e.name);
            let p = OsStr::from_bytes(&path);
            let mut h = tar::Header::new_gnu();
            h.set_mode(e.mode & 0o7777);
            h.set_uid(e.uid as u64);
            h.set_gid(e.gid as u64);
            h.set_mtime(e.mtime_ns.max(0) as u64 / 1_000_000_000);
            match &e.kind {
                EntryKind::File(_) if e.link_group != 0 && groups.contains_key(&e.link_group) => {
                    h.set_entry_type(tar::EntryType::Link);
                    h.set_size(0);
                    let first = OsStr::from_bytes(&groups[&e.link_group]);
                    b.append_link(&mut h, p, first)?;
                }
                EntryKind::File(c) => {
                    if e.link_group != 0 {
                        groups.insert(e.link_group, path.clone());
                    }
                    h.set_entry_type(tar::EntryType::Regular);
                    h.set_size(c.size);
                    let r = FileReader {
                        store,
                        content: c,
                        off: 0,
                    };
                    b.append_data(&mut h, p, r)?;
                }
                EntryKind::Dir(t) => {
                    h.set_entry_type(tar::EntryType::Directory);
                    h.set_size(0);
                    b.append_data(&mut h, p, std::io::empty())?;
                    stack.push((*t, path));
                }
                EntryKind::Symlink(t) => {
                    h.set_entry_type(tar::EntryType::Symlink);
                    h.set_size(0);
                    b.append_link(&mut h, p, OsStr::from_bytes(t))?;
                }
                EntryKind::Fifo => {
                    h.set_entry_type(tar::EntryType::Fifo);
                    h.set_size(0);
                    b.append_data(&mut h, p, std::io::empty())?;
                }
                // tar has no socket type; a socket is not data anyway.
                EntryKind::Socket => {}
            }
        }
    }
    let mut out = b.into_inner()?;
    out.flush()
}

#[utoipa::path(get, tag = "store", path = "/v1/projects/{project}/tar",
    params(("project" = String, Path, description = "Project name"), PathQuery),
    responses(
        (status = 200, description = "The commit as a tar archive (GNU format; sockets are left out)", content_type = "application/x-tar"),
        (status = 400, description = "Bad query", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project, REF or path", body = ErrorBody)))]
pub(crate) async fn export(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath(project): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> AppResult<Response> {
    let store = st.store.clone();
    let tree = blocking(move || {
        let c = resolve_in(&store, &caller.scope, &project, &q.reference)?;
        match q.path.as_deref().filter(|p| !p.is_empty()) {
            None => Ok(store.read_commit(c)?.tree),
            Some(p) => {
                strata_store::split_path(p.as_bytes())?;
                match store.read_path(c, p.as_bytes())?.map(|e| e.kind) {
                    Some(EntryKind::Dir(t)) => Ok(t),
                    Some(_) => Err(ApiError::invalid(format!(
                        "{p:?} is not a directory; use cat for a file"
                    ))),
                    None => Err(ApiError::not_found(format!("path not found: {p:?}"))),
                }
            }
        }
    })
    .await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
    let store = st.store.clone();
    tokio::task::spawn_blocking(move || {
        let w = ChanWriter {
            tx: tx.clone(),
            buf: Vec::with_capacity(PIECE),
        };
        if let Err(e) = write_tar(&store, tree, w) {
            // The status is sent already: cut the stream so the client
            // sees a truncated archive, not a complete-looking one.
            let _ = tx.blocking_send(Err(e));
        }
    });
    let stream =
        futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|x| (x, rx)) });
    let mut r = Response::new(Body::from_stream(stream));
    r.headers_mut()
        .insert(header::CONTENT_TYPE, TAR.parse().unwrap());
    Ok(r)
}

#[derive(Debug, Clone, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    /// The head the import replaces (64 hex digits).
    pub expected_head: String,
    #[serde(default)]
    pub message: Option<String>,
}

/// The edits that make an empty tree into the archive's contents.
fn tar_edits(store: &Store, body: &[u8]) -> AppResult<Vec<TreeEdit>> {
    let bad = |what: String| ApiError::invalid(format!("the tar stream: {what}"));
    // tar(5): 512-byte blocks ending in two zero blocks. The reader takes a
    // short or empty body for an empty archive; such a body is a mistake
    // (it would publish an empty tree), not an archive.
    if body.len() < 1024 || !body.len().is_multiple_of(512) {
        return Err(bad(format!(
            "{} bytes is not a tar archive (whole 512-byte blocks, at least the two end blocks); send the output of `tar -cf - -C DIR .`",
            body.len()
        )));
    }
    let mut edits = Vec::new();
    let mut files: HashMap<Vec<u8>, (FileContent, u32)> = HashMap::new();
    let mut ar = tar::Archive::new(body);
    for entry in ar.entries().map_err(|e| bad(e.to_string()))? {
        let mut entry = entry.map_err(|e| bad(e.to_string()))?;
        let raw = entry.path_bytes().into_owned();
        let mut path: &[u8] = &raw;
        while let Some(rest) = path.strip_prefix(b"./") {
            path = rest;
        }
        let path = path.strip_suffix(b"/").unwrap_or(path).to_vec();
        if path.is_empty() || path == b"." {
            continue;
        }
        strata_store::split_path(&path)?;
        let h = entry.header();
        let mode = h.mode().map_err(|e| bad(e.to_string()))? & 0o7777;
        let kind = h.entry_type();
        let op = match kind {
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let mut bytes = Vec::with_capacity(entry.size() as usize);
                entry
                    .read_to_end(&mut bytes)
                    .map_err(|e| bad(e.to_string()))?;
                let content = store.write_file_bytes(&bytes, None)?;
                files.insert(path.clone(), (content.clone(), mode));
                EditOp::File { content, mode }
            }
            tar::EntryType::Directory => {
                edits.push(TreeEdit {
                    path: path.clone(),
                    op: EditOp::Mkdir { mode },
                });
                EditOp::Chmod { mode }
            }
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| bad("a symlink without a target".into()))?
                    .into_owned();
                EditOp::Symlink { target }
            }
            tar::EntryType::Link => {
                let target = entry
                    .link_name_bytes()
                    .ok_or_else(|| bad("a hard link without a target".into()))?
                    .into_owned();
                let target = target.strip_prefix(b"./").unwrap_or(&target).to_vec();
                let (content, _) = files.get(&target).cloned().ok_or_else(|| {
                    bad(format!(
                        "hard link {:?} to {:?}, which is not an earlier regular file",
                        String::from_utf8_lossy(&path),
                        String::from_utf8_lossy(&target)
                    ))
                })?;
                EditOp::File { content, mode }
            }
            other => {
                return Err(bad(format!(
                    "{:?} is a {other:?} entry; only files, directories, symlinks and hard links are imported",
                    String::from_utf8_lossy(&path)
                )))
            }
        };
        edits.push(TreeEdit { path, op });
    }
    Ok(edits)
}

#[utoipa::path(post, tag = "store", path = "/v1/projects/{project}/branches/{branch}/tar",
    params(("project" = String, Path, description = "Project name"),
           ("branch" = String, Path, description = "Branch name"), ImportQuery),
    request_body(content = Vec<u8>, content_type = "application/x-tar", description = "A tar archive: files, directories, symlinks, hard links"),
    responses(
        (status = 201, description = "Committed: the branch's tree is the archive's contents", body = CommitResponse),
        (status = 400, description = "A bad archive, path or query", body = ErrorBody),
        (status = 401, description = "Missing, wrong or revoked token", body = ErrorBody),
        (status = 404, description = "No such project or branch", body = ErrorBody),
        (status = 409, description = "The head is not `expected_head` (see `actual_head`); nothing was written", body = ErrorBody),
        (status = 413, description = "Body too large", body = ErrorBody),
        (status = 415, description = "Not application/x-tar", body = ErrorBody)))]
pub(crate) async fn import(
    State(st): St,
    Extension(caller): Extension<Caller>,
    ApiPath((project, branch)): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<ImportQuery>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> AppResult<(StatusCode, Json<CommitResponse>)> {
    caller.scope.check(&project)?;
    let ctype = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ctype.split(';').next().map(str::trim) != Some(TAR) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            ErrorCode::UnsupportedMediaType,
            format!("send the archive with `Content-Type: {TAR}`"),
        ));
    }
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                e.status(),
                ErrorCode::PayloadTooLarge,
                "the archive is larger than this server accepts (strata serve --max-body-mib)",
            )
        } else {
            ApiError::invalid(format!(
                "could not read the request body: {}",
                e.body_text()
            ))
        }
    })?;
    let store = st.store.clone();
    let resp = blocking(move || {
        let b = BranchRef::new(&project, &branch)?;
        let expected = ObjectId::from_hex(&q.expected_head).ok_or_else(|| {
            ApiError::invalid(format!(
                "expected_head {:?} is not a commit id (64 hex digits)",
                q.expected_head
            ))
        })?;
        let _session = store.write_session()?;
        check_head(&store, &b, expected)?;
        let edits = tar_edits(&store, &body)?;
        let empty = store.write_tree(Vec::new())?;
        let message = q.message.unwrap_or_else(|| "import a tar stream".into());
        commit_edits(&store, b, expected, empty, &edits, &message, &caller)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(resp)))
}
