//! The Workspace state shared by the FUSE threads and the control API:
//! the inode table, lazy resolution of the base tree, and the helpers that
//! keep the journal in step with memory.

use crate::cache::ContentCache;
use crate::config::IdMapping;
use crate::journal::Journal;
use crate::node::{to_system_time, Data, Node, NodeKind, Slot, ROOT};
use fuser::{Errno, FileAttr, INodeNo};
use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::Arc;
use strata_store::{BranchRef, ObjectId, Store, TreeEntry};

pub(crate) type R<T> = Result<T, Errno>;

/// Longest name a POSIX filesystem accepts here (NAME_MAX). The FUSE kernel
/// module itself only refuses names over 1024 bytes (FUSE_NAME_MAX), so the
/// 255-byte limit is ours to enforce.
pub(crate) const NAME_MAX: usize = 255;

pub(crate) fn check_name(name: &[u8]) -> R<()> {
    if name.len() > NAME_MAX {
        return Err(Errno::ENAMETOOLONG);
    }
    Ok(())
}

/// Log an internal failure and turn it into an errno for the kernel.
pub(crate) fn eio(what: &str, e: impl std::fmt::Display) -> Errno {
    tracing::error!("{what}: {e}");
    Errno::EIO
}

/// Turn a Workspace error into an errno for the kernel. A full disk is
/// ENOSPC (or EDQUOT), as a local filesystem would say, wherever it struck:
/// the content cache lives next to the scratch directories, so the first
/// read of a base file not cached yet needs space too. Anything else is
/// logged and becomes EIO.
pub(crate) fn ws_errno(what: &str, e: crate::error::WsError) -> Errno {
    match disk_full(&e) {
        Some(code) => Errno::from_i32(code),
        None => eio(what, e),
    }
}

/// The errno of a full disk behind `e`, if that is what `e` is.
fn disk_full(e: &crate::error::WsError) -> Option<i32> {
    use crate::error::WsError;
    use strata_store::StoreError;
    let io = match e {
        WsError::Io { source, .. } | WsError::Journal { source, .. } => source,
        WsError::Store { source, .. } => match &**source {
            StoreError::Io { source, .. } => source,
            StoreError::DiskFull { .. } => return Some(libc::ENOSPC),
            _ => return None,
        },
        _ => return None,
    };
    io.raw_os_error()
        .filter(|&c| c == libc::ENOSPC || c == libc::EDQUOT)
}

pub(crate) fn io_errno(what: &str, e: std::io::Error) -> Errno {
    match e.raw_os_error() {
        Some(code) => {
            if code != libc::ENOSPC && code != libc::EDQUOT {
                tracing::warn!("{what}: {e}");
            }
            Errno::from_i32(code)
        }
        None => eio(what, e),
    }
}

pub(crate) enum Handle {
    File {
        ino: u64,
        /// Opened for writing (O_WRONLY or O_RDWR).
        write: bool,
    },
    Dir {
        entries: Vec<(u64, fuser::FileType, Vec<u8>)>,
    },
}

pub(crate) struct State {
    pub store: Store,
    pub id: String,
    pub branch: BranchRef,
    pub base: ObjectId,
    pub nodes: HashMap<u64, Node>,
    pub next_ino: u64,
    /// Base hard-link group -> the inode that stands for it.
    pub groups: HashMap<u64, u64>,
    pub upper_dir: PathBuf,
    /// Emptied upper files of deleted nodes, reused by creates (pool.rs).
    pub pool: crate::pool::FreePool,
    pub cache: ContentCache,
    pub journal: Journal,
    pub handles: HashMap<u64, Handle>,
    pub next_fh: u64,
    pub ids: IdMapping,
    /// Passthrough negotiated with the kernel for the live mount.
    pub passthrough: bool,
    /// FUSE_HANDLE_KILLPRIV_V2 negotiated: suid/sgid are ours to clear.
    pub killpriv: bool,
    /// Base hard-link groups whose inode changed: their other links, in
    /// directories nobody looked at, must be found before status/commit.
    pub pending_groups: std::collections::BTreeSet<u64>,
    pub scanned_groups: std::collections::HashSet<u64>,
}

