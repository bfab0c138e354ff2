//! [`Client`]: one surface, two transports. [`Client::local`] opens the
//! Store in this process (contract S1); [`Client::connect`] reaches a
//! `strata serve` (docs/server.md) over its Unix socket, loopback TCP or
//! TLS. The Store calls here return the same values either way, so a
//! caller (the `strata` CLI among them) has one code path for both; the
//! Sandbox calls are in `connect_sandbox.rs`.
//!
//! REFs are the CLI's: `PROJECT/BRANCH` or a commit id of at least 8 hex
//! digits. The server's routes name a project in the URL, so through a
//! server a bare commit id is looked up in the projects the token sees.

use std::path::Path;

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::Method;
use strata_api as wire;
use strata_store::{BranchRef, EntryKind, ObjectId, StoreError, StoreOptions};

use crate::error::{Error, Result};
use crate::records::{commit_from_wire, entry_from_wire, entry_of, exact};
pub use crate::records::{BranchInfo, CommitInfo, Diff, Entry};
use crate::remote::Remote;
use crate::workspace::Change;

/// A client of strata: a Store in this process, or a `strata serve`.
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) inner: Inner,
    /// In-process: the Sandbox state root (`None`: the backend's default).
    pub(crate) sandbox_state: Option<std::path::PathBuf>,
}

#[derive(Debug, Clone)]
pub(crate) enum Inner {
    Local(strata_store::Store),
    Remote(Remote),
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend(format!("store worker thread failed: {e}"), String::new()))?
}

/// Percent-encode one URL path segment or query value (RFC 3986
/// unreserved characters stay).
pub(crate) fn enc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A path inside a commit as the server's `path` query takes it (UTF-8).
fn utf8_path(path: &[u8]) -> Result<&str> {
    std::str::from_utf8(path).map_err(|_| {
        Error::invalid(
            format!(
                "path {:?} is not UTF-8",
                String::from_utf8_lossy(path).into_owned()
            ),
            "the server's API takes UTF-8 paths; read such a file on the server's host",
        )
    })
}

/// The syntax check `Store::resolve` makes, so a malformed REF is the same
/// error (a usage error) through a server.
fn check_ref_syntax(r: &str) -> Result<()> {
    if r.contains('/') {
        BranchRef::parse(r)?;
        return Ok(());
    }
    if r.len() < 8 || r.len() > 64 || !r.bytes().all(|c| c.is_ascii_hexdigit()) {
        return Err(StoreError::InvalidName {
            what: "ref",
            name: r.to_string(),
            reason: "a REF is PROJECT/BRANCH or a commit id of at least 8 hex digits",
        }
        .into());
    }
    Ok(())
}

impl Client {
    /// Open the Store in `dir` in this process.
    pub async fn local(dir: impl AsRef<Path>) -> Result<Client> {
        Self::local_with(dir, StoreOptions::default()).await
    }

