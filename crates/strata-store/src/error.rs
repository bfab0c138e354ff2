//! Errors of the Store. Every variant says what was being done and to what,
//! so that a caller can print it as one or two sentences.

use crate::id::ObjectId;
use std::path::PathBuf;

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("no Store at {path}: {reason}. Create one with `strata init` (or pass --store PATH)")]
    NoStore { path: PathBuf, reason: String },

    #[error("{path} is not a strata Store: {reason}. Point --store at a Store directory or an empty one")]
    NotAStore { path: PathBuf, reason: String },

    #[error("the Store at {path} has format version {found}, newer than this strata supports ({supported}). Upgrade strata to open it")]
    NewerVersion {
        path: PathBuf,
        found: i64,
        supported: i64,
    },

    #[error("refusing to keep a Store on {fstype} at {path}: SQLite's WAL locking cannot be trusted there. Use a local ext4, xfs, btrfs or tmpfs directory, or pass --allow-any-fs if you know better")]
    UnsupportedFilesystem { path: PathBuf, fstype: String },

    #[error("could not {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("database error while trying to {action}: {source}")]
    Sqlite {
        action: &'static str,
        #[source]
        source: rusqlite::Error,
    },

    #[error("the Store is busy ({action}): another process holds the write lock; retry shortly")]
    Busy { action: &'static str },

    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        what: &'static str,
        name: String,
        reason: &'static str,
    },

    #[error("{what} not found: {name}")]
    NotFound { what: &'static str, name: String },

    #[error("{what} already exists: {name}")]
    AlreadyExists { what: &'static str, name: String },

    #[error(
        "ref {prefix:?} is ambiguous: it matches commits {candidates:?}; give more hex digits"
    )]
    AmbiguousRef {
        prefix: String,
        candidates: Vec<String>,
    },

    #[error("branch {project}/{branch} moved: expected head {expected}, actual head {actual}")]
    Conflict {
        project: String,
        branch: String,
        expected: ObjectId,
        actual: ObjectId,
    },

    #[error("object {id} is corrupt or unreadable: {reason}. Run `strata fsck` for a full report")]
    Corrupt { id: ObjectId, reason: String },

    #[error("object {id} ({kind}) is missing from the Store")]
    Missing { id: ObjectId, kind: &'static str },

    #[error("{path} is not empty; export refuses to mix trees. Choose an empty directory or pass --force")]
    NotEmpty { path: PathBuf },

    #[error("{source_dir} contains the Store itself ({store}); snapshotting it would recurse. Move the Store outside the tree")]
    SourceContainsStore { source_dir: PathBuf, store: PathBuf },

    #[error("the disk holding the Store is full ({action}); nothing was half-committed. Free space (or run `strata gc`) and retry")]
    DiskFull { action: &'static str },

    #[error("invalid input: {0}")]
    Invalid(String),
}

impl StoreError {
    pub(crate) fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        StoreError::Io {
            action,
            path: path.into(),
            source,
        }
    }

    /// Map a SQLite error, turning lock timeouts into the typed `Busy`.
    pub(crate) fn sql(action: &'static str, source: rusqlite::Error) -> Self {
        if let rusqlite::Error::SqliteFailure(e, _) = &source {
            if matches!(
                e.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) {
                return StoreError::Busy { action };
            }
            if e.code == rusqlite::ErrorCode::DiskFull {
                return StoreError::DiskFull { action };
            }
        }
        StoreError::Sqlite { action, source }
    }

    /// True when the error is worth retrying (a lost lock race).
    pub fn is_busy(&self) -> bool {
        matches!(self, StoreError::Busy { .. })
    }
}

/// Attach an action to rusqlite results.
pub(crate) trait SqlCtx<T> {
    fn ctx(self, action: &'static str) -> Result<T>;
}

impl<T> SqlCtx<T> for std::result::Result<T, rusqlite::Error> {
    fn ctx(self, action: &'static str) -> Result<T> {
        self.map_err(|e| StoreError::sql(action, e))
    }
}