impl State {
    pub(crate) fn node(&self, ino: u64) -> R<&Node> {
        self.nodes.get(&ino).ok_or(Errno::ENOENT)
    }

    pub(crate) fn node_mut(&mut self, ino: u64) -> R<&mut Node> {
        self.nodes.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    pub(crate) fn alloc(&mut self, node: Node) -> u64 {
        let ino = self.next_ino;
        self.next_ino += 1;
        self.nodes.insert(ino, node);
        ino
    }

    pub(crate) fn upper_path(&self, ino: u64) -> PathBuf {
        self.upper_dir.join(ino.to_string())
    }

    /// The lower entry `name` of base tree `tree`, from the cached listing if
    /// loaded, else by an O(log n) lookup in the Store.
    pub(crate) fn lower_entry(&self, dir: u64, name: &[u8]) -> R<Option<TreeEntry>> {
        let d = self.node(dir)?.dir().ok_or(Errno::ENOTDIR)?;
        let Some(tree) = d.lower else { return Ok(None) };
        if let Some(list) = &d.listing {
            return Ok(list
                .binary_search_by(|e| e.name.as_slice().cmp(name))
                .ok()
                .map(|i| list[i].clone()));
        }
        self.store
            .lookup(tree, name)
            .map_err(|e| eio("look up a name in the base tree", e))
    }

    /// The child `name` of directory `dir`, instantiating a node for a base
    /// entry the first time it is resolved.
    pub(crate) fn child(&mut self, dir: u64, name: &[u8]) -> R<Option<u64>> {
        let d = self.node(dir)?.dir().ok_or(Errno::ENOTDIR)?;
        match d.children.get(name) {
            Some(Slot::Node(i)) => return Ok(Some(*i)),
            Some(Slot::Whiteout) => return Ok(None),
            None => {}
        }
        match self.lower_entry(dir, name)? {
            None => Ok(None),
            Some(e) => Ok(Some(self.instantiate(dir, e))),
        }
    }

    fn instantiate(&mut self, dir: u64, e: TreeEntry) -> u64 {
        let name = e.name.clone();
        let ino = match (e.link_group != 0)
            .then(|| self.groups.get(&e.link_group).copied())
            .flatten()
            .filter(|i| self.nodes.contains_key(i))
        {
            Some(ino) => ino,
            None => {
                let ino = self.alloc(Node::from_entry(&e));
                if e.link_group != 0 {
                    self.groups.insert(e.link_group, ino);
                }
                ino
            }
        };
        let n = self.nodes.get_mut(&ino).expect("just inserted");
        n.links.push((dir, name.clone()));
        let d = self
            .nodes
            .get_mut(&dir)
            .and_then(|n| n.dir_mut())
            .expect("dir");
        d.children.insert(name, Slot::Node(ino));
        ino
    }

    /// The full listing of a directory's base tree, cached.
    pub(crate) fn listing(&mut self, dir: u64) -> R<Arc<Vec<TreeEntry>>> {
        let d = self.node(dir)?.dir().ok_or(Errno::ENOTDIR)?;
        if let Some(l) = &d.listing {
            return Ok(l.clone());
        }
        let list = match d.lower {
            None => Arc::new(Vec::new()),
            Some(t) => Arc::new(
                self.store
                    .list_tree(t)
                    .map_err(|e| eio("list a base tree", e))?,
            ),
        };
        self.node_mut(dir)?.dir_mut().expect("dir").listing = Some(list.clone());
        Ok(list)
    }

    /// Every entry of a directory, merged: base entries not overridden, then
    /// the resolved and new ones. Instantiates nodes for all of them.
    pub(crate) fn read_dir(&mut self, dir: u64) -> R<Vec<(u64, fuser::FileType, Vec<u8>)>> {
        let list = self.listing(dir)?;
        for e in list.iter() {
            let known = self
                .node(dir)?
                .dir()
                .expect("dir")
                .children
                .contains_key(&e.name);
            if !known {
                self.instantiate(dir, e.clone());
            }
        }
        let d = self.node(dir)?.dir().expect("dir");
        let mut out = Vec::with_capacity(d.children.len());
        for (name, slot) in &d.children {
            if let Slot::Node(i) = slot {
                let kind = self.node(*i)?.kind.file_type();
                out.push((*i, kind, name.clone()));
            }
        }
        Ok(out)
    }

    /// Number of subdirectories for st_nlink, or None when the base listing
    /// is not loaded: loading it just to stat a directory would make a stat
    /// of a huge directory cost O(entries). Like btrfs and many FUSE
    /// filesystems we then report nlink 1, which find(1) treats as "unknown".
    fn nsub(&mut self, dir: u64) -> Option<u32> {
        let d = self.nodes.get(&dir)?.dir()?;
        if let Some(n) = d.nsub {
            return Some(n);
        }
        if d.lower.is_some() && d.listing.is_none() {
            return None;
        }
        let mut n = 0u32;
        if let Some(list) = &d.listing {
            for e in list.iter() {
                if matches!(e.kind, strata_store::EntryKind::Dir(_))
                    && !d.children.contains_key(&e.name)
                {
                    n += 1;
                }
            }
        }
        for slot in d.children.values() {
            if let Slot::Node(c) = slot {
                if self.nodes.get(c).map(|c| c.kind) == Some(NodeKind::Dir) {
                    n += 1;
                }
            }
        }
        self.nodes.get_mut(&dir)?.dir_mut()?.nsub = Some(n);
        Some(n)
    }

    /// What the name `name` of `dir` adds to `nsub(dir)`: 1 if it stands
    /// for a directory, else 0; None when that cannot be told without
    /// loading the base listing (then `nsub` is not cached either).
    fn subdir_share(&self, dir: u64, name: &[u8]) -> Option<u32> {
        let d = self.nodes.get(&dir)?.dir()?;
        let is_dir = match d.children.get(name) {
            Some(Slot::Node(c)) => self.nodes.get(c)?.kind == NodeKind::Dir,
            Some(Slot::Whiteout) => false,
            None => match (&d.lower, &d.listing) {
                (None, _) => false,
                (Some(_), None) => return None,
                (Some(_), Some(list)) => list
                    .binary_search_by(|e| e.name.as_slice().cmp(name))
                    .is_ok_and(|i| matches!(list[i].kind, strata_store::EntryKind::Dir(_))),
            },
        };
        Some(u32::from(is_dir))
    }

    pub(crate) fn attr(&mut self, ino: u64) -> R<FileAttr> {
        let nsub = self.nsub(ino);
        let n = self.node(ino)?;
        let (mut size, mut blocks) = (0u64, 0u64);
        let (mut atime, mut mtime, mut ctime) = (n.atime, n.mtime, n.ctime);
        match &n.data {
            Data::Lower(c) => {
                size = c.size;
                blocks = c.size.div_ceil(512);
            }
            Data::Symlink(t) => size = t.len() as u64,
            Data::Upper(_) => {
                // The upper file holds size and times: passthrough writes and
                // writes through shared mmap update them without us.
                let m = match &n.file {
                    Some(f) => f.metadata(),
                    None => std::fs::metadata(self.upper_path(ino)),
                }
                .map_err(|e| io_errno("stat an upper file", e))?;
                size = m.size();
                blocks = m.blocks();
                atime = m.atime() * 1_000_000_000 + m.atime_nsec();
                mtime = m.mtime() * 1_000_000_000 + m.mtime_nsec();
                ctime = ctime.max(m.ctime() * 1_000_000_000 + m.ctime_nsec());
            }
            Data::None | Data::Device(_) => {}
        }
        let nlink = match n.kind {
            NodeKind::Dir => nsub.map(|s| s + 2).unwrap_or(1),
            _ => n.links.len() as u32,
        };
        let (uid, gid) = self.ids.outbound(n.uid, n.gid);
        Ok(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks,
            atime: to_system_time(atime),
            mtime: to_system_time(mtime),
            ctime: to_system_time(ctime),
            crtime: to_system_time(mtime),
            kind: n.kind.file_type(),
            perm: n.perm as u16,
            nlink,
            uid,
            gid,
            rdev: match n.data {
                Data::Device(d) => d,
                _ => 0,
            },
            blksize: 4096,
            flags: 0,
        })
    }

