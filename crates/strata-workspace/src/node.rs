//! In-memory inodes of a mounted Workspace.
//!
//! A node is either still backed by the base commit (its data is a
//! `FileContent` read through the content cache) or has its data in the upper
//! layer (`<scratch>/upper/<ino>`). Metadata (mode, owner, times, xattrs)
//! always lives in the node itself, so chmod/chown of a lower file never
//! copies its bytes.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;
use strata_store::{EntryKind, FileContent, ObjectId, TreeEntry};

pub(crate) const ROOT: u64 = 1;

/// The type of a node, as stored (there are no device nodes in a Store).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum NodeKind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    /// Device nodes live only in the Workspace: a Store has no entry kind
    /// for them, so commit refuses them by name (see `commit.rs`).
    CharDevice,
    BlockDevice,
}

impl NodeKind {
    pub(crate) fn of(kind: &EntryKind) -> NodeKind {
        match kind {
            EntryKind::File(_) => NodeKind::File,
            EntryKind::Dir(_) => NodeKind::Dir,
            EntryKind::Symlink(_) => NodeKind::Symlink,
            EntryKind::Fifo => NodeKind::Fifo,
            EntryKind::Socket => NodeKind::Socket,
        }
    }

    pub(crate) fn file_type(self) -> fuser::FileType {
        match self {
            NodeKind::File => fuser::FileType::RegularFile,
            NodeKind::Dir => fuser::FileType::Directory,
            NodeKind::Symlink => fuser::FileType::Symlink,
            NodeKind::Fifo => fuser::FileType::NamedPipe,
            NodeKind::Socket => fuser::FileType::Socket,
            NodeKind::CharDevice => fuser::FileType::CharDevice,
            NodeKind::BlockDevice => fuser::FileType::BlockDevice,
        }
    }
}

/// Where the bytes of a regular file (or the target of a symlink) are.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Data {
    /// Directories, fifos and sockets.
    None,
    Symlink(Vec<u8>),
    /// Unchanged bytes of the base (read via the content cache).
    Lower(FileContent),
    /// Bytes in `upper/<ino>`.
    Upper(UpperInfo),
    /// The device number of a char/block device node.
    Device(u32),
}

/// What an upper file was copied from, to tell "opened for writing" from
/// "changed" without reading it (the same test git's index uses: size and
/// mtime, plus an explicit flag for writes the daemon saw).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct UpperInfo {
    /// Content the file had when copied up (or after the last commit).
    pub origin: Option<FileContent>,
    pub origin_size: u64,
    pub origin_mtime: i64,
    /// A write, truncate, fallocate or explicit mtime change went through
    /// the daemon since `origin` (passthrough writes are caught by mtime).
    pub written: bool,
}

/// A directory entry slot that overrides the lower tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Node(u64),
    /// The lower entry of this name is deleted.
    Whiteout,
}

#[derive(Debug, Default)]
pub(crate) struct Dir {
    /// The base tree this directory's unlisted names come from.
    pub lower: Option<ObjectId>,
    /// Names resolved so far (clean lookups included) and whiteouts.
    pub children: BTreeMap<Vec<u8>, Slot>,
    /// Cached listing of `lower` (loaded on readdir/rmdir/stat only).
    pub listing: Option<Arc<Vec<TreeEntry>>>,
    /// The subtree differs (or may differ) from `lower`: commit rebuilds it.
    pub dirty: bool,
    /// Cached number of subdirectories (for st_nlink), reset on change.
    pub nsub: Option<u32>,
}

#[derive(Debug)]
pub(crate) struct Node {
    pub kind: NodeKind,
    /// Permission bits including setuid/setgid/sticky.
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub data: Data,
    pub dir: Option<Box<Dir>>,
    /// (parent, name) of every link. Directories have exactly one (root none).
    pub links: Vec<(u64, Vec<u8>)>,
    /// Hard-link group in the base commit (0 = none).
    pub link_group: u64,
    /// Kernel lookup count (FUSE forget protocol).
    pub lookups: u64,
    /// Open file handles.
    pub opens: u32,
    /// The node has a row in the journal.
    pub persisted: bool,
    /// Passthrough backing shared by all open handles of this inode (the
    /// kernel refuses different backing files for one inode: EBUSY).
    pub backing: Option<Backing>,
    /// Opened data file (upper read-write, or cache read-only).
    pub file: Option<Arc<std::fs::File>>,
}

