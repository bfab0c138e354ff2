//! strata-store: the Store. One directory, one SQLite database (WAL), and
//! content-addressed immutable objects: chunks, manifest pages, trees and
//! commits; projects and branches that move only by compare-and-swap.
//!
//! This crate does no FUSE, no namespace and no process work.
#![forbid(unsafe_code)]

mod batch;
mod checkpoint;
mod chunker;
mod diff;
mod edit;
mod error;
mod export;
mod files;
mod hash_many;
mod id;
mod maint;
mod meta;
mod object;
mod objects;
mod pack;
mod parallel;
mod progress;
mod rechunk;
mod refs;
mod snapshot;
mod sql;
mod store;
mod stream;
mod trees;

pub use chunker::{Cdc, LARGE_FILE};
pub use diff::{Change, ChangeKind};
pub use edit::{split_path, EditOp, TreeEdit};
pub use error::{Result, StoreError};
pub use export::{ExportOptions, ExportReport};
pub use id::{Kind, ObjectId};
pub use maint::{FsckReport, GcReport, Stats};
pub use object::{
    Commit, ContentRef, EntryKind, FileContent, IndexEntry, Page, PageEntry, TreeEntry, TreeNode,
};
pub use progress::{NoProgress, Progress};
pub use rechunk::WriteStats;
pub use refs::{validate_name, BranchRef, Resolved};
pub use snapshot::SnapshotReport;
pub use store::{
    check_filesystem, Store, StoreOptions, WriteSession, BUSY_TIMEOUT, FORMAT_VERSION,
};

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
