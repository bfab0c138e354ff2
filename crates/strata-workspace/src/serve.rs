//! The Workspace's request handling, independent of the transport: each
//! FUSE operation is a function of a small request context and the
//! request's arguments that returns a value (attributes, an entry, data,
//! an open handle...). fs.rs adapts them to fuser's `Filesystem` (replies
//! through fuser's `Reply*` types); uring/dispatch.rs decodes requests from
//! io_uring buffers and encodes the same values itself.
//!
//! Every handler takes the state lock for metadata only; file bytes are
//! read and written with pread/pwrite on an `Arc<File>` after the lock is
//! released, and with passthrough they do not come through here at all.
//! Work that must follow the reply (an attribute invalidation, which the
//! kernel would otherwise race with the reply) is recorded in [`Later`]
//! and run by the transport after it answered.

use crate::fs::WsFs;
use crate::killpriv::may_keep_privs;
use crate::node::{Data, NodeKind};
use crate::pool::Reaped;
use crate::state::{eio, io_errno, R};
use fuser::{Errno, FileAttr, INodeNo, RenameFlags, TimeOrNow, WriteFlags};
use std::os::unix::fs::FileExt;
use std::time::SystemTime;

/// Who asks: the ids of the calling process as the FUSE request header
/// carries them (in the mount's user namespace).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctx {
    pub uid: u32,
    pub gid: u32,
}

impl Ctx {
    pub(crate) fn of(req: &fuser::Request) -> Ctx {
        Ctx {
            uid: req.uid(),
            gid: req.gid(),
        }
    }
}

/// What to do once the reply is sent.
#[derive(Default)]
pub(crate) struct Later {
    /// Invalidate the kernel's attributes of this inode.
    pub inval_attr: Option<u64>,
}

impl Later {
    /// Nothing to do after the reply (the ring then needs no submission of
    /// its own before doing it).
    pub(crate) fn is_empty(&self) -> bool {
        self.inval_attr.is_none()
    }
}

/// The answer to GETXATTR and LISTXATTR.
pub(crate) enum Xattr {
    /// The caller asked for the size only (size 0).
    Size(u32),
    Data(Vec<u8>),
}

/// The answer to STATFS.
pub(crate) struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

/// The attributes a SETATTR asks to change (fuser's decoding of
/// fuse_setattr_in: each field present when its FATTR_* bit is set).
pub(crate) struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<TimeOrNow>,
    pub mtime: Option<TimeOrNow>,
    pub ctime: Option<SystemTime>,
}

impl WsFs {
    pub(crate) fn run_later(&self, later: Later) {
        if let Some(ino) = later.inval_attr {
            self.inval_attr(INodeNo(ino));
        }
    }

    /// LOOKUP. A missing name is a negative entry (node id 0) the kernel
    /// caches for TTL: compilers, git and python probe many missing paths,
    /// and every name change goes through this daemon anyway.
    pub(crate) fn op_lookup(&self, parent: u64, name: &[u8]) -> R<FileAttr> {
        match self.st().do_lookup(parent, name) {
            Err(e) if e == Errno::ENOENT => Ok(negative_attr()),
            r => r,
        }
    }

    pub(crate) fn op_forget(&self, ino: u64, nlookup: u64) {
        let reaped = {
            let mut st = self.st();
            st.do_forget(ino, nlookup);
            st.take_reaped()
        };
        self.dispose_reaped(reaped);
    }

    /// Empty or unlink the upper files of the nodes a request reaped, after
    /// its lock was released, and pool the emptied numbers (pool.rs).
    pub(crate) fn dispose_reaped(&self, reaped: Reaped) {
        if reaped.is_empty() {
            return;
        }
        let (emptied, meant) = reaped.dispose();
        self.st().pool_emptied(emptied, meant);
    }