    // ---- journal helpers -------------------------------------------------

    /// Write the node's row and make sure every link to it (and the chain of
    /// directories above) is in the journal, so a reopen finds it by path.
    /// The chain can be as deep as the tree: it is walked with a stack of
    /// steps, in the order a recursion would take (a parent's row before
    /// the entry that names its child), never with call stack.
    pub(crate) fn persist(&mut self, ino: u64) -> R<()> {
        enum Step {
            Node(u64),
            /// A parent of a newly journalled node: journal it unless a
            /// step before this one already did.
            Parent(u64),
            Entry(u64, Vec<u8>, u64),
        }
        let mut todo = vec![Step::Node(ino)];
        while let Some(step) = todo.pop() {
            let ino = match step {
                Step::Node(i) => i,
                Step::Parent(p) if self.node(p)?.persisted => continue,
                Step::Parent(p) => p,
                Step::Entry(p, name, child) => {
                    self.journal
                        .put_entry(p, &name, Some(child))
                        .map_err(|e| io_errno("journal an entry", e))?;
                    continue;
                }
            };
            let n = self.node(ino)?;
            if n.links.is_empty() && ino != ROOT {
                continue; // unlinked: reopening must not resurrect it
            }
            let rec = n.record();
            let links = n.links.clone();
            let was = n.persisted;
            self.journal
                .put_node(ino, &rec)
                .map_err(|e| io_errno("journal a node", e))?;
            self.node_mut(ino)?.persisted = true;
            if !was {
                // Reversed: the stack pops the first link's steps first.
                for (p, name) in links.into_iter().rev() {
                    todo.push(Step::Entry(p, name, ino));
                    todo.push(Step::Parent(p));
                }
            }
        }
        Ok(())
    }

