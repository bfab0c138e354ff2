//! Namespace and metadata operations on the state (errno results, as the
//! kernel expects them). Each runs inside one journal transaction, called
//! from the FUSE handlers in `fs.rs`.

use crate::node::{now_ns, Data, Node, NodeKind, Slot, UpperInfo};
use crate::ranges::TO_END;
use crate::state::{check_name, io_errno, ws_errno, State, R};
use fuser::{Errno, FileAttr, RenameFlags, TimeOrNow};
use std::fs::{File, FileTimes};

/// Owner and mode for a new node.
pub(crate) struct NewOwner {
    pub uid: u32,
    pub gid: u32,
}

fn system_time(t: TimeOrNow) -> std::time::SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => std::time::SystemTime::now(),
    }
}

impl State {
    pub(crate) fn do_lookup(&mut self, parent: u64, name: &[u8]) -> R<FileAttr> {
        check_name(name)?;
        let ino = self.child(parent, name)?.ok_or(Errno::ENOENT)?;
        let attr = self.attr(ino)?;
        self.node_mut(ino)?.lookups += 1;
        Ok(attr)
    }

    pub(crate) fn do_forget(&mut self, ino: u64, n: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
        }
        self.maybe_reap(ino);
    }

    fn touch_dir(&mut self, dir: u64, now: i64) -> R<()> {
        let n = self.node_mut(dir)?;
        n.mtime = now;
        n.ctime = now;
        self.changed(dir)
    }

    /// Create a node named `name` in `parent`; the caller's `lookups` share
    /// is counted (the reply is an entry). A regular file's new upper file
    /// is left open in `file` (CREATE opens it at once; mknod drops it).
    pub(crate) fn do_create(
        &mut self,
        parent: u64,
        name: &[u8],
        kind: NodeKind,
        mode: u32,
        owner: NewOwner,
        data: Data,
    ) -> R<(u64, FileAttr)> {
        check_name(name)?;
        if self.child(parent, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let now = now_ns();
        let p = self.node(parent)?;
        // BSD group semantics of a setgid directory (see mkdir(2), open(2)):
        // the new node takes the directory's group, and a new directory
        // inherits the setgid bit.
        let sgid = p.perm & libc::S_ISGID != 0;
        let gid = if sgid { p.gid } else { owner.gid };
        let mut perm = mode & 0o7777;
        if sgid && kind == NodeKind::Dir {
            perm |= libc::S_ISGID;
        }
        let is_file = kind == NodeKind::File;
        let mut node = Node::new(kind, perm, owner.uid, gid, now, data);
        node.links.push((parent, name.to_vec()));
        let ino = if is_file {
            // A freed number comes with its (empty) upper file (pool.rs).
            let (ino, reused) = self.alloc_file_ino();
            let f = self
                .new_upper_file(ino, reused)
                .map_err(|e| io_errno("create an upper file", e))?;
            let _ = f.set_times(
                FileTimes::new()
                    .set_accessed(crate::node::to_system_time(now))
                    .set_modified(crate::node::to_system_time(now)),
            );
            // Kept: attr() takes fstat of it instead of a stat by path, and
            // CREATE's handle needs it open anyway.
            node.file = Some(std::sync::Arc::new(f));
            self.nodes.insert(ino, node);
            ino
        } else {
            self.alloc(node)
        };
        self.persist(ino)?;
        self.set_slot(parent, name, Some(Slot::Node(ino)))?;
        self.touch_dir(parent, now)?;
        let attr = self.attr(ino)?;
        self.node_mut(ino)?.lookups += 1;
        Ok((ino, attr))
    }

    /// Remove the link `name` from `parent` (unlink or rmdir).
    pub(crate) fn do_remove(&mut self, parent: u64, name: &[u8], dir: bool) -> R<()> {
        check_name(name)?;
        let ino = self.child(parent, name)?.ok_or(Errno::ENOENT)?;
        let kind = self.node(ino)?.kind;
        if dir && kind != NodeKind::Dir {
            return Err(Errno::ENOTDIR);
        }
        if !dir && kind == NodeKind::Dir {
            return Err(Errno::EISDIR);
        }
        if dir && !self.is_empty_dir(ino)? {
            return Err(Errno::ENOTEMPTY);
        }
        self.unlink_node(parent, name, ino)?;
        self.touch_dir(parent, now_ns())
    }

    fn is_empty_dir(&mut self, ino: u64) -> R<bool> {
        let list = self.listing(ino)?;
        let d = self.node(ino)?.dir().ok_or(Errno::ENOTDIR)?;
        if d.children.values().any(|s| matches!(s, Slot::Node(_))) {
            return Ok(false);
        }
        Ok(list.iter().all(|e| d.children.contains_key(&e.name)))
    }

    /// Detach `ino` from `(parent, name)`, leaving a whiteout when the base
    /// has that name.
    fn unlink_node(&mut self, parent: u64, name: &[u8], ino: u64) -> R<()> {
        self.set_slot(parent, name, None)?;
        let now = now_ns();
        let n = self.node_mut(ino)?;
        if let Some(i) = n.links.iter().position(|l| l.0 == parent && l.1 == name) {
            n.links.remove(i);
        }
        n.ctime = now;
        if n.links.is_empty() {
            let persisted = n.persisted;
            n.persisted = false;
            if persisted {
                self.journal
                    .del_node(ino)
                    .map_err(|e| io_errno("journal a removal", e))?;
            }
            self.maybe_reap(ino);
        } else {
            self.changed(ino)?;
        }
        Ok(())
    }

    pub(crate) fn do_link(&mut self, ino: u64, parent: u64, name: &[u8]) -> R<FileAttr> {
        check_name(name)?;
        if self.node(ino)?.kind == NodeKind::Dir {
            return Err(Errno::EPERM);
        }
        if self.child(parent, name)?.is_some() {
            return Err(Errno::EEXIST);
        }
        let now = now_ns();
        let n = self.node_mut(ino)?;
        n.links.push((parent, name.to_vec()));
        n.ctime = now;
        self.set_slot(parent, name, Some(Slot::Node(ino)))?;
        self.changed(ino)?;
        self.touch_dir(parent, now)?;
        let attr = self.attr(ino)?;
        self.node_mut(ino)?.lookups += 1;
        Ok(attr)
    }

    /// rename(2)/renameat2(2). Directories move with their base tree, so a
    /// rename never copies contents, however big the subtree.
    pub(crate) fn do_rename(
        &mut self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: RenameFlags,
    ) -> R<()> {
        check_name(name)?;
        check_name(newname)?;
        let src = self.child(parent, name)?.ok_or(Errno::ENOENT)?;
        let dst = self.child(newparent, newname)?;
        let now = now_ns();
        if flags.contains(RenameFlags::RENAME_EXCHANGE) {
            let dst = dst.ok_or(Errno::ENOENT)?;
            if src == dst {
                return Ok(());
            }
            self.relink(src, parent, name, newparent, newname)?;
            self.relink(dst, newparent, newname, parent, name)?;
            self.set_slot(newparent, newname, Some(Slot::Node(src)))?;
            self.set_slot(parent, name, Some(Slot::Node(dst)))?;
            for i in [src, dst] {
                self.node_mut(i)?.ctime = now;
                self.changed(i)?;
            }
            self.touch_dir(parent, now)?;
            return self.touch_dir(newparent, now);
        }
        if let Some(dst) = dst {
            if flags.contains(RenameFlags::RENAME_NOREPLACE) {
                return Err(Errno::EEXIST);
            }
            if dst == src {
                // POSIX: two links to the same file: do nothing, succeed.
                return Ok(());
            }
            let (sk, dk) = (self.node(src)?.kind, self.node(dst)?.kind);
            if sk == NodeKind::Dir && dk != NodeKind::Dir {
                return Err(Errno::ENOTDIR);
            }
            if sk != NodeKind::Dir && dk == NodeKind::Dir {
                return Err(Errno::EISDIR);
            }
            if dk == NodeKind::Dir && !self.is_empty_dir(dst)? {
                return Err(Errno::ENOTEMPTY);
            }
            self.unlink_node(newparent, newname, dst)?;
        }
        self.relink(src, parent, name, newparent, newname)?;
        self.set_slot(parent, name, None)?;
        self.set_slot(newparent, newname, Some(Slot::Node(src)))?;
        // Linux updates the ctime of the renamed inode (ext4 does).
        self.node_mut(src)?.ctime = now;
        self.changed(src)?;
        self.touch_dir(parent, now)?;
        if newparent != parent {
            self.touch_dir(newparent, now)?;
        }
        Ok(())
    }

    fn relink(&mut self, ino: u64, p: u64, n: &[u8], np: u64, nn: &[u8]) -> R<()> {
        let node = self.node_mut(ino)?;
        match node.links.iter_mut().find(|l| l.0 == p && l.1 == n) {
            Some(l) => *l = (np, nn.to_vec()),
            None => node.links.push((np, nn.to_vec())),
        }
        Ok(())
    }

    /// Give a lower file its own copy in the upper layer (first write,
    /// truncate or write-open). Metadata stays in the node.
    pub(crate) fn copy_up(&mut self, ino: u64) -> R<()> {
        self.copy_up_with(ino, true)
    }

    /// Copy-up for open(O_TRUNC): the bytes would be thrown away at once,
    /// so the upper file starts empty instead of being copied.
    pub(crate) fn copy_up_truncated(&mut self, ino: u64) -> R<()> {
        self.copy_up_with(ino, false)
    }

    /// open(O_TRUNC) with FUSE_ATOMIC_O_TRUNC: truncate here, and update
    /// mtime and ctime as open(2) does for an existing file.
    pub(crate) fn open_truncate(&mut self, ino: u64) -> R<()> {
        self.copy_up_truncated(ino)?;
        self.note_written(ino, 0, TO_END)?;
        let f = self.data_file(ino)?;
        f.set_len(0).map_err(|e| io_errno("truncate", e))?;
        let now = std::time::SystemTime::now();
        f.set_times(FileTimes::new().set_modified(now))
            .map_err(|e| io_errno("set times", e))?;
        self.node_mut(ino)?.ctime = crate::node::from_system_time(now);
        self.mark_written(ino)?;
        self.changed(ino)
    }

    fn copy_up_with(&mut self, ino: u64, copy: bool) -> R<()> {
        let n = self.node(ino)?;
        let content = match &n.data {
            Data::Upper(_) => return Ok(()),
            Data::Lower(c) => c.clone(),
            _ => return Err(Errno::EINVAL),
        };
        let (atime, mtime) = (n.atime, n.mtime);
        let path = self.upper_path(ino);
        let src = if copy {
            self.cache
                .ensure(&self.store, &content)
                .map_err(|e| ws_errno("materialize for copy-up", e))?
        } else {
            std::path::PathBuf::new()
        };
        let tmp = path.with_extension("copyup");
        if copy {
            std::fs::copy(&src, &tmp).map_err(|e| io_errno("copy up", e))?;
        } else {
            File::create(&tmp).map_err(|e| io_errno("copy up", e))?;
        }
        let f = File::options()
            .write(true)
            .open(&tmp)
            .map_err(|e| io_errno("open a copied-up file", e))?;
        f.set_times(
            FileTimes::new()
                .set_accessed(crate::node::to_system_time(atime))
                .set_modified(crate::node::to_system_time(mtime)),
        )
        .map_err(|e| io_errno("set times of a copied-up file", e))?;
        // Make the upper file's permissions independent of the cache's 0444.
        let _ = f.set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o600));
        std::fs::rename(&tmp, &path).map_err(|e| io_errno("copy up", e))?;
        let n = self.node_mut(ino)?;
        n.data = Data::Upper(UpperInfo {
            origin_size: content.size,
            origin: Some(content),
            origin_mtime: mtime,
            written: !copy,
        });
        n.file = None;
        // A reused inode number may carry ranges of a file gone since.
        self.journal
            .clear_written(ino)
            .map_err(|e| io_errno("journal a copy-up", e))?;
        if !copy {
            self.note_written(ino, 0, TO_END)?;
        }
        self.changed(ino)
    }

    /// Record bytes `a..b` of a file as changed since its origin
    /// (ranges.rs), before the change is made. Only upper files with an
    /// origin keep ranges: a new file is chunked whole anyway.
    pub(crate) fn note_written(&mut self, ino: u64, a: u64, b: u64) -> R<()> {
        if !matches!(&self.node(ino)?.data, Data::Upper(u) if u.origin.is_some()) {
            return Ok(());
        }
        self.journal
            .note_written(ino, a, b)
            .map_err(|e| io_errno("journal a write", e))
    }

    /// Note a change of an upper file's bytes that went through the daemon.
    pub(crate) fn mark_written(&mut self, ino: u64) -> R<()> {
        let n = self.node_mut(ino)?;
        match &mut n.data {
            Data::Upper(u) if !u.written => {
                u.written = true;
                self.changed(ino)
            }
            _ => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn do_setattr(
        &mut self,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<std::time::SystemTime>,
    ) -> R<FileAttr> {
        let now = now_ns();
        if let Some(size) = size {
            if self.node(ino)?.kind != NodeKind::File {
                return Err(Errno::EINVAL);
            }
            self.copy_up(ino)?;
            let f = self.data_file(ino)?;
            // Bytes from the smaller size on are gone or new zeros.
            let cur = f.metadata().map_err(|e| io_errno("stat", e))?.len();
            self.note_written(ino, cur.min(size), TO_END)?;
            f.set_len(size).map_err(|e| io_errno("truncate", e))?;
            self.mark_written(ino)?;
            // truncate(2) updates mtime and ctime (when the size changes,
            // and ftruncate always; ext4 does it on every call).
            self.node_mut(ino)?.ctime = now;
        }
        let n = self.node_mut(ino)?;
        if let Some(m) = mode {
            n.perm = m & 0o7777;
        }
        if let Some(u) = uid {
            n.uid = u;
        }
        if let Some(g) = gid {
            n.gid = g;
        }
        n.ctime = match ctime {
            Some(t) => crate::node::from_system_time(t),
            None => now,
        };
        if atime.is_some() || mtime.is_some() {
            let at = atime.map(system_time);
            let mt = mtime.map(system_time);
            if matches!(n.data, Data::Upper(_)) {
                let mut ft = FileTimes::new();
                if let Some(t) = at {
                    ft = ft.set_accessed(t);
                }
                if let Some(t) = mt {
                    ft = ft.set_modified(t);
                }
                let f = self.data_file(ino)?;
                f.set_times(ft).map_err(|e| io_errno("set times", e))?;
                if mt.is_some() {
                    // An explicit mtime can hide a write from the size+mtime
                    // change test: remember that the bytes may differ.
                    self.mark_written(ino)?;
                }
            } else {
                let n = self.node_mut(ino)?;
                if let Some(t) = at {
                    n.atime = crate::node::from_system_time(t);
                }
                if let Some(t) = mt {
                    n.mtime = crate::node::from_system_time(t);
                }
            }
        }
        self.changed(ino)?;
        self.attr(ino)
    }

    pub(crate) fn do_setxattr(&mut self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> R<()> {
        check_xattr_name(name)?;
        let n = self.node_mut(ino)?;
        // Linux allows user.* xattrs only on regular files and directories
        // (xattr(7)): EPERM elsewhere.
        if !matches!(n.kind, NodeKind::File | NodeKind::Dir) {
            return Err(Errno::EPERM);
        }
        let exists = n.xattrs.contains_key(name);
        if flags & libc::XATTR_CREATE != 0 && exists {
            return Err(Errno::EEXIST);
        }
        if flags & libc::XATTR_REPLACE != 0 && !exists {
            return Err(Errno::NO_XATTR);
        }
        n.xattrs.insert(name.to_vec(), value.to_vec());
        n.ctime = now_ns();
        self.changed(ino)
    }

    pub(crate) fn do_removexattr(&mut self, ino: u64, name: &[u8]) -> R<()> {
        check_xattr_name(name)?;
        let n = self.node_mut(ino)?;
        if n.xattrs.remove(name).is_none() {
            return Err(Errno::NO_XATTR);
        }
        n.ctime = now_ns();
        self.changed(ino)
    }
}

/// Only the `user.` namespace is stored (a Store keeps user xattrs only);
/// `security.`, `trusted.` and `system.` are refused like on a filesystem
/// mounted without support for them.
fn check_xattr_name(name: &[u8]) -> R<()> {
    if name.len() > 255 {
        return Err(Errno::ERANGE);
    }
    if !name.starts_with(b"user.") {
        return Err(Errno::EOPNOTSUPP);
    }
    Ok(())
}
