//! File operations on a live Workspace over HTTP: `files` (GET with
//! `Range`, PUT streaming to disk, DELETE), `ls`, `stat`, `rename`,
//! `mkdir`. The confinement is `crate::files`; this module is the wire:
//! query parsing, status codes, streaming in both directions with bounded
//! memory.

use axum::http::HeaderValue;
use futures_util::StreamExt;
use strata_api::range::{parse_range, Unsatisfiable};

use super::*;
use crate::api::{ErrorCode, FileEntry, ListResponse, MkdirRequest, RenameRequest};
use crate::files::{FileError, RelPath, Root};

/// Bytes read from the file per piece of a streamed answer; at most
/// [`READ_AHEAD`] pieces wait for a slow client (1 MiB in flight). A
/// piece's buffer goes back to its answer's [`Pool`] once hyper has
/// written it, so a long read reuses a handful of buffers: no malloc, no
/// zeroing and no page faults per piece. Fresh buffers per piece were the
/// largest cost of a 32 MiB read at 1 MiB (each a new mmap, above the
/// daemon's fixed 128 KiB threshold, `strata_sandbox::heap`) and still
/// memset at 64 KiB; 256 KiB pieces also make a quarter of the frames
/// (docs/benchmarks.md, "strata serve").
const READ_CHUNK: usize = 256 << 10;
const READ_AHEAD: usize = 4;

/// The buffers of one streamed answer, reused piece after piece.
type Pool = Arc<parking_lot::Mutex<Vec<Vec<u8>>>>;

/// One piece of a streamed answer: `len` bytes of `buf`, whose buffer
/// returns to `pool` when the frame is dropped (written or abandoned).
struct Piece {
    buf: Vec<u8>,
    len: usize,
    pool: Pool,
}

impl AsRef<[u8]> for Piece {
    fn as_ref(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}

impl Drop for Piece {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        let mut pool = self.pool.lock();
        // More than the pieces that can be in flight is never needed.
        if pool.len() <= READ_AHEAD + 2 {
            pool.push(buf);
        }
    }
}

#[derive(Deserialize)]
pub(super) struct PathQuery {
    path: String,
}

#[derive(Deserialize)]
pub(super) struct LsQuery {
    path: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct WriteQuery {
    path: String,
    mode: Option<String>,
}

#[derive(Deserialize)]
pub(super) struct RemoveQuery {
    path: String,
    #[serde(default)]
    recursive: bool,
}

/// The answer a failed file operation gets.
pub(super) fn file_error(e: FileError) -> ApiError {
    let msg = e.to_string();
    match e {
        FileError::BadPath { .. } => ApiError::invalid(msg),
        FileError::Conflict { errno, .. } => path_conflict(msg, errno),
        FileError::Os { source, .. } => {
            let errno = source.raw_os_error();
            match source {
                rustix::io::Errno::NOENT => ApiError::not_found(msg),
                rustix::io::Errno::XDEV => ApiError::invalid(format!(
                    "{msg} (the path leads outside the Workspace: an absolute symlink, or a symlink whose '..' climbs out, is refused)"
                )),
                rustix::io::Errno::NAMETOOLONG => ApiError::invalid(msg),
                rustix::io::Errno::NOTDIR
                | rustix::io::Errno::ISDIR
                | rustix::io::Errno::EXIST
                | rustix::io::Errno::NOTEMPTY
                | rustix::io::Errno::LOOP
                | rustix::io::Errno::INVAL
                | rustix::io::Errno::BUSY
                | rustix::io::Errno::MLINK
                | rustix::io::Errno::TXTBSY
                | rustix::io::Errno::PERM
                | rustix::io::Errno::ACCESS => path_conflict(msg, errno),
                _ => ApiError::internal(msg),
            }
        }
    }
}

fn path_conflict(msg: String, errno: i32) -> ApiError {
    let mut a = ApiError::new(
        StatusCode::CONFLICT,
        ErrorCode::PathConflict,
        format!("{msg} ({})", api::errno_name(errno)),
    );
    a.detail.errno = Some(errno);
    a
}

fn rel(p: &str) -> AppResult<RelPath> {
    RelPath::parse(p).map_err(file_error)
}

/// Open the mount root of Workspace `id` and run `f` on it on the
/// blocking pool (every call below may wait on FUSE).
async fn with_root<T: Send + 'static>(
    st: &AppState,
    id: &str,
    f: impl FnOnce(Root) -> Result<T, FileError> + Send + 'static,
) -> AppResult<T> {
    let mount = st
        .workspaces
        .lock()
        .get(id)
        .map(|e| e.path.clone())
        .ok_or_else(|| {
            ApiError::not_found(format!("no mounted workspace {id:?} in this Sandbox"))
                .hint("list them with GET /v1/workspaces")
        })?;
    let owner = st.config.default_user();
    blocking(move || {
        let root = Root::open(&mount, owner).map_err(file_error)?;
        f(root).map_err(file_error)
    })
    .await
}