    /// Record that directory `dir`'s tree must be rebuilt at commit, and all
    /// directories above it.
    pub(crate) fn dirty_dir(&mut self, mut dir: u64) -> R<()> {
        loop {
            let n = self.node_mut(dir)?;
            let d = n.dir_mut().ok_or(Errno::ENOTDIR)?;
            if d.dirty {
                return Ok(());
            }
            d.dirty = true;
            self.persist(dir)?;
            if dir == ROOT {
                return Ok(());
            }
            dir = self.node(dir)?.parent();
        }
    }

    /// A node's own data or metadata changed: journal it and mark every
    /// directory holding it for rebuild.
    pub(crate) fn changed(&mut self, ino: u64) -> R<()> {
        self.persist(ino)?;
        let g = self.node(ino)?.link_group;
        if g != 0 && !self.scanned_groups.contains(&g) {
            self.pending_groups.insert(g);
        }
        let parents: Vec<u64> = self.node(ino)?.links.iter().map(|l| l.0).collect();
        for p in parents {
            self.dirty_dir(p)?;
        }
        Ok(())
    }

    /// Set (Some) or clear (None) the slot `name` of `dir`, journalled. A
    /// removed name that exists in the base becomes a whiteout.
    pub(crate) fn set_slot(&mut self, dir: u64, name: &[u8], slot: Option<Slot>) -> R<()> {
        let slot = match slot {
            Some(s) => Some(s),
            None if self.lower_entry(dir, name)?.is_some() => Some(Slot::Whiteout),
            None => None,
        };
        if !self.node(dir)?.persisted {
            self.persist(dir)?;
        }
        // st_nlink's subdirectory count is kept up to date by this name's
        // share of it rather than recounted: a recount walks every child,
        // and the kernel asks for the directory's attributes after each
        // change in it (fuse_dir_changed() invalidates them, and
        // default_permissions needs its mode for the next create or
        // unlink), which made 10,000 creates in one directory quadratic.
        let before = self.subdir_share(dir, name);
        let d = self.node_mut(dir)?.dir_mut().ok_or(Errno::ENOTDIR)?;
        match slot {
            Some(s) => {
                d.children.insert(name.to_vec(), s);
            }
            None => {
                d.children.remove(name);
            }
        }
        let after = self.subdir_share(dir, name);
        let d = self.node_mut(dir)?.dir_mut().ok_or(Errno::ENOTDIR)?;
        d.nsub = match (d.nsub, before, after) {
            (Some(n), Some(b), Some(a)) => (n + a).checked_sub(b),
            _ => None,
        };
        let j = match slot {
            Some(Slot::Node(c)) => {
                // A node not yet journalled gets its row (and entries) now.
                if !self.node(c)?.persisted {
                    self.persist(c)?;
                }
                self.journal.put_entry(dir, name, Some(c))
            }
            Some(Slot::Whiteout) => self.journal.put_entry(dir, name, None),
            None => self.journal.del_entry(dir, name),
        };
        j.map_err(|e| io_errno("journal an entry", e))?;
        self.dirty_dir(dir)
    }

