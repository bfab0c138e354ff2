//! Building a tree from a base tree plus a list of path edits (put a file,
//! make a symlink, change a mode, delete), without a Workspace: the write
//! half of a change set sent over an API. Only the directories on the
//! edited paths are read and rewritten; everything else keeps its tree id.
//!
//! No recursion on depth (ARCHITECTURE.md, "No walk recurses on tree
//! depth"): the touched directories live in an arena in creation order, a
//! child always after its parent, so writing them back to front writes
//! every child before the parent that names it.

use std::collections::{BTreeMap, HashMap};

use crate::error::{Result, StoreError};
use crate::id::ObjectId;
use crate::object::{EntryKind, FileContent, TreeEntry};
use crate::store::Store;

/// What to do at one path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EditOp {
    /// Create or replace a regular file (never a directory: delete that
    /// first). `mode` is the permission bits (`& 0o7777`).
    File { content: FileContent, mode: u32 },
    /// Create or replace a symlink; the target is stored verbatim.
    Symlink { target: Vec<u8> },
    /// Create a directory if it is missing (an existing one is kept).
    Mkdir { mode: u32 },
    /// Change the permission bits of an existing entry.
    Chmod { mode: u32 },
    /// Remove an existing entry (a directory with everything under it).
    Delete,
}

/// One edit: a slash-separated relative path and what to do there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TreeEdit {
    pub path: Vec<u8>,
    pub op: EditOp,
}

/// Longest path component the Store accepts (NAME_MAX on Linux).
const NAME_MAX: usize = 255;

/// Split and check a relative path: no empty, `.` or `..` component, no
/// NUL, not absolute. The error names the path and the rule it broke.
pub fn split_path(path: &[u8]) -> Result<Vec<&[u8]>> {
    let shown = String::from_utf8_lossy(path);
    let bad = |why: &str| {
        Err(StoreError::Invalid(format!(
            "path {shown:?} {why}; give a relative path like \"src/main.rs\""
        )))
    };
    if path.is_empty() {
        return bad("is empty");
    }
    if path[0] == b'/' {
        return bad("is absolute");
    }
    if path.contains(&0) {
        return bad("contains a NUL byte");
    }
    let parts: Vec<&[u8]> = path.split(|&b| b == b'/').collect();
    for p in &parts {
        if p.is_empty() {
            return bad("has an empty component (\"//\" or a trailing \"/\")");
        }
        if *p == b"." || *p == b".." {
            return bad("has a \".\" or \"..\" component");
        }
        if p.len() > NAME_MAX {
            return bad("has a component longer than 255 bytes");
        }
    }
    Ok(parts)
}

/// A directory touched by the edits.
struct Node {
    /// Its entries, by name (the base tree's, then edited).
    entries: BTreeMap<Vec<u8>, TreeEntry>,
    /// Touched subdirectories: name -> arena index.
    children: HashMap<Vec<u8>, usize>,
    /// Owner of new entries made in it.
    uid: u32,
    gid: u32,
}

