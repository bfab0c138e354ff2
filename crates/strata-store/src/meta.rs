//! Reading and applying file metadata: modes, owners, times, xattrs.

use crate::error::{Result, StoreError};
use std::ffi::OsStr;
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Where to read extended attributes from: a path (not following a
/// symlink), or a file the caller has open, which spares a path walk per
/// file (the closure then names it in errors, built only on an error).
#[derive(Clone, Copy)]
pub(crate) enum XattrSource<'a> {
    Path(&'a Path),
    Fd(BorrowedFd<'a>, &'a dyn Fn() -> PathBuf),
}

/// The `user.` extended attributes of `src`, sorted.
pub(crate) fn read_user_xattrs(src: XattrSource<'_>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let list = |buf: &mut [u8]| match src {
        XattrSource::Path(p) => rustix::fs::llistxattr(p, buf),
        XattrSource::Fd(fd, _) => rustix::fs::flistxattr(fd, buf),
    };
    let get = |name: &OsStr, buf: &mut [u8]| match src {
        XattrSource::Path(p) => rustix::fs::lgetxattr(p, name, buf),
        XattrSource::Fd(fd, _) => rustix::fs::fgetxattr(fd, name, buf),
    };
    let name_it = || match src {
        XattrSource::Path(p) => p.to_path_buf(),
        XattrSource::Fd(_, name_it) => name_it(),
    };
    let mut names = vec![0u8; 1024];
    let n = loop {
        match list(&mut names) {
            Ok(n) => break n,
            Err(rustix::io::Errno::RANGE) => names.resize(names.len() * 4, 0),
            // Filesystems without xattr support have none to preserve.
            Err(rustix::io::Errno::NOTSUP) => return Ok(Vec::new()),
            Err(e) => return Err(StoreError::io("list xattrs of", name_it(), e.into())),
        }
    };
    let mut out = Vec::new();
    for name in names[..n].split(|&b| b == 0).filter(|n| !n.is_empty()) {
        if !name.starts_with(b"user.") {
            continue;
        }
        let cname = OsStr::from_bytes(name);
        let mut val = vec![0u8; 256];
        let len = loop {
            match get(cname, &mut val) {
                Ok(l) => break l,
                Err(rustix::io::Errno::RANGE) => val.resize(val.len() * 4, 0),
                Err(rustix::io::Errno::NODATA) => break usize::MAX,
                Err(e) => return Err(StoreError::io("read xattr of", name_it(), e.into())),
            }
        };
        if len != usize::MAX {
            val.truncate(len);
            out.push((name.to_vec(), val));
        }
    }
    out.sort();
    Ok(out)
}

pub(crate) fn set_xattrs(path: &Path, xattrs: &[(Vec<u8>, Vec<u8>)]) -> Result<()> {
    for (k, v) in xattrs {
        rustix::fs::lsetxattr(
            path,
            OsStr::from_bytes(k),
            v,
            rustix::fs::XattrFlags::empty(),
        )
        .map_err(|e| StoreError::io("set xattr on", path, e.into()))?;
    }
    Ok(())
}

pub(crate) fn set_mtime(path: &Path, mtime_ns: i64) -> Result<()> {
    let ts = rustix::fs::Timespec {
        tv_sec: mtime_ns.div_euclid(1_000_000_000),
        tv_nsec: mtime_ns.rem_euclid(1_000_000_000) as _,
    };
    let times = rustix::fs::Timestamps {
        last_access: ts,
        last_modification: ts,
    };
    rustix::fs::utimensat(
        rustix::fs::CWD,
        path,
        &times,
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .map_err(|e| StoreError::io("set times of", path, e.into()))
}
