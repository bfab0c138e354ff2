//! Re-serving Workspaces after a restart (docs/reliability.md).
//!
//! A Workspace's uncommitted state lives in its scratch directory (journal
//! and upper layer) and survives the death of its daemon; what does not
//! survive is the mount. A daemon whose scratch directory is its own
//! ([`DaemonConfig::recover_workspaces`], a Sandbox's) therefore keeps one
//! small record per mounted Workspace, `<scratch>/.mounts/<id>.json`
//! (0600: its ID, mount path and branch), written at mount and removed at
//! unmount, and kept when the daemon stops or dies. At start, before the
//! marker, [`recover`] reopens each recorded Workspace with
//! `Workspace::open` (the Workspace layer's crash recovery: torn journal
//! tails dropped, a commit published but not journalled adopted) and
//! mounts it again at its old path under its old ID.
//!
//! Only recorded Workspaces come back: one unmounted without discard
//! keeps its scratch (recoverable by ID) but was asked not to be served.
//! A Workspace that cannot be recovered does not stop the daemon: it is
//! logged, listed in `GET /v1/health` (`unrecovered`), and its scratch and
//! record are left as they are, so nothing is lost and a later start may
//! try again.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_store::Store;
use strata_workspace::{MountOptions, Workspace, WorkspaceOptions, WsError};

use crate::api::UnrecoveredWorkspace;
use crate::config::DaemonConfig;
use crate::error::ApiError;
use crate::server::WsEntry;

/// The records' directory under the scratch root. Not a Workspace
/// directory (it has no journal; IDs cannot start with '.').
const MOUNTS_DIR: &str = ".mounts";

/// What a record says about one mounted Workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct MountRecord {
    id: String,
    /// The mount path inside the Sandbox.
    path: PathBuf,
    /// `PROJECT/BRANCH`, for the log (the journal is authoritative).
    branch: String,
}

fn records_dir(config: &DaemonConfig) -> PathBuf {
    config.scratch_dir.join(MOUNTS_DIR)
}

fn record_path(config: &DaemonConfig, id: &str) -> PathBuf {
    records_dir(config).join(format!("{id}.json"))
}

/// The options a Sandbox's Workspaces are created and reopened with.
pub(crate) fn workspace_options(config: &DaemonConfig) -> WorkspaceOptions {
    WorkspaceOptions {
        root_owner: Some(config.default_user()),
        ..Default::default()
    }
}

/// How a Sandbox's Workspaces are mounted: `allow_other`, so that the
/// commands' uid reaches the root daemon's mount.
pub(crate) fn mount_options(id: &str) -> MountOptions {
    MountOptions {
        allow_other: true,
        fsname: format!("strata:{id}"),
        ..Default::default()
    }
}

/// Make sure `at` is a directory to mount on: an existing directory (never
/// through a symlink), or created.
pub(crate) fn prepare_mountpoint(at: &Path) -> Result<(), ApiError> {
    match std::fs::symlink_metadata(at) {
        Ok(m) if m.file_type().is_dir() => Ok(()),
        Ok(_) => Err(ApiError::invalid(format!(
            "mount path {} exists and is not a directory (symlinks are not followed)",
            at.display()
        ))),
        Err(_) => std::fs::create_dir_all(at).map_err(|e| {
            ApiError::invalid(format!("cannot create mount path {}: {e}", at.display()))
                .hint("mount under a writable directory of the Sandbox, or one that exists")
        }),
    }
}

/// Record that Workspace `id` is mounted at `path` (no-op unless this
/// daemon recovers its Workspaces). Written through a temporary name and a
/// rename, so a crash leaves the old record or the new one, never half.
pub(crate) fn record_mount(
    config: &DaemonConfig,
    id: &str,
    path: &Path,
    branch: &str,
) -> Result<(), ApiError> {
    if !config.recover_workspaces {
        return Ok(());
    }
    let dir = records_dir(config);
    let fail = |what: &str, p: &Path, e: std::io::Error| {
        ApiError::internal(format!(
            "recording the mount of workspace {id} ({what} {}): {e}",
            p.display()
        ))
    };
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(&dir)
        .map_err(|e| fail("create", &dir, e))?;
    let rec = MountRecord {
        id: id.to_string(),
        path: path.to_path_buf(),
        branch: branch.to_string(),
    };
    let bytes = serde_json::to_vec_pretty(&rec).expect("a mount record serializes");
    let dst = record_path(config, id);
    let tmp = dst.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()))
        .map_err(|e| fail("write", &tmp, e))?;
    std::fs::rename(&tmp, &dst).map_err(|e| fail("rename into place", &dst, e))
}

