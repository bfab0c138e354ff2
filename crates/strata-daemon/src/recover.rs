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

use std::os::fd::OwnedFd;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_store::Store;
use strata_workspace::{MountHandle, MountOptions, Workspace, WorkspaceOptions, WsError};

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
/// commands' uid reaches the root daemon's mount, over the configured
/// transport.
pub(crate) fn mount_options(config: &DaemonConfig, id: &str) -> MountOptions {
    MountOptions {
        allow_other: true,
        fsname: format!("strata:{id}"),
        transport: config.transport(),
        ..Default::default()
    }
}

/// Make sure `at` is a directory to mount on, without following any
/// symlink: each component is opened from `/` with openat2(2)
/// `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH` and a
/// missing one is created with mkdirat(2) (0755, root's). A command owns
/// /tmp and its Workspace and can plant `/tmp/x -> /some/dir` before a
/// client asks for `/tmp/x/ws`; following it would have this root daemon
/// create directories and mount wherever the command points. A symlink
/// (or a non-directory) anywhere in the path is refused, naming it.
/// Returns the directory, opened `O_PATH`.
pub(crate) fn prepare_mountpoint(at: &Path) -> Result<OwnedFd, ApiError> {
    use rustix::fs::{Mode, OFlags, ResolveFlags};
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let resolve = ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS | ResolveFlags::BENEATH;
    let fail = |so_far: &Path, what: String| {
        ApiError::invalid(format!(
            "mount path {}: {} {what}; symlinks in a mount path are never followed (a command could point them anywhere)",
            at.display(),
            so_far.display()
        ))
        .hint("mount at a path made of real directories, e.g. /workspace or a new directory under /tmp")
    };
    let mut dir: OwnedFd = rustix::fs::open("/", flags, Mode::empty())
        .map_err(|e| ApiError::internal(format!("opening / to resolve {}: {e}", at.display())))?;
    let mut so_far = PathBuf::from("/");
    for c in at.components() {
        let name = match c {
            std::path::Component::RootDir => continue,
            std::path::Component::Normal(n) => n,
            _ => return Err(fail(&so_far, "is not a clean absolute path".into())),
        };
        so_far.push(name);
        let mut created = false;
        let next = loop {
            match rustix::fs::openat2(&dir, name, flags, Mode::empty(), resolve) {
                Ok(fd) => break fd,
                Err(rustix::io::Errno::NOENT) if !created => {
                    match rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => created = true,
                        Err(e) => return Err(ApiError::invalid(format!(
                            "cannot create mount path {} ({}): {e}",
                            at.display(),
                            so_far.display()
                        ))
                        .hint(
                            "mount under a writable directory of the Sandbox, or one that exists",
                        )),
                    }
                }
                Err(rustix::io::Errno::LOOP) => return Err(fail(&so_far, "is a symlink".into())),
                Err(rustix::io::Errno::NOTDIR) => {
                    return Err(fail(&so_far, "is not a directory (or is a symlink)".into()))
                }
                Err(e) => {
                    return Err(ApiError::invalid(format!(
                        "mount path {}: opening {}: {e}",
                        at.display(),
                        so_far.display()
                    )))
                }
            }
        };
        dir = next;
    }
    Ok(dir)
}

