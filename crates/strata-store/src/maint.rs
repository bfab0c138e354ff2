//! Maintenance: stats, fsck (re-hash every object, check every reachable
//! reference) and gc (delete what no branch, pin or delta reaches).

use crate::error::{Result, SqlCtx, StoreError};
use crate::id::{Kind, ObjectId};
use crate::object::{decode, Commit, ContentRef, EntryKind, Page, TreeNode};
use crate::objects;
use crate::pack;
use crate::progress::Progress;
use crate::sql;
use crate::store::Store;
use rusqlite::Connection;
use std::collections::{HashMap, HashSet};

/// Sizes and counts of a Store.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct Stats {
    pub objects: u64,
    /// Bytes of all objects as stored (after compression and deltas).
    pub stored_bytes: u64,
    /// Bytes of file content the chunks represent (each unique chunk once).
    pub logical_bytes: u64,
    /// Bytes of the Store's files on disk: the database, WAL and shared
    /// memory (their lengths) and the pack files (the blocks they hold,
    /// so the holes `gc` punched do not count).
    pub db_bytes: u64,
    /// Objects stored as deltas.
    pub delta_objects: u64,
    pub projects: u64,
    pub branches: u64,
    pub commits: u64,
    /// Sum of every commit's file bytes (where recorded): what the history
    /// would take with no deduplication.
    pub referenced_bytes: u64,
    /// `referenced_bytes / logical_bytes`.
    pub dedup_ratio: f64,
}

/// The result of fsck: `ok` is false when any problem was found.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct FsckReport {
    pub ok: bool,
    pub objects_checked: u64,
    pub reachable: u64,
    pub problems: Vec<String>,
    /// Things that are not damage but should be fixed (a Store that other
    /// users can read); they do not make `ok` false.
    pub warnings: Vec<String>,
}

/// What gc deleted.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GcReport {
    pub reachable: u64,
    pub deleted_objects: u64,
    pub deleted_bytes: u64,
    /// Rows moved from the fresh object index into the large one
    /// (docs/design.md "The object index").
    pub folded: u64,
}

/// (rowid, id, kind, delta base) of one stored object.
type RowInfo = (i64, ObjectId, u8, Option<ObjectId>);

fn all_rows(conn: &Connection) -> Result<Vec<RowInfo>> {
    let mut s = conn.prepare(sql::OBJ_ALL_IDS).ctx("list objects")?;
    let rows = s
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, Vec<u8>>(1)?,
                r.get::<_, u8>(2)?,
                r.get::<_, Option<Vec<u8>>>(3)?,
            ))
        })
        .ctx("list objects")?;
    let mut out = Vec::new();
    for r in rows {
        let (rowid, id, kind, base) = r.ctx("list objects")?;
        let id = ObjectId::from_slice(&id).unwrap_or(ObjectId([0; 32]));
        out.push((rowid, id, kind, base.and_then(|b| ObjectId::from_slice(&b))));
    }
    Ok(out)
}

/// Per pack, the end of its last indexed object.
fn pack_ends(conn: &Connection) -> Result<HashMap<u64, u64>> {
    let mut s = conn.prepare(sql::PACK_ENDS).ctx("list packs")?;
    let rows = s
        .query_map([], |r| {
            Ok((r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })
        .ctx("list packs")?;
    rows.collect::<Result<_, _>>().ctx("list packs")
}

fn roots(conn: &Connection) -> Result<Vec<ObjectId>> {
    let mut out = Vec::new();
    for q in [sql::BRANCH_HEADS, sql::PIN_HEADS] {
        let mut s = conn.prepare(q).ctx("list roots")?;
        let rows = s
            .query_map([], |r| r.get::<_, Vec<u8>>(0))
            .ctx("list roots")?;
        for r in rows {
            if let Some(id) = ObjectId::from_slice(&r.ctx("list roots")?) {
                out.push(id);
            }
        }
    }
    Ok(out)
}

/// What a reference says about the object it names: a file's manifest
/// entry gives a page's level and the bytes under it, or a chunk's size.
/// Readers refuse an object that disagrees (`files::visit_chunks`); fsck
/// reports it, once per disagreeing reference.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Expect {
    Any,
    Page { level: u8, size: u64 },
    Chunk { size: u64 },
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Any => write!(f, "anything"),
            Expect::Page { level, size } => write!(f, "a level-{level} page of {size} bytes"),
            Expect::Chunk { size } => write!(f, "a chunk of {size} bytes"),
        }
    }
}

