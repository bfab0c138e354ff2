//! Reuse of upper files: a deleted file's upper file `upper/<ino>` is
//! emptied and kept where it is, and the next created file takes its inode
//! number, so it needs neither a new ext4 inode nor a rename.
//!
//! Why not unlink and create: on a journal-less ext4 (the root filesystem
//! of these machines) inode allocation skips every inode freed in the last
//! 5 s (300 s while its inode-table block is dirty), testing them one by
//! one (find_inode_bit() -> recently_deleted() in fs/ext4/ialloc.c). A
//! daemon that creates and deletes thousands of upper files pays
//! O(recently deleted) per create: a profile of create+stat+unlink showed
//! 39% of the daemon's CPU there. Why not a `free/` directory and renames
//! (the first version): two renames per file between two large ext4
//! directories cost ~18 us each, a third of the daemon's system time.
//!
//! Safe to reuse the number: a node is reaped only when the kernel has
//! forgotten it (FORGET: the kernel evicted its inode, so no dentry, open
//! file or passthrough mapping refers to that node id any more; a backing
//! file holds the FUSE path it was opened for, backing_file_open() does
//! path_get(user_path), which keeps the FUSE inode and so the node alive),
//! no handle is open and no link is left. Node ids may be reused after
//! FORGET (FUSE protocol; the kernel waits for an inode still being freed,
//! iget5_locked()). What the daemon itself keeps by number is guarded:
//! READDIRPLUS answers an entry of an old listing only if the node still
//! has that name (dir.rs), and no number is reused while a commit hashes
//! files by path outside the lock (`hashing`, commit.rs).
//!
//! Crash safety: the journal never names a free number (its node was
//! deleted from the journal when its last link went). A file is emptied
//! before its number enters the pool; a crash leaves upper files of unknown
//! inodes, which `Workspace::open` empties and adopts (or deletes beyond
//! the bound).

use crate::state::State;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Directory of the first version's pool; files left there by an older
/// server are deleted at open.
const OLD_FREE: &str = "free";

/// Most files kept: enough for what a burst of deletes frees before the
/// next burst of creates (`rm -rf` of a 10,000-file tree, then `tar x`),
/// and a bound on the empty inodes a Workspace holds. Beyond it, files are
/// unlinked as before.
pub(crate) const POOL_MAX: usize = 16_384;

#[derive(Default)]
pub(crate) struct FreePool {
    /// Inode numbers whose `upper/<ino>` is an empty file nobody uses.
    pub(crate) free: Vec<u64>,
    /// Set while a commit hashes upper files by path without the lock:
    /// no number is reused then (its hash would be taken for the new file).
    pub(crate) hashing: bool,
}

impl FreePool {
    /// An empty pool for workspace directory `ws_dir`; the first version's
    /// `free/` directory, if any, is removed.
    pub(crate) fn open(ws_dir: &Path) -> std::io::Result<FreePool> {
        let old = ws_dir.join(OLD_FREE);
        if old.exists() {
            std::fs::remove_dir_all(&old)?;
        }
        Ok(FreePool::default())
    }
}

impl State {
    /// A number for a new regular file whose upper file `new_upper_file`
    /// will open: a freed one when there is one, else a fresh one.
    /// The bool says which.
    pub(crate) fn alloc_file_ino(&mut self) -> (u64, bool) {
        if !self.pool.hashing {
            if let Some(ino) = self.pool.free.pop() {
                return (ino, true);
            }
        }
        let ino = self.next_ino;
        self.next_ino += 1;
        (ino, false)
    }

    /// Open (create, or reuse when `reused`) the empty upper file of new
    /// node `ino`.
    ///
    /// A reused file is not opened with O_TRUNC: truncating an ext4 file,
    /// even an empty one to 0, sets EXT4_STATE_DA_ALLOC_CLOSE (ext4_truncate(),
    /// the "auto_da_alloc" replace-via-truncate heuristic), and the next
    /// close then allocates and flushes the blocks written meanwhile
    /// (ext4_release_file() -> ext4_alloc_da_blocks()). The byte a client
    /// writes through passthrough would be flushed at RELEASE, and freeing
    /// that block when the file is deleted, on this journal-less ext4
    /// mounted with discard, waits for a synchronous TRIM (ext4_free_blocks()
    /// -> blkdev_issue_discard()): ~70 us per file in a profile. Pool files
    /// are empty: `free_upper_file` empties a file before its number enters
    /// the pool (and unlinks it when it cannot), and nothing writes to a
    /// reaped node's file (no handle, no backing file, no mapping is left).
    pub(crate) fn new_upper_file(&mut self, ino: u64, reused: bool) -> std::io::Result<File> {
        File::options()
            .read(true)
            .write(true)
            .create(true)
            .truncate(!reused)
            .mode(0o600)
            .open(self.upper_path(ino))
    }

    /// Dispose of the upper file of reaped node `ino`: emptied in place and
    /// its number pooled, or unlinked when the pool is full or emptying
    /// fails.
    pub(crate) fn free_upper_file(&mut self, ino: u64) {
        let path = self.upper_path(ino);
        if self.pool.free.len() < POOL_MAX {
            // Emptied now: the pool never holds data, and the blocks are
            // freed as an unlink would (an open with O_TRUNC is one system
            // call more than the unlink it replaces).
            if File::options()
                .write(true)
                .truncate(true)
                .open(&path)
                .is_ok()
            {
                self.pool.free.push(ino);
                return;
            }
        }
        let _ = std::fs::remove_file(&path);
    }

    /// At open: adopt the upper file `upper/<ino>` of an inode the journal
    /// does not know (a node deleted before a crash or a clean stop, or
    /// pooled): emptied and pooled, or deleted beyond the bound.
    pub(crate) fn adopt_upper_file(&mut self, ino: u64) {
        self.next_ino = self.next_ino.max(ino + 1);
        self.free_upper_file(ino);
    }
}
