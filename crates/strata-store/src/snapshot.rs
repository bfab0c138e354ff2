//! Snapshot: commit a host directory's current state as the next commit on a
//! branch. Files are read, chunked, hashed and compressed on every core
//! (rayon: each directory, and each batch of its names, is a task of one
//! scope); one writer thread inserts the objects in bounded transactions;
//! the trees are built bottom-up by a walk with its own stack; the commit
//! and the branch head are published last, in one transaction. No part of
//! it recurses on the depth of the tree.

use crate::error::{Result, StoreError};
use crate::files::Sink;
use crate::id::ObjectId;
use crate::meta::{read_user_xattrs, XattrSource};
use crate::object::{Commit, EntryKind, FileContent, TreeEntry};
use crate::objects::Prepared;
use crate::progress::Progress;
use crate::refs::{BranchRef, Target};
use crate::store::Store;
use crate::trees::build_tree;
use rustix::fs::{AtFlags, FileType, Mode, OFlags, StatxFlags};
use std::collections::{BTreeMap, HashMap};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Mutex};

/// What a snapshot did.
#[derive(Clone, Debug, Default)]
pub struct SnapshotReport {
    /// The new commit, or the unchanged head when `unchanged`.
    pub commit: Option<ObjectId>,
    /// The tree equals the parent's: no commit was written and the branch
    /// did not move (like a Workspace commit with no changes).
    pub unchanged: bool,
    pub files: u64,
    pub dirs: u64,
    pub symlinks: u64,
    pub bytes: u64,
    /// Objects that were not in the Store before, and their stored bytes.
    pub new_objects: u64,
    pub new_bytes: u64,
    /// Entries that were skipped (sockets, devices), one sentence each.
    pub warnings: Vec<String>,
}

/// A directory found by the scan: where it is, its tree in the parent
/// commit (for deltas), and its entries in no particular order until the
/// trees are built.
struct DirScan {
    path: PathBuf,
    prev: Option<ObjectId>,
    items: Vec<Scanned>,
}

/// A scanned entry before hard-link groups and tree ids are assigned.
struct Scanned {
    entry: TreeEntry,
    /// (dev, ino) when the file has other hard links.
    inode: Option<(u64, u64)>,
    /// A directory: its index in the scan's list of directories.
    dir: Option<usize>,
}

/// What `scan_entry` found: the entry, and for a directory its tree in
/// the parent commit (Some(prev)), to be scanned as a task of its own.
type Found = Option<(Scanned, Option<Option<ObjectId>>)>;

/// Names handed to one task: large enough that a task costs more than its
/// scheduling and its one message to the writer, small enough that a big
/// directory still spreads over every core.
const NAMES_PER_TASK: usize = 64;

/// The scan's shared state. Directories are a flat list (index 0 is the
/// source root) and every task is spawned into one `rayon::scope`: a task
/// never waits for another, so no stack, of the caller or of a pool
/// thread, grows with the depth of the tree (a deep tree used to
/// overflow the stack, which aborts the process).
struct Scan<'a> {
    ctx: &'a Ctx<'a>,
    tx: &'a SyncSender<Vec<Prepared>>,
    dirs: Mutex<Vec<DirScan>>,
    failed: AtomicBool,
    error: Mutex<Option<StoreError>>,
}

struct Ctx<'a> {
    store: &'a Store,
    progress: &'a dyn Progress,
    warnings: Mutex<Vec<String>>,
    store_dir: PathBuf,
}

impl Store {
    /// Commit the current state of `dir` as the next commit on `b`.
    pub fn snapshot(
        &self,
        b: &BranchRef,
        dir: &Path,
        message: &str,
        progress: &dyn Progress,
    ) -> Result<SnapshotReport> {
        let head = self.branch_head(b)?;
        self.snapshot_into(Target::Move(b, head), Some(head), dir, message, progress)
    }

    /// Create project `name` whose `main` branch's first commit is `dir`.
    pub fn create_project_from(
        &self,
        name: &str,
        dir: &Path,
        message: &str,
        progress: &dyn Progress,
    ) -> Result<SnapshotReport> {
        let b = BranchRef::new(name, "main")?;
        if self.list_projects()?.iter().any(|p| p == name) {
            return Err(StoreError::AlreadyExists {
                what: "project",
                name: name.to_string(),
            });
        }
        self.snapshot_into(Target::NewProject(&b), None, dir, message, progress)
    }

