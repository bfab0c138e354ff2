//! Projects, branches, pins and commits: names, resolution of REFs, and the
//! compare-and-swap that is the only way a branch head moves.

use crate::error::{Result, SqlCtx, StoreError};
use crate::id::{Kind, ObjectId};
use crate::object::{decode, encode, Commit};
use crate::objects;
use crate::sql;
use crate::store::Store;
use rusqlite::{Connection, OptionalExtension};
use std::collections::BTreeMap;
use std::fmt;

/// A branch of a project: `PROJECT/BRANCH`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BranchRef {
    pub project: String,
    pub branch: String,
}

impl BranchRef {
    /// Build a validated reference.
    pub fn new(project: &str, branch: &str) -> Result<BranchRef> {
        validate_name("project", project)?;
        validate_name("branch", branch)?;
        Ok(BranchRef {
            project: project.to_string(),
            branch: branch.to_string(),
        })
    }

    /// Parse `PROJECT/BRANCH`.
    pub fn parse(s: &str) -> Result<BranchRef> {
        match s.split_once('/') {
            Some((p, b)) => BranchRef::new(p, b),
            None => Err(StoreError::InvalidName {
                what: "branch reference",
                name: s.to_string(),
                reason: "expected PROJECT/BRANCH",
            }),
        }
    }
}

impl fmt::Display for BranchRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.project, self.branch)
    }
}

/// What a REF named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub commit: ObjectId,
    /// The branch, when the REF named one.
    pub branch: Option<BranchRef>,
}

/// Names of projects and branches: `[a-z0-9][a-z0-9._-]{0,62}`, no `..`.
pub fn validate_name(what: &'static str, name: &str) -> Result<()> {
    let bad = |reason| {
        Err(StoreError::InvalidName {
            what,
            name: name.to_string(),
            reason,
        })
    };
    let b = name.as_bytes();
    if b.is_empty() {
        return bad("it is empty");
    }
    if b.len() > 63 {
        return bad("it is longer than 63 characters");
    }
    if !(b[0].is_ascii_lowercase() || b[0].is_ascii_digit()) {
        return bad("it must start with a lowercase letter or a digit");
    }
    if !b
        .iter()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'.' | b'_' | b'-'))
    {
        return bad("only a-z, 0-9, '.', '_' and '-' are allowed");
    }
    if name.contains("..") {
        return bad("it must not contain '..'");
    }
    Ok(())
}

pub(crate) fn branch_head_in(conn: &Connection, b: &BranchRef) -> Result<Option<ObjectId>> {
    let v: Option<Vec<u8>> = conn
        .prepare_cached(sql::BRANCH_HEAD)
        .and_then(|mut s| {
            s.query_row((&b.project, &b.branch), |r| r.get(0))
                .optional()
        })
        .ctx("read a branch head")?;
    Ok(v.and_then(|v| ObjectId::from_slice(&v)))
}

fn project_exists(conn: &Connection, p: &str) -> Result<bool> {
    conn.prepare_cached(sql::PROJECT_EXISTS)
        .and_then(|mut s| s.exists([p]))
        .ctx("look up a project")
}

