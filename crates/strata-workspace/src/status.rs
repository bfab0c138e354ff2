//! Status: compare the live tree with the base. It walks only directories
//! marked dirty (a mutation marks its directory and every ancestor), so its
//! cost follows the size of the change, not of the namespace; unchanged
//! files are compared by `FileContent` (ids), never by reading bytes.
//!
//! The walk is a work list, not recursion: a deep tree costs heap, never
//! call stack (an overflow aborts the whole process, the daemon's or an SDK
//! user's). The order of the steps does not matter; the result is sorted.

use crate::commit::{errno_err, join, st_err};
use crate::error::{Result, WsError};
use crate::node::{NodeKind, Slot, ROOT};
use crate::state::State;
use std::collections::{BTreeMap, BTreeSet};
use strata_store::{Change, ChangeKind, EntryKind, ObjectId, TreeEntry};

/// Current state of a name: a node, or an untouched entry of the node's
/// own (possibly moved) base tree.
enum Cur {
    Node(u64),
    Entry(TreeEntry),
}

/// One step of the status walk.
enum Step {
    /// Compare live directory `ino` with base tree `base`.
    Dir {
        ino: u64,
        base: Option<ObjectId>,
        path: Vec<u8>,
    },
    /// Compare one name: its base entry and its current state.
    One {
        b: Option<TreeEntry>,
        cur: Option<Cur>,
        path: Vec<u8>,
    },
    /// Compare two base trees (an untouched directory moved over another).
    Trees {
        a: ObjectId,
        b: ObjectId,
        path: Vec<u8>,
    },
    /// Report an added or deleted base entry and everything below it.
    Entry {
        e: TreeEntry,
        path: Vec<u8>,
        kind: ChangeKind,
    },
    /// Report an added node and everything below it.
    Node { ino: u64, path: Vec<u8> },
}

impl State {
    pub(crate) fn status(&mut self) -> Result<Vec<Change>> {
        self.refresh_dirty()?;
        let mut out = Vec::new();
        let base_tree = self
            .store
            .read_commit(self.base)
            .map_err(st_err("read the base commit"))?
            .tree;
        // A work list, not recursion: a deep tree costs heap, never call
        // stack (an overflow aborts the whole process). The order of the
        // steps does not matter; the result is sorted.
        let mut todo = vec![Step::Dir {
            ino: ROOT,
            base: Some(base_tree),
            path: Vec::new(),
        }];
        while let Some(step) = todo.pop() {
            match step {
                Step::Dir { ino, base, path } => self.diff_dir(ino, base, path, &mut todo)?,
                Step::One { b, cur, path } => self.diff_one(b, cur, path, &mut todo, &mut out)?,
                Step::Trees { a, b, path } => self.diff_trees(a, b, path, &mut todo)?,
                Step::Entry { e, path, kind } => {
                    if let EntryKind::Dir(t) = &e.kind {
                        for c in self.store.list_tree(*t).map_err(st_err("list a tree"))? {
                            let path = join(&path, &c.name);
                            todo.push(Step::Entry { e: c, path, kind });
                        }
                    }
                    out.push(Change { path, kind });
                }
                Step::Node { ino, path } => self.report_node(ino, path, &mut todo, &mut out)?,
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    fn diff_dir(
        &mut self,
        ino: u64,
        base: Option<ObjectId>,
        path: Vec<u8>,
        todo: &mut Vec<Step>,
    ) -> Result<()> {
        let d = self
            .node(ino)
            .map_err(errno_err("status"))?
            .dir()
            .ok_or_else(|| WsError::Invalid(format!("inode {ino} is not a directory")))?;
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
            let path = join(&path, &name);
            todo.push(Step::One { b, cur, path });
        }
        Ok(())
    }

    fn diff_one(
        &mut self,
        b: Option<TreeEntry>,
        cur: Option<Cur>,
        p: Vec<u8>,
        todo: &mut Vec<Step>,
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
            (Some(b), None) => todo.push(Step::Entry {
                e: b,
                path: p,
                kind: Deleted,
            }),
            (None, Some(Cur::Entry(e))) => todo.push(Step::Entry {
                e,
                path: p,
                kind: Added,
            }),
            (None, Some(Cur::Node(i))) => todo.push(Step::Node { ino: i, path: p }),
            (Some(b), Some(Cur::Entry(e))) => {
                if e == b {
                    return Ok(());
                }
                match (&e.kind, &b.kind) {
                    (EntryKind::Dir(et), EntryKind::Dir(bt)) => {
                        if (e.mode, e.uid, e.gid, &e.xattrs) != (b.mode, b.uid, b.gid, &b.xattrs) {
                            push(out, Modified);
                        }
                        if et != bt {
                            todo.push(Step::Trees {
                                a: *et,
                                b: *bt,
                                path: p,
                            });
                        }
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
                    todo.push(Step::Dir {
                        ino: i,
                        base: Some(*bt),
                        path: p,
                    });
                }
            }
        }
        Ok(())
    }

    /// Report an added node and (through new steps) everything below it.
    fn report_node(
        &mut self,
        ino: u64,
        p: Vec<u8>,
        todo: &mut Vec<Step>,
        out: &mut Vec<Change>,
    ) -> Result<()> {
        let n = self.node(ino).map_err(errno_err("status"))?;
        if let Some(d) = n.dir() {
            let children = d.children.clone();
            for e in self.base_entries(d.lower)?.into_values() {
                if !children.contains_key(&e.name) {
                    let path = join(&p, &e.name);
                    todo.push(Step::Entry {
                        e,
                        path,
                        kind: ChangeKind::Added,
                    });
                }
            }
            for (name, slot) in children {
                if let Slot::Node(c) = slot {
                    todo.push(Step::Node {
                        ino: c,
                        path: join(&p, &name),
                    });
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
        path: Vec<u8>,
        todo: &mut Vec<Step>,
    ) -> Result<()> {
        if a == b {
            return Ok(());
        }
        let (al, bl) = (self.base_entries(Some(a))?, self.base_entries(Some(b))?);
        let names: BTreeSet<Vec<u8>> = al.keys().chain(bl.keys()).cloned().collect();
        for name in names {
            let cur = al.get(&name).cloned().map(Cur::Entry);
            todo.push(Step::One {
                b: bl.get(&name).cloned(),
                cur,
                path: join(&path, &name),
            });
        }
        Ok(())
    }
}
