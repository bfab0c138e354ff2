//! Store calls (S1): the Store is opened in the caller's own process; the
//! blocking SQLite work runs on tokio's blocking pool.

use std::path::{Path, PathBuf};

use strata_store::{BranchRef, ObjectId, StoreOptions};

use crate::error::{Error, Result};

/// A Store opened in this process. Cheap to clone.
///
/// ```no_run
/// # async fn f() -> strata_sdk::Result<()> {
/// let store = strata_sdk::Store::create("/var/tmp/my-store").await?;
/// store.create_project_from("demo", "./src").await?;
/// store.fork("demo/main", "demo/agent-1").await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Store {
    inner: strata_store::Store,
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::backend(format!("store worker thread failed: {e}"), String::new()))?
}

impl Store {
    /// Create a Store in `dir` (created if missing; must be empty or a Store).
    pub async fn create(dir: impl AsRef<Path>) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        blocking(move || {
            Ok(Store {
                inner: strata_store::Store::create(&dir, &StoreOptions::default())?,
            })
        })
        .await
    }

    /// Open an existing Store.
    pub async fn open(dir: impl AsRef<Path>) -> Result<Store> {
        let dir = dir.as_ref().to_path_buf();
        blocking(move || {
            Ok(Store {
                inner: strata_store::Store::open(&dir, &StoreOptions::default())?,
            })
        })
        .await
    }

    /// The Store directory.
    pub fn dir(&self) -> PathBuf {
        self.inner.dir().to_path_buf()
    }

    /// The underlying strata-store handle (for calls the SDK does not wrap).
    pub fn raw(&self) -> &strata_store::Store {
        &self.inner
    }

    /// Create project `name` whose `main` is a snapshot of `dir`; returns
    /// the first commit (hex).
    pub async fn create_project_from(&self, name: &str, dir: impl AsRef<Path>) -> Result<String> {
        let (s, name, dir) = (
            self.inner.clone(),
            name.to_string(),
            dir.as_ref().to_path_buf(),
        );
        blocking(move || {
            let r = s.create_project_from(&name, &dir, "import", &strata_store::NoProgress)?;
            let head = s.branch_head(&BranchRef::new(&name, "main")?)?;
            let _ = r;
            Ok(head.to_hex())
        })
        .await
    }

    /// Create branch `new` (`PROJECT/BRANCH`) at the head of `from` (a REF:
    /// `PROJECT/BRANCH` or a commit id). O(1). Returns the commit (hex).
    pub async fn fork(&self, from: &str, new: &str) -> Result<String> {
        let (s, from, new) = (self.inner.clone(), from.to_string(), new.to_string());
        blocking(move || {
            let at = s.resolve(&from)?.commit;
            s.create_branch(&BranchRef::parse(&new)?, at)?;
            Ok(at.to_hex())
        })
        .await
    }

    /// Head commit of `PROJECT/BRANCH` (hex).
    pub async fn head(&self, branch: &str) -> Result<String> {
        let (s, b) = (self.inner.clone(), branch.to_string());
        blocking(move || Ok(s.branch_head(&BranchRef::parse(&b)?)?.to_hex())).await
    }

    /// The bytes of the file at `path` (slash-separated) in `reference`
    /// (`PROJECT/BRANCH` or a commit id).
    pub async fn read_file(&self, reference: &str, path: &str) -> Result<Vec<u8>> {
        let (s, r, p) = (self.inner.clone(), reference.to_string(), path.to_string());
        blocking(move || {
            let c = s.resolve(&r)?.commit;
            let e = s.read_path(c, p.as_bytes())?.ok_or_else(|| {
                Error::not_found(
                    format!("file {p:?} in {r}"),
                    "list the tree with `strata ls` to see what the commit holds",
                )
            })?;
            match &e.kind {
                strata_store::EntryKind::File(fc) => {
                    Ok(s.read_file_range(fc, 0, fc.size as usize)?)
                }
                other => Err(Error::invalid(
                    format!("{p:?} in {r} is a {}, not a file", other.type_name()),
                    "give the path of a regular file",
                )),
            }
        })
        .await
    }

    /// Commits from `reference` back along first parents, newest first:
    /// (id hex, message).
    pub async fn log(&self, reference: &str, limit: usize) -> Result<Vec<(String, String)>> {
        let (s, r) = (self.inner.clone(), reference.to_string());
        blocking(move || {
            let c = s.resolve(&r)?.commit;
            Ok(s.log(c, limit)?
                .into_iter()
                .map(|(id, c)| (id.to_hex(), c.message))
                .collect())
        })
        .await
    }

    /// Changed paths between two REFs: (path, kind).
    pub async fn diff(&self, a: &str, b: &str) -> Result<Vec<(Vec<u8>, String)>> {
        let (s, a, b) = (self.inner.clone(), a.to_string(), b.to_string());
        blocking(move || {
            let (x, y): (ObjectId, ObjectId) = (s.resolve(&a)?.commit, s.resolve(&b)?.commit);
            Ok(s.diff(x, y)?
                .into_iter()
                .map(|c| (c.path, c.kind.as_str().to_string()))
                .collect())
        })
        .await
    }

    /// Projects in the Store.
    pub async fn projects(&self) -> Result<Vec<String>> {
        let s = self.inner.clone();
        blocking(move || Ok(s.list_projects()?)).await
    }

    /// Branches (`PROJECT/BRANCH`, head hex), optionally of one project.
    pub async fn branches(&self, project: Option<&str>) -> Result<Vec<(String, String)>> {
        let (s, p) = (self.inner.clone(), project.map(str::to_string));
        blocking(move || {
            Ok(s.list_branches(p.as_deref())?
                .into_iter()
                .map(|(b, h)| (b.to_string(), h.to_hex()))
                .collect())
        })
        .await
    }
}