/// Where a new commit goes.
pub(crate) enum Target<'a> {
    /// Move an existing branch from this head.
    Move(&'a BranchRef, ObjectId),
    /// Create a new project with this branch.
    NewProject(&'a BranchRef),
}

impl Store {
    /// Write a commit object and move (or create) a branch to it in one
    /// transaction: a crash leaves either the old head or the complete new one.
    pub(crate) fn publish(&self, target: Target<'_>, commit: &Commit) -> Result<ObjectId> {
        let raw = encode(commit);
        let p = objects::prepare(Kind::Commit, &raw);
        let id = p.id;
        let now = crate::now_ns();
        let mut conn = self.writer();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .ctx("begin publishing a commit")?;
        // The commit's tree must be present: never publish a dangling head.
        if !objects::exists(&tx, &commit.tree)? {
            return Err(StoreError::Missing {
                id: commit.tree,
                kind: "tree",
            });
        }
        objects::insert(&tx, &p)?;
        match target {
            Target::Move(b, expected) => {
                let n = tx
                    .execute(
                        sql::BRANCH_CAS,
                        (&b.project, &b.branch, &id.0[..], &expected.0[..], now),
                    )
                    .ctx("move a branch head")?;
                if n != 1 {
                    let actual = branch_head_in(&tx, b)?;
                    return Err(match actual {
                        None => StoreError::NotFound {
                            what: "branch",
                            name: b.to_string(),
                        },
                        Some(actual) => StoreError::Conflict {
                            project: b.project.clone(),
                            branch: b.branch.clone(),
                            expected,
                            actual,
                        },
                    });
                }
            }
            Target::NewProject(b) => {
                if project_exists(&tx, &b.project)? {
                    return Err(StoreError::AlreadyExists {
                        what: "project",
                        name: b.project.clone(),
                    });
                }
                tx.execute(sql::PROJECT_INSERT, (&b.project, now))
                    .ctx("create a project")?;
                tx.execute(sql::BRANCH_INSERT, (&b.project, &b.branch, &id.0[..], now))
                    .ctx("create a branch")?;
            }
        }
        tx.commit().ctx("commit the new head")?;
        Ok(id)
    }

    /// Create a project whose `main` branch points at an empty commit.
    pub fn create_project(&self, name: &str, message: &str) -> Result<ObjectId> {
        let b = BranchRef::new(name, "main")?;
        let tree = self.write_tree(Vec::new())?;
        let commit = Commit {
            tree,
            parents: Vec::new(),
            message: message.to_string(),
            time_ns: crate::now_ns(),
            metadata: BTreeMap::new(),
            file_bytes: Some(0),
            entries: Some(0),
        };
        self.publish(Target::NewProject(&b), &commit)
    }

    pub fn list_projects(&self) -> Result<Vec<String>> {
        let conn = self.reader();
        let mut s = conn
            .prepare_cached(sql::PROJECT_LIST)
            .ctx("list projects")?;
        let rows = s
            .query_map([], |r| r.get::<_, String>(0))
            .ctx("list projects")?;
        rows.collect::<Result<Vec<_>, _>>().ctx("list projects")
    }

    /// Create a branch at `from` (O(1): no object is copied).
    pub fn create_branch(&self, b: &BranchRef, from: ObjectId) -> Result<()> {
        let mut conn = self.writer();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .ctx("begin creating a branch")?;
        if !project_exists(&tx, &b.project)? {
            return Err(StoreError::NotFound {
                what: "project",
                name: b.project.clone(),
            });
        }
        if branch_head_in(&tx, b)?.is_some() {
            return Err(StoreError::AlreadyExists {
                what: "branch",
                name: b.to_string(),
            });
        }
        let row = objects::get_row(&tx, &from)?;
        if row.map(|r| r.kind) != Some(Kind::Commit as u8) {
            return Err(StoreError::NotFound {
                what: "commit",
                name: from.to_hex(),
            });
        }
        tx.execute(
            sql::BRANCH_INSERT,
            (&b.project, &b.branch, &from.0[..], crate::now_ns()),
        )
        .ctx("create a branch")?;
        tx.commit().ctx("commit the new branch")?;
        Ok(())
    }

    pub fn list_branches(&self, project: Option<&str>) -> Result<Vec<(BranchRef, ObjectId)>> {
        let conn = self.reader();
        let map = |r: &rusqlite::Row<'_>| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Vec<u8>>(2)?,
            ))
        };
        let rows: Vec<(String, String, Vec<u8>)> = match project {
            Some(p) => {
                if !project_exists(&conn, p)? {
                    return Err(StoreError::NotFound {
                        what: "project",
                        name: p.to_string(),
                    });
                }
                let mut s = conn
                    .prepare_cached(sql::BRANCH_LIST_PROJECT)
                    .ctx("list branches")?;
                let r = s.query_map([p], map).ctx("list branches")?;
                r.collect::<Result<_, _>>().ctx("list branches")?
            }
            None => {
                let mut s = conn
                    .prepare_cached(sql::BRANCH_LIST_ALL)
                    .ctx("list branches")?;
                let r = s.query_map([], map).ctx("list branches")?;
                r.collect::<Result<_, _>>().ctx("list branches")?
            }
        };
        Ok(rows
            .into_iter()
            .filter_map(|(p, b, h)| {
                Some((
                    BranchRef {
                        project: p,
                        branch: b,
                    },
                    ObjectId::from_slice(&h)?,
                ))
            })
            .collect())
    }

    pub fn branch_head(&self, b: &BranchRef) -> Result<ObjectId> {
        branch_head_in(&self.reader(), b)?.ok_or_else(|| StoreError::NotFound {
            what: "branch",
            name: b.to_string(),
        })
    }

    pub fn delete_branch(&self, b: &BranchRef) -> Result<()> {
        let conn = self.writer();
        let n = conn
            .execute(sql::BRANCH_DELETE, (&b.project, &b.branch))
            .ctx("delete a branch")?;
        if n == 0 {
            return Err(StoreError::NotFound {
                what: "branch",
                name: b.to_string(),
            });
        }
        Ok(())
    }

    /// Keep `commit` (and all it reaches) alive through gc while `holder` lives.
    pub fn pin(&self, holder: &str, commit: ObjectId) -> Result<()> {
        self.writer()
            .execute(sql::PIN_PUT, (holder, &commit.0[..]))
            .ctx("pin a commit")?;
        Ok(())
    }

    pub fn unpin(&self, holder: &str) -> Result<()> {
        self.writer()
            .execute(sql::PIN_DELETE, [holder])
            .ctx("unpin a commit")?;
        Ok(())
    }

    /// Publish `tree` as the next commit on `b`, which must be at `expected`.
    /// On a lost race returns `StoreError::Conflict` with the actual head and
    /// changes nothing.
    pub fn commit_tree(
        &self,
        b: &BranchRef,
        expected: ObjectId,
        tree: ObjectId,
        message: &str,
        metadata: BTreeMap<String, String>,
    ) -> Result<ObjectId> {
        let commit = Commit {
            tree,
            parents: vec![expected],
            message: message.to_string(),
            time_ns: crate::now_ns(),
            metadata,
            file_bytes: None,
            entries: None,
        };
        self.publish(Target::Move(b, expected), &commit)
    }

    pub fn read_commit(&self, id: ObjectId) -> Result<Commit> {
        let raw = self.get_raw(&id, Kind::Commit).map_err(|e| match e {
            StoreError::Missing { .. } => StoreError::NotFound {
                what: "commit",
                name: id.to_hex(),
            },
            e => e,
        })?;
        decode(&raw).map_err(|e| StoreError::Corrupt {
            id,
            reason: format!("bad commit: {e}"),
        })
    }

    /// Resolve `PROJECT/BRANCH` or a commit id (a unique hex prefix of at
    /// least 8 digits).
    pub fn resolve(&self, r: &str) -> Result<Resolved> {
        if r.contains('/') {
            let b = BranchRef::parse(r)?;
            let commit = self.branch_head(&b)?;
            return Ok(Resolved {
                commit,
                branch: Some(b),
            });
        }
        let hex = r.to_ascii_lowercase();
        if hex.len() < 8 || hex.len() > 64 || !hex.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(StoreError::InvalidName {
                what: "ref",
                name: r.to_string(),
                reason: "a REF is PROJECT/BRANCH or a commit id of at least 8 hex digits",
            });
        }
        let lo = hex::decode(format!("{:0<64}", hex)).expect("hex checked");
        let hi = hex::decode(format!("{:f<64}", hex)).expect("hex checked");
        let conn = self.reader();
        let mut s = conn.prepare_cached(sql::OBJ_PREFIX).ctx("resolve a ref")?;
        let ids: Vec<Vec<u8>> = s
            .query_map((Kind::Commit as u8, lo, hi), |row| row.get(0))
            .ctx("resolve a ref")?
            .collect::<Result<_, _>>()
            .ctx("resolve a ref")?;
        match ids.len() {
            0 => Err(StoreError::NotFound {
                what: "commit or branch",
                name: r.to_string(),
            }),
            1 => Ok(Resolved {
                commit: ObjectId::from_slice(&ids[0]).expect("32-byte id"),
                branch: None,
            }),
            _ => Err(StoreError::AmbiguousRef {
                prefix: r.to_string(),
                candidates: ids.iter().map(hex::encode).collect(),
            }),
        }
    }

    /// Commits from `commit` back along first parents, newest first.
    pub fn log(&self, commit: ObjectId, limit: usize) -> Result<Vec<(ObjectId, Commit)>> {
        let mut out = Vec::new();
        let mut cur = Some(commit);
        while let Some(id) = cur {
            if out.len() >= limit {
                break;
            }
            let c = self.read_commit(id)?;
            cur = c.parents.first().copied();
            out.push((id, c));
        }
        Ok(out)
    }
}
