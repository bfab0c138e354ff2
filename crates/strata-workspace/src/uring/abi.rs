//! The FUSE wire format this transport reads and writes, field by field in
//! native byte order, as include/uapi/linux/fuse.h lays it out (every
//! struct there is made of naturally aligned u32/u64 fields with explicit
//! padding, so the offsets below are the C layout's). Decoding is bounds
//! checked: a short buffer is EIO for that request, never a panic.

use fuser::{FileAttr, FileType};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// Commands of IORING_OP_URING_CMD on /dev/fuse (enum fuse_uring_cmd).
pub(super) const CMD_REGISTER: u32 = 1;
pub(super) const CMD_COMMIT_AND_FETCH: u32 = 2;

/// struct fuse_uring_req_header: in_out[128] (fuse_in_header on the way
/// in, fuse_out_header on the way out), op_in[128] (the opcode's first
/// argument), then struct fuse_uring_ent_in_out (32 bytes).
pub(super) const IN_OUT_SZ: usize = 128;
pub(super) const OP_IN_SZ: usize = 128;
pub(super) const ENT_IN_OUT_OFF: usize = IN_OUT_SZ + OP_IN_SZ;
pub(super) const REQ_HEADER_SZ: usize = ENT_IN_OUT_OFF + 32;
/// Offsets in struct fuse_uring_ent_in_out {flags u64, commit_id u64,
/// payload_sz u32, padding u32, reserved u64}.
pub(super) const ENT_COMMIT_ID: usize = ENT_IN_OUT_OFF + 8;
pub(super) const ENT_PAYLOAD_SZ: usize = ENT_IN_OUT_OFF + 16;

/// struct fuse_uring_cmd_req {flags u64, commit_id u64, qid u16,
/// padding[6]}, in the 80-byte command area of a 128-byte SQE.
pub(super) fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_ne_bytes());
    c[16..18].copy_from_slice(&qid.to_ne_bytes());
    c
}

// Opcodes (enum fuse_opcode) this transport serves.
pub(super) const LOOKUP: u32 = 1;
pub(super) const GETATTR: u32 = 3;
pub(super) const SETATTR: u32 = 4;
pub(super) const READLINK: u32 = 5;
pub(super) const SYMLINK: u32 = 6;
pub(super) const MKNOD: u32 = 8;
pub(super) const MKDIR: u32 = 9;
pub(super) const UNLINK: u32 = 10;
pub(super) const RMDIR: u32 = 11;
pub(super) const RENAME: u32 = 12;
pub(super) const LINK: u32 = 13;
pub(super) const OPEN: u32 = 14;
pub(super) const READ: u32 = 15;
pub(super) const WRITE: u32 = 16;
pub(super) const STATFS: u32 = 17;
pub(super) const RELEASE: u32 = 18;
pub(super) const FSYNC: u32 = 20;
pub(super) const SETXATTR: u32 = 21;
pub(super) const GETXATTR: u32 = 22;
pub(super) const LISTXATTR: u32 = 23;
pub(super) const REMOVEXATTR: u32 = 24;
pub(super) const FLUSH: u32 = 25;
pub(super) const OPENDIR: u32 = 27;
pub(super) const READDIR: u32 = 28;
pub(super) const RELEASEDIR: u32 = 29;
pub(super) const FSYNCDIR: u32 = 30;
pub(super) const ACCESS: u32 = 34;
pub(super) const CREATE: u32 = 35;
pub(super) const DESTROY: u32 = 38;
pub(super) const FALLOCATE: u32 = 43;
pub(super) const READDIRPLUS: u32 = 44;
pub(super) const RENAME2: u32 = 45;
pub(super) const LSEEK: u32 = 46;

