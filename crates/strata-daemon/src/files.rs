//! File operations on a live Workspace for API callers (read, write, list,
//! stat, remove, rename, mkdir), confined to the Workspace's mount.
//!
//! The daemon is root and the files belong to the command's uid, who can
//! plant symlinks anywhere in the Workspace. So no path the caller gives is
//! ever handed to a path-walking call from `/`: the mount root is opened
//! once per request (`O_PATH`), every directory is reached with openat2(2)
//! relative to it with `RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_NO_XDEV` (the kernel refuses, with EXDEV, any resolution that
//! would leave the root: `..` past it, an absolute symlink, a symlink
//! whose `..` climbs out; openat2(2)), and the last component is then
//! acted on with a `*at` call relative to its directory's fd, by name,
//! where nothing is followed: `O_NOFOLLOW`/`O_EXCL` on create,
//! `AT_SYMLINK_NOFOLLOW` on stat, and unlinkat(2)/renameat(2), which act
//! on a symlink itself. A write goes to a new temporary file in the target
//! directory and is renamed over the name, so a symlink there is replaced,
//! never written through. Created files and directories are given to the
//! command's uid:gid (fchown on the new fd), like files a command makes.
//!
//! Reads follow symlinks, still confined (a symlink to `/etc/shadow` is
//! EXDEV, never the host's file), and open with `O_NONBLOCK` so a FIFO a
//! command planted cannot hang the daemon; anything but a regular file is
//! refused after fstat(2).
//!
//! Paths are relative to the Workspace root (a leading `/` means the
//! root); empty paths, NUL bytes and `..` components are refused before
//! anything is opened. No walk recurses on tree depth (a recursive remove
//! keeps its own work list).

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::path::Path;

use base64::Engine;
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::api::{FileEntry, FileKind};

/// Confinement of every resolution below the mount root (openat2(2)).
const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Prefix of the temporary file a write goes to before its rename.
pub const TMP_PREFIX: &str = ".strata-put-";

/// A file operation that failed: each variant says which answer it is.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The path is malformed (400): refused before anything was opened.
    #[error("path {path:?} {reason}")]
    BadPath { path: String, reason: String },
    /// The path exists in a state the operation refuses (409).
    #[error("{path:?} {reason}")]
    Conflict {
        path: String,
        reason: String,
        errno: i32,
    },
    /// A system call failed; the errno decides the answer.
    #[error("could not {action} {path:?}: {source}")]
    Os {
        action: &'static str,
        path: String,
        source: Errno,
    },
}

type Result<T> = std::result::Result<T, FileError>;

fn os(action: &'static str, path: &str) -> impl FnOnce(Errno) -> FileError {
    let path = path.to_string();
    move |source| FileError::Os {
        action,
        path,
        source,
    }
}

/// A path inside a Workspace, checked lexically: the names between
/// slashes, none empty, `.` or `..`. No components = the root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath {
    shown: String,
    parts: Vec<String>,
}

impl RelPath {
    /// Check `p` (`a/b`, `/a/b`, `a//b/`, `.` and `/` for the root).
    pub fn parse(p: &str) -> Result<RelPath> {
        let bad = |reason: &str| FileError::BadPath {
            path: p.to_string(),
            reason: reason.to_string(),
        };
        if p.is_empty() {
            return Err(bad(
                "is empty: give a path relative to the Workspace root (\"/\" or \".\" is the root)",
            ));
        }
        if p.contains('\0') {
            return Err(bad("contains a NUL byte"));
        }
        let mut parts = Vec::new();
        for c in p.split('/') {
            match c {
                "" | "." => {}
                ".." => {
                    return Err(bad(
                        "has a '..' component: give the path from the Workspace root without '..'",
                    ))
                }
                name => parts.push(name.to_string()),
            }
        }
        Ok(RelPath {
            shown: parts.join("/"),
            parts,
        })
    }

    /// Slash-joined, `""` for the root.
    pub fn as_str(&self) -> &str {
        &self.shown
    }

    fn is_root(&self) -> bool {
        self.parts.is_empty()
    }