/// The children of a tree node with what their references say.
fn tree_children(node: &TreeNode) -> Vec<(ObjectId, Kind, Expect)> {
    let mut v = Vec::new();
    match node {
        TreeNode::Index(children) => {
            v.extend(children.iter().map(|c| (c.id, Kind::Tree, Expect::Any)))
        }
        TreeNode::Leaf(entries) => {
            for e in entries {
                match &e.kind {
                    EntryKind::Dir(t) => v.push((*t, Kind::Tree, Expect::Any)),
                    EntryKind::File(c) => match &c.data {
                        ContentRef::Empty => {}
                        ContentRef::Chunk(id) => {
                            v.push((*id, Kind::Chunk, Expect::Chunk { size: c.size }))
                        }
                        ContentRef::Pages { root, height } => v.push((
                            *root,
                            Kind::Page,
                            Expect::Page {
                                level: *height,
                                size: c.size,
                            },
                        )),
                    },
                    _ => {}
                }
            }
        }
    }
    v
}

/// A page's level and the bytes its entries cover, or why it is malformed
/// (an entry of 0 bytes, a chunk entry over the largest chunk of any size
/// class, `Cdc::MAX`, an overflow). A reader also bounds a chunk by its
/// file's class (`files::visit_chunks`); a page may be shared by files of
/// either class, so fsck, which reads each page once, checks the bound
/// common to both.
fn page_shape(p: &Page) -> std::result::Result<Expect, String> {
    let mut size = 0u64;
    for e in &p.entries {
        if e.size == 0 || (p.level == 0 && e.size > crate::chunker::Cdc::MAX as u64) {
            return Err(format!("an entry of {} bytes at level {}", e.size, p.level));
        }
        size = size
            .checked_add(e.size)
            .ok_or_else(|| "entry sizes overflow".to_string())?;
    }
    Ok(Expect::Page {
        level: p.level,
        size,
    })
}

/// Walk everything reachable from the roots, recording problems instead of
/// stopping at the first one. Each object is read once however many
/// references share it (a forged DAG of pages that each list the next
/// twice costs one read per page); each reference is still checked
/// against the object's recorded shape.
fn mark(conn: &Connection, problems: &mut Vec<String>) -> Result<HashSet<ObjectId>> {
    let mut seen = HashSet::new();
    let mut shapes: HashMap<ObjectId, Expect> = HashMap::new();
    let mut stack: Vec<(ObjectId, Kind, String, Expect)> = roots(conn)?
        .into_iter()
        .map(|r| {
            (
                r,
                Kind::Commit,
                "a branch head or pin".to_string(),
                Expect::Any,
            )
        })
        .collect();
    let check = |id: ObjectId, from: &str, expect: Expect, shape: Expect| {
        (expect != Expect::Any && expect != shape).then(|| {
            format!(
                "{} referenced by {from} as {expect} is {shape}: the manifest is corrupt",
                id.to_hex()
            )
        })
    };
    while let Some((id, kind, from, expect)) = stack.pop() {
        if !seen.insert(id) {
            if let Some(shape) = shapes.get(&id) {
                problems.extend(check(id, &from, expect, *shape));
            }
            continue;
        }
        let raw = match objects::get_raw_in(conn, &id, kind) {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("{} referenced by {from}: {e}", id.to_hex()));
                continue;
            }
        };
        let bad =
            |e: postcard::Error| format!("{} ({}) does not decode: {e}", id.to_hex(), kind.name());
        match kind {
            Kind::Chunk => {
                let shape = Expect::Chunk {
                    size: raw.len() as u64,
                };
                shapes.insert(id, shape);
                problems.extend(check(id, &from, expect, shape));
            }
            Kind::Commit => match decode::<Commit>(&raw) {
                Ok(c) => {
                    let here = format!("commit {}", id.short());
                    stack.push((c.tree, Kind::Tree, here.clone(), Expect::Any));
                    for p in c.parents {
                        stack.push((p, Kind::Commit, here.clone(), Expect::Any));
                    }
                }
                Err(e) => problems.push(bad(e)),
            },
            Kind::Tree => match decode::<TreeNode>(&raw) {
                Ok(n) => {
                    let here = format!("tree {}", id.short());
                    for (c, k, x) in tree_children(&n) {
                        stack.push((c, k, here.clone(), x));
                    }
                }
                Err(e) => problems.push(bad(e)),
            },
            Kind::Page => match decode::<Page>(&raw) {
                Ok(p) => match page_shape(&p) {
                    Ok(shape) => {
                        shapes.insert(id, shape);
                        problems.extend(check(id, &from, expect, shape));
                        let here = format!("page {}", id.short());
                        for e in p.entries {
                            let (k, x) = match p.level.checked_sub(1) {
                                None => (Kind::Chunk, Expect::Chunk { size: e.size }),
                                Some(level) => (
                                    Kind::Page,
                                    Expect::Page {
                                        level,
                                        size: e.size,
                                    },
                                ),
                            };
                            stack.push((e.id, k, here.clone(), x));
                        }
                    }
                    Err(why) => problems.push(format!("{} (page): {why}", id.to_hex())),
                },
                Err(e) => problems.push(bad(e)),
            },
        }
    }
    Ok(seen)
}