// struct fuse_setattr_in's `valid` bits (FATTR_*).
pub(super) const FATTR_MODE: u32 = 1 << 0;
pub(super) const FATTR_UID: u32 = 1 << 1;
pub(super) const FATTR_GID: u32 = 1 << 2;
pub(super) const FATTR_SIZE: u32 = 1 << 3;
pub(super) const FATTR_ATIME: u32 = 1 << 4;
pub(super) const FATTR_MTIME: u32 = 1 << 5;
pub(super) const FATTR_ATIME_NOW: u32 = 1 << 7;
pub(super) const FATTR_MTIME_NOW: u32 = 1 << 8;
pub(super) const FATTR_CTIME: u32 = 1 << 10;

/// fsync_flags bit 0: datasync.
pub(super) const FSYNC_FDATASYNC: u32 = 1;

/// Little reader over one argument area.
pub(super) struct Rd<'a> {
    b: &'a [u8],
}

impl<'a> Rd<'a> {
    pub(super) fn new(b: &'a [u8]) -> Rd<'a> {
        Rd { b }
    }

    pub(super) fn u32_at(&self, off: usize) -> Option<u32> {
        Some(u32::from_ne_bytes(
            self.b.get(off..off + 4)?.try_into().ok()?,
        ))
    }

    pub(super) fn u64_at(&self, off: usize) -> Option<u64> {
        Some(u64::from_ne_bytes(
            self.b.get(off..off + 8)?.try_into().ok()?,
        ))
    }
}

/// struct fuse_in_header {len u32, opcode u32, unique u64, nodeid u64,
/// uid u32, gid u32, pid u32, total_extlen u16, padding u16}: 40 bytes.
#[derive(Clone, Copy, Debug)]
pub(super) struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
}

impl InHeader {
    pub(super) fn parse(b: &[u8]) -> Option<InHeader> {
        let r = Rd::new(b);
        Some(InHeader {
            opcode: r.u32_at(4)?,
            unique: r.u64_at(8)?,
            nodeid: r.u64_at(16)?,
            uid: r.u32_at(24)?,
            gid: r.u32_at(28)?,
        })
    }
}

/// struct fuse_out_header {len u32, error i32, unique u64}: 16 bytes.
pub(super) fn out_header(len: u32, error: i32, unique: u64) -> [u8; 16] {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&len.to_ne_bytes());
    h[4..8].copy_from_slice(&error.to_ne_bytes());
    h[8..16].copy_from_slice(&unique.to_ne_bytes());
    h
}

/// Writer of one reply's payload.
#[derive(Default)]
pub(super) struct Wr {
    pub buf: Vec<u8>,
}

impl Wr {
    pub(super) fn u32(&mut self, v: u32) -> &mut Self {
        self.buf.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub(super) fn u64(&mut self, v: u64) -> &mut Self {
        self.buf.extend_from_slice(&v.to_ne_bytes());
        self
    }

    pub(super) fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(b);
        self
    }

    /// Pad to a multiple of 8 (FUSE_DIRENT_ALIGN).
    pub(super) fn align8(&mut self) -> &mut Self {
        while !self.buf.len().is_multiple_of(8) {
            self.buf.push(0);
        }
        self
    }

    /// struct fuse_attr (88 bytes): ino, size, blocks, atime, mtime,
    /// ctime (u64 each), atimensec, mtimensec, ctimensec, mode, nlink,
    /// uid, gid, rdev, blksize, flags (u32 each).
    pub(super) fn attr(&mut self, a: &FileAttr) -> &mut Self {
        let (at, atn) = wire_time(a.atime);
        let (mt, mtn) = wire_time(a.mtime);
        let (ct, ctn) = wire_time(a.ctime);
        self.u64(a.ino.0).u64(a.size).u64(a.blocks);
        self.u64(at as u64).u64(mt as u64).u64(ct as u64);
        self.u32(atn).u32(mtn).u32(ctn);
        self.u32(mode_of(a.kind, a.perm)).u32(a.nlink);
        self.u32(a.uid).u32(a.gid).u32(a.rdev).u32(a.blksize);
        // `flags` is FUSE_ATTR_* (submount, DAX), which we never set.
        self.u32(0)
    }