    /// The path for openat2: `.` for the root.
    fn at(&self) -> &str {
        if self.is_root() {
            "."
        } else {
            &self.shown
        }
    }

    /// The parent and the last name; `None` for the root.
    fn split(&self) -> Option<(RelPath, &str)> {
        let (name, rest) = self.parts.split_last()?;
        let parent = RelPath {
            shown: rest.join("/"),
            parts: rest.to_vec(),
        };
        Some((parent, name))
    }

    fn child(&self, name: &str) -> RelPath {
        let mut parts = self.parts.clone();
        parts.push(name.to_string());
        RelPath {
            shown: parts.join("/"),
            parts,
        }
    }
}

/// The mount root of one Workspace, opened for one request, and the owner
/// given to what the request creates.
pub struct Root {
    fd: OwnedFd,
    owner: (u32, u32),
}

/// A write in progress: bytes go to a temporary file beside the target;
/// [`PendingWrite::finish`] renames it over the name. Dropped unfinished,
/// the temporary file is removed.
pub struct PendingWrite {
    parent: OwnedFd,
    tmp: String,
    name: String,
    path: RelPath,
    file: File,
    written: u64,
    done: bool,
}

impl Root {
    /// Open the mount root `mount` (no symlink followed on the way: the
    /// daemon made and checked the mount path).
    pub fn open(mount: &Path, owner: (u32, u32)) -> Result<Root> {
        let shown = mount.display().to_string();
        let fd = rfs::open(
            mount,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(os("open the Workspace mount", &shown))?;
        Ok(Root { fd, owner })
    }

    /// openat2 below the root; EAGAIN (a concurrent rename raced the
    /// lookup, which RESOLVE_BENEATH reports instead of guessing) is
    /// retried a few times.
    fn resolve(&self, rel: &str, flags: OFlags) -> std::result::Result<OwnedFd, Errno> {
        let mut tries = 0;
        loop {
            match rfs::openat2(
                &self.fd,
                rel,
                flags | OFlags::CLOEXEC,
                Mode::empty(),
                RESOLVE,
            ) {
                Err(Errno::AGAIN) if tries < 8 => tries += 1,
                r => return r,
            }
        }
    }

    fn dir(&self, p: &RelPath) -> Result<OwnedFd> {
        self.resolve(p.at(), OFlags::PATH | OFlags::DIRECTORY)
            .map_err(os("open the directory", p.as_str()))
    }

    /// The directory of `p`'s last name, and the name. The root has none.
    fn parent_of<'a>(&self, p: &'a RelPath, what: &str) -> Result<(OwnedFd, &'a str)> {
        let Some((parent, name)) = p.split() else {
            return Err(FileError::Conflict {
                path: "/".into(),
                reason: format!("is the Workspace root, which cannot be {what}"),
                errno: libc::EBUSY,
            });
        };
        Ok((self.dir(&parent)?, name))
    }

    /// Open a regular file for reading; returns it and its size.
    pub fn open_read(&self, p: &RelPath) -> Result<(File, u64)> {
        let fd = self
            .resolve(p.at(), OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY)
            .map_err(os("open", p.as_str()))?;
        let st = rfs::fstat(&fd).map_err(os("stat", p.as_str()))?;
        let kind = FileType::from_raw_mode(st.st_mode);
        if kind != FileType::RegularFile {
            return Err(FileError::Conflict {
                path: p.as_str().into(),
                reason: format!(
                    "is not a regular file ({}); read files only (list a directory with ls)",
                    kind_of(kind)
                ),
                errno: if kind == FileType::Directory {
                    libc::EISDIR
                } else {
                    libc::EINVAL
                },
            });
        }
        Ok((File::from(fd), st.st_size as u64))
    }

    /// lstat: a symlink is described, not followed.
    pub fn stat(&self, p: &RelPath) -> Result<FileEntry> {
        match p.split() {
            None => {
                let st = rfs::fstat(&self.fd).map_err(os("stat", "/"))?;
                Ok(entry(b"", &st, None))
            }
            Some(_) => {
                let (dir, name) = self.parent_of(p, "described")?;
                stat_at(&dir, name, p.as_str())
            }
        }
    }

