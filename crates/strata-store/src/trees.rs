//! Directory trees. A directory of up to `TREE_LEAF_MAX` entries is one leaf
//! node; a larger one is split into leaves at names whose hash hits a
//! boundary, under index nodes, so adding or changing one entry of a
//! 100,000-entry directory rewrites one leaf and the index above it.

use crate::chunker::{split_runs, tree_boundary, PAGE_MAX, PAGE_MIN, TREE_LEAF_MAX};
use crate::error::{Result, StoreError};
use crate::files::Batch;
use crate::id::{Kind, ObjectId};
use crate::object::{decode, encode, IndexEntry, TreeEntry, TreeNode};
use crate::objects::{self, Prepared};
use crate::store::Store;

/// Why `name` cannot be a directory entry, if it cannot: it must be one
/// path component (path_resolution(7)): not empty, not `.` or `..`, no '/'
/// and no NUL. Export joins names onto its target, so any other name could
/// make it write outside the target.
pub(crate) fn bad_name(name: &[u8]) -> Option<&'static str> {
    match name {
        b"" => Some("an empty name"),
        b"." | b".." => Some("a name that is . or .."),
        n if n.contains(&b'/') => Some("a name with '/'"),
        n if n.contains(&0) => Some("a name with a NUL byte"),
        _ => None,
    }
}