/// `GET /v1/workspaces/{id}/files?path=P`: the bytes, streamed; one
/// `Range` (RFC 9110 §14) gives 206, a range past the end 416.
pub(super) async fn file_read(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
    headers: HeaderMap,
) -> AppResult<Response> {
    let p = rel(&q.path)?;
    let (file, size) = with_root(&st, &id, move |root| root.open_read(&p)).await?;
    let range = headers.get(header::RANGE).and_then(|v| v.to_str().ok());
    let (status, start, end) = match parse_range(range, size) {
        Ok(None) => (StatusCode::OK, 0, size),
        Ok(Some((s, e))) => (StatusCode::PARTIAL_CONTENT, s, e),
        Err(Unsatisfiable) => {
            let mut r = ApiError::new(
                StatusCode::RANGE_NOT_SATISFIABLE,
                ErrorCode::RangeNotSatisfiable,
                format!(
                    "the range {:?} is outside {:?} ({size} bytes)",
                    range.unwrap_or_default(),
                    q.path
                ),
            )
            .into_response();
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"),
            );
            return Ok(r);
        }
    };
    // Read on the blocking pool; the bounded channel is the back-pressure
    // (a slow client holds at most READ_AHEAD pieces in memory).
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(READ_AHEAD);
    tokio::task::spawn_blocking(move || {
        use std::os::unix::fs::FileExt;
        let pool = Pool::default();
        let mut off = start;
        while off < end {
            let n = (end - off).min(READ_CHUNK as u64) as usize;
            let mut buf = pool.lock().pop().unwrap_or_else(|| vec![0u8; READ_CHUNK]);
            match file.read_at(&mut buf[..n], off) {
                // The file shrank under us: end the body early (the
                // client sees fewer bytes than Content-Length).
                Ok(0) => break,
                Ok(k) => {
                    off += k as u64;
                    let piece = Piece {
                        buf,
                        len: k,
                        pool: pool.clone(),
                    };
                    if tx.blocking_send(Ok(Bytes::from_owner(piece))).is_err() {
                        return;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
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
        HeaderValue::from_static("application/octet-stream"),
    );
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(header::CONTENT_LENGTH, (end - start).into());
    if status == StatusCode::PARTIAL_CONTENT {
        h.insert(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes {start}-{}/{size}", end - 1)).expect("ascii"),
        );
    }
    Ok(r)
}

/// `mode=0644`: permission bits in octal, at most 0777.
fn parse_mode(m: &str) -> AppResult<u32> {
    let bad = || {
        ApiError::invalid(format!(
            "mode {m:?}: expected permission bits in octal, 0 to 0777 (e.g. 0644)"
        ))
    };
    if m.is_empty() || m.len() > 4 || !m.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return Err(bad());
    }
    let v = u32::from_str_radix(m, 8).map_err(|_| bad())?;
    if v > 0o777 {
        return Err(bad());
    }
    Ok(v)
}

/// `PUT /v1/workspaces/{id}/files?path=P[&mode=0644]`: the raw body
/// becomes the file (created or replaced; parents made), streamed to
/// disk; over the daemon's limit it is 413 and nothing is replaced.
pub(super) async fn file_write(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<WriteQuery>,
    headers: HeaderMap,
    body: Body,
) -> AppResult<Json<FileEntry>> {
    let p = rel(&q.path)?;
    let mode = q.mode.as_deref().map(parse_mode).transpose()?;
    let limit = st.config.max_write();
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::PayloadTooLarge,
            format!(
                "the body for {:?} is larger than the daemon's limit of {limit} bytes; nothing was written",
                q.path
            ),
        )
        .hint("write large files with an exec, or raise the daemon's max_write_bytes")
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let pending = with_root(&st, &id, move |root| root.begin_write(&p, mode)).await?;
    // One writer on the blocking pool; the bounded channel holds the
    // client back while the disk (FUSE) catches up.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let writer = tokio::task::spawn_blocking(move || {
        let mut pending = pending;
        while let Some(b) = rx.blocking_recv() {
            if let Err(e) = pending.write(&b) {
                return (pending, Err(e));
            }
        }
        (pending, Ok(()))
    });
    let mut stream = body.into_data_stream();
    let mut total = 0u64;
    let mut failure = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(b) => {
                total += b.len() as u64;
                if total > limit {
                    failure = Some(too_large());
                    break;
                }
                if tx.send(b).await.is_err() {
                    break; // the writer failed; its error is below
                }
            }
            Err(e) => {
                failure = Some(ApiError::invalid(format!(
                    "the request body for {:?} broke off: {e}; nothing was written",
                    q.path
                )));
                break;
            }
        }
    }
    drop(tx);
    let (pending, written) = writer
        .await
        .map_err(|e| ApiError::internal(format!("worker thread failed: {e}")))?;
    let result = match (failure, written) {
        (Some(f), _) => Err(f),
        (None, Err(e)) => Err(file_error(e)),
        (None, Ok(())) => Ok(()),
    };
    // Finishing (rename into place) or dropping (removing the temporary
    // file) both touch FUSE: on the blocking pool.
    let entry = blocking(move || match result {
        Ok(()) => pending.finish().map_err(file_error),
        Err(e) => {
            drop(pending);
            Err(e)
        }
    })
    .await?;
    tracing::info!(workspace = %id, path = %q.path, bytes = total, "file written over the API");
    Ok(Json(entry))
}

