//! Directory listing handlers: opendir snapshots the listing into a
//! handle; readdir and readdirplus page through it.

use crate::fs::{WsFs, TTL};
use crate::state::Handle;
use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus,
    ReplyOpen,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

impl WsFs {
    pub(crate) fn do_opendir(&self, ino: INodeNo, reply: ReplyOpen) {
        let mut st = self.st();
        let r = (|| {
            let parent = st.node(ino.0)?.parent();
            let mut entries = vec![
                (ino.0, fuser::FileType::Directory, b".".to_vec()),
                (parent, fuser::FileType::Directory, b"..".to_vec()),
            ];
            entries.extend(st.read_dir(ino.0)?);
            Ok(st.new_fh(Handle::Dir { entries }))
        })();
        match r {
            // The kernel keeps the listing in its readdir cache
            // (FOPEN_CACHE_DIR) across opens (FOPEN_KEEP_CACHE) and drops it
            // when the directory changes through this mount (its version
            // and mtime move, fuse_dir_changed()), which is every change.
            Ok(fh) => reply.opened(
                FileHandle(fh),
                FopenFlags::FOPEN_CACHE_DIR | FopenFlags::FOPEN_KEEP_CACHE,
            ),
            Err(e) => reply.error(e),
        }
    }

    pub(crate) fn do_readdir(&self, fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let st = self.st();
        let Some(Handle::Dir { entries }) = st.handles.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        for (i, (ino, kind, name)) in entries.iter().enumerate().skip(offset as usize) {
            if reply.add(
                INodeNo(*ino),
                (i + 1) as u64,
                *kind,
                OsStr::from_bytes(name),
            ) {
                break;
            }
        }
        reply.ok();
    }

    /// READDIR plus LOOKUP in one reply (FUSE_DO_READDIRPLUS with
    /// FUSE_READDIRPLUS_AUTO: the kernel asks for it when a listing is
    /// followed by lookups, as in `ls -l`, `git status` on a cold tree or
    /// `rm -rf`). Each entry returned with a node id counts as one lookup
    /// for the kernel (fuse_direntplus_link(); "." and ".." excepted), so it
    /// is counted here as one too, or FORGET would drop the node early.
    pub(crate) fn do_readdirplus(
        &self,
        dir: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let mut st = self.st();
        if !matches!(st.handles.get(&fh.0), Some(Handle::Dir { .. })) {
            return reply.error(Errno::EBADF);
        }
        // One entry cloned at a time (attr() needs the state mutably): a
        // reply holds a few dozen entries, and cloning the whole rest of a
        // large listing for each one made listing it quadratic.
        for i in offset as usize.. {
            let Some(Handle::Dir { entries }) = st.handles.get(&fh.0) else {
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
                .is_ok_and(|n| dot || n.links.iter().any(|l| l.0 == dir.0 && l.1 == name));
            if !linked {
                continue;
            }
            let Ok(attr) = st.attr(ino) else { continue };
            if reply.add(
                INodeNo(ino),
                off,
                OsStr::from_bytes(&name),
                &TTL,
                &attr,
                Generation(0),
            ) {
                break;
            }
            if !dot {
                if let Ok(n) = st.node_mut(ino) {
                    n.lookups += 1;
                }
            }
        }
        reply.ok();
    }
}