    /// Transports send replies after the lock is released (here and in the
    /// other frequent requests): the client's next request arrives as soon
    /// as the reply is written, on another thread, which would otherwise
    /// find the lock held and sleep on it (a futex wait and wake-up per
    /// request in a profile of create+stat+unlink).
    pub(crate) fn op_getattr(&self, ino: u64) -> R<FileAttr> {
        self.st().attr(ino)
    }

    pub(crate) fn op_setattr(&self, ctx: Ctx, ino: u64, a: SetAttr) -> R<FileAttr> {
        let mut st = self.st();
        // FATTR_KILL_SUIDGID, which fuser does not pass, as the kernel sets
        // it (fuse_do_setattr()): on every chown of a non-directory, and on
        // a truncate by a caller without CAP_FSETID (killpriv.rs).
        let kill = st.killpriv
            && (a.uid.is_some()
                || a.gid.is_some()
                || (a.size.is_some() && !may_keep_privs(st.ids, ctx.uid)));
        let uid = a.uid.map(|u| st.ids.inbound_uid(u));
        let gid = a.gid.map(|g| st.ids.inbound_gid(g));
        st.tx(|s| {
            let r = s.do_setattr(ino, a.mode, uid, gid, a.size, a.atime, a.mtime, a.ctime)?;
            match kill && s.kill_suidgid(ino)? {
                true => s.attr(ino),
                false => Ok(r),
            }
        })
    }

    pub(crate) fn op_readlink(&self, ino: u64) -> R<Vec<u8>> {
        let st = self.st();
        match st.node(ino).map(|n| &n.data) {
            Ok(Data::Symlink(t)) => Ok(t.clone()),
            Ok(_) => Err(Errno::EINVAL),
            Err(e) => Err(e),
        }
    }

    pub(crate) fn op_mknod(
        &self,
        ctx: Ctx,
        parent: u64,
        name: &[u8],
        mode: u32,
        rdev: u32,
    ) -> R<FileAttr> {
        let (kind, data) = match mode & libc::S_IFMT {
            libc::S_IFREG => (NodeKind::File, crate::fs::new_file_data()),
            libc::S_IFIFO => (NodeKind::Fifo, Data::None),
            libc::S_IFSOCK => (NodeKind::Socket, Data::None),
            // Creating device nodes is allowed (the mount is nodev, so they
            // cannot be opened through it); committing them is not.
            libc::S_IFCHR => (NodeKind::CharDevice, Data::Device(rdev)),
            libc::S_IFBLK => (NodeKind::BlockDevice, Data::Device(rdev)),
            _ => return Err(Errno::EINVAL),
        };
        self.new_node(ctx, parent, name, kind, mode, data)
            .map(|(_, a)| a)
    }

    pub(crate) fn op_mkdir(&self, ctx: Ctx, parent: u64, name: &[u8], mode: u32) -> R<FileAttr> {
        self.new_node(ctx, parent, name, NodeKind::Dir, mode, Data::None)
            .map(|(_, a)| a)
    }

    pub(crate) fn op_remove(&self, parent: u64, name: &[u8], dir: bool) -> R<()> {
        let (r, reaped) = {
            let mut st = self.st();
            (st.tx(|s| s.do_remove(parent, name, dir)), st.take_reaped())
        };
        self.dispose_reaped(reaped);
        r
    }

    pub(crate) fn op_symlink(
        &self,
        ctx: Ctx,
        parent: u64,
        name: &[u8],
        target: &[u8],
    ) -> R<FileAttr> {
        let data = Data::Symlink(target.to_vec());
        self.new_node(ctx, parent, name, NodeKind::Symlink, 0o777, data)
            .map(|(_, a)| a)
    }

