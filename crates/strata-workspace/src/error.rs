//! Errors of the Workspace layer. Each variant says what was being done and
//! to what, so that a CLI can print it as one sentence.

use std::path::PathBuf;
use strata_store::{ObjectId, StoreError};

pub type Result<T, E = WsError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum WsError {
    #[error("store error while trying to {action}: {source}")]
    Store {
        action: &'static str,
        #[source]
        source: Box<StoreError>,
    },

    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("workspace journal {path}: could not {action}: {source}")]
    Journal {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("workspace journal {path} is unreadable: {reason}")]
    CorruptJournal { path: PathBuf, reason: String },

    #[error("no workspace {id} under {scratch_root}")]
    NotFound { id: String, scratch_root: PathBuf },

    #[error("workspace {id} is in use by another process or handle (lock {path} is held); stop that process (or unmount it) first")]
    Locked { id: String, path: PathBuf },

    #[error("workspace {id} is mounted; unmount it first")]
    Mounted { id: String },

    #[error("cannot mount at {path}: {reason}")]
    Mountpoint { path: PathBuf, reason: String },

    #[error("branch {branch} moved: the workspace is based on {base} but the head is now {actual}; nothing was committed (rebase is not supported yet: discard or re-create the workspace from the new head)")]
    Conflict {
        branch: String,
        base: ObjectId,
        actual: ObjectId,
    },

    #[error("REF {reference:?} is not a branch: a workspace needs a branch to commit to")]
    NotABranch { reference: String },

    #[error("FUSE over io_uring was asked for (STRATA_FUSE_TRANSPORT=uring or MountOptions::transport) but is unusable: {reason}")]
    UringUnusable { reason: String },

    #[error("FUSE over io_uring at {path}: {source}")]
    Uring {
        path: PathBuf,
        source: crate::uring::UringError,
    },

    #[error("invalid input: {0}")]
    Invalid(String),
}

impl WsError {
    pub(crate) fn store(action: &'static str) -> impl FnOnce(StoreError) -> WsError {
        move |source| WsError::Store {
            action,
            source: Box::new(source),
        }
    }

    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> WsError {
        let path = path.into();
        move |source| WsError::Io {
            action,
            path,
            source,
        }
    }
}