    fn snapshot_into(
        &self,
        target: Target<'_>,
        parent: Option<ObjectId>,
        dir: &Path,
        message: &str,
        progress: &dyn Progress,
    ) -> Result<SnapshotReport> {
        let src = dir
            .canonicalize()
            .map_err(|e| StoreError::io("open the snapshot source", dir, e))?;
        if !src.is_dir() {
            return Err(StoreError::Invalid(format!(
                "{} is not a directory; snapshot takes a directory",
                dir.display()
            )));
        }
        let store_dir = self
            .dir()
            .canonicalize()
            .map_err(|e| StoreError::io("resolve", self.dir(), e))?;
        if store_dir.starts_with(&src) {
            return Err(StoreError::SourceContainsStore {
                source_dir: src,
                store: store_dir,
            });
        }
        let prev_tree = match parent {
            Some(p) => Some(self.read_commit(p)?.tree),
            None => None,
        };
        let _session = self.write_session()?;
        let ctx = Ctx {
            store: self,
            progress,
            warnings: Mutex::new(Vec::new()),
            store_dir,
        };
        progress.start("import", None);
        // One message per directory: per-object messages cost more in futex
        // wake-ups than the objects cost to insert.
        let (tx, rx) = sync_channel::<Vec<Prepared>>(64);
        let (scan, written) = std::thread::scope(|s| {
            let writer = s.spawn(move || -> Result<(u64, u64)> {
                let mut batch = crate::files::Batch::new(self);
                for v in rx {
                    for p in v {
                        batch.push(p)?;
                    }
                }
                batch.flush()?;
                Ok((batch.new_objects, batch.new_bytes))
            });
            let scan = scan_tree(&ctx, &src, prev_tree, &tx);
            let root_meta =
                std::fs::symlink_metadata(&src).map_err(|e| StoreError::io("stat", &src, e));
            let built = scan.and_then(|dirs| {
                let mut report = SnapshotReport::default();
                let tree = assign_and_build(dirs, &mut report, &tx)?;
                Ok((tree, report, root_meta?))
            });
            drop(tx);
            let written = writer.join().expect("writer thread panicked");
            (built, written)
        });
        progress.finish();
        // A writer that failed (a full disk) stops the scan too, whose own
        // error then only says that the writer stopped: report the cause.
        let (new_objects, new_bytes) = match (&scan, written) {
            (Err(_), Err(w)) => return Err(w),
            (_, w) => w?,
        };
        let (tree, mut report, root_meta) = scan?;
        report.new_objects = new_objects;
        report.new_bytes = new_bytes;
        report.warnings = ctx.warnings.into_inner().unwrap_or_default();
        if let Some(p) = parent {
            if prev_tree == Some(tree) {
                report.commit = Some(p);
                report.unchanged = true;
                return Ok(report);
            }
        }
        let mut metadata = BTreeMap::new();
        metadata.insert("source".to_string(), src.display().to_string());
        metadata.insert(
            "root_mode".into(),
            format!("{:o}", root_meta.mode() & 0o7777),
        );
        let commit = Commit {
            tree,
            parents: parent.into_iter().collect(),
            message: message.to_string(),
            time_ns: crate::now_ns(),
            metadata,
            file_bytes: Some(report.bytes),
            entries: Some(report.files + report.dirs + report.symlinks),
        };
        report.commit = Some(self.publish(target, &commit)?);
        Ok(report)
    }
}

/// Scan `root` into a flat list of directories (index 0 is `root`), sending
/// every file's objects to the writer as they are prepared.
fn scan_tree(
    ctx: &Ctx<'_>,
    root: &Path,
    prev_tree: Option<ObjectId>,
    tx: &SyncSender<Vec<Prepared>>,
) -> Result<Vec<DirScan>> {
    let scan = Scan {
        ctx,
        tx,
        dirs: Mutex::new(vec![DirScan {
            path: root.to_path_buf(),
            prev: prev_tree,
            items: Vec::new(),
        }]),
        failed: AtomicBool::new(false),
        error: Mutex::new(None),
    };
    rayon::scope(|s| s.spawn(|s| scan_dir(&scan, s, 0)));
    if let Some(e) = lock(&scan.error).take() {
        return Err(e);
    }
    Ok(scan.dirs.into_inner().unwrap_or_else(|p| p.into_inner()))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Scan<'_> {
    /// Record the first error; every task not yet started then does nothing.
    fn fail(&self, e: StoreError) {
        self.failed.store(true, Ordering::Relaxed);
        lock(&self.error).get_or_insert(e);
    }
}

