//! Differences between two commits' trees. Equal subtree ids are skipped
//! without reading them, so a diff costs what changed, not the tree size.

use crate::error::Result;
use crate::id::ObjectId;
use crate::object::{EntryKind, TreeEntry};
use crate::store::Store;
use std::cmp::Ordering;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
    TypeChanged,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Modified => "modified",
            ChangeKind::Deleted => "deleted",
            ChangeKind::TypeChanged => "type_changed",
        }
    }
}

/// One changed path (slash-separated, relative to the root; raw bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub path: Vec<u8>,
    pub kind: ChangeKind,
}

fn same_type(a: &EntryKind, b: &EntryKind) -> bool {
    std::mem::discriminant(a) == std::mem::discriminant(b)
}

/// Whether two entries of the same type differ in content or metadata
/// (ignoring a directory's tree id, which is compared by recursion).
fn entry_differs(a: &TreeEntry, b: &TreeEntry) -> bool {
    let content = match (&a.kind, &b.kind) {
        (EntryKind::Dir(_), EntryKind::Dir(_)) => false,
        (x, y) => x != y,
    };
    content
        || a.mode != b.mode
        || a.uid != b.uid
        || a.gid != b.gid
        || a.xattrs != b.xattrs
        || (!matches!(a.kind, EntryKind::Dir(_)) && a.mtime_ns != b.mtime_ns)
}

impl Store {
    /// Paths added, modified, deleted or changed in type from commit `a` to `b`.
    pub fn diff(&self, a: ObjectId, b: ObjectId) -> Result<Vec<Change>> {
        let ta = self.read_commit(a)?.tree;
        let tb = self.read_commit(b)?.tree;
        let mut out = Vec::new();
        self.diff_trees(ta, tb, &[], &mut out)?;
        Ok(out)
    }

    /// Differences between two trees (see `diff`), in the order a
    /// depth-first walk in name order meets them. The walk keeps its own
    /// stack of directories (a deep tree costs heap, never call stack).
    pub fn diff_trees(
        &self,
        a: ObjectId,
        b: ObjectId,
        prefix: &[u8],
        out: &mut Vec<Change>,
    ) -> Result<()> {
        let mut stack: Vec<Frame> = Vec::new();
        self.push_pair(&mut stack, a, b, prefix.to_vec())?;
        while let Some(top) = stack.last_mut() {
            match top {
                Frame::Pair {
                    ea,
                    eb,
                    i,
                    j,
                    prefix,
                    ..
                } => {
                    let ord = match (ea.get(*i), eb.get(*j)) {
                        (Some(x), Some(y)) => x.name.cmp(&y.name),
                        (Some(_), None) => Ordering::Less,
                        (None, Some(_)) => Ordering::Greater,
                        (None, None) => {
                            stack.pop();
                            continue;
                        }
                    };
                    let prefix = prefix.clone();
                    match ord {
                        Ordering::Less => {
                            let e = ea[*i].clone();
                            *i += 1;
                            self.report(&mut stack, &e, &prefix, ChangeKind::Deleted, out)?;
                        }
                        Ordering::Greater => {
                            let e = eb[*j].clone();
                            *j += 1;
                            self.report(&mut stack, &e, &prefix, ChangeKind::Added, out)?;
                        }
                        Ordering::Equal => {
                            let (x, y) = (ea[*i].clone(), eb[*j].clone());
                            *i += 1;
                            *j += 1;
                            let path = join(&prefix, &x.name);
                            if !same_type(&x.kind, &y.kind) {
                                out.push(Change {
                                    path,
                                    kind: ChangeKind::TypeChanged,
                                });
                                continue;
                            }
                            if entry_differs(&x, &y) {
                                out.push(Change {
                                    path: path.clone(),
                                    kind: ChangeKind::Modified,
                                });
                            }
                            if let (EntryKind::Dir(ta), EntryKind::Dir(tb)) = (&x.kind, &y.kind) {
                                self.push_pair(&mut stack, *ta, *tb, path)?;
                            }
                        }
                    }
                }
                Frame::All {
                    entries,
                    next,
                    prefix,
                    kind,
                    ..
                } => {
                    let Some(e) = entries.get(*next).cloned() else {
                        stack.pop();
                        continue;
                    };
                    *next += 1;
                    let (prefix, kind) = (prefix.clone(), *kind);
                    self.report(&mut stack, &e, &prefix, kind, out)?;
                }
            }
        }
        Ok(())
    }

    /// Start comparing trees `a` and `b` (nothing to do when equal). A
    /// damaged Store can hold a tree that contains itself (readers do not
    /// re-hash): the pairs being compared above are checked for it.
    fn push_pair(
        &self,
        stack: &mut Vec<Frame>,
        a: ObjectId,
        b: ObjectId,
        prefix: Vec<u8>,
    ) -> Result<()> {
        if a == b {
            return Ok(());
        }
        for f in stack.iter() {
            if let Frame::Pair { a: x, b: y, .. } = f {
                if *x == a || *y == b {
                    return Err(cycle(if *x == a { a } else { b }));
                }
            }
        }
        stack.push(Frame::Pair {
            a,
            b,
            ea: self.list_tree(a)?,
            eb: self.list_tree(b)?,
            i: 0,
            j: 0,
            prefix,
        });
        Ok(())
    }

    /// Report an added or deleted entry and (through a new frame)
    /// everything below it.
    fn report(
        &self,
        stack: &mut Vec<Frame>,
        e: &TreeEntry,
        prefix: &[u8],
        kind: ChangeKind,
        out: &mut Vec<Change>,
    ) -> Result<()> {
        let path = join(prefix, &e.name);
        out.push(Change {
            path: path.clone(),
            kind,
        });
        if let EntryKind::Dir(t) = &e.kind {
            // The top of an added or deleted subtree: every path below it
            // is reported, so count them first (each stored tree read
            // once), refusing a forged DAG of shared subtrees whose paths
            // would not fit in memory (trees::expanded_entries).
            if matches!(stack.last(), Some(Frame::Pair { .. })) {
                crate::trees::expanded_entries(&self.reader(), *t)?;
            }
            // Only the trees reported since the nearest pair can repeat.
            for f in stack.iter().rev() {
                match f {
                    Frame::All { tree, .. } if tree == t => return Err(cycle(*t)),
                    Frame::All { .. } => {}
                    Frame::Pair { .. } => break,
                }
            }
            stack.push(Frame::All {
                tree: *t,
                entries: self.list_tree(*t)?,
                next: 0,
                prefix: path,
                kind,
            });
        }
        Ok(())
    }
}

/// One directory of a diff's walk.
enum Frame {
    /// Two trees being merged by name.
    Pair {
        a: ObjectId,
        b: ObjectId,
        ea: Vec<TreeEntry>,
        eb: Vec<TreeEntry>,
        i: usize,
        j: usize,
        prefix: Vec<u8>,
    },
    /// Everything below an added or deleted directory.
    All {
        tree: ObjectId,
        entries: Vec<TreeEntry>,
        next: usize,
        prefix: Vec<u8>,
        kind: ChangeKind,
    },
}

fn cycle(id: ObjectId) -> crate::error::StoreError {
    crate::error::StoreError::Corrupt {
        id,
        reason: "a directory tree contains itself".into(),
    }
}

fn join(prefix: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = prefix.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}