    /// struct fuse_entry_out (128 bytes): nodeid, generation, entry_valid,
    /// attr_valid (u64), entry_valid_nsec, attr_valid_nsec (u32), attr.
    pub(super) fn entry(&mut self, a: &FileAttr, ttl: Duration) -> &mut Self {
        self.u64(a.ino.0)
            .u64(0)
            .u64(ttl.as_secs())
            .u64(ttl.as_secs());
        self.u32(ttl.subsec_nanos()).u32(ttl.subsec_nanos());
        self.attr(a)
    }

    /// struct fuse_attr_out (104 bytes): attr_valid u64,
    /// attr_valid_nsec u32, dummy u32, attr.
    pub(super) fn attr_out(&mut self, a: &FileAttr, ttl: Duration) -> &mut Self {
        self.u64(ttl.as_secs()).u32(ttl.subsec_nanos()).u32(0);
        self.attr(a)
    }

    /// struct fuse_open_out (16 bytes): fh u64, open_flags u32,
    /// backing_id i32.
    pub(super) fn open_out(&mut self, fh: u64, flags: u32, backing_id: i32) -> &mut Self {
        self.u64(fh).u32(flags).u32(backing_id as u32)
    }

    /// struct fuse_dirent: ino u64, off u64, namelen u32, type u32, name,
    /// padded to 8. Returns false (and writes nothing) past `max` bytes.
    pub(super) fn dirent(
        &mut self,
        ino: u64,
        off: u64,
        kind: FileType,
        name: &[u8],
        max: usize,
    ) -> bool {
        let len = (24 + name.len()).next_multiple_of(8);
        if self.buf.len() + len > max {
            return false;
        }
        self.u64(ino).u64(off).u32(name.len() as u32);
        self.u32(mode_of(kind, 0) >> 12).bytes(name).align8();
        true
    }
}

/// Seconds and nanoseconds as fuser puts them on the wire (before the
/// epoch: negative seconds, positive nanoseconds).
pub(super) fn wire_time(t: SystemTime) -> (i64, u32) {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => (
            i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            d.subsec_nanos(),
        ),
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            match d.subsec_nanos() {
                0 => (-secs, 0),
                n => (-secs - 1, 1_000_000_000 - n),
            }
        }
    }
}

/// Seconds and nanoseconds from the wire (fuse_setattr_in's times).
pub(super) fn system_time(secs: i64, nsecs: u32) -> SystemTime {
    if secs >= 0 {
        UNIX_EPOCH + Duration::new(secs as u64, nsecs)
    } else {
        UNIX_EPOCH - Duration::new(secs.unsigned_abs(), 0) + Duration::new(0, nsecs)
    }
}

pub(super) fn mode_of(kind: FileType, perm: u16) -> u32 {
    let t = match kind {
        FileType::NamedPipe => libc::S_IFIFO,
        FileType::CharDevice => libc::S_IFCHR,
        FileType::BlockDevice => libc::S_IFBLK,
        FileType::Directory => libc::S_IFDIR,
        FileType::RegularFile => libc::S_IFREG,
        FileType::Symlink => libc::S_IFLNK,
        FileType::Socket => libc::S_IFSOCK,
    };
    t | u32::from(perm)
}

/// The NUL-terminated strings of a payload (names, link targets).
pub(super) fn cstrs(b: &[u8]) -> impl Iterator<Item = &[u8]> {
    b.split(|c| *c == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_round_trip_before_and_after_the_epoch() {
        for (s, n) in [(0i64, 0u32), (5, 7), (-1, 500_000_000), (-3, 0)] {
            assert_eq!(wire_time(system_time(s, n)), (s, n));
        }
    }

    #[test]
    fn dirents_are_padded_to_eight_bytes_and_bounded() {
        let mut w = Wr::default();
        assert!(w.dirent(5, 1, FileType::RegularFile, b"abc", 64));
        assert_eq!(w.buf.len(), 32);
        assert_eq!(Rd::new(&w.buf).u32_at(20), Some(libc::S_IFREG >> 12));
        assert!(!w.dirent(6, 2, FileType::Directory, b"abcdefghi", 64));
        assert_eq!(w.buf.len(), 32);
    }
}
