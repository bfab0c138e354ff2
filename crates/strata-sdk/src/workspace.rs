//! Workspaces mounted in a Sandbox, driven over the daemon API.

use base64::Engine;
use hyper::Method;
use strata_daemon::api;

use crate::client::DaemonClient;
use crate::error::Result;
use crate::exec::ExecBuilder;
use crate::FileEntry;

/// The most a file read reserves up front from the response's
/// Content-Length (a larger file still reads whole, growing the buffer).
const READ_PREALLOC_MAX: usize = 1 << 30;

/// One changed path of [`Workspace::status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Slash-separated path relative to the Workspace root (exact bytes).
    pub path: Vec<u8>,
    /// `added`, `modified`, `deleted` or `type_changed`.
    pub kind: String,
}

impl From<api::ChangeEntry> for Change {
    /// The exact bytes from `path_b64`; the lossy `path` only if a daemon
    /// sent no valid base64.
    fn from(c: api::ChangeEntry) -> Self {
        Change {
            path: base64::engine::general_purpose::STANDARD
                .decode(&c.path_b64)
                .unwrap_or_else(|_| c.path.into_bytes()),
            kind: c.kind,
        }
    }
}

/// Every byte but RFC 3986's unreserved ones as `%XX`, for a query value.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Result of [`Workspace::commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Published; the Workspace continues from this commit (hex id).
    Committed(String),
    /// Nothing changed; nothing was written. The base commit (hex id).
    UpToDate(String),
}

impl CommitOutcome {
    /// From the daemon's response.
    pub(crate) fn from_api(r: api::CommitResponse) -> CommitOutcome {
        match r.outcome {
            api::Outcome::Committed => CommitOutcome::Committed(r.commit),
            api::Outcome::UpToDate => CommitOutcome::UpToDate(r.commit),
        }
    }

    /// Whether a commit was published (the branch moved).
    pub fn committed(&self) -> bool {
        matches!(self, CommitOutcome::Committed(_))
    }

    /// The commit id either way.
    pub fn commit(&self) -> &str {
        match self {
            CommitOutcome::Committed(c) | CommitOutcome::UpToDate(c) => c,
        }
    }
}

/// A Workspace mounted in a Sandbox (from [`crate::Sandbox::mount`]).
#[derive(Debug, Clone)]
pub struct Workspace {
    pub(crate) client: DaemonClient,
    pub(crate) info: api::WorkspaceInfo,
}

impl Workspace {
    /// Workspace ID.
    pub fn id(&self) -> &str {
        &self.info.id
    }
    /// Mount path inside the Sandbox.
    pub fn path(&self) -> &str {
        &self.info.path
    }
    /// `PROJECT/BRANCH` it projects and commits to.
    pub fn branch(&self) -> &str {
        &self.info.branch
    }
    /// The commit it was mounted from (hex).
    pub fn base(&self) -> &str {
        &self.info.base
    }
    /// What serves the mount's FUSE requests, as its daemon reported at
    /// mount: `io_uring` or `/dev/fuse` (`None` from a daemon too old to
    /// say). See [`crate::SandboxSpec::fuse_transport`].
    pub fn transport(&self) -> Option<&str> {
        self.info.transport.as_deref()
    }

    /// Changed paths relative to the base commit.
    pub async fn status(&self) -> Result<Vec<Change>> {
        let st: api::StatusResponse = self
            .client
            .call(
                Method::GET,
                &format!("/v1/workspaces/{}/status", self.info.id),
                None::<&()>,
            )
            .await?;
        Ok(st.changes.into_iter().map(Change::from).collect())
    }

    /// Publish the changes as a commit on the branch and continue from it.
    /// A lost race is [`crate::Error::Conflict`] with the actual head.
    pub async fn commit(&self, message: &str) -> Result<CommitOutcome> {
        let r: api::CommitResponse = self
            .client
            .call(
                Method::POST,
                &format!("/v1/workspaces/{}/commit", self.info.id),
                Some(&api::CommitRequest {
                    message: message.into(),
                }),
            )
            .await?;
        Ok(CommitOutcome::from_api(r))
    }