/// `DELETE /v1/workspaces/{id}/files?path=P[&recursive=true]`.
pub(super) async fn file_remove(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<RemoveQuery>,
) -> AppResult<StatusCode> {
    let p = rel(&q.path)?;
    let recursive = q.recursive;
    with_root(&st, &id, move |root| root.remove(&p, recursive)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /v1/workspaces/{id}/ls[?path=P]` (default: the root).
pub(super) async fn file_list(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<LsQuery>,
) -> AppResult<Json<ListResponse>> {
    let p = rel(q.path.as_deref().unwrap_or("/"))?;
    let shown = p.as_str().to_string();
    let entries = with_root(&st, &id, move |root| root.list(&p)).await?;
    Ok(Json(ListResponse {
        path: shown,
        entries,
    }))
}

/// `GET /v1/workspaces/{id}/stat?path=P` (lstat: a symlink is described).
pub(super) async fn file_stat(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<PathQuery>,
) -> AppResult<Json<FileEntry>> {
    let p = rel(&q.path)?;
    Ok(Json(with_root(&st, &id, move |root| root.stat(&p)).await?))
}

/// `POST /v1/workspaces/{id}/rename` `{"from", "to"}`.
pub(super) async fn file_rename(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<RenameRequest>,
) -> AppResult<Json<FileEntry>> {
    let from = rel(&req.from)?;
    let to = rel(&req.to)?;
    Ok(Json(
        with_root(&st, &id, move |root| root.rename(&from, &to)).await?,
    ))
}

/// `POST /v1/workspaces/{id}/mkdir` `{"path", "parents"}`.
pub(super) async fn file_mkdir(
    State(st): St,
    ApiPath(id): ApiPath<String>,
    ApiJson(req): ApiJson<MkdirRequest>,
) -> AppResult<Json<FileEntry>> {
    let p = rel(&req.path)?;
    let parents = req.parents;
    Ok(Json(
        with_root(&st, &id, move |root| root.mkdir(&p, parents)).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse() {
        assert_eq!(parse_mode("0644").unwrap(), 0o644);
        assert_eq!(parse_mode("755").unwrap(), 0o755);
        for bad in ["", "8", "01000", "4755", "-1", "0x1"] {
            assert!(parse_mode(bad).is_err(), "{bad}");
        }
    }
}
