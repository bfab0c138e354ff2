//! What the Store calls of [`crate::Client`] return, the same values
//! in-process and through a server, and their conversions from the
//! Store's types and from the wire (exact bytes where the wire carries a
//! hex form of a name that is not UTF-8).

use std::collections::BTreeMap;

use strata_api as wire;
use strata_store::{EntryKind, TreeEntry};

use crate::workspace::Change;

/// A commit, as `log` returns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitInfo {
    /// Commit id (hex).
    pub id: String,
    /// Root tree id (hex).
    pub tree: String,
    /// Parent commit ids (hex), first parent first.
    pub parents: Vec<String>,
    /// The message.
    pub message: String,
    /// When it was made, nanoseconds since the epoch.
    pub time_ns: i64,
    /// Metadata (e.g. the server token that made it).
    pub metadata: BTreeMap<String, String>,
    /// Bytes of all files in the commit, when its writer knew it.
    pub file_bytes: Option<u64>,
    /// Entries in the commit, when known.
    pub entries: Option<u64>,
}

/// One entry of a tree, as `ls` and `stat` return it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The name, exact bytes.
    pub name: Vec<u8>,
    /// `file`, `dir`, `symlink`, `fifo` or `socket`.
    pub kind: String,
    /// Permission bits including setuid, setgid and sticky.
    pub mode: u32,
    /// Size in bytes (a symlink's target length, 0 for a directory).
    pub size: u64,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Modification time, nanoseconds since the epoch.
    pub mtime_ns: i64,
    /// A symlink's target, exact bytes.
    pub target: Option<Vec<u8>>,
    /// Hard-link group (0: not hard-linked).
    pub link_group: u64,
    /// Names of its extended attributes.
    pub xattrs: Vec<Vec<u8>>,
}

/// One branch and its head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BranchInfo {
    /// The project.
    pub project: String,
    /// The branch name within it.
    pub name: String,
    /// Head commit (hex).
    pub head: String,
}

/// What `diff` returns: the commits both REFs named, and the changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// The older commit (hex).
    pub from: String,
    /// The newer commit (hex).
    pub to: String,
    /// Changed paths, in path order.
    pub changes: Vec<Change>,
}

pub(crate) fn entry_of(e: &TreeEntry) -> Entry {
    Entry {
        name: e.name.clone(),
        kind: e.kind.type_name().to_string(),
        mode: e.mode,
        size: e.size(),
        uid: e.uid,
        gid: e.gid,
        mtime_ns: e.mtime_ns,
        target: match &e.kind {
            EntryKind::Symlink(t) => Some(t.clone()),
            _ => None,
        },
        link_group: e.link_group,
        xattrs: e.xattrs.iter().map(|(k, _)| k.clone()).collect(),
    }
}

/// Exact bytes from the wire: the hex form when the server sent one.
pub(crate) fn exact(text: &str, hex_form: Option<&str>) -> Vec<u8> {
    hex_form
        .and_then(|h| hex::decode(h).ok())
        .unwrap_or_else(|| text.as_bytes().to_vec())
}

pub(crate) fn entry_from_wire(e: wire::Entry) -> Entry {
    Entry {
        name: exact(&e.name, e.name_hex.as_deref()),
        target: e
            .target
            .as_deref()
            .map(|t| exact(t, e.target_hex.as_deref())),
        kind: e.kind,
        mode: e.mode,
        size: e.size,
        uid: e.uid,
        gid: e.gid,
        mtime_ns: e.mtime_ns,
        link_group: e.link_group.unwrap_or(0),
        xattrs: e.xattrs.into_iter().map(String::into_bytes).collect(),
    }
}

pub(crate) fn commit_from_wire(c: wire::CommitInfo) -> CommitInfo {
    CommitInfo {
        id: c.id,
        tree: c.tree,
        parents: c.parents,
        message: c.message,
        time_ns: c.time_ns,
        metadata: c.metadata,
        file_bytes: c.file_bytes,
        entries: c.entries,
    }
}
