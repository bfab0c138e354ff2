//! WAL checkpoints off the writers' path. SQLite's automatic checkpoint
//! runs inside the commit that crosses the threshold, on the committing
//! thread: copying every page written since the last checkpoint from the
//! WAL into the database and fsync'ing both. A commit of a fresh 32 MiB
//! file crossed it every time and spent about a third of its insert
//! thread's samples there, plus the two fsyncs (perf, docs/benchmarks.md,
//! "Commit cost"). So the write connection has `wal_autocheckpoint = 0` and
//! this thread, with its own connection, checkpoints after any write
//! transaction that left the WAL at `CHECKPOINT_PAGES` or more pages with
//! some not yet copied (`checkpoint_if_due` says why not only when that
//! many wait): the same threshold as before, but the commit returns first.
//!
//! Durability is unchanged (docs/reliability.md): a commit is in the WAL
//! when it returns, and a checkpoint never decides what survives a crash;
//! it only bounds the WAL's size. A PASSIVE checkpoint never blocks a
//! writer or a reader and copies what no reader still needs.
//!
//! The same thread folds the fresh index on object ids into the large one
//! (sql.rs `SCHEMA`, docs/design.md "The object index") once it holds
//! `FRESH_MAX` rows, before the checkpoint it is due with. A commit's new
//! ids then land in a small index, whose few leaves take all of them,
//! instead of in random leaves of an index as large as the Store: at
//! 4 GiB of chunks that wrote ~5,800 pages (23 MiB) per fresh 32 MiB file
//! and made its commit step 2.3 times as slow as on an empty Store.

