//! Snapshot: commit a host directory's current state as the next commit on a
//! branch. Files are read, chunked, hashed and compressed on every core
//! (rayon); one writer thread inserts the objects in bounded transactions;
//! the commit and the branch head are published last, in one transaction.

use crate::error::{Result, StoreError};
use crate::files::Sink;
use crate::id::ObjectId;
use crate::meta::read_user_xattrs;
use crate::object::{Commit, EntryKind, FileContent, TreeEntry};
use crate::objects::Prepared;
use crate::progress::Progress;
use crate::refs::{BranchRef, Target};
use crate::store::Store;
use crate::trees::build_tree;
use rayon::prelude::*;
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::Mutex;

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

/// A scanned entry before hard-link groups and tree ids are assigned.
struct Scanned {
    entry: TreeEntry,
    /// (dev, ino) when the file has other hard links.
    inode: Option<(u64, u64)>,
    children: Option<Vec<Scanned>>,
}

/// A scanned entry and the objects its content needs stored (None: skipped).
type ScannedWithObjects = Option<(Scanned, Vec<Prepared>)>;

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
            let scan = scan_dir(&ctx, &src, prev_tree, &tx);
            let root_meta =
                std::fs::symlink_metadata(&src).map_err(|e| StoreError::io("stat", &src, e));
            let built = scan.and_then(|children| {
                let mut report = SnapshotReport::default();
                let mut groups = HashMap::new();
                let mut tx2 = tx.clone();
                let tree = assign_and_build(children, &mut groups, &mut report, &mut tx2)?;
                Ok((tree, report, root_meta?))
            });
            drop(tx);
            let written = writer.join().expect("writer thread panicked");
            (built, written)
        });
        progress.finish();
        let (tree, mut report, root_meta) = scan?;
        let (new_objects, new_bytes) = written?;
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

fn scan_dir(
    ctx: &Ctx<'_>,
    dir: &Path,
    prev_tree: Option<ObjectId>,
    tx: &SyncSender<Vec<Prepared>>,
) -> Result<Vec<Scanned>> {
    let prev: HashMap<Vec<u8>, TreeEntry> = match prev_tree {
        Some(t) => ctx
            .store
            .list_tree(t)?
            .into_iter()
            .map(|e| (e.name.clone(), e))
            .collect(),
        None => HashMap::new(),
    };
    let mut names = Vec::new();
    for e in std::fs::read_dir(dir).map_err(|e| StoreError::io("list", dir, e))? {
        let e = e.map_err(|e| StoreError::io("list", dir, e))?;
        names.push(e.file_name());
    }
    let results: Vec<Result<ScannedWithObjects>> = names
        .par_iter()
        .map(|name| {
            let path = dir.join(name);
            let prev = prev.get(std::os::unix::ffi::OsStrExt::as_bytes(name.as_os_str()));
            let mut objects = Vec::new();
            Ok(scan_entry(ctx, &path, prev, tx, &mut objects)?.map(|s| (s, objects)))
        })
        .collect();
    let mut out = Vec::with_capacity(results.len());
    let mut objects = Vec::new();
    for r in results {
        if let Some((s, o)) = r? {
            out.push(s);
            objects.extend(o);
        }
    }
    send(tx, objects)?;
    Ok(out)
}

fn scan_entry(
    ctx: &Ctx<'_>,
    path: &Path,
    prev: Option<&TreeEntry>,
    tx: &SyncSender<Vec<Prepared>>,
    objects: &mut Vec<Prepared>,
) -> Result<Option<Scanned>> {
    let md = std::fs::symlink_metadata(path).map_err(|e| StoreError::io("stat", path, e))?;
    let ft = md.file_type();
    let name =
        std::os::unix::ffi::OsStrExt::as_bytes(path.file_name().expect("has a name")).to_vec();
    let mut inode = None;
    let mut children = None;
    let kind = if ft.is_file() {
        let prev_content = match prev.map(|p| &p.kind) {
            Some(EntryKind::File(c)) => Some(c.clone()),
            _ => None,
        };
        let bytes = std::fs::read(path).map_err(|e| StoreError::io("read", path, e))?;
        let c: FileContent =
            ctx.store
                .put_file_bytes(&bytes, prev_content.as_ref(), objects as &mut dyn Sink)?;
        if md.nlink() > 1 {
            inode = Some((md.dev(), md.ino()));
        }
        ctx.progress.advance(1);
        EntryKind::File(c)
    } else if ft.is_dir() {
        if path == ctx.store_dir {
            return Ok(None);
        }
        let prev_tree = match prev.map(|p| &p.kind) {
            Some(EntryKind::Dir(t)) => Some(*t),
            _ => None,
        };
        children = Some(scan_dir(ctx, path, prev_tree, tx)?);
        EntryKind::Dir(ObjectId([0; 32])) // filled in when the tree is built
    } else if ft.is_symlink() {
        let t = std::fs::read_link(path).map_err(|e| StoreError::io("read the link", path, e))?;
        EntryKind::Symlink(std::os::unix::ffi::OsStrExt::as_bytes(t.as_os_str()).to_vec())
    } else if ft.is_fifo() {
        EntryKind::Fifo
    } else {
        let what = if ft.is_socket() {
            "a socket"
        } else if ft.is_block_device() {
            "a block device"
        } else {
            "a character device"
        };
        ctx.warnings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(format!(
                "skipped {} ({what}): it cannot be stored as file content",
                path.display()
            ));
        return Ok(None);
    };
    let xattrs = read_user_xattrs(path)?;
    Ok(Some(Scanned {
        entry: TreeEntry {
            name,
            kind,
            mode: md.mode() & 0o7777,
            uid: md.uid(),
            gid: md.gid(),
            mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
            xattrs,
            link_group: 0,
        },
        inode,
        children,
    }))
}

fn send(tx: &SyncSender<Vec<Prepared>>, objects: Vec<Prepared>) -> Result<()> {
    if objects.is_empty() {
        return Ok(());
    }
    tx.send(objects)
        .map_err(|_| StoreError::Invalid("the object writer stopped early".into()))
}

/// Assign hard-link groups in name order (deterministic: the same tree gets
/// the same ids) and build tree nodes bottom-up.
fn assign_and_build(
    mut items: Vec<Scanned>,
    groups: &mut HashMap<(u64, u64), u64>,
    report: &mut SnapshotReport,
    tx: &mut SyncSender<Vec<Prepared>>,
) -> Result<ObjectId> {
    items.sort_by(|a, b| a.entry.name.cmp(&b.entry.name));
    let mut entries = Vec::with_capacity(items.len());
    for mut it in items {
        if let Some(children) = it.children.take() {
            let t = assign_and_build(children, groups, report, tx)?;
            it.entry.kind = EntryKind::Dir(t);
            report.dirs += 1;
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
        entries.push(it.entry);
    }
    let (id, nodes) = build_tree(entries)?;
    send(tx, nodes)?;
    Ok(id)
}