/// List directory `d` and spawn one task per `NAMES_PER_TASK` of its names.
fn scan_dir<'s>(scan: &'s Scan<'s>, s: &rayon::Scope<'s>, d: usize) {
    if scan.failed.load(Ordering::Relaxed) {
        return;
    }
    let (dir, prev_tree) = {
        let dirs = lock(&scan.dirs);
        (dirs[d].path.clone(), dirs[d].prev)
    };
    let listed = (|| -> Result<_> {
        let prev: HashMap<Vec<u8>, TreeEntry> = match prev_tree {
            Some(t) => scan
                .ctx
                .store
                .list_tree(t)?
                .into_iter()
                .map(|e| (e.name.clone(), e))
                .collect(),
            None => HashMap::new(),
        };
        let mut names = Vec::new();
        for e in std::fs::read_dir(&dir).map_err(|e| StoreError::io("list", &dir, e))? {
            let e = e.map_err(|e| StoreError::io("list", &dir, e))?;
            names.push(e.file_name());
        }
        Ok((prev, names))
    })();
    let (prev, mut names) = match listed {
        Ok(x) => x,
        Err(e) => return scan.fail(e),
    };
    let dir = Arc::new(dir);
    let prev = Arc::new(prev);
    while !names.is_empty() {
        let rest = names.split_off(names.len().saturating_sub(NAMES_PER_TASK));
        let (dir, prev) = (dir.clone(), prev.clone());
        s.spawn(move |s| scan_names(scan, s, d, &dir, &prev, rest));
    }
}

/// Scan some entries of directory `d`: files are read and cut into objects
/// here; each subdirectory becomes a new directory of the scan and a task.
/// The directory is opened once per task and every entry is reached
/// relative to it (statx, openat, flistxattr): a path-based call per entry
/// walked the whole path again, three times per file, which perf showed.
/// The descriptor lives only as long as the task, so open descriptors stay
/// bounded by the number of threads however wide or deep the tree is.
fn scan_names<'s>(
    scan: &'s Scan<'s>,
    s: &rayon::Scope<'s>,
    d: usize,
    dir: &Path,
    prev: &HashMap<Vec<u8>, TreeEntry>,
    names: Vec<OsString>,
) {
    if scan.failed.load(Ordering::Relaxed) {
        return;
    }
    // O_NOFOLLOW: a directory swapped for a symlink since it was listed is
    // an error, never followed (the Store never follows symlinks).
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let dirfd = match rustix::fs::open(dir, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(e) => return scan.fail(StoreError::io("open", dir, e.into())),
    };
    let mut items = Vec::with_capacity(names.len());
    let mut subdirs = Vec::new();
    let mut objects = Vec::new();
    for name in names {
        let at = At {
            dirfd: dirfd.as_fd(),
            dir,
            name: &name,
        };
        let prev = prev.get(name.as_bytes());
        match scan_entry(scan.ctx, &at, prev, &mut objects) {
            Ok(None) => {}
            Ok(Some((item, sub))) => {
                if let Some(prev_tree) = sub {
                    subdirs.push((items.len(), dir.join(&name), prev_tree));
                }
                items.push(item);
            }
            Err(e) => return scan.fail(e),
        }
    }
    drop(dirfd);
    if let Err(e) = send(scan.tx, objects) {
        return scan.fail(e);
    }
    let mut spawn = Vec::with_capacity(subdirs.len());
    {
        let mut dirs = lock(&scan.dirs);
        for (k, path, prev) in subdirs {
            let j = dirs.len();
            dirs.push(DirScan {
                path,
                prev,
                items: Vec::new(),
            });
            items[k].dir = Some(j);
            spawn.push(j);
        }
        dirs[d].items.extend(items);
    }
    for j in spawn {
        s.spawn(move |s| scan_dir(scan, s, j));
    }
}

/// One entry of an open directory.
struct At<'a> {
    dirfd: BorrowedFd<'a>,
    dir: &'a Path,
    name: &'a OsStr,
}

impl At<'_> {
    /// The entry's full path, built only for messages and the rare
    /// path-based call.
    fn path(&self) -> PathBuf {
        self.dir.join(self.name)
    }
}

