//! Status and commit: compare the live tree with the base, and publish it.
//!
//! Both walk only directories marked dirty (a mutation marks its directory
//! and every ancestor), so their cost follows the size of the change, not of
//! the namespace. Unchanged files are compared by `FileContent` (ids), never
//! by reading bytes; an upper file counts as unchanged while its size and
//! mtime still equal those recorded at copy-up and no write went through
//! the daemon.

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

fn join(path: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = path.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn st_err(action: &'static str) -> impl Fn(StoreError) -> WsError {
    move |source| WsError::Store {
        action,
        source: Box::new(source),
    }
}

fn errno_err(action: &'static str) -> impl Fn(fuser::Errno) -> WsError {
    move |e| WsError::Invalid(format!("{action}: {e:?}"))
}

/// Current state of a name: a node, or an untouched entry of the node's
/// own (possibly moved) base tree.
enum Cur {
    Node(u64),
    Entry(TreeEntry),
}

/// Hash `files` (see [`State::files_to_hash`]) with no lock held. A file that
/// vanished meanwhile is skipped: the tree walk decides what is committed.
pub(crate) fn prehash(store: &strata_store::Store, files: ToHash) -> Result<Prehashed> {
    let mut out = HashMap::new();
    for (ino, path, origin) in files {
        let Ok(m) = std::fs::metadata(&path) else {
            continue;
        };
        let (size, mtime) = (m.size(), m.mtime() * 1_000_000_000 + m.mtime_nsec());
        match store.write_file_from_path(&path, origin.as_ref()) {
            Ok(c) => {
                out.insert(ino, (c, size, mtime));
            }
            Err(e) if !path.exists() => {
                tracing::debug!("{} vanished while hashing: {e}", path.display())
            }
            Err(e) => return Err(st_err("store a changed file")(e)),
        }
    }
    Ok(out)
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
/// size and mtime sampled before hashing).
pub(crate) type Prehashed = HashMap<u64, (FileContent, u64, i64)>;

/// An upper file to hash outside the lock: inode, path, origin (for deltas).
pub(crate) type ToHash = Vec<(u64, std::path::PathBuf, Option<FileContent>)>;

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

    fn node_mtime(&self, ino: u64) -> Result<i64> {
        let n = self.node(ino).map_err(errno_err("status"))?;
        match n.data {
            Data::Upper(_) => Ok(self.upper_size_mtime(ino)?.1),
            _ => Ok(n.mtime),
        }
    }

    /// Is node `ino` equal to base entry `b` (same kind assumed)?
    fn same_as(&self, ino: u64, b: &TreeEntry) -> Result<bool> {
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
    fn refresh_dirty(&mut self) -> Result<()> {
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

    fn scan_groups(&mut self, dir: u64, groups: &BTreeSet<u64>) -> Result<()> {
        let d = self
            .node(dir)
            .map_err(errno_err("scan hard links"))?
            .dir()
            .expect("dir");
        let children = d.children.clone();
        let mut paths = Vec::new();
        for (name, e) in self.base_entries(d.lower)? {
            if !children.contains_key(&name) {
                self.collect_group_paths(&e, vec![name], groups, &mut paths)?;
            }
        }
        for path in paths {
            let mut cur = dir;
            let last = path.len() - 1;
            for (i, comp) in path.iter().enumerate() {
                match self
                    .child(cur, comp)
                    .map_err(errno_err("resolve a hard link"))?
                {
                    Some(c) if i == last => {
                        let parent = cur;
                        let _ = c;
                        self.tx(|s| s.dirty_dir(parent))
                            .map_err(errno_err("journal"))?;
                    }
                    Some(c) => cur = c,
                    None => break,
                }
            }
        }
        for slot in children.values() {
            if let Slot::Node(c) = slot {
                if self
                    .node(*c)
                    .map(|n| n.kind == NodeKind::Dir)
                    .unwrap_or(false)
                {
                    self.scan_groups(*c, groups)?;
                }
            }
        }
        Ok(())
    }

    fn collect_group_paths(
        &self,
        e: &TreeEntry,
        path: Vec<Vec<u8>>,
        groups: &BTreeSet<u64>,
        out: &mut Vec<Vec<Vec<u8>>>,
    ) -> Result<()> {
        match &e.kind {
            EntryKind::File(_) if groups.contains(&e.link_group) => out.push(path),
            EntryKind::Dir(t) => {
                for c in self.store.list_tree(*t).map_err(st_err("list a tree"))? {
                    let mut p = path.clone();
                    p.push(c.name.clone());
                    self.collect_group_paths(&c, p, groups, out)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    pub(crate) fn status(&mut self) -> Result<Vec<Change>> {
        self.refresh_dirty()?;
        let mut out = Vec::new();
        let base_tree = self
            .store
            .read_commit(self.base)
            .map_err(st_err("read the base commit"))?
            .tree;
        self.diff_dir(ROOT, Some(base_tree), b"", &mut out)?;
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn base_entries(&self, tree: Option<ObjectId>) -> Result<BTreeMap<Vec<u8>, TreeEntry>> {
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

    fn diff_dir(
        &mut self,
        ino: u64,
        base: Option<ObjectId>,
        path: &[u8],
        out: &mut Vec<Change>,
    ) -> Result<()> {
        let d = self
            .node(ino)
            .map_err(errno_err("status"))?
            .dir()
            .expect("dir");
        if !d.dirty && d.lower == base {
            return Ok(());
        }
        let same_origin = d.lower == base;
        let own_lower = d.lower;
        let children = d.children.clone();
        if same_origin && children.len() > 16 {
            // One listing (cached) beats a Store lookup per changed name.
            self.listing(ino).map_err(errno_err("status"))?;
        }
        let own = if same_origin {
            BTreeMap::new()
        } else {
            self.base_entries(own_lower)?
        };
        let mut names: BTreeSet<Vec<u8>> = children.keys().cloned().collect();
        let base_list = if same_origin {
            None
        } else {
            let b = self.base_entries(base)?;
            names.extend(b.keys().cloned());
            names.extend(own.keys().cloned());
            Some(b)
        };
        for name in names {
            let b = match &base_list {
                Some(l) => l.get(&name).cloned(),
                None => self.lower_entry(ino, &name).map_err(errno_err("status"))?,
            };
            let cur = match children.get(&name) {
                Some(Slot::Node(i)) => Some(Cur::Node(*i)),
                Some(Slot::Whiteout) => None,
                None => own.get(&name).cloned().map(Cur::Entry),
            };
            let p = join(path, &name);
            self.diff_one(b, cur, p, out)?;
        }
        Ok(())
    }

    fn diff_one(
        &mut self,
        b: Option<TreeEntry>,
        cur: Option<Cur>,
        p: Vec<u8>,
        out: &mut Vec<Change>,
    ) -> Result<()> {
        use ChangeKind::*;
        let push = |out: &mut Vec<Change>, kind| {
            out.push(Change {
                path: p.clone(),
                kind,
            })
        };
        match (b, cur) {
            (None, None) => {}
            (Some(b), None) => self.report_entry(&b, p, Deleted, out)?,
            (None, Some(Cur::Entry(e))) => self.report_entry(&e, p, Added, out)?,
            (None, Some(Cur::Node(i))) => self.report_node(i, p, out)?,
            (Some(b), Some(Cur::Entry(e))) => {
                if e == b {
                    return Ok(());
                }
                match (&e.kind, &b.kind) {
                    (EntryKind::Dir(et), EntryKind::Dir(bt)) => {
                        if (e.mode, e.uid, e.gid, &e.xattrs) != (b.mode, b.uid, b.gid, &b.xattrs) {
                            push(out, Modified);
                        }
                        self.diff_trees(*et, *bt, &p, out)?;
                    }
                    (ek, bk) if ek.type_name() != bk.type_name() => push(out, TypeChanged),
                    _ => push(out, Modified),
                }
            }
            (Some(b), Some(Cur::Node(i))) => {
                let kind = self.node(i).map_err(errno_err("status"))?.kind;
                if kind != NodeKind::of(&b.kind) {
                    push(out, TypeChanged);
                } else if !self.same_as(i, &b)? {
                    push(out, Modified);
                }
                if let (NodeKind::Dir, EntryKind::Dir(bt)) = (kind, &b.kind) {
                    self.diff_dir(i, Some(*bt), &p, out)?;
                }
            }
        }
        Ok(())
    }

    /// Report an added or deleted base entry and, like `Store::diff`,
    /// everything below it.
    fn report_entry(
        &self,
        e: &TreeEntry,
        p: Vec<u8>,
        kind: ChangeKind,
        out: &mut Vec<Change>,
    ) -> Result<()> {
        if let EntryKind::Dir(t) = &e.kind {
            for c in self.store.list_tree(*t).map_err(st_err("list a tree"))? {
                self.report_entry(&c, join(&p, &c.name), kind, out)?;
            }
        }
        out.push(Change { path: p, kind });
        Ok(())
    }

    /// Report an added node and everything below it.
    fn report_node(&mut self, ino: u64, p: Vec<u8>, out: &mut Vec<Change>) -> Result<()> {
        let n = self.node(ino).map_err(errno_err("status"))?;
        if let Some(d) = n.dir() {
            let children = d.children.clone();
            for e in self.base_entries(d.lower)?.into_values() {
                if !children.contains_key(&e.name) {
                    self.report_entry(&e, join(&p, &e.name), ChangeKind::Added, out)?;
                }
            }
            for (name, slot) in children {
                if let Slot::Node(c) = slot {
                    self.report_node(c, join(&p, &name), out)?;
                }
            }
        }
        out.push(Change {
            path: p,
            kind: ChangeKind::Added,
        });
        Ok(())
    }

    fn diff_trees(
        &mut self,
        a: ObjectId,
        b: ObjectId,
        path: &[u8],
        out: &mut Vec<Change>,
    ) -> Result<()> {
        if a == b {
            return Ok(());
        }
        let (al, bl) = (self.base_entries(Some(a))?, self.base_entries(Some(b))?);
        let names: BTreeSet<Vec<u8>> = al.keys().chain(bl.keys()).cloned().collect();
        for name in names {
            let cur = al.get(&name).cloned().map(Cur::Entry);
            self.diff_one(bl.get(&name).cloned(), cur, join(path, &name), out)?;
        }
        Ok(())
    }

    // ---- commit ----------------------------------------------------------

    fn build_dir(&mut self, ino: u64, built: &mut Built) -> Result<ObjectId> {
        let d = self
            .node(ino)
            .map_err(errno_err("commit"))?
            .dir()
            .expect("dir");
        if let (false, Some(t)) = (d.dirty, d.lower) {
            return Ok(t);
        }
        let lower = d.lower;
        let children = d.children.clone();
        let mut entries = self.base_entries(lower)?;
        for (name, slot) in children {
            match slot {
                Slot::Whiteout => {
                    entries.remove(&name);
                }
                Slot::Node(c) => {
                    let e = self.build_entry(c, name.clone(), built)?;
                    entries.insert(name, e);
                }
            }
        }
        let tree = self
            .store
            .write_tree(entries.into_values().collect())
            .map_err(st_err("write a tree"))?;
        built.dirs.push((ino, tree));
        Ok(tree)
    }

    fn build_entry(&mut self, ino: u64, name: Vec<u8>, built: &mut Built) -> Result<TreeEntry> {
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
            (NodeKind::Dir, _) => (EntryKind::Dir(self.build_dir(ino, built)?), mtime),
            (NodeKind::File, Data::Lower(c)) => (EntryKind::File(c), mtime),
            (NodeKind::File, Data::Upper(u)) => {
                if let Some((c, _, m)) = built.files.get(&ino) {
                    (EntryKind::File(c.clone()), *m)
                } else {
                    // Sample size and mtime before hashing: a write racing
                    // with the hash leaves them different, so the next
                    // status still sees the file as changed.
                    let (size, m) = self.upper_size_mtime(ino)?;
                    let pre = built.pre.get(&ino).filter(|p| (p.1, p.2) == (size, m));
                    let c = match (&u.origin, self.upper_changed(ino)?) {
                        (Some(o), false) => o.clone(),
                        _ if pre.is_some() => pre.expect("checked").0.clone(),
                        _ => self
                            .store
                            .write_file_from_path(&self.upper_path(ino), u.origin.as_ref())
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
        let mut out = Vec::new();
        for ino in uppers {
            if self.upper_changed(ino)? {
                let Data::Upper(u) = &self.node(ino).map_err(errno_err("commit"))?.data else {
                    continue;
                };
                out.push((ino, self.upper_path(ino), u.origin.clone()));
            }
        }
        Ok(out)
    }

    pub(crate) fn commit(&mut self, message: &str, pre: Prehashed) -> Result<CommitOutcome> {
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
