//! fuser 0.18's `Filesystem` (`&self` methods called from several session
//! threads) as a thin adapter: each method calls the transport-independent
//! handler of serve.rs (open.rs, dir.rs) and replies through fuser's
//! `Reply*` type. FUSE_INIT, which negotiates the connection, is here.

use crate::node::{now_ns, BackingRef, Data, NodeKind, UpperInfo};
use crate::ops::NewOwner;
use crate::serve::{Ctx, Later, SetAttr, Xattr};
use crate::state::{State, R};
use crate::workspace::Shared;
use fuser::{
    AccessFlags, Errno, FileHandle, Filesystem, Generation, INodeNo, InitFlags, KernelConfig,
    LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
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
    /// Ask for FUSE_OVER_IO_URING at FUSE_INIT (crate::uring serves the
    /// requests then).
    pub want_uring: bool,
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

    pub(crate) fn owner(&self, st: &State, ctx: Ctx) -> NewOwner {
        NewOwner {
            uid: st.ids.inbound_uid(ctx.uid),
            gid: st.ids.inbound_gid(ctx.gid),
        }
    }

    pub(crate) fn new_node(
        &self,
        ctx: Ctx,
        parent: u64,
        name: &[u8],
        kind: NodeKind,
        mode: u32,
        data: Data,
    ) -> R<(u64, fuser::FileAttr)> {
        let mut st = self.st();
        let owner = self.owner(&st, ctx);
        let r = st.tx(|s| s.do_create(parent, name, kind, mode, owner, data));
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
        if self.want_uring {
            // Requests wait for the ring once this is on (fuse_block_alloc()),
            // until every queue registered or a registration failed (which
            // turns it off again, fuse_uring_cmd()). Writes are capped at
            // 1 MiB so that each entry's payload buffer is 1 MiB: the
            // kernel wants it at least max_write (fuse_uring_create()), and
            // fuser's default of 16 MiB would make every entry that large.
            let on = config
                .add_capabilities(InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
            let _ = config.set_max_write(crate::uring::MAX_WRITE as u32);
            tracing::debug!("fuse init: io_uring offered={on}");
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
        entry(self.op_lookup(parent.0, name_bytes(name)), reply);
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.op_forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        attr(self.op_getattr(ino.0), reply);
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
        let a = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime,
            mtime,
            ctime,
        };
        attr(self.op_setattr(Ctx::of(req), ino.0, a), reply);
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.op_readlink(ino.0) {
            Ok(t) => reply.data(&t),
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
        let r = self.op_mknod(Ctx::of(req), parent.0, name_bytes(name), mode, rdev);
        entry(r, reply);
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
        entry(
            self.op_mkdir(Ctx::of(req), parent.0, name_bytes(name), mode),
            reply,
        );
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.op_remove(parent.0, name_bytes(name), false), reply);
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.op_remove(parent.0, name_bytes(name), true), reply);
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        let r = self.op_symlink(Ctx::of(req), parent.0, name_bytes(link_name), target);
        entry(r, reply);
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
        let r = self.op_rename(
            parent.0,
            name_bytes(name),
            newparent.0,
            name_bytes(newname),
            flags,
        );
        empty(r, reply);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entry(self.op_link(ino.0, newparent.0, name_bytes(newname)), reply);
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mut later = Later::default();
        let r = self.op_open(Ctx::of(req), ino.0, flags.0, &mut later, &|f| {
            reply.open_backing(f).map(BackingRef::Fuser)
        });
        match r {
            Ok(o) => match o.backing.as_deref() {
                Some(BackingRef::Fuser(id)) => {
                    reply.opened_passthrough(FileHandle(o.fh), o.flags, id)
                }
                // Registered by the ring on a ring-served mount, whose
                // opens all arrive through the ring (uring/mod.rs).
                Some(BackingRef::Ring(_)) => reply.error(Errno::EIO),
                None => reply.opened(FileHandle(o.fh), o.flags),
            },
            Err(e) => reply.error(e),
        }
        self.run_later(later);
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
        let r = self.op_create(
            Ctx::of(req),
            parent.0,
            name_bytes(name),
            mode,
            flags,
            &|f| reply.open_backing(f).map(BackingRef::Fuser),
        );
        match r {
            Ok((a, o)) => match o.backing.as_deref() {
                Some(BackingRef::Ring(_)) => reply.error(Errno::EIO),
                Some(BackingRef::Fuser(id)) => reply.created_passthrough(
                    &TTL,
                    &a,
                    Generation(0),
                    FileHandle(o.fh),
                    o.flags,
                    id,
                ),
                None => reply.created(&TTL, &a, Generation(0), FileHandle(o.fh), o.flags),
            },
            Err(e) => reply.error(e),
        }
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
        match self.op_read(ino.0, offset, size) {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
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
        let mut later = Later::default();
        match self.op_write(ino.0, offset, data, write_flags, &mut later) {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(e),
        }
        self.run_later(later);
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
        let mut later = Later::default();
        self.op_release(ino.0, fh.0, &mut later);
        reply.ok();
        self.run_later(later);
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(self.op_fsync(ino.0, datasync), reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.op_opendir(ino.0) {
            Ok((fh, flags)) => reply.opened(FileHandle(fh), flags),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let r = self.op_readdir(fh.0, offset, &mut |ino, off, kind, name| {
            reply.add(INodeNo(ino), off, kind, OsStr::from_bytes(name))
        });
        empty(r, reply);
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = self.op_readdirplus(ino.0, fh.0, offset, &mut |ino, off, name, a| {
            reply.add(
                INodeNo(ino),
                off,
                OsStr::from_bytes(name),
                &TTL,
                a,
                Generation(0),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.op_releasedir(fh.0);
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
        match self.op_statfs() {
            Ok(s) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Err(e) => reply.error(e),
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
        empty(
            self.op_setxattr(ino.0, name_bytes(name), value, flags),
            reply,
        );
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let mut later = Later::default();
        let r = self.op_getxattr(Ctx::of(req), ino.0, name_bytes(name), size, &mut later);
        xattr(r, reply);
        self.run_later(later);
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        xattr(self.op_listxattr(ino.0, size), reply);
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(self.op_removexattr(ino.0, name_bytes(name)), reply);
    }

    fn access(&self, _req: &Request, ino: INodeNo, _mask: AccessFlags, reply: ReplyEmpty) {
        empty(self.op_access(ino.0), reply);
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
        empty(self.op_fallocate(ino.0, offset, length, mode), reply);
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
        match self.op_lseek(ino.0, offset, whence) {
            Ok(o) => reply.offset(o),
            Err(e) => reply.error(e),
        }
    }
}

fn entry(r: R<fuser::FileAttr>, reply: ReplyEntry) {
    match r {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn attr(r: R<fuser::FileAttr>, reply: ReplyAttr) {
    match r {
        Ok(a) => reply.attr(&TTL, &a),
        Err(e) => reply.error(e),
    }
}

fn empty(r: R<()>, reply: impl EmptyReply) {
    match r {
        Ok(()) => reply.done(),
        Err(e) => reply.fail(e),
    }
}

fn xattr(r: R<Xattr>, reply: ReplyXattr) {
    match r {
        Ok(Xattr::Size(n)) => reply.size(n),
        Ok(Xattr::Data(v)) => reply.data(&v),
        Err(e) => reply.error(e),
    }
}

/// The fuser replies that end a request with "ok" or an error.
trait EmptyReply {
    fn done(self);
    fn fail(self, e: fuser::Errno);
}

impl EmptyReply for ReplyEmpty {
    fn done(self) {
        self.ok()
    }
    fn fail(self, e: fuser::Errno) {
        self.error(e)
    }
}

impl EmptyReply for ReplyDirectory {
    fn done(self) {
        self.ok()
    }
    fn fail(self, e: fuser::Errno) {
        self.error(e)
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
