//! The daemon's private configuration file (JSON, mode 0600, written by the
//! backend at B3) and the bearer token file it points to.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::DaemonError;

/// Default bound of buffered, undelivered output per exec (both streams).
pub const DEFAULT_OUTPUT_BUFFER: usize = 4 << 20;

/// Default bound of one file written through `PUT /v1/workspaces/{id}/files`
/// (the body streams to disk; beyond this the answer is 413).
pub const DEFAULT_MAX_WRITE: u64 = 1 << 30;

/// Everything the daemon needs. Read from a file whose path is the only
/// argument (`__strata-daemon --config PATH`); the token itself is in
/// another 0600 file, never in argv or the environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonConfig {
    /// The Unix socket to serve on (created with mode 0600; an existing
    /// socket file at the path is replaced).
    pub socket: PathBuf,
    /// File holding the bearer token: 64 hex digits (32 random bytes).
    /// Must be mode 0600 (no group/other bits) and owned by the daemon's uid.
    pub token_file: PathBuf,
    /// Where tracing logs go (appended); `GET /v1/logs` tails it.
    pub log_file: PathBuf,
    /// The Store directory (B2).
    pub store: PathBuf,
    /// Scratch root of the Workspaces (journal + upper layer per ID).
    pub scratch_dir: PathBuf,
    /// Also serve on 127.0.0.1:PORT (0: any free port, printed in the
    /// marker). Off by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_port: Option<u16>,
    /// A binary that calls `strata_sandbox::maybe_run_internal()` first
    /// (the strata binary): re-executed as the single-threaded
    /// `__strata-exec` helper for every command. Default: this executable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_exe: Option<PathBuf>,
    /// Default mount path of a Workspace (default `/workspace`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_mount: Option<PathBuf>,
    /// Default identity of commands and owner of a Workspace root,
    /// `[uid, gid]` (default 1500:1500).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_user: Option<(u32, u32)>,
    /// Bound of buffered undelivered output per exec, bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_buffer_bytes: Option<usize>,
    /// Largest file body `PUT /v1/workspaces/{id}/files` accepts, bytes
    /// (default [`DEFAULT_MAX_WRITE`], 1 GiB); a larger one is 413 and
    /// nothing is written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_write_bytes: Option<u64>,
    /// Skip the Store's filesystem-type check.
    #[serde(default)]
    pub allow_any_fs: bool,
    /// The scratch directory is this daemon's alone (a Sandbox's): record
    /// each mounted Workspace there and, at start, mount again the ones
    /// that were mounted when the previous daemon on it ended (crashed,
    /// killed or stopped), same ID and path, uncommitted state recovered
    /// (see `recover.rs`). Off by default: host mounts run one daemon per
    /// mount on one shared scratch root, where a new daemon must not take
    /// over the others' Workspaces.
    #[serde(default)]
    pub recover_workspaces: bool,
    /// How this daemon's mounts serve FUSE requests: `dev-fuse`, `auto`
    /// (FUSE over io_uring when the kernel offers it) or `uring` (io_uring
    /// or the mount fails). Unset: the daemon's own
    /// `STRATA_FUSE_TRANSPORT`, else /dev/fuse. A Sandbox's daemon starts
    /// with a cleared environment, so the SDK writes the creator's choice
    /// here (`SandboxSpec::fuse_transport`); a host mount's daemon inherits
    /// the environment of `strata mount`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fuse_transport: Option<strata_workspace::Transport>,
}

impl DaemonConfig {
    /// A config with the defaults for everything optional.
    pub fn new(
        socket: PathBuf,
        token_file: PathBuf,
        log_file: PathBuf,
        store: PathBuf,
        scratch_dir: PathBuf,
    ) -> Self {
        DaemonConfig {
            socket,
            token_file,
            log_file,
            store,
            scratch_dir,
            tcp_port: None,
            helper_exe: None,
            default_mount: None,
            default_user: None,
            output_buffer_bytes: None,
            max_write_bytes: None,
            allow_any_fs: false,
            recover_workspaces: false,
            fuse_transport: None,
        }
    }

