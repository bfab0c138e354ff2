//! One request from a ring entry: decode the opcode's arguments, call the
//! transport-independent handler (serve.rs, open.rs, dir.rs) and encode
//! its value as the reply's payload.
//!
//! Where the arguments are (fuse_uring_args_to_ring()): the fuse_in_header
//! in the header's in_out area, the opcode's first argument (its struct,
//! e.g. fuse_write_in) in op_in, and the other arguments one after the
//! other in the payload buffer. Opcodes whose only arguments are names
//! have an empty first argument (fuse_set_zero_arg0()), so their names
//! are in the payload too. A reply's arguments all go to the payload
//! (fuse_uring_copy_from_ring()).

use super::abi::*;
use super::backing::RingBacking;
use crate::fs::{WsFs, TTL};
use crate::node::BackingRef;
use crate::open::Opened;
use crate::serve::{Ctx, Later, SetAttr, Xattr};
use crate::state::R;
use fuser::{Errno, RenameFlags, TimeOrNow, WriteFlags};
use std::os::fd::OwnedFd;
use std::sync::Arc;

/// Requests fuser's session answers even for a caller its ACL refuses
/// (the kernel may send them without the caller's ids): the same list as
/// fuser 0.18's dispatch, so both transports refuse the same requests.
fn acl_exempt(opcode: u32) -> bool {
    matches!(
        opcode,
        DESTROY | READ | READDIR | READDIRPLUS | WRITE | FSYNC | FSYNCDIR | RELEASE | RELEASEDIR
    )
}

