//! "A Workspace", wherever it is served: mounted on the host (one daemon
//! per mount, [`crate::host`]) or in a running [`Sandbox`]; live, or
//! offline from its scratch directory when nothing serves it. IDs are
//! unique across both, so `strata ws status|commit|unmount WS` find a
//! Workspace by ID alone ([`find`]) and `strata ws list` lists both
//! ([`list`]). The CLI only parses and renders what these return.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::host::{self, HostDirs, HostMount};
use crate::sandbox::{Sandbox, SandboxFilter};
use crate::workspace::{Change, CommitOutcome, Workspace};

/// How long a Sandbox's daemon may take to list its Workspaces before a
/// listing goes on without it (a hung daemon must not hang `ws list`).
const LIST_TIMEOUT: Duration = Duration::from_secs(2);

/// One Workspace of [`list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The Workspace ID.
    pub workspace: String,
    /// The Sandbox it is mounted in; `None` for a host mount.
    pub sandbox: Option<String>,
    /// Where it is mounted (a host path, or a path inside the Sandbox).
    pub mountpoint: PathBuf,
    /// `PROJECT/BRANCH` it commits to.
    pub branch: String,
    /// Whether its serving process answers (always true in a Sandbox that
    /// answered the listing).
    pub alive: bool,
    /// The host mount's serving process; `None` in a Sandbox.
    pub pid: Option<u32>,
}

/// The Workspaces mounted on this host by this user (`dirs`), then those
/// of the running Sandboxes under `state_dir` (`None`: the backend's
/// default, the docker backend's and those of running project VMs). Sandboxes the caller cannot open (e.g. root's, for a user)
/// or whose daemon does not answer within 2 s are left out, not an error.
pub async fn list(dirs: &HostDirs, state_dir: Option<PathBuf>) -> Result<Vec<Listed>> {
    let mut rows: Vec<Listed> = host::list(dirs)?
        .into_iter()
        .map(|m| Listed {
            // Probing a daemon connects to its socket: once per mount.
            alive: m.alive(),
            workspace: m.workspace,
            sandbox: None,
            mountpoint: m.mountpoint,
            branch: m.branch,
            pid: Some(m.pid),
        })
        .collect();
    let sandboxes = Sandbox::list(SandboxFilter {
        state_dir: state_dir.clone(),
        ..Default::default()
    })
    .await
    .unwrap_or_default();
    let mut open = Vec::new();
    for info in sandboxes {
        if let Ok(sb) = Sandbox::open_in(info.id.as_str(), state_dir.clone()).await {
            open.push(sb);
        }
    }
    // And the Sandboxes in running project VMs (docs/microvm.md), unless a
    // native state root was named: their records are the VMs' own.
    if state_dir.is_none() {
        open.extend(crate::microvm::running(None).await);
    }
    for sb in open {
        let wss = tokio::time::timeout(LIST_TIMEOUT, sb.workspaces()).await;
        for w in wss.ok().and_then(|r| r.ok()).unwrap_or_default() {
            rows.push(Listed {
                workspace: w.id().to_string(),
                sandbox: Some(sb.id().to_string()),
                mountpoint: PathBuf::from(w.path()),
                branch: w.branch().to_string(),
                alive: true,
                pid: None,
            });
        }
    }
    Ok(rows)
}

/// A Workspace found by ID: a host mount, or a Workspace of a running
/// Sandbox.
#[derive(Debug)]
pub enum Found {
    /// Mounted on the host (its daemon may have died: see
    /// [`HostMount::alive`]).
    Host(HostMount),
    /// Mounted in this running Sandbox.
    Sandbox(Box<(Sandbox, Workspace)>),
}

/// What [`Found::status`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The commit the changes are against (hex).
    pub base: String,
    /// Changed paths, sorted.
    pub changes: Vec<Change>,
}