    /// The entries of a directory, sorted by name.
    pub fn list(&self, p: &RelPath) -> Result<Vec<FileEntry>> {
        let fd = self
            .resolve(p.at(), OFlags::RDONLY | OFlags::DIRECTORY)
            .map_err(os("open the directory", p.as_str()))?;
        let mut out = Vec::new();
        for e in rfs::Dir::read_from(&fd).map_err(os("list", p.as_str()))? {
            let e = e.map_err(os("list", p.as_str()))?;
            let name = e.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            match stat_at(&fd, name, p.as_str()) {
                Ok(entry) => out.push((name.to_vec(), entry)),
                // Removed between readdir and stat: not listed.
                Err(FileError::Os {
                    source: Errno::NOENT,
                    ..
                }) => {}
                Err(e) => return Err(e),
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out.into_iter().map(|(_, e)| e).collect())
    }

    /// Make a directory (with `parents`: and the missing ones above it,
    /// and succeed if it exists).
    pub fn mkdir(&self, p: &RelPath, parents: bool) -> Result<FileEntry> {
        if parents {
            self.ensure_dir(p)?;
            return self.stat(p);
        }
        let (dir, name) = self.parent_of(p, "made")?;
        self.make_dir_at(&dir, name, p)?;
        stat_at(&dir, name, p.as_str())
    }

    fn make_dir_at(&self, dir: &OwnedFd, name: &str, p: &RelPath) -> Result<()> {
        match rfs::mkdirat(dir, name, Mode::from_raw_mode(0o755)) {
            Ok(()) => {}
            Err(Errno::EXIST) => {
                return Err(FileError::Conflict {
                    path: p.as_str().into(),
                    reason: "exists already".into(),
                    errno: libc::EEXIST,
                })
            }
            Err(e) => return Err(os("make the directory", p.as_str())(e)),
        }
        // Owner and exact mode (not the daemon's umask) through an fd of
        // the new directory, opened by name with O_NOFOLLOW: a symlink a
        // command swapped in meanwhile is refused (ELOOP), never followed.
        let fd = rfs::openat(
            dir,
            name,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(os("open the new directory", p.as_str()))?;
        self.give(fd.as_fd(), 0o755, p)
    }

    /// The owner first (chown(2) may clear mode bits), then the mode.
    fn give(&self, fd: BorrowedFd<'_>, mode: u32, p: &RelPath) -> Result<()> {
        rfs::fchown(
            fd,
            Some(rfs::Uid::from_raw(self.owner.0)),
            Some(rfs::Gid::from_raw(self.owner.1)),
        )
        .map_err(os("give to the command's uid", p.as_str()))?;
        rfs::fchmod(fd, Mode::from_raw_mode(mode)).map_err(os("set the mode of", p.as_str()))
    }

    /// `mkdir -p`: each missing directory made and given to the owner.
    fn ensure_dir(&self, p: &RelPath) -> Result<OwnedFd> {
        let mut cur = RelPath::parse("/")?;
        let mut fd = self.dir(&cur)?;
        for name in &p.parts {
            let next = cur.child(name);
            fd = match self.resolve(next.at(), OFlags::PATH | OFlags::DIRECTORY) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    match self.make_dir_at(&fd, name, &next) {
                        Ok(()) | Err(FileError::Conflict { .. }) => {}
                        Err(e) => return Err(e),
                    }
                    self.dir(&next)?
                }
                Err(e) => return Err(os("open the directory", next.as_str())(e)),
            };
            cur = next;
        }
        Ok(fd)
    }