    /// Drop a node nobody can reach any more (no links, no kernel
    /// references, no open handles), with its upper file.
    pub(crate) fn maybe_reap(&mut self, ino: u64) {
        let Some(n) = self.nodes.get(&ino) else {
            return;
        };
        if ino == ROOT || !n.links.is_empty() || n.lookups > 0 || n.opens > 0 {
            return;
        }
        let upper = matches!(n.data, Data::Upper(_));
        let group = n.link_group;
        self.nodes.remove(&ino);
        if group != 0 && self.groups.get(&group) == Some(&ino) {
            self.groups.remove(&group);
        }
        if upper {
            self.free_upper_file(ino);
        }
    }

    /// The open data file of a regular file: the upper file read-write, or
    /// the cached base content read-only.
    pub(crate) fn data_file(&mut self, ino: u64) -> R<Arc<File>> {
        let n = self.node(ino)?;
        if let Some(f) = &n.file {
            return Ok(f.clone());
        }
        let f = match &n.data {
            Data::Upper(_) => {
                let p = self.upper_path(ino);
                File::options()
                    .read(true)
                    .write(true)
                    .open(&p)
                    .map_err(|e| io_errno("open an upper file", e))?
            }
            Data::Lower(c) => {
                let c = c.clone();
                self.cache
                    .open(&self.store, &c)
                    .map_err(|e| ws_errno("open cached content", e))?
            }
            _ => return Err(Errno::EINVAL),
        };
        let f = Arc::new(f);
        self.node_mut(ino)?.file = Some(f.clone());
        Ok(f)
    }

    pub(crate) fn new_fh(&mut self, h: Handle) -> u64 {
        let fh = self.next_fh;
        self.next_fh += 1;
        self.handles.insert(fh, h);
        fh
    }

    /// Run `f` as one journal transaction.
    pub(crate) fn tx<T>(&mut self, f: impl FnOnce(&mut State) -> R<T>) -> R<T> {
        self.journal
            .begin()
            .map_err(|e| io_errno("begin a journal transaction", e))?;
        let r = f(self);
        self.journal
            .end()
            .map_err(|e| io_errno("commit a journal transaction", e))?;
        r
    }
}
