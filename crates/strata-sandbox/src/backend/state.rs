//! A backend's state directory, the same for every backend: one private
//! directory per Sandbox under a root-only state root, its record
//! (`sandbox.json`), its token, the lock of its daemon runs, and its
//! removal, which never crosses a mount. Also the small file helpers the
//! backends and the daemon share: private (0600) writes, random hex and
//! tokens, bounded log tails. Each backend's own files are listed in its
//! module (`native_state`, strata-docker's `state`).

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::{BackendError, SandboxId};

/// The file name of a backend's record in a Sandbox's state directory.
pub const RECORD: &str = "sandbox.json";

pub use crate::rmtree::remove_tree;

/// A request error: `what` was wrong, `message` says why and what to do.
pub fn invalid(what: impl Into<String>, message: impl Into<String>) -> BackendError {
    BackendError::Invalid {
        what: what.into(),
        message: message.into(),
    }
}

/// Maps an I/O error of `action` on `path` to [`BackendError::State`].
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

/// Write `bytes` to `path` with mode 0600, through a temporary name
/// (created exclusively, so nobody can plant it for us) and a rename, so
/// a reader sees the old or the new file, never half of one; rename(2)
/// replaces a symlink at `path` rather than following it.
pub fn write_private(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = fs::remove_file(&tmp);
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes).and_then(|()| f.sync_all())?;
    fs::rename(&tmp, path)
}

/// `n` random bytes from the kernel's CSPRNG, hex-encoded.
pub fn random_hex(n: usize) -> io::Result<String> {
    let mut buf = vec![0u8; n];
    fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut buf))?;
    Ok(hex::encode(buf))
}

/// A fresh bearer token: 32 random bytes as 64 lowercase hex digits (the
/// format the daemon's `read_token` accepts).
pub fn new_token() -> io::Result<String> {
    random_hex(32)
}

/// A fresh token written privately to `path` (one line).
pub fn write_new_token(path: &Path) -> Result<(), BackendError> {
    let token = new_token().map_err(state_err("read random bytes for", path))?;
    write_private(path, format!("{token}\n").as_bytes()).map_err(state_err("write the token", path))
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
    let p = dir.join(RECORD);
    let bytes = serde_json::to_vec_pretty(rec).map_err(|e| BackendError::State {
        action: "encode the record",
        path: p.clone(),
        source: io::Error::new(io::ErrorKind::InvalidData, e),
    })?;
    write_private(&p, &bytes).map_err(state_err("write the record", &p))
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

/// A new Sandbox ID and its state directory under `root`, 0700 whatever
/// the umask. `create` (not recursive) fails on an existing directory,
/// so an ID is never reused, even on a collision.
pub fn new_state_dir(root: &Path) -> Result<(SandboxId, PathBuf), BackendError> {
    for _ in 0..8 {
        let id = format!(
            "sb-{}",
            random_hex(12).map_err(state_err("read random bytes for an ID in", root))?
        );
        let dir = root.join(&id);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // Root-only whatever the umask: commands must not traverse it.
                fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
                    .map_err(state_err("chmod 0700", &dir))?;
                return Ok((SandboxId(id), dir));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(state_err("create the state directory", &dir)(e)),
        }
    }
    Err(invalid("sandbox ID", "8 random IDs in a row were taken"))
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The last `lines` lines of a file, reading at most its last 64 KiB so
/// that a huge log never costs more than that (B5: bounded). A missing
/// file has no lines.
pub fn tail(path: &Path, lines: usize) -> io::Result<String> {
    match tail_within(path, lines, 64 * 1024) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(String::new()),
        r => r,
    }
}

/// The last `lines` lines of the file at `path`, reading at most its last
/// `max_bytes` (a line cut by that bound is dropped), joined by newlines
/// without a final one. The one log tail: the backends' ([`tail`]) and
/// the daemon's `GET /v1/logs`.
pub fn tail_within(path: &Path, lines: usize, max_bytes: u64) -> io::Result<String> {
    let mut f = fs::File::open(path)?;
    let len = f.metadata()?.len();
    let start = len.saturating_sub(max_bytes);
    f.seek(SeekFrom::Start(start))?;
    let mut buf = Vec::new();
    f.take(max_bytes).read_to_end(&mut buf)?;
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    // A cut first line is partial: drop it when we did not start at 0.
    let skip = usize::from(start > 0 && all.len() > 1);
    let from = all.len().saturating_sub(lines).max(skip);
    Ok(all[from..].join("\n"))
}

/// Mount points below `dir` in this (host) mount namespace. The backends
/// make none there (the native backend's binds live in the Sandbox's
/// namespace only, docker's in the container's); a non-empty answer means
/// something else did, and removing the directory recursively could then
/// delete through a mount, e.g. into the Store.
pub fn mounts_below(dir: &Path) -> Result<Vec<PathBuf>, BackendError> {
    let p = Path::new(crate::mounts::MOUNTINFO);
    let entries = crate::mounts::read_mountinfo().map_err(state_err("read", p))?;
    Ok(entries
        .into_iter()
        .map(|m| m.mount_point)
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

/// B9's end, the same for every backend once its Sandbox is stopped:
/// refuse while anything is mounted below `dir` ([`refuse_mounts_below`],
/// `hint` ends that message), remove the Store's mount point `store_mp`
/// first and non-recursively (if the Store were ever there, this fails
/// instead of deleting it), then the state directory at any depth
/// ([`remove_tree`]: commands write a tree of any depth into the scratch
/// space, which `remove_dir_all` would walk by recursion).
pub fn delete_state_dir(
    id: &SandboxId,
    dir: &Path,
    store_mp: &Path,
    hint: &str,
) -> Result<(), BackendError> {
    refuse_mounts_below(id, dir, hint)?;
    match fs::remove_dir(store_mp) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(state_err("remove the Store mount point", store_mp)(e)),
    }
    remove_tree(dir).map_err(state_err("remove the state directory", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_ids_are_valid() {
        let r = random_hex(12).unwrap();
        assert!(super::super::validate::valid_id(&format!("sb-{r}")));
        let t = new_token().unwrap();
        assert_eq!(t.len(), 64);
        assert!(t.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn private_writes_replace_atomically() {
        use std::os::unix::fs::MetadataExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        write_private(&p, b"one").unwrap();
        write_private(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        assert!(!p.with_extension("tmp").exists());
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
}