    pub(crate) fn op_rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: RenameFlags,
    ) -> R<()> {
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return Err(Errno::EINVAL);
        }
        let (r, reaped) = {
            let mut st = self.st();
            let r = st.tx(|s| s.do_rename(parent, name, newparent, newname, flags));
            (r, st.take_reaped())
        };
        self.dispose_reaped(reaped);
        r
    }

    pub(crate) fn op_link(&self, ino: u64, newparent: u64, newname: &[u8]) -> R<FileAttr> {
        self.st().tx(|s| s.do_link(ino, newparent, newname))
    }

    /// READ served by the daemon (no passthrough for this handle): up to
    /// `size` bytes, fewer only at the end of the file.
    pub(crate) fn op_read(&self, ino: u64, offset: u64, size: u32) -> R<Vec<u8>> {
        let f = self.st().data_file(ino)?;
        let mut buf = vec![0u8; size as usize];
        let mut got = 0usize;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io_errno("read", e)),
            }
        }
        buf.truncate(got);
        Ok(buf)
    }

    pub(crate) fn op_write(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        later: &mut Later,
    ) -> R<u32> {
        // Set for every write by a caller without CAP_FSETID once
        // FUSE_HANDLE_KILLPRIV_V2 is on (killpriv.rs).
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let (f, killed) = {
            let mut st = self.st();
            let kill = kill && st.killpriv;
            st.tx(|s| {
                s.copy_up(ino)?;
                s.mark_written(ino)?;
                s.note_written(ino, offset, offset.saturating_add(data.len() as u64))?;
                let killed = kill && s.kill_suidgid(ino)?;
                Ok((s.data_file(ino)?, killed))
            })?
        };
        if killed {
            later.inval_attr = Some(ino);
        }
        match f.write_all_at(data, offset) {
            Ok(()) => Ok(data.len() as u32),
            Err(e) => Err(io_errno("write", e)),
        }
    }

    pub(crate) fn op_release(&self, ino: u64, fh: u64, later: &mut Later) {
        let mut st = self.st();
        st.handles.remove(&fh);
        if let Ok(n) = st.node_mut(ino) {
            n.opens = n.opens.saturating_sub(1);
            if n.opens == 0 {
                // An upper passthrough backing may have been mmapped
                // shared and written: that changes the backing file's
                // mtime without a request. A mapping holds its file,
                // so the last release comes after the last such write.
                if n.backing.as_ref().is_some_and(|b| b.upper) {
                    later.inval_attr = Some(ino);
                }
                n.backing = None;
                n.file = None;
            }
        }
        st.maybe_reap(ino);
        let reaped = st.take_reaped();
        drop(st);
        self.dispose_reaped(reaped);
    }

    pub(crate) fn op_fsync(&self, ino: u64, datasync: bool) -> R<()> {
        let f = {
            let mut st = self.st();
            // The metadata of the file (its name, mode...) is in the journal:
            // fsync(2) promises it survives a power loss too.
            st.journal
                .sync()
                .map_err(|e| io_errno("sync the journal", e))?;
            match st.node(ino).map(|n| matches!(n.data, Data::Upper(_)))? {
                true => st.data_file(ino)?,
                false => return Ok(()),
            }
        };
        if datasync {
            f.sync_data()
        } else {
            f.sync_all()
        }
        .map_err(|e| io_errno("fsync", e))
    }

    pub(crate) fn op_releasedir(&self, fh: u64) {
        self.st().handles.remove(&fh);
    }

    pub(crate) fn op_statfs(&self) -> R<Statfs> {
        let dir = self.st().upper_dir.clone();
        let s = rustix::fs::statvfs(&dir).map_err(|e| eio("statfs", e))?;
        Ok(Statfs {
            blocks: s.f_blocks,
            bfree: s.f_bfree,
            bavail: s.f_bavail,
            files: s.f_files,
            ffree: s.f_ffree,
            bsize: s.f_bsize as u32,
            namelen: crate::state::NAME_MAX as u32,
            frsize: s.f_frsize as u32,
        })
    }

    pub(crate) fn op_setxattr(&self, ino: u64, name: &[u8], value: &[u8], flags: i32) -> R<()> {
        self.st().tx(|s| s.do_setxattr(ino, name, value, flags))
    }

    pub(crate) fn op_getxattr(
        &self,
        ctx: Ctx,
        ino: u64,
        name: &[u8],
        size: u32,
        later: &mut Later,
    ) -> R<Xattr> {
        if self.getxattr_kills(ctx, ino, name) {
            // No `security.` xattrs are stored: the answer is ENODATA.
            later.inval_attr = Some(ino);
            return Err(Errno::NO_XATTR);
        }
        let v = self.st().node(ino)?.xattrs.get(name).cloned();
        match v {
            None => Err(Errno::NO_XATTR),
            Some(v) => xattr_answer(v, size),
        }
    }

    pub(crate) fn op_listxattr(&self, ino: u64, size: u32) -> R<Xattr> {
        let st = self.st();
        let n = st.node(ino)?;
        let mut buf = Vec::new();
        for k in n.xattrs.keys() {
            buf.extend_from_slice(k);
            buf.push(0);
        }
        xattr_answer(buf, size)
    }

    pub(crate) fn op_removexattr(&self, ino: u64, name: &[u8]) -> R<()> {
        self.st().tx(|s| s.do_removexattr(ino, name))
    }

    /// Only called without default_permissions, i.e. in rootless mode,
    /// where the one user of the namespace owns everything.
    pub(crate) fn op_access(&self, ino: u64) -> R<()> {
        self.st().node(ino).map(|_| ())
    }

    pub(crate) fn op_fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> R<()> {
        let f = {
            let mut st = self.st();
            // Collapsing or inserting a range moves every byte after it.
            let shifts =
                mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0;
            let end = match shifts {
                true => crate::ranges::TO_END,
                false => offset.saturating_add(length),
            };
            st.tx(|s| {
                s.copy_up(ino)?;
                s.mark_written(ino)?;
                s.note_written(ino, offset, end)?;
                s.data_file(ino)
            })?
        };
        let flags = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
        rustix::fs::fallocate(&*f, flags, offset, length)
            .map_err(|e| Errno::from_i32(e.raw_os_error()))
    }

    pub(crate) fn op_lseek(&self, ino: u64, offset: i64, whence: i32) -> R<i64> {
        let f = self.st().data_file(ino)?;
        let pos = match whence {
            libc::SEEK_DATA => rustix::fs::SeekFrom::Data(offset as u64),
            libc::SEEK_HOLE => rustix::fs::SeekFrom::Hole(offset as u64),
            _ => return Err(Errno::EINVAL),
        };
        // The shared descriptor's offset is never used (all I/O is
        // pread/pwrite), so moving it is harmless.
        rustix::fs::seek(&*f, pos)
            .map(|o| o as i64)
            .map_err(|e| Errno::from_i32(e.raw_os_error()))
    }
}

fn xattr_answer(v: Vec<u8>, size: u32) -> R<Xattr> {
    if size == 0 {
        Ok(Xattr::Size(v.len() as u32))
    } else if v.len() > size as usize {
        Err(Errno::ERANGE)
    } else {
        Ok(Xattr::Data(v))
    }
}

/// The attributes of a negative entry: node id 0 (fuse_lookup_name()
/// treats it as "no such name", cached for the entry timeout).
pub(crate) fn negative_attr() -> FileAttr {
    FileAttr {
        ino: INodeNo(0),
        size: 0,
        blocks: 0,
        atime: SystemTime::UNIX_EPOCH,
        mtime: SystemTime::UNIX_EPOCH,
        ctime: SystemTime::UNIX_EPOCH,
        crtime: SystemTime::UNIX_EPOCH,
        kind: fuser::FileType::RegularFile,
        perm: 0,
        nlink: 0,
        uid: 0,
        gid: 0,
        rdev: 0,
        blksize: 0,
        flags: 0,
    }
}
