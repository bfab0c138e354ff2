//! Removing a directory tree of any depth: what a backend's delete does to
//! a Sandbox's state directory, whose scratch space commands write into.
//!
//! `std::fs::remove_dir_all` recurses once per level and keeps one open
//! directory per level, so a tree a few thousand levels deep can overflow
//! a small stack (an abort of the whole process, e.g. an SDK user's tokio
//! worker) or run out of file descriptors. This walk keeps its own stack of
//! directories, holds at most `MAX_OPEN` of them open (a directory closed on
//! the way down is reopened through `..` of its child on the way up, and
//! checked to be the same inode), and works relative to open directories
//! (openat, unlinkat), so paths longer than PATH_MAX are no obstacle. It
//! never follows a symlink: a link is unlinked, never entered.

use rustix::fs::{openat, statat, unlinkat, AtFlags, Dir, FileType, Mode, OFlags, CWD};
use std::ffi::CString;
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Directories kept open at once (the deepest ones).
const MAX_OPEN: usize = 32;

/// How often a directory is listed again because entries appeared in it
/// while it was being emptied, before giving up with ENOTEMPTY.
const MAX_RESCANS: u32 = 8;

struct Frame {
    /// None while closed to stay under `MAX_OPEN`.
    fd: Option<OwnedFd>,
    /// The name in the parent (the full path for the root).
    name: CString,
    /// (dev, ino), to check a reopened directory is the one left.
    id: (u64, u64),
    /// Subdirectories still to empty and remove.
    pending: Vec<CString>,
    rescans: u32,
}

fn dir_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

fn open_frame(fd: OwnedFd, name: CString) -> io::Result<Frame> {
    let st = rustix::fs::fstat(&fd)?;
    Ok(Frame {
        fd: Some(fd),
        name,
        id: (st.st_dev, st.st_ino),
        pending: Vec::new(),
        rescans: 0,
    })
}