#[derive(Debug)]
pub(crate) struct Backing {
    pub id: Arc<BackingRef>,
    /// Backed by the upper file (true) or the shared cache file (false).
    pub upper: bool,
}

/// A registered passthrough backing: made through a fuser reply on a
/// /dev/fuse-served mount, by the ring itself on a ring-served one
/// (uring/backing.rs). Either closes its id when dropped.
#[derive(Debug)]
pub(crate) enum BackingRef {
    Fuser(fuser::BackingId),
    Ring(crate::uring::RingBacking),
}

impl Node {
    pub(crate) fn new(kind: NodeKind, perm: u32, uid: u32, gid: u32, now: i64, data: Data) -> Node {
        Node {
            kind,
            perm: perm & 0o7777,
            uid,
            gid,
            atime: now,
            mtime: now,
            ctime: now,
            xattrs: BTreeMap::new(),
            data,
            dir: (kind == NodeKind::Dir).then(Default::default),
            links: Vec::new(),
            link_group: 0,
            lookups: 0,
            opens: 0,
            persisted: false,
            backing: None,
            file: None,
        }
    }

    /// A node for an entry of the base commit.
    pub(crate) fn from_entry(e: &TreeEntry) -> Node {
        let kind = NodeKind::of(&e.kind);
        let data = match &e.kind {
            EntryKind::File(c) => Data::Lower(c.clone()),
            EntryKind::Symlink(t) => Data::Symlink(t.clone()),
            _ => Data::None,
        };
        let mut n = Node::new(kind, e.mode, e.uid, e.gid, e.mtime_ns, data);
        if let EntryKind::Dir(t) = &e.kind {
            n.dir.as_mut().expect("dir").lower = Some(*t);
        }
        n.xattrs = e.xattrs.iter().cloned().collect();
        n.link_group = e.link_group;
        n
    }

    pub(crate) fn dir(&self) -> Option<&Dir> {
        self.dir.as_deref()
    }

    pub(crate) fn dir_mut(&mut self) -> Option<&mut Dir> {
        self.dir.as_deref_mut()
    }

    pub(crate) fn parent(&self) -> u64 {
        self.links.first().map(|l| l.0).unwrap_or(ROOT)
    }

    pub(crate) fn record(&self) -> NodeRecord {
        NodeRecord {
            kind: self.kind,
            perm: self.perm,
            uid: self.uid,
            gid: self.gid,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
            xattrs: self.xattrs.clone().into_iter().collect(),
            data: self.data.clone(),
            lower_tree: self.dir().and_then(|d| d.lower),
            dirty: self.dir().map(|d| d.dirty).unwrap_or(false),
            link_group: self.link_group,
        }
    }

    pub(crate) fn from_record(r: NodeRecord) -> Node {
        let mut n = Node::new(r.kind, r.perm, r.uid, r.gid, r.mtime, r.data);
        n.atime = r.atime;
        n.ctime = r.ctime;
        n.xattrs = r.xattrs.into_iter().collect();
        n.link_group = r.link_group;
        if let Some(d) = n.dir_mut() {
            d.lower = r.lower_tree;
            d.dirty = r.dirty;
        }
        n.persisted = true;
        n
    }
}

/// A node as persisted in the journal (postcard-encoded).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct NodeRecord {
    pub kind: NodeKind,
    pub perm: u32,
    pub uid: u32,
    pub gid: u32,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    pub data: Data,
    pub lower_tree: Option<ObjectId>,
    pub dirty: bool,
    pub link_group: u64,
}

/// Nanoseconds since the epoch, now.
pub(crate) fn now_ns() -> i64 {
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    d.as_nanos() as i64
}

pub(crate) fn to_system_time(ns: i64) -> std::time::SystemTime {
    use std::time::{Duration, UNIX_EPOCH};
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH - Duration::from_nanos(ns.unsigned_abs())
    }
}

pub(crate) fn from_system_time(t: std::time::SystemTime) -> i64 {
    match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}