/// Find Workspace `id`: a host mount of this user first, then the running
/// Sandboxes under `state_dir`. [`Error::NotFound`] when neither has it.
pub async fn find(dirs: &HostDirs, state_dir: Option<PathBuf>, id: &str) -> Result<Found> {
    match host::find(dirs, id) {
        Ok(m) => Ok(Found::Host(m)),
        Err(Error::NotFound { .. }) => match Sandbox::find_workspace(id, state_dir).await {
            Ok(x) => Ok(Found::Sandbox(Box::new(x))),
            Err(Error::NotFound { source, .. }) => Err(Error::NotFound {
                what: format!("Workspace {id} (on this host or in a running Sandbox)"),
                hint: "list them with `strata ws list`".into(),
                source,
            }),
            Err(e) => Err(e),
        },
        Err(e) => Err(e),
    }
}

impl Found {
    /// The Sandbox serving it; `None` on the host.
    pub fn sandbox_id(&self) -> Option<&str> {
        match self {
            Found::Host(_) => None,
            Found::Sandbox(x) => Some(x.0.id()),
        }
    }

    /// `PROJECT/BRANCH` it commits to.
    pub fn branch(&self) -> &str {
        match self {
            Found::Host(m) => &m.branch,
            Found::Sandbox(x) => x.1.branch(),
        }
    }

    /// Changes since its base, from its live server.
    pub async fn status(&self, dirs: &HostDirs) -> Result<Status> {
        match self {
            Found::Host(m) => {
                let st = host::status(dirs, m).await?;
                let changes = st.changes.into_iter().map(Change::from).collect();
                Ok(Status {
                    base: st.base,
                    changes,
                })
            }
            Found::Sandbox(x) => Ok(Status {
                base: x.1.base().to_string(),
                changes: x.1.status().await?,
            }),
        }
    }

    /// Publish its changes through its live server; the mount continues
    /// from the new head.
    pub async fn commit(&self, dirs: &HostDirs, message: &str) -> Result<CommitOutcome> {
        match self {
            Found::Host(m) => host::commit(dirs, m, message).await,
            Found::Sandbox(x) => x.1.commit(message).await,
        }
    }

    /// Publish the changes of a host Workspace whose serving process died,
    /// straight from its scratch directory. A Sandbox's Workspace is
    /// refused ([`Error::InvalidInput`]): its daemon serves it.
    pub fn commit_offline(
        &self,
        store: &Path,
        dirs: &HostDirs,
        message: &str,
        allow_any_fs: bool,
    ) -> Result<CommitOutcome> {
        match self {
            Found::Host(m) => host::commit_offline(store, dirs, m, message, allow_any_fs),
            Found::Sandbox(x) => Err(Error::invalid(
                format!(
                    "--offline is for host Workspaces whose serving process died; workspace {} is served by a running Sandbox",
                    x.1.id()
                ),
                "commit it without --offline",
            )),
        }
    }

    /// Unmount; refuses uncommitted changes unless `discard`. A host
    /// mount's dead daemon is cleaned up from its scratch directory.
    pub async fn unmount(
        self,
        store: &Path,
        dirs: &HostDirs,
        discard: bool,
        allow_any_fs: bool,
    ) -> Result<()> {
        match self {
            Found::Host(m) => host::unmount(store, dirs, &m, discard, allow_any_fs).await,
            Found::Sandbox(x) => x.1.unmount(discard).await,
        }
    }
}

/// Open Workspace `id` of the Store at `store` from its scratch directory
/// `scratch`, with nothing serving it (its daemon died, or its Sandbox is
/// stopped): the Workspace layer's own recovery (journal and upper layer)
/// makes it whole, and status, commit and discard work without a mount.
/// The one place the SDK opens a Workspace offline.
pub fn open_offline(
    store: &Path,
    scratch: &Path,
    id: &str,
    allow_any_fs: bool,
) -> Result<strata_workspace::Workspace> {
    let s = strata_store::Store::open(
        store,
        &strata_store::StoreOptions {
            allow_any_fs,
            ..Default::default()
        },
    )?;
    Ok(strata_workspace::Workspace::open(
        &s,
        id,
        scratch,
        &Default::default(),
    )?)
}
