//! The FUSE operation handlers (fuser 0.18 `Filesystem`, `&self` methods
//! called from several session threads). Every handler takes the state lock
//! for metadata only; file bytes are read and written with pread/pwrite on
//! an `Arc<File>` after the lock is released, and with passthrough they do
//! not come through here at all.

use crate::killpriv::may_keep_privs;
use crate::node::{now_ns, Data, NodeKind, UpperInfo};
use crate::ops::NewOwner;
use crate::state::{eio, io_errno, State, R};
use crate::workspace::Shared;
use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::{Arc, MutexGuard, OnceLock};
use std::time::{Duration, SystemTime};

/// Attribute and entry (positive and negative) cache lifetime. This daemon
/// is the only writer of the tree: every name, mode, owner and time changes
/// through a request on this mount, and the kernel drops what a request
/// changes (fuse_dir_changed() on the parent, fuse_invalidate_attr() on
/// the inode, FUSE_STATX_MODSIZE after a passthrough write). A commit
/// changes nothing the kernel can see. So a long lifetime is safe, and it
/// is what keeps `git status` and path walks free of LOOKUP/GETATTR round
/// trips (each costs tens of microseconds here). The one change the kernel
/// does not see is a write through a shared writable mmap of a passthrough
/// file (it lands in the backing file): its attributes are invalidated when
/// the last writable handle is released (see `release`).
pub(crate) const TTL: Duration = Duration::from_secs(24 * 3600);

pub(crate) struct WsFs {
    pub shared: Arc<Shared>,
    pub want_passthrough: bool,
    /// Set once the session exists: invalidates the kernel's attributes of
    /// a file changed behind its back (writes through a shared mmap).
    pub notifier: Arc<OnceLock<fuser::Notifier>>,
    /// Dropped with this filesystem object; the `MountHandle` holds the
    /// other end and waits for it, so "unmounted" means the session's last
    /// reference to the Workspace (and its lock) is gone.
    pub _serving: Arc<()>,
}

pub(crate) fn name_bytes(n: &OsStr) -> &[u8] {
    n.as_bytes()
}

