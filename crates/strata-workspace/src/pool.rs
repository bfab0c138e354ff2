//! Reuse of upper files: a deleted file's upper file is emptied and kept in
//! `<workspace>/free/` for the next created file, instead of unlinked.
//!
//! Why: on a journal-less ext4 (the root filesystem of these machines) inode
//! allocation skips every inode freed in the last 5 s (300 s while its
//! inode-table block is dirty), testing them one by one
//! (find_inode_bit() -> recently_deleted() in fs/ext4/ialloc.c). A daemon
//! that creates and deletes thousands of upper files pays O(recently
//! deleted) per create: a profile of create+stat+unlink showed 39% of the
//! daemon's CPU there. A rename allocates no inode.
//!
//! Safe to reuse: a node is reaped only when the kernel has forgotten it
//! (no lookups), no handle is open and no link is left. Nothing in the
//! kernel can reach the upper file then: a passthrough mapping holds a
//! backing file, and a backing file holds the FUSE path it was opened for
//! (backing_file_open() does path_get(user_path)), which keeps the FUSE
//! inode, and so the node, alive. A commit that was hashing the old file by
//! path may read the new one, but the old node is in no tree any more, so
//! what it read is never used.
//!
//! Crash safety: the journal never names a pool file. A file is emptied
//! before it enters the pool and truncated again when it leaves it; a
//! crash between taking it and journalling its node leaves an upper file
//! of an unknown inode, which `Workspace::open` deletes as before. Pool
//! files found at open are adopted.

use crate::state::State;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Directory of the pool, next to `upper/` (same filesystem, so a rename).
pub(crate) const FREE: &str = "free";

/// Most files kept: enough for what a burst of deletes frees before the
/// next burst of creates (`rm -rf` of a 10,000-file tree, then `tar x`),
/// and a bound on the empty inodes a Workspace holds. Beyond it, files are
/// unlinked as before.
const POOL_MAX: usize = 16_384;

pub(crate) struct FreePool {
    dir: PathBuf,
    free: Vec<u64>,
    next: u64,
}

impl FreePool {
    /// The pool of workspace directory `ws_dir`, created if missing; files
    /// left by an earlier server are adopted.
    pub(crate) fn open(ws_dir: &Path) -> std::io::Result<FreePool> {
        let dir = ws_dir.join(FREE);
        std::fs::create_dir_all(&dir)?;
        let mut free = Vec::new();
        for e in std::fs::read_dir(&dir)?.flatten() {
            match e.file_name().to_str().and_then(|s| s.parse::<u64>().ok()) {
                Some(n) if free.len() < POOL_MAX => free.push(n),
                _ => {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        let next = free.iter().max().map_or(0, |m| m + 1);
        Ok(FreePool { dir, free, next })
    }
}

impl State {
    /// Create the empty upper file of new node `ino`, from the pool if it
    /// has one.
    pub(crate) fn new_upper_file(&mut self, ino: u64) -> std::io::Result<File> {
        let path = self.upper_path(ino);
        while let Some(n) = self.pool.free.pop() {
            let src = self.pool.dir.join(n.to_string());
            if std::fs::rename(&src, &path).is_ok() {
                break;
            }
        }
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
    }

    /// Dispose of the upper file of reaped node `ino`: emptied into the
    /// pool, or unlinked when the pool is full or anything fails.
    pub(crate) fn free_upper_file(&mut self, ino: u64) {
        let path = self.upper_path(ino);
        if self.pool.free.len() < POOL_MAX {
            // Emptied first: the pool never holds data, and the blocks are
            // freed now (an open with O_TRUNC is one system call more than
            // the unlink it replaces).
            let emptied = File::options()
                .write(true)
                .truncate(true)
                .open(&path)
                .is_ok();
            let n = self.pool.next;
            if emptied && std::fs::rename(&path, self.pool.dir.join(n.to_string())).is_ok() {
                self.pool.next += 1;
                self.pool.free.push(n);
                return;
            }
        }
        let _ = std::fs::remove_file(&path);
    }
}
