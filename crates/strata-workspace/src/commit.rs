//! Commit: publish the live tree (status, its comparison with the base, is
//! in `status.rs`).
//!
//! Both walk only directories marked dirty (a mutation marks its directory
//! and every ancestor), so their cost follows the size of the change, not of
//! the namespace. Unchanged files are compared by `FileContent` (ids), never
//! by reading bytes; an upper file counts as unchanged while its size and
//! mtime still equal those recorded at copy-up and no write went through
//! the daemon. No walk recurses: each keeps its own stack or work list, so
//! a deep tree costs heap, never call stack.

use crate::error::{Result, WsError};
use crate::node::{Data, NodeKind, Slot, ROOT};
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::unix::fs::MetadataExt;
pub use strata_store::{Change, ChangeKind};
use strata_store::{EntryKind, FileContent, ObjectId, StoreError, TreeEntry};

/// The result of [`crate::Workspace::commit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// A new commit was published and is now the Workspace's base.
    Committed(ObjectId),
    /// Nothing changed since the base; nothing was written.
    UpToDate,
}

pub(crate) fn join(path: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = path.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

pub(crate) fn st_err(action: &'static str) -> impl Fn(StoreError) -> WsError {
    move |source| WsError::Store {
        action,
        source: Box::new(source),
    }
}

pub(crate) fn errno_err(action: &'static str) -> impl Fn(fuser::Errno) -> WsError {
    move |e| WsError::Invalid(format!("{action}: {e:?}"))
}

/// A directory being rebuilt by commit: its entries so far, the live
/// children still to visit, and the name it has in its parent.
struct BuildFrame {
    ino: u64,
    name: Vec<u8>,
    entries: BTreeMap<Vec<u8>, TreeEntry>,
    children: Vec<(Vec<u8>, Slot)>,
    next: usize,
}

/// Hash `files` (see [`State::files_to_hash`]) with no lock held. A file that
/// vanished meanwhile is skipped: the tree walk decides what is committed.
pub(crate) fn prehash(store: &strata_store::Store, files: ToHash) -> Result<Prehashed> {
    let mut out = HashMap::new();
    for (ino, path, origin, ranges) in files {
        let Ok(m) = std::fs::metadata(&path) else {
            continue;
        };
        let (size, mtime) = (m.size(), m.mtime() * 1_000_000_000 + m.mtime_nsec());
        match store_content(store, &path, origin.as_ref(), ranges.as_deref()) {
            Ok(c) => {
                out.insert(ino, (c, size, mtime, ranges));
            }
            Err(e) if !path.exists() => {
                tracing::debug!("{} vanished while hashing: {e}", path.display())
            }
            Err(e) => return Err(st_err("store a changed file")(e)),
        }
    }
    Ok(out)
}

/// Store an upper file's content: only its written ranges when they are
/// known (ranges.rs), else all of it (with `origin` as the delta base).
fn store_content(
    store: &strata_store::Store,
    path: &std::path::Path,
    origin: Option<&FileContent>,
    ranges: Option<&[(u64, u64)]>,
) -> std::result::Result<FileContent, StoreError> {
    match (origin, ranges) {
        (Some(o), Some(r)) => store.write_file_edited(path, o, r).map(|(c, _)| c),
        _ => store.write_file_from_path(path, origin),
    }
}

/// What commit computed, applied to the state only once the branch moved.
#[derive(Default)]
struct Built {
    dirs: Vec<(u64, ObjectId)>,
    files: HashMap<u64, (FileContent, u64, i64)>,
    groups: HashMap<u64, u64>,
    /// Contents hashed before the tree walk, without the state lock; used
    /// only if the file's size and mtime did not move since.
    pre: Prehashed,
}

/// Changed upper files hashed outside the state lock: inode -> (content,
/// size and mtime sampled before hashing, the written ranges used).
pub(crate) type Prehashed = HashMap<u64, (FileContent, u64, i64, Option<Ranges>)>;

/// Written ranges of an upper file, when they can be trusted (ranges.rs).
type Ranges = Vec<(u64, u64)>;

/// An upper file to hash outside the lock: inode, path, origin (for deltas
/// and the ranges), written ranges.
pub(crate) type ToHash = Vec<(u64, std::path::PathBuf, Option<FileContent>, Option<Ranges>)>;

impl State {
    fn upper_size_mtime(&self, ino: u64) -> Result<(u64, i64)> {
        let p = self.upper_path(ino);
        let m = std::fs::metadata(&p).map_err(WsError::io("stat an upper file", &p))?;
        Ok((m.size(), m.mtime() * 1_000_000_000 + m.mtime_nsec()))
    }

    /// The bytes of an upper file may differ from its origin.
    fn upper_changed(&self, ino: u64) -> Result<bool> {
        let n = self.node(ino).map_err(errno_err("status"))?;
        let Data::Upper(u) = &n.data else {
            return Ok(false);
        };
        if u.written || u.origin.is_none() {
            return Ok(true);
        }
        let (size, mtime) = self.upper_size_mtime(ino)?;
        Ok(size != u.origin_size || mtime != u.origin_mtime)
    }

    /// The ranges of upper file `ino` that may differ from its origin, if
    /// every change went through the daemon (`written`, and no passthrough
    /// writer unaccounted: open.rs marks those whole). A change seen only
    /// by its size or mtime gives None: the whole file is read.
    pub(crate) fn trusted_ranges(&self, ino: u64) -> Option<Ranges> {
        match &self.node(ino).ok()?.data {
            Data::Upper(u) if u.origin.is_some() && u.written => Some(self.journal.written(ino)),
            _ => None,
        }
    }

    /// The origin moved to the content just stored: forget the ranges,
    /// unless a passthrough handle is open (a writer behind it is not
    /// seen, so the next commit must read the whole file).
    fn reset_ranges(&mut self, ino: u64) -> Result<()> {
        let open_backing = self
            .node(ino)
            .is_ok_and(|n| n.backing.as_ref().is_some_and(|b| b.upper));
        self.journal
            .clear_written(ino)
            .map_err(self.journal.err("forget written ranges"))?;
        if open_backing {
            self.journal
                .note_written(ino, 0, crate::ranges::TO_END)
                .map_err(self.journal.err("record written ranges"))?;
        }
        Ok(())
    }

    fn node_mtime(&self, ino: u64) -> Result<i64> {
        let n = self.node(ino).map_err(errno_err("status"))?;
        match n.data {
            Data::Upper(_) => Ok(self.upper_size_mtime(ino)?.1),
            _ => Ok(n.mtime),
        }
    }

    /// Is node `ino` equal to base entry `b` (same kind assumed)?
    pub(crate) fn same_as(&self, ino: u64, b: &TreeEntry) -> Result<bool> {
        let n = self.node(ino).map_err(errno_err("status"))?;
        if n.perm != b.mode & 0o7777 || n.uid != b.uid || n.gid != b.gid {
            return Ok(false);
        }
        let xattrs: Vec<_> = n.xattrs.clone().into_iter().collect();
        if xattrs != b.xattrs {
            return Ok(false);
        }
        if n.kind == NodeKind::Dir {
            // A directory's mtime follows its entries; its entries are
            // compared one by one instead.
            return Ok(true);
        }
        if self.node_mtime(ino)? != b.mtime_ns {
            return Ok(false);
        }
        Ok(match (&n.data, &b.kind) {
            (Data::Lower(c), EntryKind::File(bc)) => c == bc,
            (Data::Upper(u), EntryKind::File(bc)) => {
                u.origin.as_ref() == Some(bc) && !self.upper_changed(ino)?
            }
            (Data::Symlink(t), EntryKind::Symlink(bt)) => t == bt,
            (Data::None, EntryKind::Fifo | EntryKind::Socket) => true,
            _ => false,
        })
    }

    /// Writes through passthrough and shared mmap reach the upper file
    /// without passing through the daemon: find upper files whose size or
    /// mtime moved and mark their directories for the walk below. Costs one
    /// stat per upper file (files changed in this Workspace), not per file
    /// of the namespace.
    pub(crate) fn refresh_dirty(&mut self) -> Result<()> {
        self.resolve_pending_groups()?;
        let uppers: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| matches!(&n.data, Data::Upper(u) if !u.written) && !n.links.is_empty())
            .map(|(i, _)| *i)
            .collect();
        for ino in uppers {
            let clean_parents = self
                .node(ino)
                .map(|n| {
                    n.links.iter().any(|l| {
                        self.node(l.0)
                            .ok()
                            .and_then(|p| p.dir())
                            .is_some_and(|d| !d.dirty)
                    })
                })
                .unwrap_or(false);
            if clean_parents && self.upper_changed(ino)? {
                self.tx(|s| s.changed(ino))
                    .map_err(errno_err("journal a changed file"))?;
            }
        }
        Ok(())
    }

    /// A base hard-link group whose inode changed: every link must carry
    /// the change, including links in directories never looked at. The
    /// Store cannot list a group's paths, so walk the base trees below the
    /// live directories once per group (O(namespace), but only when a base
    /// hard-linked file changes) and resolve each link, which attaches it to
    /// the group's inode and marks its directory for rebuild.
    fn resolve_pending_groups(&mut self) -> Result<()> {
        if self.pending_groups.is_empty() {
            return Ok(());
        }
        let groups: BTreeSet<u64> = std::mem::take(&mut self.pending_groups);
        self.scan_groups(ROOT, &groups)?;
        self.scanned_groups.extend(groups);
        Ok(())
    }

    /// Walk the live directories (a work list, not recursion: a deep tree
    /// costs heap, never call stack) and resolve every base link of
    /// `groups` that lies in a part of the base nobody looked at.
    fn scan_groups(&mut self, root: u64, groups: &BTreeSet<u64>) -> Result<()> {
        let mut dirs = vec![root];
        while let Some(dir) = dirs.pop() {
            let d = self
                .node(dir)
                .map_err(errno_err("scan hard links"))?
                .dir()
                .ok_or_else(|| WsError::Invalid(format!("inode {dir} is not a directory")))?;
            let children = d.children.clone();
            let mut paths = Vec::new();
            for (name, e) in self.base_entries(d.lower)? {
                if !children.contains_key(&name) {
                    self.collect_group_paths(e, vec![name], groups, &mut paths)?;
                }
            }
            for path in paths {
                self.resolve_link(dir, &path)?;
            }
            for slot in children.values() {
                if let Slot::Node(c) = slot {
                    if self
                        .node(*c)
                        .map(|n| n.kind == NodeKind::Dir)
                        .unwrap_or(false)
                    {
                        dirs.push(*c);
                    }
                }
            }
        }
        Ok(())
    }

    /// Resolve `path` below directory `dir`, which attaches the link to its
    /// group's inode, and mark its directory for rebuild.
    fn resolve_link(&mut self, dir: u64, path: &[Vec<u8>]) -> Result<()> {
        let mut cur = dir;
        for (i, comp) in path.iter().enumerate() {
            match self
                .child(cur, comp)
                .map_err(errno_err("resolve a hard link"))?
            {
                Some(_) if i + 1 == path.len() => {
                    let parent = cur;
                    self.tx(|s| s.dirty_dir(parent))
                        .map_err(errno_err("journal"))?;
                }
                Some(c) => cur = c,
                None => break,
            }
        }
        Ok(())
    }

    /// The paths (as components) of every file of `groups` at or below base
    /// entry `e`, found with a work list of base directories.
    fn collect_group_paths(
        &self,
        e: TreeEntry,
        path: Vec<Vec<u8>>,
        groups: &BTreeSet<u64>,
        out: &mut Vec<Vec<Vec<u8>>>,
    ) -> Result<()> {
        let mut todo = vec![(e, path)];
        while let Some((e, path)) = todo.pop() {
            match &e.kind {
                EntryKind::File(_) if groups.contains(&e.link_group) => out.push(path),
                EntryKind::Dir(t) => {
                    for c in self.store.list_tree(*t).map_err(st_err("list a tree"))? {
                        let mut p = path.clone();
                        p.push(c.name.clone());
                        todo.push((c, p));
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    pub(crate) fn base_entries(
        &self,
        tree: Option<ObjectId>,
    ) -> Result<BTreeMap<Vec<u8>, TreeEntry>> {
        Ok(match tree {
            None => BTreeMap::new(),
            Some(t) => self
                .store
                .list_tree(t)
                .map_err(st_err("list a base tree"))?
                .into_iter()
                .map(|e| (e.name.clone(), e))
                .collect(),
        })
    }

    // ---- commit ----------------------------------------------------------

    /// The tree of a directory that commit need not rebuild (clean, with a
    /// base tree), or None.
    fn clean_tree(&self, ino: u64) -> Result<Option<ObjectId>> {
        let d = self
            .node(ino)
            .map_err(errno_err("commit"))?
            .dir()
            .ok_or_else(|| WsError::Invalid(format!("inode {ino} is not a directory")))?;
        Ok(if d.dirty { None } else { d.lower })
    }

    fn build_frame(&self, ino: u64, name: Vec<u8>) -> Result<BuildFrame> {
        let d = self
            .node(ino)
            .map_err(errno_err("commit"))?
            .dir()
            .ok_or_else(|| WsError::Invalid(format!("inode {ino} is not a directory")))?;
        let children = d.children.clone().into_iter().collect();
        let entries = self.base_entries(d.lower)?;
        Ok(BuildFrame {
            ino,
            name,
            entries,
            children,
            next: 0,
        })
    }

    /// Write the trees of directory `root` and of every changed directory
    /// below it, bottom-up. The walk keeps its own stack of directories
    /// being rebuilt, so a deep tree costs heap, never call stack.
    fn build_dir(&mut self, root: u64, built: &mut Built) -> Result<ObjectId> {
        if let Some(t) = self.clean_tree(root)? {
            return Ok(t);
        }
        let mut stack = vec![self.build_frame(root, Vec::new())?];
        // Returns when it pops the root.
        while let Some(top) = stack.last_mut() {
            if let Some((name, slot)) = top.children.get(top.next).cloned() {
                top.next += 1;
                match slot {
                    Slot::Whiteout => {
                        top.entries.remove(&name);
                    }
                    Slot::Node(c) => {
                        let is_dir =
                            self.node(c).map_err(errno_err("commit"))?.kind == NodeKind::Dir;
                        let tree = if is_dir { self.clean_tree(c)? } else { None };
                        if is_dir && tree.is_none() {
                            stack.push(self.build_frame(c, name)?);
                            continue;
                        }
                        let e = self.build_entry(c, name.clone(), tree, built)?;
                        top.entries.insert(name, e);
                    }
                }
                continue;
            }
            let Some(done) = stack.pop() else { break };
            let tree = self
                .store
                .write_tree(done.entries.into_values().collect())
                .map_err(st_err("write a tree"))?;
            built.dirs.push((done.ino, tree));
            let Some(parent) = stack.last_mut() else {
                return Ok(tree);
            };
            let e = self.build_entry(done.ino, done.name.clone(), Some(tree), built)?;
            parent.entries.insert(done.name, e);
        }
        Err(WsError::Invalid(
            "commit's tree walk lost its root (an internal error)".into(),
        ))
    }

    /// The tree entry of node `ino`; `dir_tree` is its tree when it is a
    /// directory (built by `build_dir`).
    fn build_entry(
        &mut self,
        ino: u64,
        name: Vec<u8>,
        dir_tree: Option<ObjectId>,
        built: &mut Built,
    ) -> Result<TreeEntry> {
        let n = self.node(ino).map_err(errno_err("commit"))?;
        let (kind, perm, uid, gid, mtime) = (n.kind, n.perm, n.uid, n.gid, n.mtime);
        let xattrs: Vec<_> = n.xattrs.clone().into_iter().collect();
        let nlinks = n.links.len();
        let mut link_group = n.link_group;
        if nlinks > 1 && link_group == 0 {
            // A new hard-link group: any number unused in this commit.
            link_group = *built
                .groups
                .entry(ino)
                .or_insert_with(|| rand::random::<u64>() | 1);
        }
        let data = n.data.clone();
        let (entry_kind, mtime) = match (kind, data) {
            (NodeKind::Dir, _) => {
                let t = dir_tree.ok_or_else(|| {
                    WsError::Invalid(format!("directory inode {ino} has no tree (an internal error)"))
                })?;
                (EntryKind::Dir(t), mtime)
            }
            (NodeKind::File, Data::Lower(c)) => (EntryKind::File(c), mtime),
            (NodeKind::File, Data::Upper(u)) => {
                if let Some((c, _, m)) = built.files.get(&ino) {
                    (EntryKind::File(c.clone()), *m)
                } else {
                    // Sample size and mtime before hashing: a write racing
                    // with the hash leaves them different, so the next
                    // status still sees the file as changed. A write
                    // through the daemon meanwhile also moves the ranges.
                    let (size, m) = self.upper_size_mtime(ino)?;
                    let ranges = self.trusted_ranges(ino);
                    let pre = built
                        .pre
                        .get(&ino)
                        .filter(|p| (p.1, p.2) == (size, m) && p.3 == ranges);
                    let c = match (&u.origin, self.upper_changed(ino)?) {
                        (Some(o), false) => o.clone(),
                        _ if pre.is_some() => pre.expect("checked").0.clone(),
                        _ => store_content(
                            &self.store,
                            &self.upper_path(ino),
                            u.origin.as_ref(),
                            ranges.as_deref(),
                        )
                        .map_err(st_err("store a changed file"))?,
                    };
                    built.files.insert(ino, (c.clone(), size, m));
                    (EntryKind::File(c), m)
                }
            }
            (NodeKind::Symlink, Data::Symlink(t)) => (EntryKind::Symlink(t), mtime),
            (NodeKind::Fifo, _) => (EntryKind::Fifo, mtime),
            (NodeKind::Socket, _) => (EntryKind::Socket, mtime),
            (NodeKind::CharDevice | NodeKind::BlockDevice, _) => {
                return Err(WsError::Invalid(format!(
                    "{:?} is a device node, which a Store cannot hold; remove it and commit again (nothing was committed)",
                    String::from_utf8_lossy(&name)
                )))
            }
            (k, d) => {
                return Err(WsError::Invalid(format!(
                    "inode {ino} is a {k:?} with data {d:?}"
                )))
            }
        };
        Ok(TreeEntry {
            name,
            kind: entry_kind,
            mode: perm,
            uid,
            gid,
            mtime_ns: mtime,
            xattrs,
            link_group,
        })
    }

    /// After adopting a commit this Workspace published but did not journal
    /// (see `Workspace::open`): make every upper file's origin its current
    /// content, so that status compares it with the adopted base by id.
    pub(crate) fn rebase_uppers(&mut self) -> Result<()> {
        let uppers: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| matches!(n.data, Data::Upper(_)) && !n.links.is_empty())
            .map(|(i, _)| *i)
            .collect();
        for ino in uppers {
            let (size, mtime) = self.upper_size_mtime(ino)?;
            let path = self.upper_path(ino);
            let Data::Upper(u) = &self.node(ino).map_err(errno_err("rebase"))?.data else {
                continue;
            };
            let c = self
                .store
                .write_file_from_path(&path, u.origin.as_ref())
                .map_err(st_err("hash an upper file"))?;
            if let Ok(n) = self.node_mut(ino) {
                n.data = Data::Upper(crate::node::UpperInfo {
                    origin: Some(c),
                    origin_size: size,
                    origin_mtime: mtime,
                    written: false,
                });
            }
            self.reset_ranges(ino)?;
            self.tx(|s| s.persist(ino)).map_err(errno_err("journal"))?;
        }
        Ok(())
    }

    /// Changed upper files, to be hashed without holding the state lock (so
    /// that FUSE operations go on while big files are chunked).
    pub(crate) fn files_to_hash(&mut self) -> Result<ToHash> {
        self.refresh_dirty()?;
        // A moved branch is a conflict before anything is written.
        let head = self
            .store
            .branch_head(&self.branch)
            .map_err(st_err("read the branch head"))?;
        if head != self.base {
            return Err(WsError::Conflict {
                branch: self.branch.to_string(),
                base: self.base,
                actual: head,
            });
        }
        let uppers: Vec<u64> = self
            .nodes
            .iter()
            .filter(|(_, n)| matches!(n.data, Data::Upper(_)) && !n.links.is_empty())
            .map(|(i, _)| *i)
            .collect();
        // Hashed by path without the lock: a number reused meanwhile would
        // lend its old file's hash to a new file (pool.rs).
        self.pool.hashing = true;
        let mut out = Vec::new();
        for ino in uppers {
            if self.upper_changed(ino)? {
                let Data::Upper(u) = &self.node(ino).map_err(errno_err("commit"))?.data else {
                    continue;
                };
                let origin = u.origin.clone();
                out.push((ino, self.upper_path(ino), origin, self.trusted_ranges(ino)));
            }
        }
        Ok(out)
    }

    pub(crate) fn commit(&mut self, message: &str, pre: Prehashed) -> Result<CommitOutcome> {
        // The hashes were taken by inode number; numbers may be reused
        // again from here on, under the lock (pool.rs).
        self.pool.hashing = false;
        if self.status()?.is_empty() {
            return Ok(CommitOutcome::UpToDate);
        }
        let head = self
            .store
            .branch_head(&self.branch)
            .map_err(st_err("read the branch head"))?;
        if head != self.base {
            return Err(WsError::Conflict {
                branch: self.branch.to_string(),
                base: self.base,
                actual: head,
            });
        }
        let mut built = Built {
            pre,
            ..Default::default()
        };
        let tree = self.build_dir(ROOT, &mut built)?;
        let mut meta = BTreeMap::new();
        meta.insert("workspace".to_string(), self.id.clone());
        let new = match self
            .store
            .commit_tree(&self.branch, self.base, tree, message, meta)
        {
            Ok(c) => c,
            Err(StoreError::Conflict { actual, .. }) => {
                return Err(WsError::Conflict {
                    branch: self.branch.to_string(),
                    base: self.base,
                    actual,
                })
            }
            Err(e) => return Err(st_err("publish the commit")(e)),
        };
        self.apply(new, built)?;
        Ok(CommitOutcome::Committed(new))
    }

    /// Make the published commit the new base: rebuilt directories now read
    /// their new trees, changed files their new content.
    fn apply(&mut self, new: ObjectId, built: Built) -> Result<()> {
        self.journal.begin().map_err(self.journal.err("begin"))?;
        for (ino, tree) in &built.dirs {
            let Some(n) = self.nodes.get_mut(ino) else {
                continue;
            };
            let d = n.dir_mut().expect("dir");
            d.lower = Some(*tree);
            d.dirty = false;
            d.listing = None;
            d.nsub = None;
            let gone: Vec<Vec<u8>> = d
                .children
                .iter()
                .filter(|(_, s)| matches!(s, Slot::Whiteout))
                .map(|(k, _)| k.clone())
                .collect();
            for k in gone {
                d.children.remove(&k);
                self.journal
                    .del_entry(*ino, &k)
                    .map_err(self.journal.err("drop a whiteout"))?;
            }
        }
        for (ino, (c, size, mtime)) in &built.files {
            let Ok(n) = self.node_mut(*ino) else { continue };
            if let Data::Upper(u) = &mut n.data {
                u.origin = Some(c.clone());
                u.origin_size = *size;
                u.origin_mtime = *mtime;
                u.written = false;
            }
            self.reset_ranges(*ino)?;
        }
        for (ino, g) in &built.groups {
            if let Ok(n) = self.node_mut(*ino) {
                n.link_group = *g;
            }
        }
        let touched: BTreeSet<u64> = built
            .dirs
            .iter()
            .map(|d| d.0)
            .chain(built.files.keys().copied())
            .chain(built.groups.keys().copied())
            .collect();
        for ino in touched {
            if let Ok(n) = self.node(ino) {
                if n.persisted {
                    let rec = n.record();
                    self.journal
                        .put_node(ino, &rec)
                        .map_err(self.journal.err("update a node"))?;
                }
            }
        }
        self.base = new;
        self.journal
            .set_meta("base", &new.to_hex())
            .map_err(self.journal.err("record the new base"))?;
        self.journal.end().map_err(self.journal.err("commit"))?;
        self.store
            .pin(&format!("workspace:{}", self.id), new)
            .map_err(st_err("pin the new base"))?;
        Ok(())
    }
}
