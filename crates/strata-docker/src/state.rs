//! The docker backend's host-side state: one private directory per Sandbox
//! under the state root, bound into the container at
//! [`INSIDE_ROOT`](crate::container::INSIDE_ROOT). Layout of
//! `<root>/<id>/` (root-only, 0700):
//!
//! | file | what | written by |
//! |---|---|---|
//! | `sandbox.json` (0600) | the [`Record`] (B8, B10) | the backend, on the host |
//! | `token` (0600) | the bearer token, 64 hex digits (B3, B6) | the backend at create |
//! | `config.json` (0600) | the daemon's config, opaque bytes (B3) | archive upload |
//! | `bin/strata` (0755) | the static strata binary (B3) | archive upload |
//! | `daemon.log` (0600) | the daemon's log (B5) | the daemon |
//! | `daemon.sock` | the daemon's Unix socket (B6) | the daemon |
//! | `store/` | mount point of the Store (B2) | the Engine binds it |
//! | `scratch/` | the daemon's Workspace scratch space (kept across restarts) | the daemon |
//! | `run.lock` | `flock`ed by start and restart: one run at a time | the backend |
//!
//! The container's stdout and stderr (the startup marker, early errors)
//! are the Engine's container log, read through the API.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use strata_sandbox::{CreateRequest, DaemonInstall, DaemonPaths, SandboxId};

use crate::container::INSIDE_ROOT;

/// The persistent record of one docker Sandbox.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub id: SandboxId,
    pub name: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub created_unix_ms: u64,
    /// The request, with the Store resolved and the image pinned.
    pub config: CreateRequest,
    /// The image as requested and the image ID it resolved to at create.
    pub image_ref: String,
    pub image_id: String,
    /// The full 64-hex container ID.
    pub container: String,
    /// The static binary uploaded at install.
    pub exe_host: PathBuf,
    pub install: Option<DaemonInstall>,
    /// Set once start was asked for (one start per Sandbox; later runs
    /// are restarts of the same container).
    pub started: bool,
    pub marker: Option<String>,
    /// The daemon's socket, host path.
    pub socket: Option<PathBuf>,
}

/// The daemon's files as the daemon sees them.
pub(crate) fn inside_paths() -> DaemonPaths {
    let r = Path::new(INSIDE_ROOT);
    DaemonPaths {
        exe: r.join("bin/strata"),
        config: r.join("config.json"),
        token_file: r.join("token"),
        socket: r.join("daemon.sock"),
        log_file: r.join("daemon.log"),
        store: r.join("store"),
        scratch_dir: r.join("scratch"),
        state_dir: r.to_path_buf(),
    }
}

/// A path the daemon names (under [`INSIDE_ROOT`]) as the host sees it.
pub(crate) fn to_host(dir: &Path, inside: &Path) -> Option<PathBuf> {
    let rel = inside.strip_prefix(INSIDE_ROOT).ok()?;
    if rel
        .components()
        .any(|c| !matches!(c, std::path::Component::Normal(_)))
    {
        return None;
    }
    Some(dir.join(rel))
}

/// A tar of the daemon's binary (0755) and config (0600), both owned by
/// root, for `PUT /containers/{id}/archive?path=INSIDE_ROOT` (the Engine
/// extracts it into the bind-mounted directory, keeping the modes).
pub(crate) fn install_tar(exe: &Path, config: &[u8]) -> io::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o700);
    dir.set_uid(0);
    dir.set_gid(0);
    dir.set_size(0);
    dir.set_mtime(0);
    b.append_data(&mut dir, "bin/", io::empty())?;
    let bin = std::fs::read(exe)?;
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o755);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(bin.len() as u64);
    h.set_mtime(0);
    b.append_data(&mut h, "bin/strata", &bin[..])?;
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Regular);
    h.set_mode(0o600);
    h.set_uid(0);
    h.set_gid(0);
    h.set_size(config.len() as u64);
    h.set_mtime(0);
    b.append_data(&mut h, "config.json", config)?;
    b.into_inner()
}

/// A full container ID: 64 lowercase hex digits.
pub(crate) fn valid_container_id(id: &str) -> bool {
    id.len() == 64
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inside_paths_map_to_the_host_directory() {
        let d = Path::new("/var/lib/strata/docker/sb-1");
        let p = inside_paths();
        assert_eq!(to_host(d, &p.socket), Some(d.join("daemon.sock")));
        assert_eq!(to_host(d, Path::new("/etc/passwd")), None);
        assert_eq!(to_host(d, Path::new("/run/strata/../x")), None);
    }

    #[test]
    fn the_install_tar_keeps_modes() {
        let d = tempfile::tempdir().unwrap();
        let exe = d.path().join("exe");
        std::fs::write(&exe, b"\x7fELF...").unwrap();
        let t = install_tar(&exe, b"{}").unwrap();
        let mut a = tar::Archive::new(&t[..]);
        let got: Vec<(String, u32)> = a
            .entries()
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.path().unwrap().display().to_string(),
                    e.header().mode().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("bin/".to_string(), 0o700),
                ("bin/strata".to_string(), 0o755),
                ("config.json".to_string(), 0o600)
            ]
        );
    }

    #[test]
    fn container_ids_are_full() {
        assert!(valid_container_id(&"a".repeat(64)));
        assert!(!valid_container_id(&"a".repeat(12)));
        assert!(!valid_container_id(&"A".repeat(64)));
    }
}