use crate::error::{Result, SqlCtx};
use crate::sql;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Checkpoint once the WAL holds this many pages not yet copied (16 MiB of
/// 4 KiB pages; SQLite's default is 1,000).
pub(crate) const CHECKPOINT_PAGES: i64 = 4096;

/// Fold once the fresh index holds this many rows (~256 MiB of 4 KiB
/// chunks; its index is then ~700 leaves). Larger, and a commit's inserts
/// spread over more fresh leaves; smaller, and each fold writes the large
/// index's leaves for fewer rows.
pub(crate) const FRESH_MAX: i64 = 65_536;

/// Rows folded per write transaction: each holds the Store's write lock
/// for one slice of the id range (tens of ms at 4 GiB), so a commit waits
/// at most that long for a fold.
const FOLD_BATCH: i64 = 8_192;

#[derive(Default)]
struct Flags {
    /// A write transaction ended since the last look.
    wrote: bool,
    stop: bool,
}

#[derive(Default)]
struct Shared {
    flags: Mutex<Flags>,
    cv: Condvar,
}

/// The checkpoint thread of one Store handle; stopped (and joined, so no
/// connection outlives the handle) when dropped.
pub(crate) struct Checkpointer {
    shared: Arc<Shared>,
    handle: Option<JoinHandle<()>>,
}

impl Checkpointer {
    /// Start the thread on `conn` (a connection of its own).
    pub(crate) fn start(conn: Connection) -> Result<Checkpointer> {
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        let handle = std::thread::Builder::new()
            .name("strata-ckpt".into())
            .spawn(move || run(&conn, &s))
            .map_err(|e| {
                crate::error::StoreError::Invalid(format!("start the checkpoint thread: {e}"))
            })?;
        Ok(Checkpointer {
            shared,
            handle: Some(handle),
        })
    }

    /// A write transaction ended: look at the WAL.
    pub(crate) fn poke(&self) {
        let mut f = self.shared.flags.lock().unwrap_or_else(|p| p.into_inner());
        f.wrote = true;
        self.shared.cv.notify_one();
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        {
            let mut f = self.shared.flags.lock().unwrap_or_else(|p| p.into_inner());
            f.stop = true;
            self.shared.cv.notify_one();
        }
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

fn run(conn: &Connection, shared: &Shared) {
    loop {
        {
            let mut f = shared.flags.lock().unwrap_or_else(|p| p.into_inner());
            while !f.wrote && !f.stop {
                f = shared.cv.wait(f).unwrap_or_else(|p| p.into_inner());
            }
            if f.stop {
                return;
            }
            f.wrote = false;
        }
        let stop = || shared.flags.lock().unwrap_or_else(|p| p.into_inner()).stop;
        if let Err(e) = fold_if_due(conn, &stop) {
            // The fresh index keeps growing until a fold succeeds; lookups
            // and inserts stay correct meanwhile, only slower.
            tracing::warn!("folding the fresh object index: {e}");
        }
        if let Err(e) = checkpoint_if_due(conn) {
            // The next write tries again; meanwhile the WAL grows, and
            // closing the last connection checkpoints it.
            tracing::warn!("WAL checkpoint: {e}");
        }
    }
}

/// Checkpoint (PASSIVE) if the WAL is `CHECKPOINT_PAGES` pages or longer
/// and not all of it is copied into the database. Returns whether it ran.
///
/// Not only when that many pages wait: SQLite starts the WAL over (the
/// next write goes to its first frame) only if every frame was copied
/// when that write begins. A commit's small last transactions (its trees,
/// the branch head) land while the checkpoint of its large one runs, after
/// the checkpoint's snapshot, and were left in the WAL: every later write
/// then appended behind them, so the WAL grew by each commit's size (to
/// ~200 MiB after five fresh 32 MiB files, docs/benchmarks.md) and every
/// frame went to a new part of the file, which ext4 allocates and zeroes
/// page by page. Copying such a tail costs a few pages and two fsyncs off
/// the writers' path, once per long WAL: the next write starts it over.
pub(crate) fn checkpoint_if_due(conn: &Connection) -> Result<bool> {
    if !wal_due(conn, CHECKPOINT_PAGES)? {
        return Ok(false);
    }
    conn.query_row(sql::WAL_CHECKPOINT, [], |_| Ok(()))
        .ctx("checkpoint the WAL")?;
    Ok(true)
}

/// Whether the WAL is `pages` or longer with some of it not yet copied.
/// NOOP reads the WAL's frame count and how many are copied, for free.
fn wal_due(conn: &Connection, pages: i64) -> Result<bool> {
    let (log, done): (i64, i64) = conn
        .query_row(sql::WAL_PENDING, [], |r| Ok((r.get(1)?, r.get(2)?)))
        .ctx("read the WAL's size")?;
    Ok(log >= pages && done < log)
}

/// Fold the fresh index if a checkpoint is due and the fresh index holds
/// `FRESH_MAX` rows or more. Returns the rows folded.
pub(crate) fn fold_if_due(conn: &Connection, stop: &dyn Fn() -> bool) -> Result<u64> {
    if fold_due(conn, CHECKPOINT_PAGES, FRESH_MAX)? {
        fold(conn, stop)
    } else {
        Ok(0)
    }
}

/// The test of [`fold_if_due`], with its thresholds as arguments. The
/// WAL's size first, read for free: counting the fresh rows walks their
/// index, so not after every small write.
fn fold_due(conn: &Connection, wal_pages: i64, fresh_max: i64) -> Result<bool> {
    if !wal_due(conn, wal_pages)? {
        return Ok(false);
    }
    let fresh: i64 = conn
        .query_row(sql::FRESH_COUNT, [], |r| r.get(0))
        .ctx("count the fresh object index")?;
    Ok(fresh >= fresh_max)
}

/// Fold every fresh row into the large index, `FOLD_BATCH` rows per write
/// transaction in id order, until none is left past the last slice or
/// `stop` says so. Rows made meanwhile below the slice reached wait for
/// the next fold. Returns the rows folded.
pub(crate) fn fold(conn: &Connection, stop: &dyn Fn() -> bool) -> Result<u64> {
    // An empty blob sorts below every id, 33 bytes of 0xff above every
    // 32-byte one (SQLite compares blobs with memcmp, then by length).
    let mut after: Vec<u8> = Vec::new();
    let mut total = 0u64;
    loop {
        // Rolled back when dropped uncommitted, on any error below.
        let tx = rusqlite::Transaction::new_unchecked(conn, TransactionBehavior::Immediate)
            .ctx("begin a fold of the fresh object index")?;
        let upto: Option<Vec<u8>> = tx
            .query_row(sql::FRESH_NTH_AFTER, (&after, FOLD_BATCH - 1), |r| r.get(0))
            .optional()
            .ctx("find a fold's slice")?;
        let end = upto.clone().unwrap_or_else(|| vec![0xff; 33]);
        let n = tx
            .execute(sql::FOLD_RANGE, (&after, &end))
            .ctx("fold a slice of the fresh object index")?;
        tx.commit().ctx("commit a fold of the fresh object index")?;
        total += n as u64;
        match upto {
            Some(u) if !stop() => after = u,
            _ => {
                // A fold read and wrote its slices' pages of both indexes
                // through this connection's cache (up to 64 MiB), and the
                // next fold is 65,536 rows away: give the pages back, as a
                // large write does (sql.rs SHRINK_MEMORY says why). At 1
                // GiB the process kept 3-7 MiB less (examples/fresh_commit,
                // VmRSS after the runs, two pairs).
                crate::batch::shrink_cache(conn);
                return Ok(total);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WAL-mode database with the Store's schema, in a temporary
    /// directory, and `n` rows inserted as a commit inserts them.
    fn db_with(n: u32, dir: &std::path::Path) -> Connection {
        let conn = Connection::open(dir.join("t.db")).unwrap();
        conn.query_row(sql::JOURNAL_MODE_WAL, [], |_| Ok(()))
            .unwrap();
        conn.execute_batch(sql::SCHEMA).unwrap();
        conn.execute_batch(sql::NO_AUTOCHECKPOINT).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        for i in 0..n {
            assert_eq!(insert(&tx, &id(i)), 1);
        }
        tx.commit().unwrap();
        conn
    }

    /// Id number `i`: spread over the id range as hashes are.
    fn id(i: u32) -> Vec<u8> {
        blake3::hash(&i.to_le_bytes()).as_bytes().to_vec()
    }

    /// Insert as the Store does (objects.rs); 1 if the row is new.
    fn insert(conn: &Connection, id: &[u8]) -> usize {
        let p = crate::objects::Prepared {
            id: crate::id::ObjectId::from_slice(id).unwrap(),
            kind: crate::id::Kind::Chunk,
            enc: 0,
            raw_len: 200,
            base: None,
            depth: 0,
            data: crate::objects::Data::Own(vec![0u8; 200]),
        };
        crate::objects::insert(conn, &p).unwrap() as usize
    }

    fn count(conn: &Connection, q: &str) -> i64 {
        conn.query_row(q, [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_fold_moves_every_fresh_row_once_and_lookups_find_both() {
        let tmp = tempfile::tempdir().unwrap();
        let n = 2 * FOLD_BATCH as u32 + 123;
        let conn = db_with(n, tmp.path());
        assert_eq!(count(&conn, sql::FRESH_COUNT), n as i64);
        // Stopped after its first slice, a fold moves exactly one slice,
        // the lowest ids.
        assert_eq!(fold(&conn, &|| true).unwrap(), FOLD_BATCH as u64);
        assert_eq!(count(&conn, sql::probe::FOLDED_COUNT), FOLD_BATCH);
        let max_folded: Vec<u8> = conn
            .query_row(sql::probe::FOLDED_MAX_ID, [], |r| r.get(0))
            .unwrap();
        let min_fresh: Vec<u8> = conn
            .query_row(sql::probe::FRESH_MIN_ID, [], |r| r.get(0))
            .unwrap();
        assert!(max_folded < min_fresh);
        // An id in either index is not inserted again, and is found.
        for i in [0, n / 2, n - 1] {
            assert_eq!(insert(&conn, &id(i)), 0, "id {i} inserted twice");
            assert!(conn
                .prepare(sql::OBJ_EXISTS)
                .unwrap()
                .exists([&id(i)])
                .unwrap());
        }
        // The rest, to the end.
        assert_eq!(
            fold(&conn, &|| false).unwrap(),
            (n as i64 - FOLD_BATCH) as u64
        );
        assert_eq!(count(&conn, sql::FRESH_COUNT), 0);
        assert_eq!(count(&conn, sql::probe::FOLDED_COUNT), n as i64);
        assert_eq!(count(&conn, sql::probe::ALL_COUNT), n as i64);
        // A row made after the fold goes to the fresh index again.
        assert_eq!(insert(&conn, &id(n)), 1);
        assert_eq!(count(&conn, sql::FRESH_COUNT), 1);
        assert_eq!(insert(&conn, &id(n)), 0);
        assert_eq!(fold(&conn, &|| false).unwrap(), 1);
    }

    #[test]
    fn a_fold_is_due_only_with_a_long_wal_and_a_full_fresh_index() {
        let tmp = tempfile::tempdir().unwrap();
        let conn = db_with(999, tmp.path());
        let (log, _): (i64, i64) = conn
            .query_row(sql::WAL_PENDING, [], |r| Ok((r.get(1)?, r.get(2)?)))
            .unwrap();
        assert!(log > 40, "the WAL is only {log} pages");
        // Both conditions met: due.
        assert!(fold_due(&conn, 40, 999).unwrap());
        // The fresh index one row short.
        assert!(!fold_due(&conn, 40, 1000).unwrap());
        // The WAL too short.
        assert!(!fold_due(&conn, log + 1, 999).unwrap());
        // With the WAL copied, never, whatever the thresholds.
        conn.query_row(sql::probe::WAL_TRUNCATE, [], |_| Ok(()))
            .unwrap();
        assert!(!fold_due(&conn, 0, 0).unwrap());
        // The thresholds in use, in the order the doc comments give.
        const { assert!(FOLD_BATCH < FRESH_MAX) };
    }
}