/// List the directory open as `fd`: unlink everything but subdirectories,
/// which are returned.
fn empty_files(fd: &OwnedFd) -> io::Result<Vec<CString>> {
    let mut dirs = Vec::new();
    let mut dir = Dir::read_from(fd)?;
    while let Some(entry) = dir.read() {
        let entry = entry?;
        let name = entry.file_name();
        if name.to_bytes() == b"." || name.to_bytes() == b".." {
            continue;
        }
        let is_dir = match entry.file_type() {
            FileType::Directory => true,
            FileType::Unknown => match statat(fd, name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => FileType::from_raw_mode(st.st_mode) == FileType::Directory,
                Err(rustix::io::Errno::NOENT) => continue,
                Err(e) => return Err(e.into()),
            },
            _ => false,
        };
        if is_dir {
            dirs.push(name.to_owned());
        } else {
            match unlinkat(fd, name, AtFlags::empty()) {
                Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(dirs)
}

/// Remove `path` and everything below it, as `std::fs::remove_dir_all`
/// does (a symlink or file at `path` is unlinked), at any depth and with a
/// bounded number of open file descriptors.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let cpath = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path with a NUL byte"))?;
    let root = match openat(CWD, cpath.as_c_str(), dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        // A symlink (O_NOFOLLOW) or a file: unlink it, never follow it.
        Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
            return std::fs::remove_file(path)
        }
        Err(e) => return Err(e.into()),
    };
    let mut stack = vec![open_frame(root, cpath)?];
    let mut scanned = false;
    while let Some(top) = stack.last_mut() {
        let fd = top.fd.as_ref().ok_or_else(|| {
            io::Error::other("a directory being removed was left closed (an internal error)")
        })?;
        if !scanned {
            top.pending = empty_files(fd)?;
            scanned = true;
        }
        if let Some(name) = top.pending.pop() {
            let child = match openat(fd, name.as_c_str(), dir_flags(), Mode::empty()) {
                Ok(c) => c,
                Err(rustix::io::Errno::NOENT) => continue,
                // Replaced by a non-directory meanwhile: unlink that.
                Err(rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR) => {
                    match unlinkat(fd, name.as_c_str(), AtFlags::empty()) {
                        Ok(()) | Err(rustix::io::Errno::NOENT) => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Err(e) => return Err(e.into()),
            };
            stack.push(open_frame(child, name)?);
            scanned = false;
            if stack.len() > MAX_OPEN {
                let i = stack.len() - 1 - MAX_OPEN;
                stack[i].fd = None;
            }
            continue;
        }
        // Empty now: remove it from its parent (reopened if it was closed).
        let Some(done) = stack.pop() else { break };
        let Some(parent) = stack.last_mut() else {
            drop(done.fd);
            return std::fs::remove_dir(path);
        };
        if parent.fd.is_none() {
            let fd = done.fd.as_ref().ok_or_else(|| {
                io::Error::other("a directory being removed was left closed (an internal error)")
            })?;
            let up = openat(fd, c"..", dir_flags(), Mode::empty())?;
            let st = rustix::fs::fstat(&up)?;
            if (st.st_dev, st.st_ino) != parent.id {
                return Err(io::Error::other(format!(
                    "{} changed while it was being removed (a directory was moved); nothing more was removed",
                    path.display()
                )));
            }
            parent.fd = Some(up);
        }
        drop(done.fd);
        let pfd = parent.fd.as_ref().expect("just opened");
        match unlinkat(pfd, done.name.as_c_str(), AtFlags::REMOVEDIR) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => {}
            // Something was created in it meanwhile: empty it again.
            Err(rustix::io::Errno::NOTEMPTY) if done.rescans < MAX_RESCANS => {
                let fd = openat(pfd, done.name.as_c_str(), dir_flags(), Mode::empty())?;
                let mut again = open_frame(fd, done.name)?;
                again.rescans = done.rescans + 1;
                stack.push(again);
                scanned = false;
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        // The parent's listing was taken before we went down: go on with
        // its pending subdirectories, without listing it again.
        scanned = true;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deep(root: &Path, depth: usize) {
        let flags = dir_flags();
        std::fs::create_dir_all(root).unwrap();
        let mut fd = openat(CWD, root, flags, Mode::empty()).unwrap();
        for i in 0..depth {
            rustix::fs::mkdirat(&fd, "d", Mode::from_raw_mode(0o755)).unwrap();
            if i % 7 == 0 {
                let f = openat(
                    &fd,
                    "f",
                    OFlags::WRONLY | OFlags::CREATE | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o644),
                )
                .unwrap();
                drop(f);
                rustix::fs::symlinkat("/", &fd, "link-to-root").unwrap();
                rustix::fs::mkdirat(&fd, "side", Mode::from_raw_mode(0o755)).unwrap();
            }
            fd = openat(&fd, "d", flags, Mode::empty()).unwrap();
        }
    }

    /// Deeper than PATH_MAX allows a path to name, on a 128 KiB stack (on
    /// tmpfs if there is one: the root filesystem here is ext4 mounted with
    /// `discard`, where every rmdir waits for a TRIM).
    #[test]
    fn removes_a_tree_deeper_than_path_max_on_a_small_stack() {
        let tmp = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm").unwrap()
        } else {
            tempfile::tempdir().unwrap()
        };
        let root = tmp.path().join("state");
        deep(&root, 3_000);
        let r = root.clone();
        std::thread::Builder::new()
            .stack_size(128 * 1024)
            .spawn(move || remove_tree(&r))
            .unwrap()
            .join()
            .unwrap()
            .expect("remove_tree");
        assert!(!root.exists());
        // The symlinks' target is untouched.
        assert!(Path::new("/").read_dir().unwrap().next().is_some());
    }

    #[test]
    fn a_symlink_or_a_file_is_unlinked_and_never_followed() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"x").unwrap();
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        remove_tree(&link).unwrap();
        assert!(target.join("keep").exists());
        let file = tmp.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        remove_tree(&file).unwrap();
        assert!(!file.exists());
        assert!(remove_tree(&tmp.path().join("missing")).is_err());
    }
}
