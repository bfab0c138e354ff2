//! The host-side scratch of `strata run`: one directory per run under the
//! run directory, flock'd while the run lives, and the sweep that releases
//! the Workspaces of runs that were killed (docs/design.md §4); plus the
//! path helpers the mountpoint checks use.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use strata_store::Store;
use strata_workspace::{Workspace, WorkspaceOptions};

pub(crate) const SCRATCH_PREFIX: &str = "strata-run-";
pub(crate) const RUN_LOCK: &str = "run.lock";

pub(crate) fn lock_scratch(dir: &Path) -> std::io::Result<std::fs::File> {
    let f = std::fs::File::create(dir.join(RUN_LOCK))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive)?;
    Ok(f)
}

/// Which Store a scratch directory belongs to.
pub(crate) const STORE_FILE: &str = "store";

pub(crate) fn store_key(store: &Store) -> PathBuf {
    store
        .dir()
        .canonicalize()
        .unwrap_or_else(|_| store.dir().to_path_buf())
}

/// Remove the scratch directories of our runs on this Store that were
/// killed (their run lock is free: flock(2) dies with its holder), and
/// release their Workspaces through the Workspace API (open, then discard:
/// that also drops the Store pin on the base commit). Best effort; scratch
/// of other Stores is left for a run on them.
pub(crate) fn sweep_stale_scratch(store: &Store, parent: &Path) {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    let key = store_key(store);
    let Ok(rd) = std::fs::read_dir(parent) else {
        return;
    };
    for e in rd.flatten() {
        if !e
            .file_name()
            .as_bytes()
            .starts_with(SCRATCH_PREFIX.as_bytes())
        {
            continue;
        }
        let dir = e.path();
        let Ok(m) = dir.symlink_metadata() else {
            continue;
        };
        if !m.is_dir() || m.uid() != me {
            continue;
        }
        // No lock file: a run that is just starting, or a kept scratch.
        let Ok(f) = std::fs::File::open(dir.join(RUN_LOCK)) else {
            continue;
        };
        if rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        match std::fs::read(dir.join(STORE_FILE)) {
            Ok(k) if k == key.as_os_str().as_bytes() => {}
            // Killed before it wrote the file: no Workspace, no pin.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            _ => continue,
        }
        let ws_root = dir.join("ws");
        for id in Workspace::list(&ws_root).unwrap_or_default() {
            match Workspace::open(store, &id, &ws_root, &WorkspaceOptions::default()) {
                Ok(ws) => {
                    if let Err(err) = ws.discard() {
                        tracing::warn!(%id, %err, "discard the Workspace of a killed run");
                    }
                }
                Err(err) => tracing::warn!(%id, %err, "open the Workspace of a killed run"),
            }
        }
        tracing::debug!(path = %dir.display(), "removing the scratch of a killed run");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

pub(crate) struct RemoveDirOnDrop(pub(crate) Option<PathBuf>);

impl Drop for RemoveDirOnDrop {
    fn drop(&mut self) {
        if let Some(p) = &self.0 {
            let _ = std::fs::remove_dir(p);
        }
    }
}

pub(crate) fn absolute(p: &Path, cwd: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

/// Canonicalize the longest existing prefix of `p`, keep the rest.
pub(crate) fn canonical_prefix(p: &Path) -> PathBuf {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        if let Ok(c) = cur.canonicalize() {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return out;
        }
        match (cur.file_name().map(|f| f.to_owned()), cur.parent()) {
            (Some(f), Some(parent)) => {
                rest.push(f);
                cur = parent.to_path_buf();
            }
            _ => return p.to_path_buf(),
        }
    }
}
