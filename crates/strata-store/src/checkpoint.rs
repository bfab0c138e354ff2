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

use crate::error::{Result, SqlCtx};
use crate::sql;
use rusqlite::Connection;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Checkpoint once the WAL holds this many pages not yet copied (16 MiB of
/// 4 KiB pages; SQLite's default is 1,000).
pub(crate) const CHECKPOINT_PAGES: i64 = 4096;

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
    // NOOP: the WAL's frame count and how many are copied, for free.
    let (log, done): (i64, i64) = conn
        .query_row(sql::WAL_PENDING, [], |r| Ok((r.get(1)?, r.get(2)?)))
        .ctx("read the WAL's size")?;
    if log < CHECKPOINT_PAGES || done >= log {
        return Ok(false);
    }
    conn.query_row(sql::WAL_CHECKPOINT, [], |_| Ok(()))
        .ctx("checkpoint the WAL")?;
    Ok(true)
}