    /// Unmount. Without `discard` it refuses ([`crate::Error::Busy`])
    /// while there are uncommitted changes (closing the Sandbox would
    /// delete them); with `discard` they are dropped. Never commits.
    pub async fn unmount(self, discard: bool) -> Result<()> {
        let _: api::UnmountResponse = self
            .client
            .call(
                Method::POST,
                &format!("/v1/workspaces/{}/unmount", self.info.id),
                Some(&api::UnmountRequest { discard }),
            )
            .await?;
        Ok(())
    }

    /// The whole content of the regular file at `path` (relative to the
    /// Workspace root; symlinks on the way are followed but never out of
    /// the Workspace). A missing file is [`crate::Error::NotFound`]; a
    /// directory, or a path leading outside, [`crate::Error::InvalidInput`].
    pub async fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        self.read(path, None).await
    }

    /// `len` bytes of the file at `path` from byte `offset` (fewer at the
    /// end of the file; an `offset` at or past the end is
    /// [`crate::Error::InvalidInput`], HTTP 416).
    pub async fn read_range(&self, path: &str, offset: u64, len: u64) -> Result<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        let last = offset.saturating_add(len - 1);
        self.read(path, Some(format!("bytes={offset}-{last}")))
            .await
    }

    /// Stream the regular file at `path` into `out` as its bytes arrive,
    /// never holding more than one frame of it in memory; returns the
    /// number of bytes written. For large files this is the cheap way:
    /// [`Workspace::read_file`] must first fault in a buffer of the whole
    /// file, which on this project's machines costs about as much CPU as
    /// the transfer itself (docs/benchmarks.md, "The file route, streamed").
    /// Errors as [`Workspace::read_file`]; a failing `out` is
    /// [`crate::Error::Io`] and ends the read.
    pub async fn read_file_to<W: std::io::Write + ?Sized>(
        &self,
        path: &str,
        out: &mut W,
    ) -> Result<u64> {
        let mut n = 0u64;
        self.read_with(path, None, |_, b| {
            n += b.len() as u64;
            out.write_all(b)
        })
        .await?;
        Ok(n)
    }

    async fn read(&self, path: &str, range: Option<String>) -> Result<Vec<u8>> {
        // Straight into one buffer of the announced size: collecting the
        // frames and then flattening them copied a 32 MiB file twice more
        // and held the read to ~500 MB/s (docs/benchmarks.md, "strata
        // serve"); a body larger than announced still grows the buffer.
        let mut out = Vec::new();
        self.read_with(path, range, |announced, b| {
            if out.capacity() == 0 {
                out.reserve_exact(announced.min(READ_PREALLOC_MAX).max(b.len()));
            }
            out.extend_from_slice(b);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// The file route's GET: `sink` takes a successful answer's frames in
    /// order, each with the announced Content-Length (0 if none). An error
    /// answer's body is read whole and becomes the error.
    async fn read_with(
        &self,
        path: &str,
        range: Option<String>,
        mut sink: impl FnMut(usize, &[u8]) -> std::io::Result<()>,
    ) -> Result<()> {
        use http_body_util::BodyExt;
        let url = self.files_url("files", path, "");
        let resp = self
            .client
            .send_with(
                Method::GET,
                &url,
                bytes::Bytes::new(),
                "application/octet-stream",
                range.as_deref(),
            )
            .await?;
        let status = resp.status();
        let length = resp
            .headers()
            .get(hyper::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<usize>().ok())
            .unwrap_or(0);
        let mut body = resp.into_body();
        if !status.is_success() {
            let mut err = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame =
                    frame.map_err(|e| self.client.proto(format!("reading {path:?}: {e}")))?;
                if let Some(data) = frame.data_ref() {
                    err.extend_from_slice(data);
                }
            }
            return Err(self.client.error_from(status, &err));
        }
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| self.client.proto(format!("reading {path:?}: {e}")))?;
            if let Some(data) = frame.data_ref() {
                sink(length, data).map_err(crate::error::Error::io("write the bytes of", path))?;
            }
        }
        Ok(())
    }

    /// Create or replace the file at `path` with `bytes` (missing parent
    /// directories are made). A new file gets mode 0644, a replaced one
    /// keeps its mode; both belong to the command's uid. A symlink at
    /// `path` is replaced, never written through. Returns the new entry.
    pub async fn write_file(
        &self,
        path: &str,
        bytes: impl Into<bytes::Bytes>,
    ) -> Result<FileEntry> {
        self.write_file_mode(path, bytes, None).await
    }

    /// [`Workspace::write_file`] with permission bits (`0o755`; at most
    /// `0o777`).
    pub async fn write_file_mode(
        &self,
        path: &str,
        bytes: impl Into<bytes::Bytes>,
        mode: Option<u32>,
    ) -> Result<FileEntry> {
        let extra = mode.map(|m| format!("&mode={m:o}")).unwrap_or_default();
        let url = self.files_url("files", path, &extra);
        let resp = self
            .client
            .send(Method::PUT, &url, bytes.into(), "application/octet-stream")
            .await?;
        self.client.json(resp).await
    }

    /// The entries of the directory at `path` (`"/"` for the root),
    /// sorted by name; symlinks described, not followed.
    pub async fn list(&self, path: &str) -> Result<Vec<FileEntry>> {
        let url = self.files_url("ls", path, "");
        let r: api::ListResponse = self.client.call(Method::GET, &url, None::<&()>).await?;
        Ok(r.entries)
    }

    /// What is at `path` (lstat: a symlink is described with its target).
    pub async fn stat(&self, path: &str) -> Result<FileEntry> {
        let url = self.files_url("stat", path, "");
        self.client.call(Method::GET, &url, None::<&()>).await
    }

    /// Remove the file, symlink or empty directory at `path`; with
    /// `recursive`, a directory and everything under it. A symlink is
    /// removed itself, never its target.
    pub async fn remove(&self, path: &str, recursive: bool) -> Result<()> {
        let extra = if recursive { "&recursive=true" } else { "" };
        let url = self.files_url("files", path, extra);
        let resp = self
            .client
            .send(
                Method::DELETE,
                &url,
                bytes::Bytes::new(),
                "application/json",
            )
            .await?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        use http_body_util::BodyExt;
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| self.client.proto(format!("reading the answer: {e}")))?
            .to_bytes();
        Err(self.client.error_from(status, &body))
    }

    /// Rename `from` to `to` inside the Workspace, as rename(2) does.
    /// Returns the entry at `to`.
    pub async fn rename(&self, from: &str, to: &str) -> Result<FileEntry> {
        self.client
            .call(
                Method::POST,
                &format!("/v1/workspaces/{}/rename", self.info.id),
                Some(&api::RenameRequest {
                    from: from.into(),
                    to: to.into(),
                }),
            )
            .await
    }

    /// Make the directory `path`; its parent must exist, and `path` must
    /// not.
    pub async fn mkdir(&self, path: &str) -> Result<FileEntry> {
        self.make_dir(path, false).await
    }

    /// Make the directory `path` and any missing parents; an existing
    /// directory is fine (`mkdir -p`).
    pub async fn mkdir_all(&self, path: &str) -> Result<FileEntry> {
        self.make_dir(path, true).await
    }

    async fn make_dir(&self, path: &str, parents: bool) -> Result<FileEntry> {
        self.client
            .call(
                Method::POST,
                &format!("/v1/workspaces/{}/mkdir", self.info.id),
                Some(&api::MkdirRequest {
                    path: path.into(),
                    parents,
                }),
            )
            .await
    }

    /// `/v1/workspaces/{id}/{route}?path=…{extra}`, the path
    /// percent-encoded (the daemon checks it: no NUL, no `..`).
    fn files_url(&self, route: &str, path: &str, extra: &str) -> String {
        format!(
            "/v1/workspaces/{}/{route}?path={}{extra}",
            self.info.id,
            percent_encode(path)
        )
    }

    /// Build an exec of `argv` (no shell) in this Workspace.
    pub fn exec<I, S>(&self, argv: I) -> ExecBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecBuilder {
            client: self.client.clone(),
            workspace: self.info.id.clone(),
            req: api::ExecRequest {
                argv: argv.into_iter().map(Into::into).collect(),
                ..Default::default()
            },
            env: Default::default(),
        }
    }
}