    /// Remove a file, symlink (itself) or empty directory; with
    /// `recursive` a directory and everything under it.
    pub fn remove(&self, p: &RelPath, recursive: bool) -> Result<()> {
        let (dir, name) = self.parent_of(p, "removed")?;
        let st =
            rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(os("stat", p.as_str()))?;
        if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
            return rfs::unlinkat(&dir, name, AtFlags::empty()).map_err(os("remove", p.as_str()));
        }
        if !recursive {
            return match rfs::unlinkat(&dir, name, AtFlags::REMOVEDIR) {
                Err(Errno::NOTEMPTY) => Err(FileError::Conflict {
                    path: p.as_str().into(),
                    reason: "is a directory that is not empty: remove it with recursive=true"
                        .into(),
                    errno: libc::ENOTEMPTY,
                }),
                r => r.map_err(os("remove the directory", p.as_str())),
            };
        }
        self.remove_tree(p)
    }

    /// Post-order removal with a work list (no recursion on depth). Each
    /// directory is opened below the root with O_NOFOLLOW; its entries are
    /// removed by name relative to its fd.
    fn remove_tree(&self, top: &RelPath) -> Result<()> {
        let mut work: Vec<(RelPath, bool)> = vec![(top.clone(), false)];
        while let Some((p, emptied)) = work.pop() {
            if emptied {
                let (dir, name) = self.parent_of(&p, "removed")?;
                rfs::unlinkat(&dir, name, AtFlags::REMOVEDIR)
                    .map_err(os("remove the directory", p.as_str()))?;
                continue;
            }
            let fd = self
                .resolve(
                    p.at(),
                    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW,
                )
                .map_err(os("open the directory", p.as_str()))?;
            work.push((p.clone(), true));
            for e in rfs::Dir::read_from(&fd).map_err(os("list", p.as_str()))? {
                let e = e.map_err(os("list", p.as_str()))?;
                let raw = e.file_name().to_bytes();
                if raw == b"." || raw == b".." {
                    continue;
                }
                let Ok(name) = std::str::from_utf8(raw) else {
                    return Err(FileError::Conflict {
                        path: p.as_str().into(),
                        reason: "holds a name that is not UTF-8, which this API cannot address: remove it with an exec (rm -r)".into(),
                        errno: libc::EINVAL,
                    });
                };
                let st = rfs::statat(&fd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(os("stat", p.child(name).as_str()))?;
                if FileType::from_raw_mode(st.st_mode) == FileType::Directory {
                    work.push((p.child(name), false));
                } else {
                    rfs::unlinkat(&fd, name, AtFlags::empty())
                        .map_err(os("remove", p.child(name).as_str()))?;
                }
            }
        }
        Ok(())
    }

    /// rename(2) inside the Workspace: `to` is replaced if rename(2)
    /// allows; a symlink is moved, not followed.
    pub fn rename(&self, from: &RelPath, to: &RelPath) -> Result<FileEntry> {
        let (fdir, fname) = self.parent_of(from, "renamed")?;
        let (tdir, tname) = self.parent_of(to, "replaced")?;
        rfs::renameat(&fdir, fname, &tdir, tname).map_err(|e| match e {
            Errno::INVAL => FileError::Conflict {
                path: from.as_str().into(),
                reason: format!("cannot move into itself ({:?})", to.as_str()),
                errno: libc::EINVAL,
            },
            e => os("rename", from.as_str())(e),
        })?;
        stat_at(&tdir, tname, to.as_str())
    }

    /// Start writing `p` (parents made as needed). `mode`: permission
    /// bits; default the replaced file's, or 0644.
    pub fn begin_write(&self, p: &RelPath, mode: Option<u32>) -> Result<PendingWrite> {
        let Some((parent, name)) = p.split() else {
            return Err(FileError::Conflict {
                path: "/".into(),
                reason: "is the Workspace root, a directory: give a file path".into(),
                errno: libc::EISDIR,
            });
        };
        let dir = self.ensure_dir(&parent)?;
        let old_mode = match rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => match FileType::from_raw_mode(st.st_mode) {
                FileType::Directory => {
                    return Err(FileError::Conflict {
                        path: p.as_str().into(),
                        reason: "is a directory: remove it first to write a file there".into(),
                        errno: libc::EISDIR,
                    })
                }
                FileType::RegularFile => Some(st.st_mode & 0o777),
                _ => None,
            },
            Err(Errno::NOENT) => None,
            Err(e) => return Err(os("stat", p.as_str())(e)),
        };
        let mode = mode.or(old_mode).unwrap_or(0o644);
        let tmp = format!("{TMP_PREFIX}{:016x}", rand::random::<u64>());
        let fd = rfs::openat(
            &dir,
            tmp.as_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(os("create a temporary file beside", p.as_str()))?;
        // Removed again on any failure from here (PendingWrite's drop).
        let pending = PendingWrite {
            parent: dir,
            tmp,
            name: name.to_string(),
            path: p.clone(),
            file: File::from(fd),
            written: 0,
            done: false,
        };
        self.give(pending.file.as_fd(), mode, p)?;
        Ok(pending)
    }
}

