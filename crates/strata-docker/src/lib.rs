//! strata-docker: the docker arm of strata's Sandbox [`Backend`] contract
//! (docs/design.md §3, B1–B10) on the Docker Engine API, spoken directly over the
//! Engine's Unix socket ([`engine`]); it never runs the `docker` CLI.
//!
//! | step | here |
//! |---|---|
//! | B1 create: image pinned by ID, labels `dev.strata.*`, full 64-hex container ID, a taken name refused | [`DockerBackend`]'s `create`, [`container::create_body`] |
//! | B2 the Store bound into the container (below a 0700 root-only directory) | [`container::create_body`] |
//! | B3 the static strata binary (0755) and the daemon's config (0600) uploaded through the archive API into the stopped container | `install_daemon`, [`exe`] |
//! | B4 start with `/dev/fuse`, CAP_SYS_ADMIN, no-new-privileges, Docker's init, read-only root, tmpfs /tmp; inspect after start and refuse anything widened | `start`, [`container::verify`], [`container::verify_process`] |
//! | B5 the daemon's startup marker from the container's stdout, with a deadline; a bounded log tail on failure | `start`, `log_tail` |
//! | B4+B5 again after the daemon died: `POST /containers/{id}/start` on the same stopped container (same binds, so the same token, config, log and Workspace scratch), verified and awaited as at start; the marker is the first stdout line after the earlier runs' | `restart` |
//! | B6 the daemon's Unix socket in the bind-mounted private directory, reached from the host at its host path | `start` |
//! | B7 execs through the daemon, exactly as native | (the daemon) |
//! | B8 reopen by exact ID, B9 stop then remove (never the Store, never a volume), B10 list by label | `open`, `stop`/`delete`, `list` |
//!
//! Needs root on the host (the files the daemon checks are owned by root
//! and 0600, and the host reads its token) and a local Engine.

#![forbid(unsafe_code)]

mod backend;
pub mod container;
pub mod engine;
pub mod exe;
mod startup;
mod state;

use std::path::PathBuf;
use std::time::Duration;

pub use backend::DockerBackend;
pub use engine::{Engine, API_VERSION, DEFAULT_SOCKET};
pub use exe::{check_static, resolve_static_exe, STATIC_EXE_ENV};

/// Failures of the Engine client and of the docker backend's own checks;
/// [`DockerBackend`]'s contract methods wrap them into
/// [`strata_sandbox::BackendError`] with the Sandbox and step.
#[derive(Debug, thiserror::Error)]
pub enum DockerError {
    #[error("no Docker Engine at {socket}: {source}; start dockerd (e.g. scripts/dockerd.sh start) or point DOCKER_HOST=unix://PATH at its socket")]
    NoEngine {
        socket: PathBuf,
        source: std::io::Error,
    },
    #[error("the Docker Engine at {socket} speaks API {have}; strata needs {need} or newer (Docker 20.10+): upgrade it")]
    ApiTooOld {
        socket: PathBuf,
        have: String,
        need: String,
    },
    #[error("Docker Engine: {action}: HTTP {status}: {message}")]
    Engine {
        action: String,
        status: u16,
        message: String,
    },
    #[error("Docker Engine: {action}: {message}")]
    Protocol { action: String, message: String },
    #[error("Docker Engine: {action}: no answer within {after:?}")]
    Timeout { action: String, after: Duration },
    #[error("{what}: {message}")]
    Unsupported { what: String, message: String },
    #[error("daemon binary {path}: {message}")]
    Exe { path: PathBuf, message: String },
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

pub use strata_sandbox::Backend;
