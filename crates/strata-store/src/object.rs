//! The object model: what chunks, manifest pages, trees and commits contain,
//! and their canonical encoding (postcard over serde; deterministic because
//! every collection is a sorted `Vec` or a `BTreeMap`).

use crate::id::ObjectId;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a file's bytes live.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ContentRef {
    /// A zero-length file.
    Empty,
    /// A file that fits in one chunk: the chunk itself, no manifest.
    Chunk(ObjectId),
    /// A file of several chunks: the root page of its manifest tree.
    /// `height` is the root page's level (0 = its entries are chunks).
    Pages { root: ObjectId, height: u8 },
}

/// A file's content: its size and where its bytes live.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct FileContent {
    pub size: u64,
    pub data: ContentRef,
}

impl FileContent {
    pub const EMPTY: FileContent = FileContent {
        size: 0,
        data: ContentRef::Empty,
    };

    /// A key that identifies these bytes: equal keys mean equal content.
    /// `None` for the empty file. Used to key content caches.
    pub fn key(&self) -> Option<ObjectId> {
        match &self.data {
            ContentRef::Empty => None,
            ContentRef::Chunk(id) => Some(*id),
            ContentRef::Pages { root, .. } => Some(*root),
        }
    }
}

/// What a directory entry is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum EntryKind {
    File(FileContent),
    /// A directory: the id of its tree (root node).
    Dir(ObjectId),
    /// A symbolic link and its target, stored verbatim and never followed.
    Symlink(Vec<u8>),
    Fifo,
    Socket,
}

impl EntryKind {
    pub fn type_name(&self) -> &'static str {
        match self {
            EntryKind::File(_) => "file",
            EntryKind::Dir(_) => "dir",
            EntryKind::Symlink(_) => "symlink",
            EntryKind::Fifo => "fifo",
            EntryKind::Socket => "socket",
        }
    }

    /// The `S_IFMT` bits for this kind.
    pub fn format_bits(&self) -> u32 {
        match self {
            EntryKind::File(_) => libc::S_IFREG,
            EntryKind::Dir(_) => libc::S_IFDIR,
            EntryKind::Symlink(_) => libc::S_IFLNK,
            EntryKind::Fifo => libc::S_IFIFO,
            EntryKind::Socket => libc::S_IFSOCK,
        }
    }
}

/// One entry of a directory, with all the metadata a snapshot preserves.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeEntry {
    /// The name as raw bytes (names need not be UTF-8).
    pub name: Vec<u8>,
    pub kind: EntryKind,
    /// Permission bits including setuid, setgid and sticky (`mode & 0o7777`).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    /// Modification time in nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// Extended attributes (`user.` namespace), sorted by name.
    pub xattrs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Hard-link group within one commit: entries with the same non-zero
    /// group are one inode. 0 means not hard-linked.
    pub link_group: u64,
}

impl TreeEntry {
    /// `st_mode` as the kernel reports it: format bits | permission bits.
    pub fn st_mode(&self) -> u32 {
        self.kind.format_bits() | (self.mode & 0o7777)
    }

    /// Size in bytes as `stat` would report it.
    pub fn size(&self) -> u64 {
        match &self.kind {
            EntryKind::File(c) => c.size,
            EntryKind::Symlink(t) => t.len() as u64,
            _ => 0,
        }
    }
}

/// One entry of a manifest page: a chunk (level 0) or a child page, with the
/// number of file bytes it covers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageEntry {
    pub id: ObjectId,
    pub size: u64,
}

/// A manifest page. Level 0 entries are chunks; level n entries are pages of
/// level n-1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page {
    pub level: u8,
    pub entries: Vec<PageEntry>,
}

/// An entry of a tree index node: a child node and the first name under it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub first_name: Vec<u8>,
    pub id: ObjectId,
    pub count: u64,
}

/// A directory tree node. Small directories are one `Leaf`; large ones are
/// split at content-defined boundaries into leaves under `Index` nodes, so
/// that adding one name rewrites one leaf and the path above it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TreeNode {
    Leaf(Vec<TreeEntry>),
    Index(Vec<IndexEntry>),
}

/// A commit: immutable once written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub tree: ObjectId,
    pub parents: Vec<ObjectId>,
    pub message: String,
    pub time_ns: i64,
    pub metadata: BTreeMap<String, String>,
    /// Total bytes of regular-file content in the tree (hard links counted
    /// once), when the writer knew it (snapshots do; incremental commits
    /// record `None` rather than walk the whole tree).
    pub file_bytes: Option<u64>,
    /// Number of entries of every kind in the tree, when known.
    pub entries: Option<u64>,
}

pub(crate) fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_stdvec(v).expect("encoding an in-memory object cannot fail")
}

pub(crate) fn decode<'a, T: Deserialize<'a>>(bytes: &'a [u8]) -> Result<T, postcard::Error> {
    postcard::from_bytes(bytes)
}
