//! Directory listing handlers: opendir snapshots the listing into a
//! handle; readdir and readdirplus page through it.

use crate::state::{Handle, R};
use fuser::{Errno, FileAttr, FileType, FopenFlags};

/// Adds one READDIR entry (ino, next offset, kind, name) to the reply;
/// true when the reply is full and the entry was not added.
pub(crate) type AddEntry<'a> = &'a mut dyn FnMut(u64, u64, FileType, &[u8]) -> bool;
/// Adds one READDIRPLUS entry (ino, next offset, name, attributes); true
/// when full.
pub(crate) type AddEntryPlus<'a> = &'a mut dyn FnMut(u64, u64, &[u8], &FileAttr) -> bool;

impl crate::fs::WsFs {
    /// OPENDIR: the listing is snapshotted into the handle.
    pub(crate) fn op_opendir(&self, ino: u64) -> R<(u64, FopenFlags)> {
        let mut st = self.st();
        let parent = st.node(ino)?.parent();
        let mut entries = vec![
            (ino, FileType::Directory, b".".to_vec()),
            (parent, FileType::Directory, b"..".to_vec()),
        ];
        entries.extend(st.read_dir(ino)?);
        let fh = st.new_fh(Handle::Dir { entries });
        // The kernel keeps the listing in its readdir cache
        // (FOPEN_CACHE_DIR) across opens (FOPEN_KEEP_CACHE) and drops it
        // when the directory changes through this mount (its version
        // and mtime move, fuse_dir_changed()), which is every change.
        Ok((
            fh,
            FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
        ))
    }

    /// READDIR from `offset`: `add(ino, next offset, kind, name)` for each
    /// entry until it returns true (the transport's buffer is full).
    pub(crate) fn op_readdir(&self, fh: u64, offset: u64, add: AddEntry) -> R<()> {
        let st = self.st();
        let Some(Handle::Dir { entries }) = st.handles.get(&fh) else {
            return Err(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if add(*ino, (i + 1) as u64, *kind, name) {
                break;
            }
        }
        Ok(())
    }

    /// READDIR plus LOOKUP in one reply (FUSE_DO_READDIRPLUS with
    /// FUSE_READDIRPLUS_AUTO: the kernel asks for it when a listing is
    /// followed by lookups, as in `ls -l`, `git status` on a cold tree or
    /// `rm -rf`). Each entry returned with a node id counts as one lookup
    /// for the kernel (fuse_direntplus_link(); "." and ".." excepted), so it
    /// is counted here as one too, or FORGET would drop the node early.
    /// `add(ino, next offset, name, attributes)` returns true when full.
    pub(crate) fn op_readdirplus(
        &self,
        dir: u64,
        fh: u64,
        offset: u64,
        add: AddEntryPlus,
    ) -> R<()> {
        let mut st = self.st();
        if !matches!(st.handles.get(&fh), Some(Handle::Dir { .. })) {
            return Err(Errno::EBADF);
        }
        // One entry cloned at a time (attr() needs the state mutably): a
        // reply holds a few dozen entries, and cloning the whole rest of a
        // large listing for each one made listing it quadratic.
        for i in offset as usize.. {
            let Some(Handle::Dir { entries }) = st.handles.get(&fh) else {
                break;
            };
            let Some((ino, _, name)) = entries.get(i).cloned() else {
                break;
            };
            let off = i as u64 + 1;
            let dot = name == b"." || name == b"..";
            // A name gone since opendir is skipped: its node may be gone
            // too, or its number reused by a new file (pool.rs), which must
            // not appear under the old name.
            let linked = st
                .node(ino)
                .is_ok_and(|n| dot || n.links.iter().any(|l| l.0 == dir && l.1 == name));
            if !linked {
                continue;
            }
            let Ok(attr) = st.attr(ino) else { continue };
            if add(ino, off, &name, &attr) {
                break;
            }
            if !dot {
                if let Ok(n) = st.node_mut(ino) {
                    n.lookups += 1;
                }
            }
        }
        Ok(())
    }
}
