//! strata-workspace: a writable FUSE projection of a branch of a strata
//! Store, with status, commit and discard. See API.md for the contract.
//!
//! Layers: the base commit's tree is the lower layer, read lazily from the
//! Store; changed and new file data live in a per-Workspace scratch
//! directory (the upper layer) and every metadata change is journalled in
//! SQLite next to it, so that a Workspace survives the death of its server.
// unsafe only in uring/ring.rs (the io_uring transport's buffers and
// SQEs), each block with its SAFETY comment.
#![deny(unsafe_code)]

mod cache;
mod commit;
mod config;
mod dir;
mod error;
mod fs;
mod journal;
mod killpriv;
mod mount_handle;
mod node;
mod open;
mod ops;
mod pool;
mod ranges;
mod serve;
mod state;
mod status;
pub mod uring;
mod workspace;

pub use commit::{Change, ChangeKind, CommitOutcome};
pub use config::{IdMapping, MountOptions, WorkspaceOptions};
pub use error::{Result, WsError};
pub use mount_handle::{MountHandle, RingCounter};
pub use uring::{Transport, UringProbe};
pub use workspace::Workspace;