/// Mount `ws` at `at` (prepared by [`prepare_mountpoint`]) and check where
/// the kernel put it: a component swapped for a symlink between the
/// preparation and mount(2) (which follows symlinks) would move the
/// mount. The mount must be listed in /proc/self/mountinfo at `at`
/// exactly; if not, it is detached where it landed and refused.
pub(crate) fn mount_checked(
    config: &DaemonConfig,
    ws: &Workspace,
    at: &Path,
) -> Result<MountHandle, ApiError> {
    let _dir = prepare_mountpoint(at)?;
    let opts = mount_options(config, ws.id());
    let handle = ws.mount(at, &opts).map_err(crate::error::ws_error)?;
    let fsname = opts.fsname;
    let landed = std::fs::read_to_string(strata_sandbox::mounts::MOUNTINFO)
        .map(|t| mount_points_of(&t, &fsname))
        .unwrap_or_default();
    if landed.len() == 1 && landed[0] == at {
        return Ok(handle);
    }
    for p in &landed {
        let _ = rustix::mount::unmount(
            p,
            rustix::mount::UnmountFlags::DETACH | rustix::mount::UnmountFlags::NOFOLLOW,
        );
    }
    // Detached above; the session ends when its last user goes. Never
    // unmount by `at` again (it may lead elsewhere now).
    std::thread::spawn(move || drop(handle.join()));
    Err(ApiError::new(
        axum::http::StatusCode::CONFLICT,
        crate::api::ErrorCode::MountMoved,
        format!(
            "mount path {} changed while it was mounted (the mount landed at {landed:?}): refused and detached",
            at.display()
        ),
    )
    .hint("something in the Sandbox is replacing directories of this path; mount at a path no command can change, e.g. /workspace"))
}

/// Mount points (unescaped) of the mounts whose source is `fsname`
/// (mountinfo(5): field 5 is the mount point, the source follows " - "
/// and the filesystem type).
fn mount_points_of(mountinfo: &str, fsname: &str) -> Vec<PathBuf> {
    strata_sandbox::mounts::parse_mountinfo(mountinfo)
        .into_iter()
        .filter(|m| m.source == fsname)
        .map(|m| m.mount_point)
        .collect()
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
    crate::write_private(&dst, &bytes).map_err(|e| fail("write", &dst, e))
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
                    id: stem.into(),
                    path: Some(r.path.display().to_string()),
                    error,
                });
                continue;
            }
            Err(e) => {
                let error = format!("unreadable mount record {name}: {e}");
                tracing::error!(workspace = %stem, %error, "not recovered");
                failed.push(UnrecoveredWorkspace {
                    id: stem.into(),
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
                    id: rec.id.clone().into(),
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
    let handle = mount_checked(config, &ws, &rec.path).map_err(|e| e.detail.message)?;
    Ok(WsEntry {
        ws,
        handle: Some(handle),
        path: rec.path.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_points_come_from_mountinfo() {
        let mi = "36 35 0:50 / /tmp/a\\040b rw - fuse strata:w1 rw\n\
                  37 35 0:51 / /workspace rw shared:2 - fuse strata:w2 rw\n\
                  38 35 0:52 / /tmp/x rw - tmpfs strata:w1 rw\n";
        assert_eq!(
            mount_points_of(mi, "strata:w1"),
            vec![PathBuf::from("/tmp/a b"), PathBuf::from("/tmp/x")]
        );
        assert_eq!(
            mount_points_of(mi, "strata:w2"),
            vec![PathBuf::from("/workspace")]
        );
        assert!(mount_points_of(mi, "strata:w3").is_empty());
    }

    #[test]
    fn mount_paths_never_go_through_a_symlink() {
        let t = tempfile::tempdir().unwrap();
        let target = t.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, t.path().join("link")).unwrap();
        std::fs::write(t.path().join("file"), b"x").unwrap();
        for (at, named, what) in [
            ("link/ws", "link", "is a symlink"),
            ("link", "link", "is a symlink"),
            ("file/ws", "file", "not a directory"),
        ] {
            let e = prepare_mountpoint(&t.path().join(at)).unwrap_err();
            let msg = e.detail.message;
            assert!(
                msg.contains(&t.path().join(named).display().to_string()) && msg.contains(what),
                "{at}: {msg}"
            );
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
        assert!(!target.join("ws").exists(), "created through the symlink");
        // Real directories: created as needed, and found again.
        let at = t.path().join("a/b/ws");
        prepare_mountpoint(&at).unwrap();
        assert!(at.is_dir());
        prepare_mountpoint(&at).unwrap();
    }
}