thread_local! {
    /// The file-reading buffer of each scanning thread, reused so that a
    /// file costs no allocation to read (its bytes are copied into objects).
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// A thread keeps a read buffer up to this size between files; a larger
/// one (a big file read whole) is freed after use.
const READ_BUF_KEEP: usize = 1 << 20;

/// Read the regular file `at` (opened without following a symlink) into
/// `buf`, and its `user.` xattrs through the same descriptor.
fn read_file(at: &At<'_>, size: u64, buf: &mut Vec<u8>) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    // O_NONBLOCK: a file swapped for a fifo since the statx must not hang
    // the snapshot; it makes no difference to reading a regular file.
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NOCTTY | OFlags::NONBLOCK;
    let fd = rustix::fs::openat(at.dirfd, at.name, flags | OFlags::CLOEXEC, Mode::empty())
        .map_err(|e| StoreError::io("open", at.path(), e.into()))?;
    buf.clear();
    // One more byte than the size, so a file that has not grown is read in
    // one call and its end seen in the next. Not `File::read_to_end`: it
    // asks for the size and position again (fstat, lseek) on every file.
    buf.reserve(usize::try_from(size).unwrap_or(0).saturating_add(1));
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.capacity().max(8192));
        }
        match rustix::io::read(&fd, rustix::buffer::spare_capacity(buf)) {
            Ok(0) => break,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(StoreError::io("read", at.path(), e.into())),
        }
    }
    read_user_xattrs(XattrSource::Fd(fd.as_fd(), &|| at.path()))
}

fn scan_entry(
    ctx: &Ctx<'_>,
    at: &At<'_>,
    prev: Option<&TreeEntry>,
    objects: &mut Vec<Prepared>,
) -> Result<Found> {
    let st = rustix::fs::statx(
        at.dirfd,
        at.name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    )
    .map_err(|e| StoreError::io("stat", at.path(), e.into()))?;
    let ft = FileType::from_raw_mode(st.stx_mode.into());
    let name = at.name.as_bytes().to_vec();
    let mut inode = None;
    let mut subdir = None;
    let mut xattrs = None;
    let kind = if ft == FileType::RegularFile {
        let prev_content = match prev.map(|p| &p.kind) {
            Some(EntryKind::File(c)) => Some(c.clone()),
            _ => None,
        };
        let c: FileContent = READ_BUF.with(|b| -> Result<FileContent> {
            let mut buf = b.take();
            let r = read_file(at, st.stx_size, &mut buf).and_then(|x| {
                xattrs = Some(x);
                ctx.store
                    .put_file_bytes(&buf, prev_content.as_ref(), objects as &mut dyn Sink)
            });
            if buf.capacity() <= READ_BUF_KEEP {
                b.replace(buf);
            }
            r
        })?;
        if st.stx_nlink > 1 {
            let dev = rustix::fs::makedev(st.stx_dev_major, st.stx_dev_minor);
            inode = Some((dev, st.stx_ino));
        }
        ctx.progress.advance(1);
        EntryKind::File(c)
    } else if ft == FileType::Directory {
        let path = at.path();
        if path == ctx.store_dir {
            return Ok(None);
        }
        subdir = Some(match prev.map(|p| &p.kind) {
            Some(EntryKind::Dir(t)) => Some(*t),
            _ => None,
        });
        EntryKind::Dir(ObjectId([0; 32])) // filled in when the tree is built
    } else if ft == FileType::Symlink {
        let t = rustix::fs::readlinkat(at.dirfd, at.name, Vec::new())
            .map_err(|e| StoreError::io("read the link", at.path(), e.into()))?;
        EntryKind::Symlink(t.into_bytes())
    } else if ft == FileType::Fifo {
        EntryKind::Fifo
    } else {
        let what = if ft == FileType::Socket {
            "a socket"
        } else if ft == FileType::BlockDevice {
            "a block device"
        } else {
            "a character device"
        };
        lock(&ctx.warnings).push(format!(
            "skipped {} ({what}): it cannot be stored as file content",
            at.path().display()
        ));
        return Ok(None);
    };
    // Entries other than files (directories, symlinks, fifos: few) are not
    // opened, so their xattrs are read by path.
    let xattrs = match xattrs {
        Some(x) => x,
        None => read_user_xattrs(XattrSource::Path(&at.path()))?,
    };
    let mtime = &st.stx_mtime;
    let item = Scanned {
        entry: TreeEntry {
            name,
            kind,
            mode: u32::from(st.stx_mode) & 0o7777,
            uid: st.stx_uid,
            gid: st.stx_gid,
            mtime_ns: mtime.tv_sec * 1_000_000_000 + i64::from(mtime.tv_nsec),
            xattrs,
            link_group: 0,
        },
        inode,
        dir: None,
    };
    Ok(Some((item, subdir)))
}

