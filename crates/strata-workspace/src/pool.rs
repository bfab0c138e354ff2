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
//!
//! Emptying happens after the state lock is released (`Reaped`): the
//! request that reaped a node (nearly always a FORGET, on a /dev/fuse
//! session thread) takes the numbers out under the lock and opens each file
//! with O_TRUNC (or unlinks it) without the lock, then puts the emptied
//! numbers in the pool under the lock again. Done under the lock, those
//! system calls (~10 us per file) made the ring thread that served the
//! client's next request wait for the lock: `rm -rf` of 10,000 files took
//! 429-595 ms with them under the lock and 331-399 ms with the emptying
//! left out altogether (docs/benchmarks.md, "rm -rf: the upper file
//! emptied outside the lock"). A number taken out is in neither the pool
//! nor the node table, so nothing can reuse it before it is emptied.

use crate::state::State;
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

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
    /// Reaped numbers whose upper files are still to be emptied or
    /// unlinked, once the lock is released (`State::take_reaped`).
    reaped: Vec<u64>,
    /// Numbers taken out to be emptied and pooled, not back yet: counted
    /// against `POOL_MAX` so that concurrent disposals keep the bound.
    emptying: usize,
}

/// Upper files of reaped nodes, taken out of the state to be disposed of
/// without its lock (`WsFs::dispose_reaped`).
#[must_use = "the upper files must be disposed of (WsFs::dispose_reaped)"]
pub(crate) struct Reaped {
    dir: PathBuf,
    /// To be emptied and pooled.
    keep: Vec<u64>,
    /// To be unlinked: the pool is full.
    unlink: Vec<u64>,
}

impl Reaped {
    pub(crate) fn is_empty(&self) -> bool {
        self.keep.is_empty() && self.unlink.is_empty()
    }

    /// Empty the files to keep, unlink the others (and any that cannot be
    /// emptied). Returns the numbers of the emptied files with how many
    /// were meant to be kept, for `State::pool_emptied`.
    pub(crate) fn dispose(self) -> (Vec<u64>, usize) {
        let path = |ino: u64| self.dir.join(ino.to_string());
        let meant = self.keep.len();
        let mut emptied = Vec::with_capacity(meant);
        for ino in self.keep {
            // Emptied now: the pool never holds data, and the blocks are
            // freed as an unlink would (an open with O_TRUNC is one system
            // call more than the unlink it replaces).
            match File::options().write(true).truncate(true).open(path(ino)) {
                Ok(_) => emptied.push(ino),
                Err(_) => {
                    let _ = std::fs::remove_file(path(ino));
                }
            }
        }
        for ino in self.unlink {
            let _ = std::fs::remove_file(path(ino));
        }
        (emptied, meant)
    }
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

    /// The upper file of reaped node `ino` is to be disposed of: emptied
    /// in place and its number pooled, or unlinked when the pool is full or
    /// emptying fails. Done after the lock is released (`take_reaped`).
    pub(crate) fn free_upper_file(&mut self, ino: u64) {
        self.pool.reaped.push(ino);
    }

    /// The upper files reaped since the last call, to dispose of without
    /// the lock. Decides here which go to the pool, so the pool's bound
    /// holds however many disposals run at once.
    pub(crate) fn take_reaped(&mut self) -> Reaped {
        let mut unlink = std::mem::take(&mut self.pool.reaped);
        let room = POOL_MAX.saturating_sub(self.pool.free.len() + self.pool.emptying);
        let keep: Vec<u64> = unlink.drain(..room.min(unlink.len())).collect();
        self.pool.emptying += keep.len();
        Reaped {
            dir: match keep.is_empty() && unlink.is_empty() {
                true => PathBuf::new(),
                false => self.upper_dir.clone(),
            },
            keep,
            unlink,
        }
    }

    /// Put the numbers a `Reaped::dispose` emptied in the pool.
    pub(crate) fn pool_emptied(&mut self, emptied: Vec<u64>, meant: usize) {
        self.pool.emptying -= meant;
        self.pool.free.extend(emptied);
    }

    /// At open: adopt the upper file `upper/<ino>` of an inode the journal
    /// does not know (a node deleted before a crash or a clean stop, or
    /// pooled): emptied and pooled, or deleted beyond the bound, by one
    /// `dispose_adopted` after the last one.
    pub(crate) fn adopt_upper_file(&mut self, ino: u64) {
        self.next_ino = self.next_ino.max(ino + 1);
        self.free_upper_file(ino);
    }

    /// At open, after `adopt_upper_file` for every file: dispose of them
    /// all at once (nobody else holds the state yet, so no lock to leave).
    pub(crate) fn dispose_adopted(&mut self) {
        let (emptied, meant) = self.take_reaped().dispose();
        self.pool_emptied(emptied, meant);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `dispose` does to each file, read back from the directory: the
    /// kept ones emptied in place and returned, the others gone, and a kept
    /// one that cannot be opened (already missing) not returned.
    #[test]
    fn dispose_empties_the_kept_and_unlinks_the_rest() {
        let d = tempfile::tempdir().unwrap();
        for ino in [2u64, 3, 4] {
            std::fs::write(d.path().join(ino.to_string()), b"old bytes").unwrap();
        }
        let r = Reaped {
            dir: d.path().to_path_buf(),
            keep: vec![2, 9],
            unlink: vec![3],
        };
        assert!(!r.is_empty());
        let (emptied, meant) = r.dispose();
        assert_eq!((emptied, meant), (vec![2], 2));
        assert_eq!(std::fs::read(d.path().join("2")).unwrap(), b"");
        assert!(!d.path().join("3").exists(), "unlinked");
        assert!(
            !d.path().join("9").exists(),
            "a missing file is not created"
        );
        assert_eq!(std::fs::read(d.path().join("4")).unwrap(), b"old bytes");
    }
}