/// Forget Workspace `id`'s mount (it is being unmounted on request): a
/// later start must not mount it again. A missing record is fine.
pub(crate) fn forget_mount(config: &DaemonConfig, id: &str) -> Result<(), ApiError> {
    if !config.recover_workspaces {
        return Ok(());
    }
    let p = record_path(config, id);
    match std::fs::remove_file(&p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(ApiError::internal(format!(
            "removing the mount record {} of workspace {id}: {e}",
            p.display()
        ))),
    }
}

/// Mount again every recorded Workspace. Returns what was mounted (for the
/// daemon's table) and what could not be, each failure already logged.
pub(crate) fn recover(
    config: &DaemonConfig,
    store: &Store,
) -> (Vec<(String, WsEntry)>, Vec<UnrecoveredWorkspace>) {
    let mut served: Vec<(String, WsEntry)> = Vec::new();
    let mut failed = Vec::new();
    if !config.recover_workspaces {
        return (served, failed);
    }
    let dir = records_dir(config);
    let mut names: Vec<String> = match std::fs::read_dir(&dir) {
        Ok(rd) => rd
            .flatten()
            .filter_map(|e| e.file_name().to_str().map(String::from))
            .filter(|n| n.ends_with(".json"))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            tracing::error!(dir = %dir.display(), error = %e, "cannot list the mount records: no Workspace recovered");
            failed.push(UnrecoveredWorkspace {
                id: "*".into(),
                path: None,
                error: format!("listing the mount records in {}: {e}", dir.display()),
            });
            return (served, failed);
        }
    };
    names.sort();
    for name in names {
        let stem = name.trim_end_matches(".json").to_string();
        let rec = std::fs::read(dir.join(&name))
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<MountRecord>(&b).map_err(|e| e.to_string()));
        let rec = match rec {
            Ok(r) if r.id == stem => r,
            Ok(r) => {
                let error = format!("mount record {name} names workspace {:?}", r.id);
                tracing::error!(workspace = %stem, %error, "not recovered");
                failed.push(UnrecoveredWorkspace {
                    id: stem,
                    path: Some(r.path.display().to_string()),
                    error,
                });
                continue;
            }
            Err(e) => {
                let error = format!("unreadable mount record {name}: {e}");
                tracing::error!(workspace = %stem, %error, "not recovered");
                failed.push(UnrecoveredWorkspace {
                    id: stem,
                    path: None,
                    error,
                });
                continue;
            }
        };
        match recover_one(config, store, &rec, &served) {
            Ok(entry) => {
                tracing::info!(workspace = %rec.id, path = %rec.path.display(), branch = %rec.branch, "recovered and mounted again");
                served.push((rec.id.clone(), entry));
            }
            Err(error) => {
                tracing::error!(workspace = %rec.id, path = %rec.path.display(), %error, "not recovered; its scratch is kept");
                failed.push(UnrecoveredWorkspace {
                    id: rec.id.clone(),
                    path: Some(rec.path.display().to_string()),
                    error,
                });
            }
        }
    }
    (served, failed)
}

fn recover_one(
    config: &DaemonConfig,
    store: &Store,
    rec: &MountRecord,
    served: &[(String, WsEntry)],
) -> Result<WsEntry, String> {
    let ws = match Workspace::open(
        store,
        &rec.id,
        &config.scratch_dir,
        &workspace_options(config),
    ) {
        Ok(ws) => ws,
        Err(e @ WsError::NotFound { .. }) => {
            // No journal: nothing of it is left to recover or to keep (it
            // was discarded, or its scratch removed). Drop the record so
            // that the next start does not report it again.
            let _ = forget_mount(config, &rec.id);
            return Err(format!("{e} (its mount record is removed)"));
        }
        Err(e) => return Err(e.to_string()),
    };
    if let Some((other, _)) = served
        .iter()
        .find(|(_, e)| e.path.starts_with(&rec.path) || rec.path.starts_with(&e.path))
    {
        return Err(format!(
            "{} overlaps the mount of workspace {other}, recovered first",
            rec.path.display()
        ));
    }
    prepare_mountpoint(&rec.path).map_err(|e| e.detail.message)?;
    let handle = ws
        .mount(&rec.path, &mount_options(&rec.id))
        .map_err(|e| e.to_string())?;
    Ok(WsEntry {
        ws,
        handle: Some(handle),
        path: rec.path.clone(),
    })
}
