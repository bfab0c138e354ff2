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

    /// Differences between two trees (see `diff`).
    pub fn diff_trees(
        &self,
        a: ObjectId,
        b: ObjectId,
        prefix: &[u8],
        out: &mut Vec<Change>,
    ) -> Result<()> {
        self.diff_trees_in(a, b, prefix, out, &[])
    }

    /// `ancestors`: the tree pairs above; a damaged Store can hold a tree
    /// that contains itself (readers do not re-hash), which would recurse
    /// forever.
    fn diff_trees_in(
        &self,
        a: ObjectId,
        b: ObjectId,
        prefix: &[u8],
        out: &mut Vec<Change>,
        ancestors: &[(ObjectId, ObjectId)],
    ) -> Result<()> {
        if a == b {
            return Ok(());
        }
        if let Some(&(x, _)) = ancestors.iter().find(|(x, y)| *x == a || *y == b) {
            return Err(cycle(if x == a { a } else { b }));
        }
        let ea = self.list_tree(a)?;
        let eb = self.list_tree(b)?;
        let (mut i, mut j) = (0, 0);
        while i < ea.len() || j < eb.len() {
            let ord = match (ea.get(i), eb.get(j)) {
                (Some(x), Some(y)) => x.name.cmp(&y.name),
                (Some(_), None) => Ordering::Less,
                _ => Ordering::Greater,
            };
            match ord {
                Ordering::Less => {
                    self.report_all(&ea[i], prefix, ChangeKind::Deleted, out, &[])?;
                    i += 1;
                }
                Ordering::Greater => {
                    self.report_all(&eb[j], prefix, ChangeKind::Added, out, &[])?;
                    j += 1;
                }
                Ordering::Equal => {
                    let (x, y) = (&ea[i], &eb[j]);
                    let path = join(prefix, &x.name);
                    if !same_type(&x.kind, &y.kind) {
                        out.push(Change {
                            path,
                            kind: ChangeKind::TypeChanged,
                        });
                    } else {
                        if entry_differs(x, y) {
                            out.push(Change {
                                path: path.clone(),
                                kind: ChangeKind::Modified,
                            });
                        }
                        if let (EntryKind::Dir(ta), EntryKind::Dir(tb)) = (&x.kind, &y.kind) {
                            let up = [ancestors, &[(a, b)]].concat();
                            self.diff_trees_in(*ta, *tb, &path, out, &up)?;
                        }
                    }
                    i += 1;
                    j += 1;
                }
            }
        }
        Ok(())
    }

    fn report_all(
        &self,
        e: &TreeEntry,
        prefix: &[u8],
        kind: ChangeKind,
        out: &mut Vec<Change>,
        ancestors: &[ObjectId],
    ) -> Result<()> {
        let path = join(prefix, &e.name);
        out.push(Change {
            path: path.clone(),
            kind,
        });
        if let EntryKind::Dir(t) = &e.kind {
            if ancestors.contains(t) {
                return Err(cycle(*t));
            }
            let up = [ancestors, &[*t]].concat();
            for c in self.list_tree(*t)? {
                self.report_all(&c, &path, kind, out, &up)?;
            }
        }
        Ok(())
    }
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
