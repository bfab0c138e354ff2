//! strata-store: the Store. One directory, one SQLite database (WAL), and
//! content-addressed immutable objects: chunks, manifest pages, trees and
//! commits; projects and branches that move only by compare-and-swap.
//!
//! This crate does no FUSE, no namespace and no process work.
#![forbid(unsafe_code)]

mod chunker;
mod error;
mod files;
mod id;
mod object;
mod objects;
mod refs;
mod sql;
mod store;
mod trees;

pub use chunker::{cut_points, CHUNK_AVG, CHUNK_MAX, CHUNK_MIN};
pub use error::{Result, StoreError};
pub use id::{Kind, ObjectId};
pub use object::{
    Commit, ContentRef, EntryKind, FileContent, IndexEntry, Page, PageEntry, TreeEntry, TreeNode,
};
pub use refs::{validate_name, BranchRef, Resolved};
pub use store::{check_filesystem, Store, StoreOptions, BUSY_TIMEOUT, FORMAT_VERSION};

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