impl WsFs {
    pub(crate) fn st(&self) -> MutexGuard<'_, State> {
        // A panic in one handler must not wedge the whole mount.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn owner(&self, st: &State, req: &Request) -> NewOwner {
        NewOwner {
            uid: st.ids.inbound_uid(req.uid()),
            gid: st.ids.inbound_gid(req.gid()),
        }
    }

    fn entry(&self, r: R<(u64, fuser::FileAttr)>, reply: ReplyEntry) {
        match r {
            Ok((_, a)) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    pub(crate) fn new_node(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: NodeKind,
        mode: u32,
        data: Data,
    ) -> R<(u64, fuser::FileAttr)> {
        let mut st = self.st();
        let owner = self.owner(&st, req);
        let r = st.tx(|s| s.do_create(parent.0, name_bytes(name), kind, mode, owner, data));
        if let Ok((ino, _)) = &r {
            // mknod(S_IFREG) opens nothing: keep no descriptor for it.
            if let Ok(n) = st.node_mut(*ino) {
                n.file = None;
            }
        }
        r
    }
}

impl Filesystem for WsFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        let mut pt = false;
        if self.want_passthrough && rustix::process::geteuid().is_root() {
            // Passthrough (kernel >= 6.9) needs CAP_SYS_ADMIN for
            // FUSE_DEV_IOC_BACKING_OPEN and a stacking depth of at least 1.
            if config.add_capabilities(InitFlags::FUSE_PASSTHROUGH).is_ok() {
                pt = config.set_max_stack_depth(1).is_ok();
            }
        }
        let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
        let _ = config
            .add_capabilities(InitFlags::FUSE_DO_READDIRPLUS | InitFlags::FUSE_READDIRPLUS_AUTO);
        let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        // SB_NOSEC: no GETXATTR before every write; we clear suid/sgid
        // ourselves instead (killpriv.rs).
        let killpriv = config
            .add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2)
            .is_ok();
        let mut st = self.st();
        st.passthrough = pt;
        st.killpriv = killpriv;
        tracing::debug!("fuse init: passthrough={pt} killpriv_v2={killpriv}");
        Ok(())
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = self.st().do_lookup(parent.0, name_bytes(name));
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            // A negative entry (node id 0) lets the kernel cache "no such
            // name" for TTL: compilers, git and python probe many missing
            // paths, and every name change goes through this daemon anyway.
            Err(e) if e == Errno::ENOENT => reply.entry(&TTL, &negative_attr(), Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.st().do_forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        // Replies are sent after the lock is released (here and in the
        // other frequent requests): the client's next request arrives as
        // soon as the reply is written, on another session thread, which
        // would otherwise find the lock held and sleep on it (a futex wait
        // and wake-up per request in a profile of create+stat+unlink).
        let r = self.st().attr(ino.0);
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut st = self.st();
        // FATTR_KILL_SUIDGID, which fuser does not pass, as the kernel sets
        // it (fuse_do_setattr()): on every chown of a non-directory, and on
        // a truncate by a caller without CAP_FSETID (killpriv.rs).
        let kill = st.killpriv
            && (uid.is_some()
                || gid.is_some()
                || (size.is_some() && !may_keep_privs(st.ids, req.uid())));
        let uid = uid.map(|u| st.ids.inbound_uid(u));
        let gid = gid.map(|g| st.ids.inbound_gid(g));
        let r = st.tx(|s| {
            let a = s.do_setattr(ino.0, mode, uid, gid, size, atime, mtime, ctime)?;
            match kill && s.kill_suidgid(ino.0)? {
                true => s.attr(ino.0),
                false => Ok(a),
            }
        });
        match r {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let st = self.st();
        match st.node(ino.0).map(|n| &n.data) {
            Ok(Data::Symlink(t)) => reply.data(t),
            Ok(_) => reply.error(Errno::EINVAL),
            Err(e) => reply.error(e),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let (kind, data) = match mode & libc::S_IFMT {
            libc::S_IFREG => (NodeKind::File, new_file_data()),
            libc::S_IFIFO => (NodeKind::Fifo, Data::None),
            libc::S_IFSOCK => (NodeKind::Socket, Data::None),
            // Creating device nodes is allowed (the mount is nodev, so they
            // cannot be opened through it); committing them is not.
            libc::S_IFCHR => (NodeKind::CharDevice, Data::Device(rdev)),
            libc::S_IFBLK => (NodeKind::BlockDevice, Data::Device(rdev)),
            _ => return reply.error(Errno::EINVAL),
        };
        self.entry(self.new_node(req, parent, name, kind, mode, data), reply);
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        self.entry(
            self.new_node(req, parent, name, NodeKind::Dir, mode, Data::None),
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .st()
            .tx(|s| s.do_remove(parent.0, name_bytes(name), false));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = self
            .st()
            .tx(|s| s.do_remove(parent.0, name_bytes(name), true));
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let data = Data::Symlink(target.as_os_str().as_bytes().to_vec());
        self.entry(
            self.new_node(req, parent, link_name, NodeKind::Symlink, 0o777, data),
            reply,
        );
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.contains(RenameFlags::RENAME_WHITEOUT) {
            return reply.error(Errno::EINVAL);
        }
        let r = self.st().tx(|s| {
            s.do_rename(
                parent.0,
                name_bytes(name),
                newparent.0,
                name_bytes(newname),
                flags,
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = self
            .st()
            .tx(|s| s.do_link(ino.0, newparent.0, name_bytes(newname)));
        match r {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        self.do_open(req, ino, flags, reply);
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        self.do_create(req, parent, name, mode, flags, reply);
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let f = match self.st().data_file(ino.0) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let mut buf = vec![0u8; size as usize];
        let mut got = 0usize;
        while got < buf.len() {
            match f.read_at(&mut buf[got..], offset + got as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return reply.error(io_errno("read", e)),
            }
        }
        reply.data(&buf[..got]);
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // Set for every write by a caller without CAP_FSETID once
        // FUSE_HANDLE_KILLPRIV_V2 is on (killpriv.rs).
        let kill = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        let (f, killed) = {
            let mut st = self.st();
            let kill = kill && st.killpriv;
            let r = st.tx(|s| {
                s.copy_up(ino.0)?;
                s.mark_written(ino.0)?;
                s.note_written(ino.0, offset, offset.saturating_add(data.len() as u64))?;
                let killed = kill && s.kill_suidgid(ino.0)?;
                Ok((s.data_file(ino.0)?, killed))
            });
            match r {
                Ok(x) => x,
                Err(e) => return reply.error(e),
            }
        };
        match f.write_all_at(data, offset) {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(io_errno("write", e)),
        }
        if killed {
            self.inval_attr(ino);
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut inval = false;
        {
            let mut st = self.st();
            st.handles.remove(&fh.0);
            if let Ok(n) = st.node_mut(ino.0) {
                n.opens = n.opens.saturating_sub(1);
                if n.opens == 0 {
                    // An upper passthrough backing may have been mmapped
                    // shared and written: that changes the backing file's
                    // mtime without a request. A mapping holds its file,
                    // so the last release comes after the last such write.
                    inval = n.backing.as_ref().is_some_and(|b| b.upper);
                    n.backing = None;
                    n.file = None;
                }
            }
            st.maybe_reap(ino.0);
        }
        reply.ok();
        if inval {
            if let Some(n) = self.notifier.get() {
                // Attributes only (a negative offset spares the page cache,
                // fuse_reverse_inval_inode()); ENOENT if already evicted.
                let _ = n.inval_inode(ino, -1, 0);
            }
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let f = {
            let mut st = self.st();
            // The metadata of the file (its name, mode...) is in the journal:
            // fsync(2) promises it survives a power loss too.
            if let Err(e) = st.journal.sync() {
                return reply.error(io_errno("sync the journal", e));
            }
            match st.node(ino.0).map(|n| matches!(n.data, Data::Upper(_))) {
                Ok(true) => st.data_file(ino.0),
                Ok(false) => return reply.ok(),
                Err(e) => Err(e),
            }
        };
        let r = f.and_then(|f| {
            if datasync {
                f.sync_data()
            } else {
                f.sync_all()
            }
            .map_err(|e| io_errno("fsync", e))
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.do_opendir(ino, reply);
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        self.do_readdir(fh, offset, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        self.do_readdirplus(ino, fh, offset, reply);
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.st().handles.remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let dir = self.st().upper_dir.clone();
        match rustix::fs::statvfs(&dir) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                crate::state::NAME_MAX as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(eio("statfs", e)),
        }
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        match self
            .st()
            .tx(|s| s.do_setxattr(ino.0, name_bytes(name), value, flags))
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        if self.getxattr_kills(req, ino, name_bytes(name)) {
            // No `security.` xattrs are stored: the answer is ENODATA.
            reply.error(Errno::NO_XATTR);
            self.inval_attr(ino);
            return;
        }
        let v = match self.st().node(ino.0) {
            Ok(n) => n.xattrs.get(name_bytes(name)).cloned(),
            Err(e) => return reply.error(e),
        };
        match v {
            None => reply.error(Errno::NO_XATTR),
            Some(v) => xattr_reply(&v, size, reply),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        let st = self.st();
        let n = match st.node(ino.0) {
            Ok(n) => n,
            Err(e) => return reply.error(e),
        };
        let mut buf = Vec::new();
        for k in n.xattrs.keys() {
            buf.extend_from_slice(k);
            buf.push(0);
        }
        xattr_reply(&buf, size, reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.st().tx(|s| s.do_removexattr(ino.0, name_bytes(name))) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        // Only called without default_permissions, i.e. in rootless mode,
        // where the one user of the namespace owns everything.
        match self.st().node(ino.0) {
            Ok(_) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let f = {
            let mut st = self.st();
            // Collapsing or inserting a range moves every byte after it.
            let shifts =
                mode & (libc::FALLOC_FL_COLLAPSE_RANGE | libc::FALLOC_FL_INSERT_RANGE) != 0;
            let end = match shifts {
                true => crate::ranges::TO_END,
                false => offset.saturating_add(length),
            };
            match st.tx(|s| {
                s.copy_up(ino.0)?;
                s.mark_written(ino.0)?;
                s.note_written(ino.0, offset, end)?;
                s.data_file(ino.0)
            }) {
                Ok(f) => f,
                Err(e) => return reply.error(e),
            }
        };
        let flags = rustix::fs::FallocateFlags::from_bits_retain(mode as u32);
        match rustix::fs::fallocate(&*f, flags, offset, length) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error())),
        }
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let f = match self.st().data_file(ino.0) {
            Ok(f) => f,
            Err(e) => return reply.error(e),
        };
        let pos = match whence {
            libc::SEEK_DATA => rustix::fs::SeekFrom::Data(offset as u64),
            libc::SEEK_HOLE => rustix::fs::SeekFrom::Hole(offset as u64),
            _ => return reply.error(Errno::EINVAL),
        };
        // The shared descriptor's offset is never used (all I/O is
        // pread/pwrite), so moving it is harmless.
        let r = rustix::fs::seek(&*f, pos);
        match r {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error())),
        }
    }
}

fn xattr_reply(v: &[u8], size: u32, reply: ReplyXattr) {
    if size == 0 {
        reply.size(v.len() as u32);
    } else if v.len() > size as usize {
        reply.error(Errno::ERANGE);
    } else {
        reply.data(v);
    }
}

fn negative_attr() -> fuser::FileAttr {
    fuser::FileAttr {
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

pub(crate) fn new_file_data() -> Data {
    Data::Upper(UpperInfo {
        origin: None,
        origin_size: 0,
        origin_mtime: now_ns(),
        written: true,
    })
}