impl Store {
    pub fn stats(&self) -> Result<Stats> {
        let conn = self.reader();
        let (objects, stored, logical, deltas): (i64, i64, i64, i64) = conn
            .query_row(sql::OBJ_STATS, [], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .ctx("count objects")?;
        let mut referenced = 0u64;
        let mut commits = 0u64;
        {
            let mut s = conn.prepare(sql::OBJ_ALL_BY_KIND).ctx("list commits")?;
            let ids: Vec<Vec<u8>> = s
                .query_map([Kind::Commit as u8], |r| r.get(0))
                .ctx("list commits")?
                .collect::<Result<_, _>>()
                .ctx("list commits")?;
            for id in ids {
                let Some(id) = ObjectId::from_slice(&id) else {
                    continue;
                };
                commits += 1;
                let raw = objects::get_raw_in(&conn, &id, Kind::Commit)?;
                if let Ok(c) = decode::<Commit>(&raw) {
                    referenced += c.file_bytes.unwrap_or(0);
                }
            }
        }
        drop(conn);
        let mut db_bytes = 0;
        for f in ["strata.db", "strata.db-wal", "strata.db-shm"] {
            if let Ok(m) = std::fs::metadata(self.dir().join(f)) {
                db_bytes += m.len();
            }
        }
        db_bytes += pack::disk_bytes(self.dir());
        let projects = self.list_projects()?.len() as u64;
        let branches = self.list_branches(None)?.len() as u64;
        Ok(Stats {
            objects: objects as u64,
            stored_bytes: stored as u64,
            logical_bytes: logical as u64,
            db_bytes,
            delta_objects: deltas as u64,
            projects,
            branches,
            commits,
            referenced_bytes: referenced,
            dedup_ratio: if logical > 0 {
                referenced as f64 / logical as f64
            } else {
                1.0
            },
        })
    }

    /// Bytes of all objects as stored: the figure storage-growth goals use.
    pub fn stored_bytes(&self) -> Result<u64> {
        let v: i64 = self
            .reader()
            .query_row(sql::OBJ_STORED_BYTES, [], |r| r.get(0))
            .ctx("sum object sizes")?;
        Ok(v as u64)
    }

    /// Re-hash every object and check every reference reachable from a
    /// branch or pin. Never stops at the first problem.
    pub fn fsck(&self, progress: &dyn Progress) -> Result<FsckReport> {
        let conn = self.reader();
        let rows = all_rows(&conn)?;
        let mut problems = Vec::new();
        progress.start("fsck", Some(rows.len() as u64));
        for (_, id, kind, _) in &rows {
            progress.advance(1);
            let Some(k) = Kind::from_u8(*kind) else {
                problems.push(format!("{}: unknown kind {kind}", id.to_hex()));
                continue;
            };
            let row = match objects::get_row(&conn, id) {
                Ok(Some(row)) => row,
                Ok(None) => {
                    problems.push(format!("{}: listed but unreadable", id.to_hex()));
                    continue;
                }
                // A packed row whose pack is missing or short.
                Err(e @ StoreError::Corrupt { .. }) => {
                    problems.push(format!("{} ({}): {e}", id.to_hex(), k.name()));
                    continue;
                }
                Err(e) => return Err(e),
            };
            match objects::decode_row(&conn, id, row) {
                Ok(raw) => {
                    let actual = ObjectId::hash(k, &raw);
                    if actual != *id {
                        problems.push(format!(
                            "{} ({}): content hashes to {}, the object is corrupt",
                            id.to_hex(),
                            k.name(),
                            actual.to_hex()
                        ));
                    }
                }
                Err(e) => problems.push(format!("{} ({}): {e}", id.to_hex(), k.name())),
            }
        }
        {
            let mut s = conn.prepare(sql::IDS_IN_BOTH).ctx("check the id indexes")?;
            let both: Vec<Vec<u8>> = s
                .query_map([], |r| r.get(0))
                .ctx("check the id indexes")?
                .collect::<Result<_, _>>()
                .ctx("check the id indexes")?;
            for id in both {
                problems.push(format!(
                    "{}: indexed twice, as fresh and as folded; the fresh index cannot be folded until one row goes (docs/design.md \"The object index\")",
                    hex::encode(id)
                ));
            }
        }
        let reachable = mark(&conn, &mut problems)?;
        progress.finish();
        Ok(FsckReport {
            ok: problems.is_empty(),
            objects_checked: rows.len() as u64,
            reachable: reachable.len() as u64,
            problems,
            warnings: crate::store::access_warnings(self.dir()),
        })
    }

    /// Delete objects unreachable from any branch or pin (a running Workspace
    /// pins its base). Refuses with `Busy` while any writer holds a session.
    pub fn gc(&self, progress: &dyn Progress) -> Result<GcReport> {
        let _excl = self.exclusive()?;
        let mut conn = self.writer();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .ctx("begin gc")?;
        let mut problems = Vec::new();
        let mut live = mark(&tx, &mut problems)?;
        if !problems.is_empty() {
            return Err(StoreError::Invalid(format!(
                "gc found {} problem(s) in reachable objects and deleted nothing; run `strata fsck`. First: {}",
                problems.len(),
                problems[0]
            )));
        }
        let rows = all_rows(&tx)?;
        // Delta bases of live objects stay live, transitively.
        let bases: HashMap<ObjectId, ObjectId> = rows
            .iter()
            .filter_map(|(_, id, _, base)| base.map(|b| (*id, b)))
            .collect();
        let mut stack: Vec<ObjectId> = live.iter().copied().collect();
        while let Some(id) = stack.pop() {
            if let Some(b) = bases.get(&id) {
                if live.insert(*b) {
                    stack.push(*b);
                }
            }
        }
        progress.start("gc", Some(rows.len() as u64));
        let mut report = GcReport {
            reachable: live.len() as u64,
            ..Default::default()
        };
        let mut dead = Vec::new();
        {
            let mut size = tx.prepare(sql::OBJ_SIZE_ROWID).ctx("size an object")?;
            let mut del = tx.prepare(sql::OBJ_DELETE_ROWID).ctx("delete objects")?;
            for (rowid, id, _, _) in &rows {
                progress.advance(1);
                if live.contains(id) {
                    continue;
                }
                let (n, loc): (i64, Option<pack::Loc>) = size
                    .query_row([rowid], |r| Ok((r.get(0)?, pack::Loc::from_row(r, 1)?)))
                    .ctx("size an object")?;
                del.execute([rowid]).ctx("delete an object")?;
                dead.extend(loc);
                report.deleted_objects += 1;
                report.deleted_bytes += n as u64;
            }
        }
        let ends = pack_ends(&tx)?;
        tx.commit().ctx("commit gc")?;
        // Only now that no row names them: free the deleted packed bytes,
        // then remove packs nothing names and cut unindexed tails (pack.rs).
        pack::punch(self.dir(), &dead);
        pack::sweep(self.dir(), conn.path().unwrap_or_default(), &ends);
        // Fold the fresh object index whatever its size (checkpoint.rs):
        // gc is where a Store is tidied, and the fold's pages are then
        // copied by the checkpoint below.
        report.folded = crate::checkpoint::fold(&conn, &|| false)?;
        // Return freed pages to the filesystem (auto_vacuum = INCREMENTAL).
        let _ = conn.execute_batch(sql::GC_SHRINK);
        progress.finish();
        Ok(report)
    }
}
