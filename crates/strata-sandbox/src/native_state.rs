//! The native backend's on-disk state: one private directory per Sandbox
//! under the state root, its record, the checks of a create request, and
//! the small file helpers the backend needs (private writes, random IDs
//! and tokens, log tails, process liveness). Layout of `<root>/<id>/` (root-only, 0700), the same names
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
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::backend::{
    BackendError, BackendKind, CreateRequest, DaemonInstall, DaemonPaths, Expose, SandboxId,
};
use crate::cgroup::Cgroup;
use crate::mounts::RootFs;

/// The file name of a backend's record in a Sandbox's state directory.
pub const RECORD: &str = "sandbox.json";

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

pub fn invalid(what: impl Into<String>, message: impl Into<String>) -> BackendError {
    BackendError::Invalid {
        what: what.into(),
        message: message.into(),
    }
}

pub fn state_err<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(io::Error) -> BackendError + 'a {
    move |source| BackendError::State {
        action,
        path: path.into(),
        source,
    }
}

/// mkdir with mode 0700 (root-only: commands, uid 1500, cannot traverse).
pub fn mkdir_private(p: &Path, recursive: bool) -> Result<(), BackendError> {
    fs::DirBuilder::new()
        .mode(0o700)
        .recursive(recursive)
        .create(p)
        .map_err(state_err("create directory", p))?;
    // The umask may have taken bits away, never added; set it exactly.
    fs::set_permissions(p, fs::Permissions::from_mode(0o700)).map_err(state_err("chmod 0700", p))
}

/// Write `bytes` to `path` with mode 0600, through a temporary name and a
/// rename, so a reader sees the old or the new file, never half of one.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<(), BackendError> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(state_err("create", &tmp))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(state_err("write", &tmp))?;
    fs::rename(&tmp, path).map_err(state_err("rename into place", path))
}

/// A backend's record (`sandbox.json`, 0600) in a Sandbox's state
/// directory; each backend has its own record type.
pub fn read_record<R: serde::de::DeserializeOwned>(dir: &Path) -> Result<R, BackendError> {
    let p = dir.join(RECORD);
    let text = fs::read(&p).map_err(state_err("read the record", &p))?;
    serde_json::from_slice(&text).map_err(|e| BackendError::State {
        action: "parse the record",
        path: p,
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })
}

/// Writes a backend's record atomically and privately (see [`read_record`]).
pub fn write_record<R: Serialize>(dir: &Path, rec: &R) -> Result<(), BackendError> {
    let bytes = serde_json::to_vec_pretty(rec).map_err(|e| BackendError::State {
        action: "encode the record",
        path: dir.join(RECORD),
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })?;
    write_private(&dir.join(RECORD), &bytes)
}

/// Exclusive lock (`flock`) of one Sandbox's daemon runs (`<dir>/run.lock`), held by start and
/// restart from their state check to the recorded outcome, so that two
/// processes never start two daemons on one state directory. Released
/// when the file is dropped (or the holder dies); the monitor does not
/// inherit it (opened close-on-exec).
pub fn lock_runs(dir: &Path) -> Result<fs::File, BackendError> {
    lock_exclusive(&dir.join("run.lock"))
}

/// Open (creating it 0600) and flock `p` exclusively; released when the
/// returned file is dropped or its holder dies.
pub fn lock_exclusive(p: &Path) -> Result<fs::File, BackendError> {
    let f = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(p)
        .map_err(state_err("open the lock", p))?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| state_err("lock", p)(e.into()))?;
    Ok(f)
}

