//! Persistence of the uncommitted state: a small SQLite database in the
//! scratch directory. Every metadata change of the upper layer (new nodes,
//! whiteouts, renames, modes, owners, xattrs) is written before the FUSE
//! reply is sent, so that after `kill -9` the same Workspace ID reopens with
//! the same state. WAL with synchronous=NORMAL: a process crash loses
//! nothing (the WAL is in the page cache); only a power loss may drop the
//! last transactions, which is also what an unsynced file write risks.
//! `locking_mode=EXCLUSIVE`: one server per Workspace holds the flock anyway,
//! so SQLite's per-transaction fcntl locks and shared memory are pure cost.

use crate::error::{Result, WsError};
use crate::node::NodeRecord;
use rusqlite::{params, Connection, OptionalExtension};
use std::path::{Path, PathBuf};

pub(crate) struct Journal {
    conn: Connection,
    path: PathBuf,
    depth: u32,
}

impl std::fmt::Debug for Journal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal").field("path", &self.path).finish()
    }
}

type Sql<T> = rusqlite::Result<T>;

impl Journal {
    pub(crate) fn open(path: &Path) -> Result<Journal> {
        let err = |action| {
            let path = path.to_path_buf();
            move |source| WsError::Journal {
                action,
                path,
                source,
            }
        };
        let conn = Connection::open(path).map_err(err("open"))?;
        conn.execute_batch(
            "PRAGMA locking_mode=EXCLUSIVE;
             PRAGMA synchronous=NORMAL;
             PRAGMA journal_mode=WAL;
             PRAGMA wal_autocheckpoint=16384;
             BEGIN;
             CREATE TABLE IF NOT EXISTS meta(k TEXT PRIMARY KEY, v TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS nodes(ino INTEGER PRIMARY KEY, rec BLOB NOT NULL);
             CREATE TABLE IF NOT EXISTS entries(parent INTEGER NOT NULL, name BLOB NOT NULL,
                 child INTEGER, PRIMARY KEY(parent, name));
             COMMIT;",
        )
        .map_err(err("create tables"))?;
        Ok(Journal {
            conn,
            path: path.to_path_buf(),
            depth: 0,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn err(&self, action: &'static str) -> impl FnOnce(rusqlite::Error) -> WsError {
        let path = self.path.clone();
        move |source| WsError::Journal {
            action,
            path,
            source,
        }
    }

    /// Start (or nest into) a transaction: one FUSE operation is atomic in
    /// the journal, so a crash mid-rename never leaves half of it.
    pub(crate) fn begin(&mut self) -> Sql<()> {
        if self.depth == 0 {
            self.conn.execute_batch("BEGIN IMMEDIATE")?;
        }
        self.depth += 1;
        Ok(())
    }

    pub(crate) fn end(&mut self) -> Sql<()> {
        self.depth = self.depth.saturating_sub(1);
        if self.depth == 0 {
            self.conn.execute_batch("COMMIT")?;
        }
        Ok(())
    }

    pub(crate) fn get_meta(&self, k: &str) -> Sql<Option<String>> {
        self.conn
            .query_row("SELECT v FROM meta WHERE k = ?1", [k], |r| r.get(0))
            .optional()
    }

    pub(crate) fn set_meta(&self, k: &str, v: &str) -> Sql<()> {
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO meta(k, v) VALUES (?1, ?2)")?
            .execute(params![k, v])?;
        Ok(())
    }

    pub(crate) fn put_node(&self, ino: u64, rec: &NodeRecord) -> Sql<()> {
        let blob = postcard::to_stdvec(rec).expect("encoding an in-memory record cannot fail");
        self.conn
            .prepare_cached("INSERT OR REPLACE INTO nodes(ino, rec) VALUES (?1, ?2)")?
            .execute(params![ino as i64, blob])?;
        Ok(())
    }

    pub(crate) fn del_node(&self, ino: u64) -> Sql<()> {
        self.conn
            .prepare_cached("DELETE FROM nodes WHERE ino = ?1")?
            .execute([ino as i64])?;
        self.conn
            .prepare_cached("DELETE FROM entries WHERE parent = ?1")?
            .execute([ino as i64])?;
        Ok(())
    }

    /// `child` None is a whiteout.
    pub(crate) fn put_entry(&self, parent: u64, name: &[u8], child: Option<u64>) -> Sql<()> {
        self.conn
            .prepare_cached(
                "INSERT OR REPLACE INTO entries(parent, name, child) VALUES (?1, ?2, ?3)",
            )?
            .execute(params![parent as i64, name, child.map(|c| c as i64)])?;
        Ok(())
    }

    pub(crate) fn del_entry(&self, parent: u64, name: &[u8]) -> Sql<()> {
        self.conn
            .prepare_cached("DELETE FROM entries WHERE parent = ?1 AND name = ?2")?
            .execute(params![parent as i64, name])?;
        Ok(())
    }

    #[allow(clippy::type_complexity)]
    pub(crate) fn load(
        &self,
    ) -> Result<(Vec<(u64, NodeRecord)>, Vec<(u64, Vec<u8>, Option<u64>)>)> {
        let mut nodes = Vec::new();
        let mut stmt = self
            .conn
            .prepare("SELECT ino, rec FROM nodes")
            .map_err(self.err("read nodes"))?;
        let rows = stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?)))
            .map_err(self.err("read nodes"))?;
        for row in rows {
            let (ino, blob) = row.map_err(self.err("read nodes"))?;
            let rec: NodeRecord =
                postcard::from_bytes(&blob).map_err(|e| WsError::CorruptJournal {
                    path: self.path.clone(),
                    reason: format!("node {ino}: {e}"),
                })?;
            nodes.push((ino as u64, rec));
        }
        let mut entries = Vec::new();
        let mut stmt = self
            .conn
            .prepare("SELECT parent, name, child FROM entries")
            .map_err(self.err("read entries"))?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    r.get::<_, Vec<u8>>(1)?,
                    r.get::<_, Option<i64>>(2)?.map(|c| c as u64),
                ))
            })
            .map_err(self.err("read entries"))?;
        for row in rows {
            entries.push(row.map_err(self.err("read entries"))?);
        }
        Ok((nodes, entries))
    }
}
