//! The native backend's on-disk state: its record, the checks of a create
//! request only the native backend makes (rootfs, daemon binary, exposed
//! paths), and process liveness. What every backend's state directory
//! shares (creation, record I/O, lock, delete) is [`crate::backend::state`];
//! the shared request checks are [`crate::backend::validate`]. Layout of `<root>/<id>/` (root-only, 0700), the same names
//! the SDK's stop-gap launcher `native_min` used:
//!
//! | file | what |
//! |---|---|
//! | `sandbox.json` (0600) | the [`Record`] (B8, B10) |
//! | `token` (0600) | the bearer token, 64 hex digits (B3, B6) |
//! | `config.json` (0600) | the daemon's config, opaque bytes (B3) |
//! | `daemon.out` (0600) | the daemon's stdout: its startup marker (B5) |
//! | `daemon.log` (0600) | the daemon's log and stderr (B5) |
//! | `daemon.sock` | the daemon's Unix socket (B6) |
//! | `report.json` | the monitor's report: how the Sandbox ended (removed by restart) |
//! | `run.lock` | `flock`ed by start and restart: one daemon run at a time |
//! | `store/` | mount point of the Store, inside the Sandbox only (B2) |
//! | `scratch/` | the daemon's Workspace scratch space |
//! | `bin/strata` (0755) | a copy of the daemon binary, when it would not be reachable in place |

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::backend::state::{invalid, state_err};
use crate::backend::validate::{check_name_and_labels, check_store};
use crate::backend::{
    BackendError, BackendKind, CreateRequest, DaemonInstall, DaemonPaths, Expose, SandboxId,
};
use crate::cgroup::Cgroup;
use crate::mounts::RootFs;

/// A process identified by pid *and* start time, so that a recycled pid
/// is never mistaken for (or signalled as) the Sandbox's monitor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ProcId {
    pub pid: u32,
    /// Field 22 of /proc/PID/stat (clock ticks since boot).
    pub start_time: u64,
}

impl ProcId {
    /// The process `pid` now (a zombie too: a monitor that died at once
    /// must still be recorded, as stopped).
    pub fn of(pid: u32) -> Option<ProcId> {
        let (_, start_time) = stat(pid)?;
        Some(ProcId { pid, start_time })
    }

    /// Running (not a zombie, not gone, not a recycled pid)?
    pub fn alive(&self) -> bool {
        matches!(stat(self.pid), Some((s, t)) if s != 'Z' && t == self.start_time)
    }
}

/// (state, start time) from /proc/PID/stat. The command name may contain
/// spaces and ')', so fields are counted after the last ')'.
fn stat(pid: u32) -> Option<(char, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    // `rest` starts at field 3 (state); start time is field 22.
    let start = fields.nth(18)?.parse().ok()?;
    Some((state, start))
}

/// The persistent record of one native Sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub id: SandboxId,
    pub backend: BackendKind,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub created_unix_ms: u64,
    pub config: CreateRequest,
    /// The daemon binary on the host (it is the init too).
    pub exe_host: PathBuf,
    /// Run a copy from the state directory (not reachable in place).
    pub copy_exe: bool,
    pub daemon: DaemonPaths,
    /// Set by install_daemon (the config bytes are in their file).
    pub install: Option<DaemonInstall>,
    /// Set by start, before waiting for the marker.
    pub monitor: Option<ProcId>,
    pub marker: Option<String>,
    pub socket: Option<PathBuf>,
    /// The Sandbox's cgroup as found after start (only with limits).
    pub cgroup: Option<Cgroup>,
}

/// File names of one Sandbox's state directory.
pub(crate) fn paths(dir: &Path, exe: &Path) -> DaemonPaths {
    DaemonPaths {
        exe: exe.to_path_buf(),
        config: dir.join("config.json"),
        token_file: dir.join("token"),
        socket: dir.join("daemon.sock"),
        log_file: dir.join("daemon.log"),
        store: dir.join("store"),
        scratch_dir: dir.join("scratch"),
        state_dir: dir.to_path_buf(),
    }
}

/// What [`check_request`] resolved.
pub(crate) struct Checked {
    pub store: PathBuf,
    pub exe: PathBuf,
    /// Run a copy of the daemon binary from the state directory.
    pub copy_exe: bool,
    /// The exposed paths with their symlinks resolved.
    pub expose: Vec<Expose>,
}