/// A new Sandbox ID and its state directory under `root`. `create` (not
/// recursive) fails on an existing directory, so an ID is never reused,
/// even on a collision.
pub fn new_state_dir(root: &Path) -> Result<(SandboxId, PathBuf), BackendError> {
    for _ in 0..8 {
        let id = format!("sb-{}", random_hex(12)?);
        let dir = root.join(&id);
        match fs::DirBuilder::new().create(&dir) {
            Ok(()) => return Ok((SandboxId(id), dir)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(state_err("create the state directory", &dir)(e)),
        }
    }
    Err(invalid("sandbox ID", "8 random IDs in a row were taken"))
}

/// `n` random bytes from the kernel's CSPRNG, hex-encoded.
pub fn random_hex(n: usize) -> Result<String, BackendError> {
    let path = Path::new("/dev/urandom");
    let mut buf = vec![0u8; n];
    fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .map_err(state_err("read random bytes from", path))?;
    Ok(hex::encode(buf))
}

/// `sb-` and 24 hex digits (96 random bits), the SDK's format.
pub fn valid_id(id: &str) -> bool {
    id.len() == 27
        && id.starts_with("sb-")
        && id[3..]
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

pub fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// The last `lines` lines of a file, reading at most its last 64 KiB so
/// that a huge log never costs more than that (B5: bounded).
pub fn tail(path: &Path, lines: usize) -> io::Result<String> {
    const MAX: u64 = 64 * 1024;
    let mut f = match fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(String::new()),
        Err(e) => return Err(e),
    };
    let len = f.metadata()?.len();
    let start = len.saturating_sub(MAX);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.take(MAX).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    // A cut first line is partial: drop it when we did not start at 0.
    let skip = usize::from(start > 0 && all.len() > 1);
    let from = all.len().saturating_sub(lines).max(skip);
    Ok(all[from..].join("\n"))
}

/// Mount points below `dir` in this (host) mount namespace. The native
/// backend makes none (its binds live in the Sandbox's namespace only); a
/// non-empty answer means something else did, and removing the directory
/// recursively could then delete through a mount, e.g. into the Store.
pub fn mounts_below(dir: &Path) -> Result<Vec<PathBuf>, BackendError> {
    let p = Path::new("/proc/self/mountinfo");
    let text = fs::read_to_string(p).map_err(state_err("read", p))?;
    Ok(text
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(crate::mounts::unescape_mountinfo)
        .filter(|m| m.starts_with(dir))
        .collect())
}

/// Refuse to delete `dir` (Sandbox `id`'s state directory) while anything is
/// mounted below it ([`mounts_below`]); `hint` ends the message.
pub fn refuse_mounts_below(id: &SandboxId, dir: &Path, hint: &str) -> Result<(), BackendError> {
    let mounts = mounts_below(dir)?;
    if mounts.is_empty() {
        return Ok(());
    }
    Err(BackendError::Step {
        id: id.clone(),
        step: "delete",
        message: format!(
            "refusing to remove {}: host mounts below it ({mounts:?}); {hint}",
            dir.display()
        ),
        log_tail: String::new(),
    })
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
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
    if let Some(n) = &req.name {
        if !valid_name(n) {
            return Err(invalid(
                format!("name {n:?}"),
                "use 1-64 characters of [A-Za-z0-9._-]",
            ));
        }
    }
    for k in req.labels.keys() {
        if k.is_empty() || k.len() > 128 || k.chars().any(|c| c.is_control() || c == '=') {
            return Err(invalid(
                format!("label {k:?}"),
                "keys are 1-128 characters, no '=' or control characters",
            ));
        }
    }
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
    let store = req
        .store
        .canonicalize()
        .map_err(state_err("resolve the Store", &req.store))?;
    // The Store's host path is masked in the Sandbox: it must not hide
    // the state directory or the daemon, and the state directory must
    // not be inside the Store.
    if !store.is_dir() || root.starts_with(&store) || store.starts_with(root) {
        return Err(invalid(
            format!("Store {}", store.display()),
            format!(
                "must be a directory that neither contains nor lies in the state root {}",
                root.display()
            ),
        ));
    }
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
    fn ids_and_names() {
        assert!(valid_id("sb-0123456789abcdef01234567"));
        for bad in [
            "sb-0123456789ABCDEF01234567",
            "sb-0123",
            "../../etc",
            "sb-0123456789abcdef0123456/",
        ] {
            assert!(!valid_id(bad), "{bad}");
        }
        assert!(valid_name("a.b_c-1"));
        assert!(!valid_name(""));
        assert!(!valid_name("a/b"));
        assert!(!valid_name(&"x".repeat(65)));
        let r = random_hex(12).unwrap();
        assert!(valid_id(&format!("sb-{r}")));
    }

    #[test]
    fn tail_is_bounded() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        assert_eq!(tail(&p, 5).unwrap(), "");
        let mut text = String::new();
        for i in 0..20_000 {
            text.push_str(&format!("line {i}\n"));
        }
        fs::write(&p, &text).unwrap();
        assert_eq!(tail(&p, 2).unwrap(), "line 19998\nline 19999");
        let many = tail(&p, 1_000_000).unwrap();
        assert!(many.len() <= 64 * 1024);
        assert!(many.lines().next().unwrap().starts_with("line "));
    }

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