fn send(tx: &SyncSender<Vec<Prepared>>, objects: Vec<Prepared>) -> Result<()> {
    if objects.is_empty() {
        return Ok(());
    }
    tx.send(objects)
        .map_err(|_| StoreError::Invalid("the object writer stopped early".into()))
}

/// Where a directory sits in its parent: (parent, index in its items);
/// None for the root.
type Parent = Option<(usize, usize)>;

/// Assign hard-link groups in name order, depth first (deterministic: the
/// same tree gets the same ids, as it did when this walk recursed), then
/// build the tree nodes bottom-up. The first walk keeps its own stack of
/// (directory, next entry), so its depth costs heap, not call stack.
fn assign_and_build(
    mut dirs: Vec<DirScan>,
    report: &mut SnapshotReport,
    tx: &SyncSender<Vec<Prepared>>,
) -> Result<ObjectId> {
    use rayon::prelude::*;
    dirs.par_iter_mut()
        .for_each(|d| d.items.sort_by(|a, b| a.entry.name.cmp(&b.entry.name)));
    let mut groups: HashMap<(u64, u64), u64> = HashMap::new();
    // (directory, its parent directory and index in the parent's items), in
    // the order the walk enters them: every directory after its parent.
    let mut order: Vec<(usize, Parent)> = vec![(0, None)];
    let mut stack: Vec<(usize, usize)> = vec![(0, 0)];
    while let Some(&(d, i)) = stack.last() {
        let Some(it) = dirs[d].items.get_mut(i) else {
            stack.pop();
            continue;
        };
        stack.last_mut().expect("not empty").1 += 1;
        if let Some(child) = it.dir {
            // Its kind is set once the subdirectory's tree is built.
            report.dirs += 1;
            order.push((child, Some((d, i))));
            stack.push((child, 0));
            continue;
        }
        match &it.entry.kind {
            EntryKind::File(c) => {
                report.files += 1;
                if let Some(ino) = it.inode {
                    let next = groups.len() as u64 + 1;
                    let g = *groups.entry(ino).or_insert(next);
                    if g == next {
                        report.bytes += c.size;
                    }
                    it.entry.link_group = g;
                } else {
                    report.bytes += c.size;
                }
            }
            EntryKind::Symlink(_) => report.symlinks += 1,
            _ => {}
        }
    }
    // Bottom-up by depth, each level's trees built in parallel (hashing and
    // compressing them was a serial tail after the scan). A directory's
    // children are one level deeper, so they are built before it.
    let mut depth = vec![0usize; dirs.len()];
    let mut levels: Vec<Vec<(usize, Parent)>> = Vec::new();
    for &(d, parent) in &order {
        let k = parent.map_or(0, |(p, _)| depth[p] + 1);
        depth[d] = k;
        if levels.len() <= k {
            levels.push(Vec::new());
        }
        levels[k].push((d, parent));
    }
    let mut slots: Vec<Option<Vec<TreeEntry>>> = dirs
        .iter_mut()
        .map(|d| {
            let items = std::mem::take(&mut d.items);
            Some(items.into_iter().map(|it| it.entry).collect())
        })
        .collect();
    while let Some(level) = levels.pop() {
        let work: Vec<_> = level
            .iter()
            .map(|&(d, parent)| (slots[d].take().unwrap_or_default(), parent))
            .collect();
        let built: Vec<Result<(ObjectId, Parent)>> = work
            .into_par_iter()
            .map(|(entries, parent)| {
                let (id, nodes) = build_tree(entries)?;
                send(tx, nodes)?;
                Ok((id, parent))
            })
            .collect();
        for b in built {
            let (id, parent) = b?;
            match parent {
                Some((p, i)) => {
                    let entries = slots[p]
                        .as_mut()
                        .expect("a parent is built after its children");
                    entries[i].kind = EntryKind::Dir(id);
                }
                None => return Ok(id),
            }
        }
    }
    unreachable!("the root is the last level's only directory")
}