    /// [`Client::local`] with Store options (e.g. `allow_any_fs`).
    pub async fn local_with(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<Client> {
        let dir = dir.as_ref().to_path_buf();
        let store = blocking(move || Ok(strata_store::Store::open(&dir, &opts)?)).await?;
        Ok(Client::from_store(store))
    }

    /// A client over a Store already open in this process.
    pub fn from_store(store: strata_store::Store) -> Client {
        Client {
            inner: Inner::Local(store),
            sandbox_state: None,
        }
    }

    /// A client of the `strata serve` at `url` (`unix:///path/serve.sock`,
    /// `http://127.0.0.1:PORT`, `https://HOST:PORT`) with bearer `token`.
    /// Nothing is sent until the first call.
    pub fn connect(url: &str, token: &str) -> Result<Client> {
        Self::connect_with(url, token, None)
    }

    /// [`Client::connect`] to an `https://` server whose certificate has
    /// this SHA-256 `fingerprint` (64 hex digits, colons allowed: what
    /// `strata serve` prints); any other certificate is refused.
    pub fn connect_pinned(url: &str, token: &str, fingerprint: &str) -> Result<Client> {
        Self::connect_with(url, token, Some(fingerprint))
    }

    /// [`Client::connect`] with an optional pinned fingerprint.
    pub fn connect_with(url: &str, token: &str, fingerprint: Option<&str>) -> Result<Client> {
        Ok(Client {
            inner: Inner::Remote(Remote::new(url, token, fingerprint)?),
            sandbox_state: None,
        })
    }

    /// In-process: keep this client's Sandboxes under the state root `dir`
    /// (as [`crate::SandboxSpec::state_dir`]; not under /tmp or /run)
    /// instead of the backend's default. Through a server the server
    /// chooses, and this is ignored.
    pub fn with_sandbox_state(mut self, dir: impl Into<std::path::PathBuf>) -> Client {
        self.sandbox_state = Some(dir.into());
        self
    }

    /// Whether calls go through a server.
    pub fn is_remote(&self) -> bool {
        matches!(self.inner, Inner::Remote(_))
    }

    /// The server's URL, or the Store directory.
    pub fn describe(&self) -> String {
        match &self.inner {
            Inner::Local(s) => s.dir().display().to_string(),
            Inner::Remote(r) => r.url().to_string(),
        }
    }

    /// Through a server: (project, REF within it) for a CLI REF.
    async fn split_ref(&self, r: &Remote, reference: &str) -> Result<(String, String)> {
        check_ref_syntax(reference)?;
        if reference.contains('/') {
            let b = BranchRef::parse(reference)?;
            return Ok((b.project, b.branch));
        }
        // A commit id: the first project (the token sees) whose history has it.
        for p in self.projects().await? {
            let path = format!(
                "/v1/projects/{}/log?ref={}&limit=1",
                enc(&p),
                enc(reference)
            );
            match r
                .call::<wire::LogResponse>(Method::GET, &path, None::<&()>)
                .await
            {
                Ok(_) => return Ok((p, reference.to_string())),
                Err(Error::NotFound { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(StoreError::NotFound {
            what: "commit or branch",
            name: reference.to_string(),
        }
        .into())
    }

    /// The commit `reference` names (hex).
    pub async fn resolve(&self, reference: &str) -> Result<String> {
        match &self.inner {
            Inner::Local(s) => {
                let (s, r) = (s.clone(), reference.to_string());
                blocking(move || Ok(s.resolve(&r)?.commit.to_hex())).await
            }
            Inner::Remote(_) => Ok(self.log(reference, Some(1)).await?.remove(0).id),
        }
    }

    /// Projects, sorted (through a server: those the token sees).
    pub async fn projects(&self) -> Result<Vec<String>> {
        match &self.inner {
            Inner::Local(s) => {
                let s = s.clone();
                blocking(move || Ok(s.list_projects()?)).await
            }
            Inner::Remote(r) => Ok(r
                .call::<wire::ProjectList>(Method::GET, "/v1/projects", None::<&()>)
                .await?
                .projects),
        }
    }

    /// Create project `name` with an empty `main` branch; returns its
    /// first commit (hex).
    pub async fn create_project(&self, name: &str, message: &str) -> Result<String> {
        strata_store::validate_name("project", name)?;
        match &self.inner {
            Inner::Local(s) => {
                let (s, n, m) = (s.clone(), name.to_string(), message.to_string());
                blocking(move || Ok(s.create_project(&n, &m)?.to_hex())).await
            }
            Inner::Remote(r) => {
                let body = wire::CreateProject {
                    name: name.into(),
                    message: Some(message.into()),
                };
                let p: wire::Project = r.call(Method::POST, "/v1/projects", Some(&body)).await?;
                Ok(p.head)
            }
        }
    }

    /// Branches and heads, of one project or all (sorted by project, then
    /// name).
    pub async fn branches(&self, project: Option<&str>) -> Result<Vec<BranchInfo>> {
        if let Some(p) = project {
            strata_store::validate_name("project", p)?;
        }
        match &self.inner {
            Inner::Local(s) => {
                let (s, p) = (s.clone(), project.map(str::to_string));
                blocking(move || {
                    Ok(s.list_branches(p.as_deref())?
                        .into_iter()
                        .map(|(b, h)| BranchInfo {
                            project: b.project,
                            name: b.branch,
                            head: h.to_hex(),
                        })
                        .collect())
                })
                .await
            }
            Inner::Remote(r) => {
                let projects = match project {
                    Some(p) => vec![p.to_string()],
                    None => self.projects().await?,
                };
                let mut out = Vec::new();
                for p in projects {
                    let path = format!("/v1/projects/{}/branches", enc(&p));
                    match r
                        .call::<wire::BranchList>(Method::GET, &path, None::<&()>)
                        .await
                    {
                        Ok(l) => out.extend(l.branches.into_iter().map(|b| BranchInfo {
                            project: b.project,
                            name: b.name,
                            head: b.head,
                        })),
                        Err(e) => return Err(e),
                    }
                }
                Ok(out)
            }
        }
    }

    /// Head of `PROJECT/BRANCH` (hex).
    pub async fn head(&self, branch: &str) -> Result<String> {
        let b = BranchRef::parse(branch)?;
        match &self.inner {
            Inner::Local(s) => {
                let s = s.clone();
                blocking(move || Ok(s.branch_head(&b)?.to_hex())).await
            }
            Inner::Remote(_) => self
                .branches(Some(&b.project))
                .await?
                .into_iter()
                .find(|x| x.name == b.branch)
                .map(|x| x.head)
                .ok_or_else(|| {
                    StoreError::NotFound {
                        what: "branch",
                        name: b.to_string(),
                    }
                    .into()
                }),
        }
    }

    /// Create branch `new` (`PROJECT/BRANCH`) at the commit `from` names.
    /// O(1). Returns that commit (hex).
    pub async fn fork(&self, from: &str, new: &str) -> Result<String> {
        let b = BranchRef::parse(new)?;
        match &self.inner {
            Inner::Local(s) => {
                let (s, from) = (s.clone(), from.to_string());
                blocking(move || {
                    let at = s.resolve(&from)?.commit;
                    s.create_branch(&b, at)?;
                    Ok(at.to_hex())
                })
                .await
            }
            Inner::Remote(r) => {
                // A branch of the same project goes as its name: the server
                // resolves it where it creates the branch, one request
                // instead of two (and no window between the two). Not a
                // name the server could also read as a commit id, which it
                // would try when no such branch exists; anything else is
                // resolved here first.
                let same_project_branch = BranchRef::parse(from).ok().filter(|f| {
                    let hex = (8..=64).contains(&f.branch.len())
                        && f.branch.bytes().all(|c| c.is_ascii_hexdigit());
                    f.project == b.project && !hex
                });
                let at = match same_project_branch {
                    Some(f) => f.branch,
                    None => self.resolve(from).await?,
                };
                let body = wire::CreateBranch {
                    name: b.branch.clone(),
                    from: at,
                };
                let path = format!("/v1/projects/{}/branches", enc(&b.project));
                let made: wire::Branch = r.call(Method::POST, &path, Some(&body)).await?;
                Ok(made.head)
            }
        }
    }

    /// Delete branch `PROJECT/BRANCH`; returns the head it had (hex). Its
    /// commits stay until gc.
    pub async fn delete_branch(&self, branch: &str) -> Result<String> {
        let b = BranchRef::parse(branch)?;
        match &self.inner {
            Inner::Local(s) => {
                let s = s.clone();
                blocking(move || {
                    let head = s.branch_head(&b)?;
                    s.delete_branch(&b)?;
                    Ok(head.to_hex())
                })
                .await
            }
            Inner::Remote(r) => {
                let head = self.head(branch).await?;
                let path = format!(
                    "/v1/projects/{}/branches/{}",
                    enc(&b.project),
                    enc(&b.branch)
                );
                let resp = r
                    .send(Method::DELETE, &path, Bytes::new(), "application/json", &[])
                    .await?;
                r.bytes(resp).await?;
                Ok(head)
            }
        }
    }

    /// Commits from `reference` back along first parents, newest first,
    /// at most `limit` (`None`: all).
    pub async fn log(&self, reference: &str, limit: Option<usize>) -> Result<Vec<CommitInfo>> {
        match &self.inner {
            Inner::Local(s) => {
                let (s, r) = (s.clone(), reference.to_string());
                blocking(move || {
                    let at = s.resolve(&r)?.commit;
                    Ok(s.log(at, limit.unwrap_or(usize::MAX))?
                        .into_iter()
                        .map(|(id, c)| CommitInfo {
                            id: id.to_hex(),
                            tree: c.tree.to_hex(),
                            parents: c.parents.iter().map(|p| p.to_hex()).collect(),
                            message: c.message,
                            time_ns: c.time_ns,
                            metadata: c.metadata,
                            file_bytes: c.file_bytes,
                            entries: c.entries,
                        })
                        .collect())
                })
                .await
            }
            Inner::Remote(r) => {
                let (project, mut at) = self.split_ref(r, reference).await?;
                let want = limit.unwrap_or(usize::MAX);
                let mut out: Vec<CommitInfo> = Vec::new();
                // The server returns at most 10,000 a call: page along
                // first parents.
                while out.len() < want {
                    let n = (want - out.len()).min(10_000);
                    let path = format!(
                        "/v1/projects/{}/log?ref={}&limit={n}",
                        enc(&project),
                        enc(&at)
                    );
                    let page: wire::LogResponse = r.call(Method::GET, &path, None::<&()>).await?;
                    let got = page.commits.len();
                    out.extend(page.commits.into_iter().map(commit_from_wire));
                    match out.last().and_then(|c| c.parents.first()) {
                        Some(p) if got == n => at = p.clone(),
                        _ => break,
                    }
                }
                Ok(out)
            }
        }
    }

    /// Changed paths between two REFs.
    pub async fn diff(&self, from: &str, to: &str) -> Result<Diff> {
        match &self.inner {
            Inner::Local(s) => {
                let (s, a, b) = (s.clone(), from.to_string(), to.to_string());
                blocking(move || {
                    let (x, y): (ObjectId, ObjectId) =
                        (s.resolve(&a)?.commit, s.resolve(&b)?.commit);
                    Ok(Diff {
                        from: x.to_hex(),
                        to: y.to_hex(),
                        changes: s
                            .diff(x, y)?
                            .into_iter()
                            .map(|c| Change {
                                path: c.path,
                                kind: c.kind.as_str().to_string(),
                            })
                            .collect(),
                    })
                })
                .await
            }
            Inner::Remote(r) => {
                let (pa, ra) = self.split_ref(r, from).await?;
                let (pb, rb) = self.split_ref(r, to).await?;
                // The server diffs within one project: name the other side
                // by its commit id.
                let rb = if pb == pa {
                    rb
                } else {
                    self.resolve(to).await?
                };
                let path = format!(
                    "/v1/projects/{}/diff?from={}&to={}",
                    enc(&pa),
                    enc(&ra),
                    enc(&rb)
                );
                let d: wire::DiffResponse = r.call(Method::GET, &path, None::<&()>).await?;
                Ok(Diff {
                    from: d.from,
                    to: d.to,
                    changes: d
                        .changes
                        .into_iter()
                        .map(|c| Change {
                            path: exact(&c.path, c.path_hex.as_deref()),
                            kind: c.kind,
                        })
                        .collect(),
                })
            }
        }
    }

    /// The entry at `path` (slash-separated; empty: the root directory)
    /// in the commit `reference` names; `None` when nothing is there.
    pub async fn stat(&self, reference: &str, path: &[u8]) -> Result<Option<Entry>> {
        match &self.inner {
            Inner::Local(s) => {
                let (s, r, p) = (s.clone(), reference.to_string(), path.to_vec());
                blocking(move || {
                    let c = s.resolve(&r)?.commit;
                    Ok(s.read_path(c, &p)?.as_ref().map(entry_of))
                })
                .await
            }
            Inner::Remote(r) => {
                let (project, at) = self.split_ref(r, reference).await?;
                let p = utf8_path(path)?;
                if p.split('/').all(|c| c.is_empty() || c == ".") {
                    // The root, as the Store describes it (a directory
                    // with no metadata of its own), once the REF resolves.
                    self.ls(reference, b"").await?;
                    return Ok(Some(Entry {
                        name: Vec::new(),
                        kind: "dir".into(),
                        mode: 0o755,
                        size: 0,
                        uid: 0,
                        gid: 0,
                        mtime_ns: 0,
                        target: None,
                        link_group: 0,
                        xattrs: Vec::new(),
                    }));
                }
                let url = format!(
                    "/v1/projects/{}/stat?ref={}&path={}",
                    enc(&project),
                    enc(&at),
                    enc(p)
                );
                let got = r.call::<wire::Entry>(Method::GET, &url, None::<&()>).await;
                missing_path_is_none(got.map(entry_from_wire))
            }
        }
    }

    /// `path`'s entries if it is a directory (sorted by name), else the
    /// one entry it names; `None` when nothing is there.
    pub async fn ls(&self, reference: &str, path: &[u8]) -> Result<Option<Vec<Entry>>> {
        match &self.inner {
            Inner::Local(s) => {
                let (s, r, p) = (s.clone(), reference.to_string(), path.to_vec());
                blocking(move || {
                    let c = s.resolve(&r)?.commit;
                    let Some(e) = s.read_path(c, &p)? else {
                        return Ok(None);
                    };
                    Ok(Some(match e.kind {
                        EntryKind::Dir(t) => s.list_tree(t)?.iter().map(entry_of).collect(),
                        _ => vec![entry_of(&e)],
                    }))
                })
                .await
            }
            Inner::Remote(r) => {
                let (project, at) = self.split_ref(r, reference).await?;
                let p = utf8_path(path)?;
                let url = format!(
                    "/v1/projects/{}/ls?ref={}&path={}",
                    enc(&project),
                    enc(&at),
                    enc(p)
                );
                let l = r
                    .call::<wire::LsResponse>(Method::GET, &url, None::<&()>)
                    .await;
                missing_path_is_none(
                    l.map(|l| l.entries.into_iter().map(entry_from_wire).collect()),
                )
            }
        }
    }

    /// Write the bytes of the regular file at `path` in `reference` to
    /// `out` as they are read (memory stays at one piece whatever the
    /// size); returns the byte count.
    pub async fn read_file_to<W: std::io::Write + ?Sized>(
        &self,
        reference: &str,
        path: &[u8],
        out: &mut W,
    ) -> Result<u64> {
        let not_file = |e: &Entry| {
            Error::invalid(
                format!(
                    "{:?} in {reference} is a {}, not a regular file",
                    String::from_utf8_lossy(path),
                    e.kind
                ),
                match e.kind.as_str() {
                    "dir" => "list it with `strata ls`",
                    "symlink" => "strata never follows symlinks; read the target instead",
                    _ => "it has no content",
                },
            )
        };
        let io_err = |e: std::io::Error| Error::Io {
            what: "write the file's bytes".into(),
            path: "stdout".into(),
            source: e,
        };
        match &self.inner {
            Inner::Local(s) => {
                let (s, r, p) = (s.clone(), reference.to_string(), path.to_vec());
                let (s, e) = blocking(move || {
                    let c = s.resolve(&r)?.commit;
                    let e = s.read_path(c, &p)?.ok_or_else(|| no_such_path(&r, &p))?;
                    Ok((s, e))
                })
                .await?;
                let EntryKind::File(fc) = &e.kind else {
                    return Err(not_file(&entry_of(&e)));
                };
                // Chunk by chunk, on this thread: `out` is the caller's.
                let mut w = IoErrWriter { out, err: None };
                match s.read_to(fc, &mut w) {
                    Ok(()) => Ok(fc.size),
                    Err(e) => Err(match w.err.take() {
                        Some(io) => io_err(io),
                        None => e.into(),
                    }),
                }
            }
            Inner::Remote(r) => {
                let e = self
                    .stat(reference, path)
                    .await?
                    .ok_or_else(|| no_such_path(reference, path))?;
                if e.kind != "file" {
                    return Err(not_file(&e));
                }
                let (project, at) = self.split_ref(r, reference).await?;
                let url = format!(
                    "/v1/projects/{}/cat?ref={}&path={}",
                    enc(&project),
                    enc(&at),
                    enc(utf8_path(path)?)
                );
                let resp = r
                    .send(Method::GET, &url, Bytes::new(), "application/json", &[])
                    .await?;
                if !resp.status().is_success() {
                    r.bytes(resp).await?;
                    unreachable!("a non-2xx response is an error");
                }
                let mut body = resp.into_body();
                let mut n = 0u64;
                while let Some(fr) = body.frame().await {
                    let fr = fr.map_err(|e| Error::Unreachable {
                        what: format!("reading a file from {}: {e}", r.url()),
                        hint: "retry; the server may have stopped".into(),
                    })?;
                    if let Ok(d) = fr.into_data() {
                        out.write_all(&d).map_err(io_err)?;
                        n += d.len() as u64;
                    }
                }
                Ok(n)
            }
        }
    }

    /// The bytes of the regular file at `path` in `reference`.
    pub async fn read_file(&self, reference: &str, path: &[u8]) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        self.read_file_to(reference, path, &mut v).await?;
        Ok(v)
    }

    /// Through a server only: commit `changes` as one commit on `branch`
    /// (`PROJECT/BRANCH`) if its head is still `expected_head`, else
    /// [`Error::Conflict`] with the actual head and nothing written.
    /// Returns the new head.
    pub async fn commit_changes(
        &self,
        branch: &str,
        expected_head: &str,
        message: &str,
        changes: Vec<wire::Change>,
    ) -> Result<String> {
        let b = BranchRef::parse(branch)?;
        let r = self.remote_only("a change set")?;
        let body = wire::ChangeSet {
            expected_head: expected_head.into(),
            message: Some(message.into()),
            changes,
        };
        let path = format!(
            "/v1/projects/{}/branches/{}/commits",
            enc(&b.project),
            enc(&b.branch)
        );
        let c: wire::CommitResponse = r.call(Method::POST, &path, Some(&body)).await?;
        Ok(c.commit)
    }

    /// Through a server only: make a tar archive the whole next tree of
    /// `branch`, by compare-and-swap on `expected_head`. Returns the new
    /// head.
    pub async fn import_tar(
        &self,
        branch: &str,
        expected_head: &str,
        message: &str,
        tar: Vec<u8>,
    ) -> Result<String> {
        let b = BranchRef::parse(branch)?;
        let r = self.remote_only("a tar import")?;
        let path = format!(
            "/v1/projects/{}/branches/{}/tar?expected_head={}&message={}",
            enc(&b.project),
            enc(&b.branch),
            enc(expected_head),
            enc(message)
        );
        let resp = r
            .send(Method::POST, &path, tar.into(), "application/x-tar", &[])
            .await?;
        let c: wire::CommitResponse = r.json(resp).await?;
        Ok(c.commit)
    }

    /// Through a server only: the commit `reference` names as a tar
    /// archive.
    pub async fn export_tar(&self, reference: &str) -> Result<Vec<u8>> {
        let r = self.remote_only("a tar export")?;
        let (project, at) = self.split_ref(r, reference).await?;
        let path = format!("/v1/projects/{}/tar?ref={}", enc(&project), enc(&at));
        let resp = r
            .send(Method::GET, &path, Bytes::new(), "application/json", &[])
            .await?;
        Ok(r.bytes(resp).await?.to_vec())
    }

    fn remote_only(&self, what: &str) -> Result<&Remote> {
        match &self.inner {
            Inner::Remote(r) => Ok(r),
            Inner::Local(_) => Err(Error::invalid(
                format!("{what} is a server call"),
                "in-process, write with a Workspace (Sandbox::mount, commit) or Store snapshots",
            )),
        }
    }
}

fn no_such_path(reference: &str, path: &[u8]) -> Error {
    Error::not_found(
        format!("path {:?} in {reference}", String::from_utf8_lossy(path)),
        format!("list what is there with `strata ls {reference}`"),
    )
}

/// The server answers 404 both for a REF and for a path that is not
/// there; the path's is the one that starts "path not found" (routes.rs,
/// `entry_at`).
fn missing_path_is_none<T>(r: Result<T>) -> Result<Option<T>> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(Error::NotFound { what, .. }) if what.starts_with("path not found") => Ok(None),
        Err(e) => Err(e),
    }
}

/// A `Write` that keeps the caller's I/O error (the Store's `read_to`
/// reports its own error type).
struct IoErrWriter<'a, W: std::io::Write + ?Sized> {
    out: &'a mut W,
    err: Option<std::io::Error>,
}

impl<W: std::io::Write + ?Sized> std::io::Write for IoErrWriter<'_, W> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.out.write(b).inspect_err(|e| {
            self.err = Some(std::io::Error::new(e.kind(), e.to_string()));
        })
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}