/// Serve one request. `op_in` is the header's op_in area, `payload` the
/// bytes the kernel wrote to the payload buffer, `max` the payload
/// buffer's size (no reply may be longer). Returns the reply's payload or
/// the errno.
#[allow(clippy::too_many_arguments)]
pub(super) fn serve(
    fs: &WsFs,
    dev: &Arc<OwnedFd>,
    acl_owner: Option<u32>,
    h: &InHeader,
    op_in: &[u8],
    payload: &[u8],
    max: usize,
    later: &mut Later,
) -> R<Vec<u8>> {
    if acl_owner.is_some_and(|o| o != h.uid) && !acl_exempt(h.opcode) {
        return Err(Errno::EACCES);
    }
    let eio = Errno::EIO;
    let a = Rd::new(op_in);
    let ctx = Ctx {
        uid: h.uid,
        gid: h.gid,
    };
    let ino = h.nodeid;
    let mut names = cstrs(payload);
    let mut name = || names.next().ok_or(eio);
    let mut w = Wr::default();
    let open_backing = |f: &std::fs::File| RingBacking::open(dev, f).map(BackingRef::Ring);
    match h.opcode {
        LOOKUP => {
            let a = fs.op_lookup(ino, name()?)?;
            w.entry(&a, TTL);
        }
        GETATTR => {
            w.attr_out(&fs.op_getattr(ino)?, TTL);
        }
        SETATTR => {
            let valid = a.u32_at(0).ok_or(eio)?;
            let has = |bit| valid & bit != 0;
            let time = |bit, now, s_off, n_off| -> R<Option<TimeOrNow>> {
                if !has(bit) {
                    return Ok(None);
                }
                if has(now) {
                    return Ok(Some(TimeOrNow::Now));
                }
                let s = a.u64_at(s_off).ok_or(eio)? as i64;
                let n = a.u32_at(n_off).ok_or(eio)?;
                Ok(Some(TimeOrNow::SpecificTime(system_time(s, n))))
            };
            let s = SetAttr {
                mode: has(FATTR_MODE).then(|| a.u32_at(68)).flatten(),
                uid: has(FATTR_UID).then(|| a.u32_at(76)).flatten(),
                gid: has(FATTR_GID).then(|| a.u32_at(80)).flatten(),
                size: has(FATTR_SIZE).then(|| a.u64_at(16)).flatten(),
                atime: time(FATTR_ATIME, FATTR_ATIME_NOW, 32, 56)?,
                mtime: time(FATTR_MTIME, FATTR_MTIME_NOW, 40, 60)?,
                ctime: match has(FATTR_CTIME) {
                    true => Some(system_time(
                        a.u64_at(48).ok_or(eio)? as i64,
                        a.u32_at(64).ok_or(eio)?,
                    )),
                    false => None,
                },
            };
            w.attr_out(&fs.op_setattr(ctx, ino, s)?, TTL);
        }
        READLINK => {
            w.bytes(&fs.op_readlink(ino)?);
        }
        SYMLINK => {
            let (n, target) = (name()?, name()?);
            w.entry(&fs.op_symlink(ctx, ino, n, target)?, TTL);
        }
        MKNOD => {
            let (mode, rdev) = (a.u32_at(0).ok_or(eio)?, a.u32_at(4).ok_or(eio)?);
            w.entry(&fs.op_mknod(ctx, ino, name()?, mode, rdev)?, TTL);
        }
        MKDIR => {
            let mode = a.u32_at(0).ok_or(eio)?;
            w.entry(&fs.op_mkdir(ctx, ino, name()?, mode)?, TTL);
        }
        UNLINK => fs.op_remove(ino, name()?, false)?,
        RMDIR => fs.op_remove(ino, name()?, true)?,
        RENAME | RENAME2 => {
            let newdir = a.u64_at(0).ok_or(eio)?;
            let flags = match h.opcode {
                RENAME2 => a.u32_at(8).ok_or(eio)?,
                _ => 0,
            };
            let (old, new) = (name()?, name()?);
            let flags = RenameFlags::from_bits_retain(flags);
            fs.op_rename(ino, old, newdir, new, flags)?;
        }
        LINK => {
            let old = a.u64_at(0).ok_or(eio)?;
            w.entry(&fs.op_link(old, ino, name()?)?, TTL);
        }
        OPEN => {
            let flags = a.u32_at(0).ok_or(eio)? as i32;
            let o = fs.op_open(ctx, ino, flags, later, &open_backing)?;
            let (flags, id) = open_flags(&o)?;
            w.open_out(o.fh, flags, id);
        }
        CREATE => {
            let (flags, mode) = (a.u32_at(0).ok_or(eio)? as i32, a.u32_at(4).ok_or(eio)?);
            let (attr, o) = fs.op_create(ctx, ino, name()?, mode, flags, &open_backing)?;
            let (flags, id) = open_flags(&o)?;
            w.entry(&attr, TTL).open_out(o.fh, flags, id);
        }
        READ => {
            let (off, size) = (a.u64_at(8).ok_or(eio)?, a.u32_at(16).ok_or(eio)?);
            let size = size.min(max as u32);
            w.buf = fs.op_read(ino, off, size)?;
        }
        WRITE => {
            let (off, size) = (a.u64_at(8).ok_or(eio)?, a.u32_at(16).ok_or(eio)?);
            let flags = WriteFlags::from_bits_retain(a.u32_at(20).ok_or(eio)?);
            let data = payload.get(..size as usize).ok_or(eio)?;
            let n = fs.op_write(ino, off, data, flags, later)?;
            w.u32(n).u32(0);
        }
        STATFS => {
            let s = fs.op_statfs()?;
            w.u64(s.blocks)
                .u64(s.bfree)
                .u64(s.bavail)
                .u64(s.files)
                .u64(s.ffree);
            w.u32(s.bsize).u32(s.namelen).u32(s.frsize).u32(0);
            w.bytes(&[0u8; 24]);
        }
        RELEASE => fs.op_release(ino, a.u64_at(0).ok_or(eio)?, later),
        FSYNC => {
            let datasync = a.u32_at(8).ok_or(eio)? & FSYNC_FDATASYNC != 0;
            fs.op_fsync(ino, datasync)?;
        }
        SETXATTR => {
            let (size, flags) = (a.u32_at(0).ok_or(eio)?, a.u32_at(4).ok_or(eio)? as i32);
            let n = name()?;
            let value = payload
                .get(n.len() + 1..n.len() + 1 + size as usize)
                .ok_or(eio)?;
            fs.op_setxattr(ino, n, value, flags)?;
        }
        GETXATTR | LISTXATTR => {
            let size = a.u32_at(0).ok_or(eio)?;
            let x = match h.opcode {
                GETXATTR => fs.op_getxattr(ctx, ino, name()?, size, later)?,
                _ => fs.op_listxattr(ino, size)?,
            };
            match x {
                // struct fuse_getxattr_out {size u32, padding u32}.
                Xattr::Size(n) => {
                    w.u32(n).u32(0);
                }
                Xattr::Data(v) => w.buf = v,
            }
        }
        REMOVEXATTR => fs.op_removexattr(ino, name()?)?,
        FLUSH | FSYNCDIR | DESTROY => {}
        OPENDIR => {
            let (fh, flags) = fs.op_opendir(ino)?;
            w.open_out(fh, flags.bits(), 0);
        }
        READDIR => {
            let (fh, off) = (a.u64_at(0).ok_or(eio)?, a.u64_at(8).ok_or(eio)?);
            let size = (a.u32_at(16).ok_or(eio)? as usize).min(max);
            fs.op_readdir(fh, off, &mut |ino, next, kind, n| {
                !w.dirent(ino, next, kind, n, size)
            })?;
        }
        READDIRPLUS => {
            let (fh, off) = (a.u64_at(0).ok_or(eio)?, a.u64_at(8).ok_or(eio)?);
            let size = (a.u32_at(16).ok_or(eio)? as usize).min(max);
            fs.op_readdirplus(ino, fh, off, &mut |ino, next, n, attr| {
                // struct fuse_direntplus: fuse_entry_out, then fuse_dirent.
                let len = 128 + (24 + n.len()).next_multiple_of(8);
                if w.buf.len() + len > size {
                    return true;
                }
                w.entry(attr, TTL);
                !w.dirent(ino, next, attr.kind, n, usize::MAX)
            })?;
        }
        RELEASEDIR => fs.op_releasedir(a.u64_at(0).ok_or(eio)?),
        ACCESS => fs.op_access(ino)?,
        FALLOCATE => {
            let off = a.u64_at(8).ok_or(eio)?;
            let len = a.u64_at(16).ok_or(eio)?;
            let mode = a.u32_at(24).ok_or(eio)? as i32;
            fs.op_fallocate(ino, off, len, mode)?;
        }
        LSEEK => {
            let off = a.u64_at(8).ok_or(eio)? as i64;
            let whence = a.u32_at(16).ok_or(eio)? as i32;
            w.u64(fs.op_lseek(ino, off, whence)? as u64);
        }
        // What fuser's default `Filesystem` methods answer for the
        // requests the Workspace does not implement.
        _ => return Err(Errno::ENOSYS),
    }
    if w.buf.len() > max {
        return Err(Errno::EIO);
    }
    Ok(w.buf)
}

/// fuse_open_out's open_flags and backing_id: with a backing, the id and
/// FOPEN_PASSTHROUGH (as fuser's opened_passthrough() sends them).
fn open_flags(o: &Opened) -> R<(u32, i32)> {
    match o.backing.as_deref() {
        None => Ok((o.flags.bits(), 0)),
        Some(BackingRef::Ring(b)) => Ok((
            (o.flags | fuser::FopenFlags::FOPEN_PASSTHROUGH).bits(),
            b.id() as i32,
        )),
        // Made through a fuser reply: its id is fuser's secret. Every open
        // of a ring-served mount comes through the ring, so none exists.
        Some(BackingRef::Fuser(_)) => Err(Errno::EIO),
    }
}