/// Build the nodes of a directory: returns the root id and every node to store.
pub(crate) fn build_tree(mut entries: Vec<TreeEntry>) -> Result<(ObjectId, Vec<Prepared>)> {
    if let Some((e, why)) = entries.iter().find_map(|e| Some((e, bad_name(&e.name)?))) {
        return Err(StoreError::Invalid(format!(
            "{why} ({:?}) in a directory: an entry name is one path component",
            String::from_utf8_lossy(&e.name)
        )));
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    for w in entries.windows(2) {
        if w[0].name == w[1].name {
            return Err(StoreError::Invalid(format!(
                "duplicate name {:?} in one directory",
                String::from_utf8_lossy(&w[0].name)
            )));
        }
    }
    let mut out = Vec::new();
    if entries.len() <= TREE_LEAF_MAX {
        let raw = encode(&TreeNode::Leaf(entries));
        let p = objects::prepare(Kind::Tree, &raw);
        let id = p.id;
        out.push(p);
        return Ok((id, out));
    }
    // Split leaves at content-defined name boundaries.
    let runs = split_runs(entries, 16, 4 * TREE_LEAF_MAX, |e| tree_boundary(&e.name));
    let mut index: Vec<IndexEntry> = Vec::with_capacity(runs.len());
    for run in runs {
        let first_name = run[0].name.clone();
        let count = run.len() as u64;
        let p = objects::prepare(Kind::Tree, &encode(&TreeNode::Leaf(run)));
        index.push(IndexEntry {
            first_name,
            id: p.id,
            count,
        });
        out.push(p);
    }
    loop {
        if index.len() <= PAGE_MAX {
            let p = objects::prepare(Kind::Tree, &encode(&TreeNode::Index(index)));
            let id = p.id;
            out.push(p);
            return Ok((id, out));
        }
        let runs = split_runs(index, PAGE_MIN, PAGE_MAX, |e| {
            crate::chunker::page_boundary(&e.id)
        });
        let mut next = Vec::with_capacity(runs.len());
        for run in runs {
            let first_name = run[0].first_name.clone();
            let count = run.iter().map(|e| e.count).sum();
            let p = objects::prepare(Kind::Tree, &encode(&TreeNode::Index(run)));
            next.push(IndexEntry {
                first_name,
                id: p.id,
                count,
            });
            out.push(p);
        }
        index = next;
    }
}

fn read_node(conn: &rusqlite::Connection, id: &ObjectId) -> Result<TreeNode> {
    let raw = objects::get_raw_in(conn, id, Kind::Tree)?;
    decode(&raw).map_err(|e| StoreError::Corrupt {
        id: *id,
        reason: format!("bad tree node: {e}"),
    })
}

impl Store {
    /// Store a directory's entries (any order) and return its tree id.
    pub fn write_tree(&self, entries: Vec<TreeEntry>) -> Result<ObjectId> {
        let _session = self.write_session()?;
        let (id, nodes) = build_tree(entries)?;
        let mut batch = Batch::new(self);
        for n in nodes {
            batch.push(n)?;
        }
        batch.flush()?;
        Ok(id)
    }

    /// Every entry of a directory, sorted by name.
    pub fn list_tree(&self, tree: ObjectId) -> Result<Vec<TreeEntry>> {
        let conn = self.reader();
        let mut out = Vec::new();
        list_into(&conn, &tree, &mut out)?;
        Ok(out)
    }

    /// One entry of a directory by name.
    pub fn lookup(&self, tree: ObjectId, name: &[u8]) -> Result<Option<TreeEntry>> {
        let conn = self.reader();
        let mut id = tree;
        loop {
            match read_node(&conn, &id)? {
                TreeNode::Leaf(entries) => {
                    return Ok(entries
                        .binary_search_by(|e| e.name.as_slice().cmp(name))
                        .ok()
                        .map(|i| entries[i].clone()))
                }
                TreeNode::Index(children) => {
                    let i = children.partition_point(|c| c.first_name.as_slice() <= name);
                    if i == 0 {
                        return Ok(None);
                    }
                    id = children[i - 1].id;
                }
            }
        }
    }

    /// The entry at a slash-separated path in a commit (`b""` or `b"/"` is
    /// the root, returned as a synthetic directory entry).
    pub fn read_path(&self, commit: ObjectId, path: &[u8]) -> Result<Option<TreeEntry>> {
        let c = self.read_commit(commit)?;
        self.lookup_path(c.tree, path)
    }

    /// The entry at a slash-separated path under a tree.
    pub fn lookup_path(&self, tree: ObjectId, path: &[u8]) -> Result<Option<TreeEntry>> {
        let mut entry = TreeEntry {
            name: Vec::new(),
            kind: crate::EntryKind::Dir(tree),
            mode: 0o755,
            uid: 0,
            gid: 0,
            mtime_ns: 0,
            xattrs: Vec::new(),
            link_group: 0,
        };
        for comp in path
            .split(|&b| b == b'/')
            .filter(|c| !c.is_empty() && *c != b".")
        {
            let crate::EntryKind::Dir(t) = entry.kind else {
                return Ok(None);
            };
            match self.lookup(t, comp)? {
                Some(e) => entry = e,
                None => return Ok(None),
            }
        }
        Ok(Some(entry))
    }
}

/// Append the entries under node `id` in order. Index nodes are walked with
/// a stack of their own; a node met twice (only a damaged Store can hold an
/// index that contains itself) is refused instead of looping forever.
fn list_into(conn: &rusqlite::Connection, id: &ObjectId, out: &mut Vec<TreeEntry>) -> Result<()> {
    let mut todo = vec![*id];
    let mut seen = std::collections::HashSet::new();
    while let Some(id) = todo.pop() {
        match read_node(conn, &id)? {
            TreeNode::Leaf(entries) => out.extend(entries),
            TreeNode::Index(children) => {
                if seen.is_empty() {
                    seen.insert(id); // the root: the first index node met
                }
                for c in children.iter().rev() {
                    if !seen.insert(c.id) {
                        return Err(StoreError::Corrupt {
                            id: c.id,
                            reason: "a tree index lists this node twice".into(),
                        });
                    }
                    todo.push(c.id);
                }
            }
        }
    }
    Ok(())
}

/// The most entries one exported tree may expand to. ext4 and xfs count
/// inodes in 32 bits, so no directory tree on disk holds more; only a
/// forged DAG of shared subtrees (each directory listing the next one
/// twice, 40 levels deep: 2^41 paths from 41 rows) does.
pub(crate) const MAX_TREE_ENTRIES: u64 = 1 << 32;

/// How many entries the tree `root` holds, each directory counted with
/// everything under it. Each distinct tree is read once (a shared subtree
/// is counted, not walked again) with a stack of its own, so the cost is
/// the number of stored trees whatever the DAG expands to. A tree that
/// contains itself, or one expanding to more than `MAX_TREE_ENTRIES`, is
/// `Corrupt`, naming the tree.
pub(crate) fn expanded_entries(conn: &rusqlite::Connection, root: ObjectId) -> Result<u64> {
    enum Step {
        Enter(ObjectId),
        /// A tree's own entry count and its subdirectories (with repeats).
        Exit(ObjectId, u64, Vec<ObjectId>),
    }
    let mut memo: std::collections::HashMap<ObjectId, u64> = Default::default();
    let mut open = std::collections::HashSet::new();
    let mut stack = vec![Step::Enter(root)];
    while let Some(step) = stack.pop() {
        match step {
            Step::Enter(id) => {
                if memo.contains_key(&id) {
                    continue;
                }
                // Entered and not yet exited: exactly the trees above this one.
                if !open.insert(id) {
                    return Err(StoreError::Corrupt {
                        id,
                        reason: "a directory tree contains itself".into(),
                    });
                }
                let mut entries = Vec::new();
                list_into(conn, &id, &mut entries)?;
                let dirs: Vec<ObjectId> = entries
                    .iter()
                    .filter_map(|e| match e.kind {
                        crate::EntryKind::Dir(t) => Some(t),
                        _ => None,
                    })
                    .collect();
                let enter: Vec<Step> = dirs.iter().copied().map(Step::Enter).collect();
                stack.push(Step::Exit(id, entries.len() as u64, dirs));
                stack.extend(enter);
            }
            Step::Exit(id, own, dirs) => {
                let mut n = own;
                for d in &dirs {
                    n = n.saturating_add(memo.get(d).copied().unwrap_or(0));
                }
                if n > MAX_TREE_ENTRIES {
                    return Err(StoreError::Corrupt {
                        id,
                        reason: format!(
                            "the directory tree expands to more than {MAX_TREE_ENTRIES} entries (shared subtrees listed again and again; no filesystem holds that many)"
                        ),
                    });
                }
                open.remove(&id);
                memo.insert(id, n);
            }
        }
    }
    Ok(memo.get(&root).copied().unwrap_or(0))
}