    /// The transport this daemon mounts with (see
    /// [`DaemonConfig::fuse_transport`]).
    pub fn transport(&self) -> strata_workspace::Transport {
        self.fuse_transport
            .unwrap_or_else(strata_workspace::Transport::from_env)
    }

    /// Read a config file. It must not be readable by group or others
    /// (it says where the token is and how the daemon is wired).
    pub fn load(path: &Path) -> Result<Self, DaemonError> {
        check_private(path, "config file")?;
        let text = std::fs::read(path).map_err(|e| DaemonError::Config {
            path: path.into(),
            message: format!("read: {e}"),
        })?;
        serde_json::from_slice(&text).map_err(|e| DaemonError::Config {
            path: path.into(),
            message: format!("parse: {e}"),
        })
    }

    pub(crate) fn default_mount(&self) -> PathBuf {
        self.default_mount
            .clone()
            .unwrap_or_else(|| PathBuf::from("/workspace"))
    }

    pub(crate) fn max_write(&self) -> u64 {
        self.max_write_bytes.unwrap_or(DEFAULT_MAX_WRITE)
    }

    pub(crate) fn default_user(&self) -> (u32, u32) {
        self.default_user
            .unwrap_or((strata_sandbox::DEFAULT_UID, strata_sandbox::DEFAULT_GID))
    }
}

/// Refuse a file with group/other permission bits or another owner.
fn check_private(path: &Path, what: &str) -> Result<(), DaemonError> {
    let meta = std::fs::metadata(path).map_err(|e| DaemonError::Config {
        path: path.into(),
        message: format!("{what}: {e}"),
    })?;
    if meta.mode() & 0o077 != 0 {
        return Err(DaemonError::Config {
            path: path.into(),
            message: format!(
                "{what} has mode {:o}; it must be private: chmod 600 it",
                meta.mode() & 0o7777
            ),
        });
    }
    let euid = rustix::process::geteuid().as_raw();
    if meta.uid() != euid {
        return Err(DaemonError::Config {
            path: path.into(),
            message: format!(
                "{what} is owned by uid {} but the daemon runs as uid {euid}",
                meta.uid()
            ),
        });
    }
    Ok(())
}

/// Read and check the bearer token file: 64 hex digits, mode 0600.
pub fn read_token(path: &Path) -> Result<String, DaemonError> {
    check_private(path, "token file")?;
    let text = std::fs::read_to_string(path).map_err(|e| DaemonError::Config {
        path: path.into(),
        message: format!("read token: {e}"),
    })?;
    let t = text.trim();
    if t.len() != 64 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(DaemonError::Config {
            path: path.into(),
            message: "the token must be 64 hex digits (32 random bytes)".into(),
        });
    }
    Ok(t.to_ascii_lowercase())
}

/// A fresh token and private (0600) writes: the ones every backend's
/// state directory uses (strata-sandbox's `backend::state`), so that a
/// token the daemon reads is made one way wherever it is made.
pub use strata_sandbox::backend::state::{new_token, write_private};

/// Write `token` to `path` with mode 0600 ([`write_private`]).
pub fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    write_private(path, format!("{token}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_workspace::Transport;

    /// The transport is written as in STRATA_FUSE_TRANSPORT, left out when
    /// unset (older daemons' configs), and a wrong name is refused at
    /// load rather than read as /dev/fuse.
    #[test]
    fn fuse_transport_round_trips_and_a_wrong_name_is_refused() {
        let p = PathBuf::from("/x");
        let mut cfg = DaemonConfig::new(p.clone(), p.clone(), p.clone(), p.clone(), p);
        let unset = serde_json::to_value(&cfg).unwrap();
        assert!(unset.get("fuse_transport").is_none(), "{unset}");
        cfg.fuse_transport = Some(Transport::IoUring);
        let mut v = serde_json::to_value(&cfg).unwrap();
        assert_eq!(v["fuse_transport"], "uring");
        let back: DaemonConfig = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back.transport(), Transport::IoUring);
        v["fuse_transport"] = "io_uring".into();
        let e = serde_json::from_value::<DaemonConfig>(v).unwrap_err();
        assert!(e.to_string().contains("io_uring"), "{e}");
    }
}