impl PendingWrite {
    /// Append bytes.
    pub fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.file
            .write_all_at(bytes, self.written)
            .map_err(|e| FileError::Os {
                action: "write",
                path: self.path.as_str().into(),
                source: Errno::from_io_error(&e).unwrap_or(Errno::IO),
            })?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Rename the temporary file over the name (a symlink there is
    /// replaced, not followed) and describe the result.
    pub fn finish(mut self) -> Result<FileEntry> {
        rfs::renameat(
            &self.parent,
            self.tmp.as_str(),
            &self.parent,
            self.name.as_str(),
        )
        .map_err(|e| match e {
            Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => FileError::Conflict {
                path: self.path.as_str().into(),
                reason: "became a directory while it was written; nothing was replaced".into(),
                errno: e.raw_os_error(),
            },
            e => os("move the written file into place at", self.path.as_str())(e),
        })?;
        self.done = true;
        stat_at(&self.parent, &self.name, self.path.as_str())
    }
}

impl Drop for PendingWrite {
    fn drop(&mut self) {
        if !self.done {
            let _ = rfs::unlinkat(&self.parent, self.tmp.as_str(), AtFlags::empty());
        }
    }
}

fn kind_of(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "a file",
        FileType::Directory => "a directory",
        FileType::Symlink => "a symlink",
        FileType::Fifo => "a FIFO",
        FileType::Socket => "a socket",
        FileType::CharacterDevice | FileType::BlockDevice => "a device",
        _ => "of an unknown type",
    }
}

fn stat_at(dir: &OwnedFd, name: impl AsRef<[u8]>, shown: &str) -> Result<FileEntry> {
    let name = name.as_ref();
    let st = rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW).map_err(os("stat", shown))?;
    let target = if FileType::from_raw_mode(st.st_mode) == FileType::Symlink {
        let t = rfs::readlinkat(dir, name, Vec::new()).map_err(os("read the symlink", shown))?;
        Some(String::from_utf8_lossy(t.as_bytes()).into_owned())
    } else {
        None
    };
    Ok(entry(name, &st, target))
}

fn entry(name: &[u8], st: &rfs::Stat, target: Option<String>) -> FileEntry {
    let kind = match FileType::from_raw_mode(st.st_mode) {
        FileType::RegularFile => FileKind::File,
        FileType::Directory => FileKind::Dir,
        FileType::Symlink => FileKind::Symlink,
        _ => FileKind::Other,
    };
    FileEntry {
        name: String::from_utf8_lossy(name).into_owned(),
        name_b64: base64::engine::general_purpose::STANDARD.encode(name),
        kind,
        size: st.st_size as u64,
        mode: st.st_mode & 0o7777,
        uid: st.st_uid,
        gid: st.st_gid,
        mtime_ms: st.st_mtime * 1000 + st.st_mtime_nsec as i64 / 1_000_000,
        target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_checked_before_anything_opens() {
        for (p, shown) in [
            ("a/b", "a/b"),
            ("/a//b/", "a/b"),
            ("./a/./b", "a/b"),
            ("/", ""),
            (".", ""),
        ] {
            assert_eq!(RelPath::parse(p).unwrap().as_str(), shown, "{p}");
        }
        for p in ["", "a\0b", "..", "../x", "a/../../x", "a/..", "/.."] {
            assert!(
                matches!(RelPath::parse(p), Err(FileError::BadPath { .. })),
                "{p:?} accepted"
            );
        }
    }
}