/// Check the request and resolve the Store, the daemon binary and the
/// exposed paths.
pub(crate) fn check_request(root: &Path, req: &CreateRequest) -> Result<Checked, BackendError> {
    if !rustix::process::geteuid().is_root() {
        return Err(invalid(
            "native backend",
            "needs root (namespaces, mounts, cgroups, FUSE mounts as root); use rootless `strata run` for one command",
        ));
    }
    check_name_and_labels(req)?;
    if req.image.is_some() {
        return Err(invalid("image", "the native backend runs the host root or a rootfs directory; images are for the docker and microVM backends"));
    }
    for m in &req.mountpoints {
        if !crate::mountpoints::valid(m) {
            return Err(invalid(
                format!("mount point {}", m.display()),
                "must be an absolute path without '..', not /",
            ));
        }
    }
    if let RootFs::Dir { path, .. } = &req.root {
        if !path.is_dir() {
            return Err(invalid(
                format!("rootfs {}", path.display()),
                "is not a directory",
            ));
        }
    }
    let store = check_store(req, root)?;
    let exe = match &req.daemon_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe().map_err(state_err(
            "find the current executable",
            Path::new("/proc/self/exe"),
        ))?,
    };
    let exe = exe
        .canonicalize()
        .map_err(state_err("resolve the daemon binary", &exe))?;
    let meta = fs::metadata(&exe).map_err(state_err("stat the daemon binary", &exe))?;
    if !meta.is_file() || meta.mode() & 0o111 == 0 || exe.starts_with(&store) {
        return Err(invalid(
            format!("daemon binary {}", exe.display()),
            "must be an executable file outside the Store",
        ));
    }
    // In place (bound read-only at its host path) where the Sandbox can
    // show the host path; a copy in the state directory otherwise.
    let copy_exe = matches!(req.root, RootFs::Dir { .. })
        || ["/tmp", "/run", "/proc", "/dev"]
            .iter()
            .any(|p| exe.starts_with(p));
    let expose = req
        .expose
        .iter()
        .map(|e| check_expose(e, &store, root))
        .collect::<Result<_, _>>()?;
    Ok(Checked {
        store,
        exe,
        copy_exe,
        expose,
    })
}

/// An exposed path must exist, and must neither hold nor lie in the Store
/// or the state root (commands would reach the database, other Sandboxes'
/// tokens and sockets); the Sandbox's own /tmp, /proc, /sys and /dev are
/// not the host's to replace. Checked on the resolved path, so a symlink
/// cannot lead around it; the resolved path is what gets bound.
fn check_expose(e: &Expose, store: &Path, root: &Path) -> Result<Expose, BackendError> {
    let what = || format!("expose {}", e.path.display());
    if !crate::exec::is_clean_absolute(&e.path) {
        return Err(invalid(what(), "must be an absolute path without '..'"));
    }
    let path = e.path.canonicalize().map_err(|err| {
        invalid(
            what(),
            format!("cannot be resolved on the host ({err}); give an existing path"),
        )
    })?;
    let overlaps = |other: &Path| path.starts_with(other) || other.starts_with(&path);
    if overlaps(store) {
        return Err(invalid(
            what(),
            format!(
                "overlaps the Store {} (commands must never see the Store); expose a directory beside it",
                store.display()
            ),
        ));
    }
    if overlaps(root) {
        return Err(invalid(
            what(),
            format!(
                "overlaps strata's Sandbox state {} (tokens, sockets, other Sandboxes)",
                root.display()
            ),
        ));
    }
    if path == Path::new("/tmp")
        || ["/proc", "/sys", "/dev"]
            .iter()
            .any(|p| path.starts_with(p))
    {
        return Err(invalid(
            what(),
            "the Sandbox has its own /tmp, /proc, /sys and /dev; expose a directory below /tmp, or elsewhere",
        ));
    }
    Ok(Expose {
        path,
        writable: e.writable,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_process_is_alive() {
        let me = ProcId::of(std::process::id()).unwrap();
        assert!(me.alive());
        let other = ProcId {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!other.alive(), "a different start time is another process");
    }
}