impl Store {
    /// Apply `edits`, in order, to the tree `base` and write the result;
    /// returns the new root tree id (objects only: publishing it is
    /// [`Store::commit_tree`]'s compare-and-swap). Missing parent
    /// directories are created (0755, owned like their parent); a path
    /// through a non-directory, a file put over a directory, or a chmod or
    /// delete of a missing path is [`StoreError::Invalid`] or
    /// [`StoreError::NotFound`] and writes nothing a branch refers to.
    /// New entries take the owner of the entry they replace, else of
    /// their directory's entry (the root's is 0:0).
    pub fn edit_tree(&self, base: ObjectId, edits: &[TreeEdit]) -> Result<ObjectId> {
        let now = crate::now_ns();
        let root_entries = self.list_tree(base)?;
        let mut arena: Vec<Node> = vec![Node {
            entries: root_entries
                .into_iter()
                .map(|e| (e.name.clone(), e))
                .collect(),
            children: HashMap::new(),
            uid: 0,
            gid: 0,
        }];

        for edit in edits {
            let parts = split_path(&edit.path)?;
            let shown = String::from_utf8_lossy(&edit.path).into_owned();
            let (leaf, dirs) = parts
                .split_last()
                .expect("split_path never returns nothing");
            // Walk (and create, for a put) the directories on the way.
            let creating = matches!(
                edit.op,
                EditOp::File { .. } | EditOp::Symlink { .. } | EditOp::Mkdir { .. }
            );
            let mut cur = 0usize;
            let mut missing = false;
            for d in dirs {
                if let Some(&i) = arena[cur].children.get(*d) {
                    cur = i;
                    continue;
                }
                let (uid, gid) = (arena[cur].uid, arena[cur].gid);
                let node = match arena[cur].entries.get(*d) {
                    Some(TreeEntry {
                        kind: EntryKind::Dir(tree),
                        uid,
                        gid,
                        ..
                    }) => {
                        let (tree, uid, gid) = (*tree, *uid, *gid);
                        Node {
                            entries: self
                                .list_tree(tree)?
                                .into_iter()
                                .map(|e| (e.name.clone(), e))
                                .collect(),
                            children: HashMap::new(),
                            uid,
                            gid,
                        }
                    }
                    Some(_) => {
                        return Err(StoreError::Invalid(format!(
                            "path {shown:?}: {:?} is not a directory; delete it first in the same change set",
                            String::from_utf8_lossy(d)
                        )))
                    }
                    None if creating => {
                        arena[cur].entries.insert(
                            d.to_vec(),
                            TreeEntry {
                                name: d.to_vec(),
                                // Replaced with the written tree below.
                                kind: EntryKind::Dir(ObjectId([0; 32])),
                                mode: 0o755,
                                uid,
                                gid,
                                mtime_ns: now,
                                xattrs: Vec::new(),
                                link_group: 0,
                            },
                        );
                        Node {
                            entries: BTreeMap::new(),
                            children: HashMap::new(),
                            uid,
                            gid,
                        }
                    }
                    None => {
                        missing = true;
                        break;
                    }
                };
                arena.push(node);
                let i = arena.len() - 1;
                arena[cur].children.insert(d.to_vec(), i);
                cur = i;
            }
            let not_found = || StoreError::NotFound {
                what: "path",
                name: shown.clone(),
            };
            if missing {
                return Err(not_found());
            }
            let node = &mut arena[cur];
            let old = node.entries.get(*leaf);
            let (uid, gid) = old.map_or((node.uid, node.gid), |e| (e.uid, e.gid));
            let fresh = |kind, mode: u32| TreeEntry {
                name: leaf.to_vec(),
                kind,
                mode: mode & 0o7777,
                uid,
                gid,
                mtime_ns: now,
                xattrs: Vec::new(),
                link_group: 0,
            };
            match &edit.op {
                EditOp::File { .. } | EditOp::Symlink { .. }
                    if matches!(
                        old,
                        Some(TreeEntry {
                            kind: EntryKind::Dir(_),
                            ..
                        })
                    ) =>
                {
                    return Err(StoreError::Invalid(format!(
                        "path {shown:?} is a directory; delete it first in the same change set"
                    )));
                }
                EditOp::File { content, mode } => {
                    let e = fresh(EntryKind::File(content.clone()), *mode);
                    node.entries.insert(leaf.to_vec(), e);
                }
                EditOp::Symlink { target } => {
                    if target.is_empty() || target.contains(&0) {
                        return Err(StoreError::Invalid(format!(
                            "symlink {shown:?}: the target must be non-empty and contain no NUL"
                        )));
                    }
                    let e = fresh(EntryKind::Symlink(target.clone()), 0o777);
                    node.entries.insert(leaf.to_vec(), e);
                }
                EditOp::Mkdir { mode } => match old {
                    Some(TreeEntry {
                        kind: EntryKind::Dir(_),
                        ..
                    }) => {}
                    Some(_) => {
                        return Err(StoreError::Invalid(format!(
                            "path {shown:?} exists and is not a directory; delete it first"
                        )))
                    }
                    None => {
                        let empty = self.write_tree(Vec::new())?;
                        let e = fresh(EntryKind::Dir(empty), *mode);
                        node.entries.insert(leaf.to_vec(), e);
                    }
                },
                EditOp::Chmod { mode } => match node.entries.get_mut(*leaf) {
                    Some(e) => {
                        e.mode = mode & 0o7777;
                        e.mtime_ns = now;
                    }
                    None => return Err(not_found()),
                },
                EditOp::Delete => {
                    if node.entries.remove(*leaf).is_none() {
                        return Err(not_found());
                    }
                    // A deleted subtree's node stays in the arena but is
                    // unlinked: its parent no longer names it.
                    node.children.remove(*leaf);
                }
            }
        }

        // Children after parents: write back to front.
        let mut written: Vec<Option<ObjectId>> = vec![None; arena.len()];
        for i in (0..arena.len()).rev() {
            let mut entries: Vec<TreeEntry> = std::mem::take(&mut arena[i].entries)
                .into_values()
                .collect();
            for e in entries.iter_mut() {
                if let Some(&c) = arena[i].children.get(&e.name) {
                    let id = written[c].expect("a child is written before its parent");
                    e.kind = EntryKind::Dir(id);
                }
            }
            written[i] = Some(self.write_tree(entries)?);
        }
        Ok(written[0].expect("the root is written last"))
    }
}
